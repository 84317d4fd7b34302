"""The operators' audit log: the entry an action on money, a key or an account (its
status, its external id) writes (with the change, in its transaction:
``app.store.audit``), and its pages (``GET /admin/v1/audit``, ``svc admin audit``).

An entry is written only when an operator acts (``app.core.operator``) and the action's
durable write takes place: a refused action (400, 404, 409) writes none. A store that cannot
write the entry fails the write with it (503), so no action is done unaudited. An action
whose durable write committed and whose Redis follow-up then failed (503) keeps its entry:
the change is in the store (its retry converges on it); the one exception, a grant Redis
refused outright, is taken back with its entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from app.accounts.lookup import DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_CHARS
from app.core.errors import invalid_value
from app.core.operator import Actor, operator
from app.core.validation import query_int
from app.store import AuditQuery, AuditRecord, Store
from app.store.audit import new_seq, seq_of

ACCOUNT_CREATE = "account.create"
ACCOUNT_STATUS = {"disabled": "account.disable", "active": "account.enable"}
ACCOUNT_UPDATE = "account.update"  # a field other than the status: the external id
CREDITS_GRANT = "credits.grant"
CREDITS_DEBIT = "credits.debit"
SPOTLIGHT_GRANT = "spotlight.grant"
KEY_CREATE = "key.create"
KEY_UPDATE = "key.update"
KEY_ROTATE = "key.rotate"
KEY_REVOKE = "key.revoke"


def audit_entry(
    action: str, pid: str, target: str | None, details: Mapping[str, Any], at: float
) -> AuditRecord | None:
    """The entry of ``action`` when an operator is acting (None otherwise). ``details``:
    what the action did, never a secret."""
    who = operator.get()
    if who is None:
        return None
    return AuditRecord(
        seq=new_seq(),
        account_pid=pid,
        action=action,
        target=target,
        actor=who.actor,
        request_id=who.request_id,
        client_address=who.client_address,
        details=msgspec.json.encode(details).decode(),
        created_at=int(at),
    )


class AuditEntry(msgspec.Struct, kw_only=True):
    object: Literal["audit.entry"] = "audit.entry"
    id: str
    action: str
    account_pid: str
    target: str | None
    actor: Actor
    request_id: str | None
    client_address: str | None
    details: dict[str, Any]
    created_at: int  # unix seconds


class AuditPage(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[AuditEntry]
    first_id: str | None
    last_id: str | None
    has_more: bool


class AuditFilter(msgspec.Struct, frozen=True, kw_only=True):
    limit: int = DEFAULT_LIMIT
    account_pid: str | None = None
    after: str | None = None  # the id of the entry the page follows


def _text(params: Mapping[str, str], name: str) -> str | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > MAX_QUERY_CHARS or not raw.isprintable():
        raise invalid_value(name, f"'{name}' is not a valid value.")
    return raw


def parse_audit_filter(params: Mapping[str, str]) -> AuditFilter:
    """The query parameters ``limit`` (1-500, default 100), ``after`` and ``account``."""
    return AuditFilter(
        limit=query_int(params.get("limit"), "limit", low=1, high=MAX_LIMIT, default=DEFAULT_LIMIT),
        account_pid=_text(params, "account"),
        after=_text(params, "after"),
    )


def _entry(rec: AuditRecord) -> AuditEntry:
    return AuditEntry(
        id=rec.id,
        action=rec.action,
        account_pid=rec.account_pid,
        target=rec.target,
        actor=msgspec.convert(rec.actor, Actor),
        request_id=rec.request_id,
        client_address=rec.client_address,
        details=msgspec.json.decode(rec.details),
        created_at=rec.created_at,
    )


async def audit_page(store: Store, wanted: AuditFilter) -> AuditPage:
    """One page, newest first; ``has_more`` when entries follow it. 400 naming ``after``
    when it is not the id of an entry of this list (of ``account``'s, when named)."""
    after = None
    if wanted.after is not None:
        seq = seq_of(wanted.after)
        found = None if seq is None else await store.get_audit(seq)
        if found is None or wanted.account_pid not in (None, found.account_pid):
            raise invalid_value("after", "'after' must be the id of an entry of this list.")
        after = found.seq
    query = AuditQuery(limit=wanted.limit + 1, account_pid=wanted.account_pid, after=after)
    records = await store.list_audit(query)
    data = [_entry(r) for r in records[: wanted.limit]]
    return AuditPage(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=len(records) > wanted.limit,
    )
