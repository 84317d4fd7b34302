"""The durable store: what must outlive Redis (accounts, keys, grants, usage rollups).

``open_store(url)`` picks the driver; callers only see the ``Store`` protocol, the record
types and ``StoreError``, never a driver's own exceptions. ``Store``'s docstrings
(``app.store.contract``) are the contract; ``app.store.base.SQLStore`` implements it once for
both engines.
"""

from __future__ import annotations

from pathlib import Path

from app.core.errors import StoreConflict, StoreError
from app.store.audit import AuditQuery, AuditRecord
from app.store.books import BooksSums, RevenueEntry, RevenueSum, UpstreamCostRollup
from app.store.contract import END_OF_TIME, Store, stream_id_key
from app.store.ledger import LedgerPosition
from app.store.purchases import KeptEvent, PurchaseChange, PurchaseQuery, PurchaseRecord
from app.store.records import (
    AccountQuery,
    AccountRecord,
    ActivityQuery,
    ActivityRecord,
    CreditExpiry,
    DeliveryRecord,
    DueDelivery,
    GrantRecord,
    GrantTotal,
    KeyRecord,
    KeyRotation,
    LedgerSnapshot,
    UsageRollup,
    WebhookEventRecord,
    WebhookRecord,
)
from app.store.usage_batch import ANY_CURSOR, UsageBatch

__all__ = [
    "ANY_CURSOR",
    "END_OF_TIME",
    "AccountQuery",
    "AccountRecord",
    "ActivityQuery",
    "ActivityRecord",
    "AuditQuery",
    "AuditRecord",
    "BooksSums",
    "CreditExpiry",
    "DeliveryRecord",
    "DueDelivery",
    "GrantRecord",
    "GrantTotal",
    "KeptEvent",
    "KeyRecord",
    "KeyRotation",
    "LedgerPosition",
    "LedgerSnapshot",
    "PurchaseChange",
    "PurchaseQuery",
    "PurchaseRecord",
    "RevenueEntry",
    "RevenueSum",
    "Store",
    "StoreConflict",
    "StoreError",
    "UpstreamCostRollup",
    "UsageBatch",
    "UsageRollup",
    "WebhookEventRecord",
    "WebhookRecord",
    "open_store",
    "stream_id_key",
]


def open_store(database_url: str) -> Store:
    """The store a database URL names.

    - ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``: a SQLite file;
    - ``postgresql://user:password@host:port/dbname`` (or ``postgres://…``, with any
      libpq option as a query parameter, e.g. ``?sslmode=require``): a PostgreSQL database.

    Opening does no I/O: the connection is made on first use. ``ValueError`` for a URL
    that names no supported store; its message never repeats the URL (it may hold a
    password).
    """
    scheme, sep, rest = database_url.partition("://")
    scheme = scheme.lower()
    if sep and scheme in ("postgresql", "postgres"):
        from app.store.postgres import PostgresStore  # only the driver in use gets imported

        return PostgresStore("postgresql://" + rest)
    if not sep or scheme != "sqlite":
        # Only the scheme is echoed: the rest of a URL may hold a password.
        got = f"scheme {scheme!r}" if sep else "no scheme"
        raise ValueError(
            f"unsupported database URL ({got}): use sqlite:///path/to/file.db "
            "or postgresql://user:password@host:5432/dbname"
        )
    if not rest.startswith("/") or len(rest) < 2 or "?" in rest:
        raise ValueError(
            "a SQLite URL is sqlite:/// followed by a file path "
            "(sqlite:///relative.db or sqlite:////absolute.db), with no query string"
        )
    from app.store.sqlite import SQLiteStore  # only the driver in use gets imported

    return SQLiteStore(Path(rest[1:]))
