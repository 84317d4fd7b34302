"""The durable store: what must outlive Redis (accounts, keys, grants, usage rollups)."""

from __future__ import annotations

from pathlib import Path

from app.store.base import Store, StoreError
from app.store.records import AccountRecord, GrantRecord, KeyRecord, UsageRollup

__all__ = [
    "AccountRecord",
    "GrantRecord",
    "KeyRecord",
    "Store",
    "StoreError",
    "UsageRollup",
    "open_store",
]


def open_store(database_url: str) -> Store:
    """A store for ``sqlite:///relative.db``, ``sqlite:////absolute.db`` (or
    ``sqlite:///`` followed by an absolute path)."""
    if database_url.startswith("sqlite:///"):
        from app.store.sqlite import SQLiteStore

        return SQLiteStore(Path(database_url[len("sqlite:///") :]))
    if database_url.startswith(("postgresql://", "postgres://")):
        raise NotImplementedError("the PostgreSQL store is not built yet")
    raise ValueError(
        "SVC_DATABASE_URL must start with sqlite:/// or postgresql:// "
        f"(got a URL with scheme '{database_url.split(':', 1)[0]}')"
    )
