"""The zero-configuration defaults, filled in: the embedded Valkey when no Redis is named
(started here when none answers), SQLite in the data folder, generated secrets. What
``svc serve``, its workers and ``svc admin`` resolve their settings with first."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from app.core.data_dir import prepare_data_dir
from app.core.errors import SettingsError
from app.core.settings import Settings
from app.kv.sentinel import DEFAULT_URL, parse_cluster_nodes, parse_sentinels

if TYPE_CHECKING:
    from app.ops.embedded import EmbeddedValkey


def resolve(
    settings: Settings, *, start_embedded: bool = True
) -> tuple[Settings, EmbeddedValkey | None]:
    """Fill in what the zero-configuration mode provides: the embedded Valkey (started here
    when none answers; returned so the caller stops it), SQLite and generated secrets."""
    data_dir = Path(settings.data_dir).resolve()
    if settings.redis_sentinels:
        if settings.redis_cluster:
            raise SettingsError("SVC_REDIS_SENTINELS and SVC_REDIS_CLUSTER: set one of them")
        parse_sentinels(settings.redis_sentinels)  # a typo refuses to start, named
    if settings.redis_cluster_nodes:
        if not settings.redis_cluster:
            raise SettingsError("SVC_REDIS_CLUSTER_NODES needs SVC_REDIS_CLUSTER=true")
        parse_cluster_nodes(settings.redis_cluster_nodes)
    if settings.redis_min_replicas and settings.redis_cluster:
        raise SettingsError(
            "SVC_REDIS_MIN_REPLICAS waits for one primary's replicas (SVC_REDIS_URL or "
            "SVC_REDIS_SENTINELS); on a Cluster set min-replicas-to-write on its primaries"
        )
    embedded = not (settings.redis_url or settings.redis_sentinels)
    if embedded:
        if settings.redis_cluster:
            raise SettingsError("SVC_REDIS_CLUSTER needs SVC_REDIS_URL (a node of the cluster)")
        if not start_embedded:
            raise SettingsError(
                "SVC_REDIS_URL is not set (only `svc serve` starts an embedded Valkey)"
            )
    admin_token, key_pepper = prepare_data_dir(settings, data_dir)
    owner = None
    redis_url = settings.redis_url or (DEFAULT_URL if settings.redis_sentinels else None)
    if not redis_url:
        # imported here: the embedded Valkey's launcher and its client library (about
        # 2.6 MB of RSS) are `svc serve`'s own, never a worker's
        from app.ops.embedded import ensure_embedded

        redis_url, owner = ensure_embedded(data_dir)  # last: nothing after it may fail
    resolved = msgspec.structs.replace(
        settings,
        data_dir=str(data_dir),
        redis_url=redis_url,
        database_url=database_url(settings),
        admin_token=admin_token,
        key_pepper=key_pepper,
        dev_bootstrap=(embedded if settings.dev_bootstrap is None else settings.dev_bootstrap),
    )
    return resolved, owner


def database_url(settings: Settings) -> str:
    """The store's URL: ``SVC_DATABASE_URL``, else SQLite in the data folder."""
    data_dir = Path(settings.data_dir).resolve()
    return settings.database_url or f"sqlite:///{data_dir / 'svc.db'}"
