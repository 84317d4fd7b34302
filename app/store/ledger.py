"""The credit ledger as the store keeps it (a part of ``SQLStore``): the entries of money in
and out of the pools (``credit_grants``: ``GrantRecord``), written before Redis changes and
marked applied after, and the earned credits that lapsed (``credit_expiries``), read
together as an account's ledger, newest first.

An entry is pending from its insert until ``mark_applied``: the repair
(``app.accounts.ledger``) finds the pending ones that no request is applying any more and
applies each once (Redis's marker of its id makes a second application a no-op).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from app.store import audit as audit_log
from app.store.audit import AuditRecord, write_audit
from app.store.core import SQLCore
from app.store.program import Program, execute, row, rows
from app.store.records import CreditExpiry, GrantRecord, WebhookEventRecord, to_record, to_row
from app.store.webhooks import write_webhook_events

_GRANT_COLUMNS = ", ".join(GrantRecord.__struct_fields__)
_SELECT = f"SELECT {_GRANT_COLUMNS} FROM credit_grants"
_EXPIRY_COLUMNS = ", ".join(CreditExpiry.__struct_fields__)

INSERT_GRANT = (
    f"INSERT INTO credit_grants ({_GRANT_COLUMNS}) "
    f"VALUES ({', '.join('?' * len(GrantRecord.__struct_fields__))}) "
    "ON CONFLICT (grant_id) DO NOTHING"
)
GET_GRANT = f"{_SELECT} WHERE grant_id = ?"
DELETE_GRANT = "DELETE FROM credit_grants WHERE grant_id = ?"
LIST_GRANTS = f"{_SELECT} WHERE account_pid = ? ORDER BY created_at, grant_id"
# Only a pending entry is marked: the first mark of an entry (the request's or the
# repair's) is the one kept.
MARK_APPLIED = (
    "UPDATE credit_grants SET credits = ?, debt_change = ?, applied_at = ? "
    "WHERE grant_id = ? AND applied_at IS NULL"
)
LIST_PENDING = (
    f"{_SELECT} WHERE applied_at IS NULL AND created_at <= ? ORDER BY created_at, grant_id LIMIT ?"
)
# the entries Redis applied at or after a time, a page at a time (the recheck of what a
# failover may have lost: ``app.accounts.lost_entries``)
LIST_APPLIED_AFTER = (
    f"{_SELECT} WHERE applied_at IS NOT NULL AND (applied_at, grant_id) > (?, ?) "
    "ORDER BY applied_at, grant_id LIMIT ?"
)
# the account's spotlight rewards, newest first (the console's list of them), and how many
# fall on or after a time (the UTC day's count)
LIST_REWARDS = (
    f"{_SELECT} WHERE account_pid = ? AND kind = 'reward' "
    "ORDER BY created_at DESC, grant_id DESC LIMIT ?"
)
COUNT_REWARDS_SINCE = (
    "SELECT COUNT(*) FROM credit_grants WHERE account_pid = ? AND kind = 'reward' "
    "AND created_at >= ?"
)
# the entries Redis applied (their markers are restored by a rebuild)
LIST_APPLIED_SINCE = (
    f"{_SELECT} WHERE created_at >= ? AND applied_at IS NOT NULL ORDER BY created_at, grant_id"
)
GET_EXPIRY = f"SELECT {_EXPIRY_COLUMNS} FROM credit_expiries WHERE expiry_id = ?"
EXPIRY_KIND = "expiry"  # the ledger's name of a lapse (``credit_expiries``' rows)


class LedgerPosition(msgspec.Struct, frozen=True):
    """Where a page of an account's ledger starts: after the entry at (time, seq, id)."""

    at: int
    seq: int
    entry_id: str


def _page(
    table_select: str,
    time_column: str,
    seq_column: str | None,
    id_column: str,
    after: LedgerPosition | None,
    kinds: Sequence[str] = (),
) -> tuple[str, list[Any]]:
    """Newest first: by time, then (within a second) by seq (a table without one: 0), then
    by id; of ``kinds`` only when it names some (the entries' table)."""
    where = "account_pid = ?"
    args: list[Any] = []
    if kinds:
        where += f" AND kind IN ({', '.join('?' * len(kinds))})"
        args += list(kinds)
    if after is not None:
        where += f" AND ({time_column}, {seq_column or 0}, {id_column}) < (?, ?, ?)"
        args += [after.at, after.seq, after.entry_id]
    seq_order = f"{seq_column} DESC, " if seq_column else ""
    order = f" ORDER BY {time_column} DESC, {seq_order}{id_column} DESC LIMIT ?"
    return f"{table_select} WHERE {where}{order}", args


class LedgerSQL(SQLCore):
    """``Store``'s credit ledger methods; what each promises is in ``Store``'s docstrings."""

    async def insert_grant(
        self,
        rec: GrantRecord,
        events: Sequence[WebhookEventRecord] = (),
        audit: AuditRecord | None = None,
    ) -> bool:
        def write() -> Program[bool]:
            if (yield from execute(INSERT_GRANT, to_row(rec))) != 1:
                return False
            yield from write_webhook_events(events, rec.created_at)
            yield from write_audit(audit)
            return True

        return await self._write(write())

    async def delete_grant(self, grant_id: str) -> bool:
        def delete() -> Program[bool]:
            found = yield from row(GET_GRANT, (grant_id,))
            if found is None:
                return False
            grant = to_record(GrantRecord, found)
            yield from execute(DELETE_GRANT, (grant_id,))
            target = (grant.account_pid, grant_id)
            yield from execute(audit_log.DELETE_AUDIT_OF_TARGET, target)
            return True

        return await self._write(delete())

    async def mark_applied(
        self,
        grant_id: str,
        *,
        credits: int,
        debt_change: int,
        applied_at: int,
        events: Sequence[WebhookEventRecord] = (),
    ) -> bool:
        def mark() -> Program[bool]:
            args = (credits, debt_change, applied_at, grant_id)
            if (yield from execute(MARK_APPLIED, args)) != 1:
                return False
            yield from write_webhook_events(events, applied_at)
            return True

        return await self._write(mark())

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        return await self._record(GrantRecord, GET_GRANT, (grant_id,))

    async def list_grants(self, account_pid: str) -> list[GrantRecord]:
        return await self._records(GrantRecord, LIST_GRANTS, (account_pid,))

    async def list_pending(self, created_before: int, limit: int) -> list[GrantRecord]:
        return await self._records(GrantRecord, LIST_PENDING, (created_before, limit))

    async def list_applied_after(self, since: int, after_id: str, limit: int) -> list[GrantRecord]:
        return await self._records(GrantRecord, LIST_APPLIED_AFTER, (since, after_id, limit))

    async def list_rewards(
        self, account_pid: str, limit: int, since: int
    ) -> tuple[list[GrantRecord], int]:
        def read() -> Program[tuple[list[GrantRecord], int]]:
            found = yield from rows(LIST_REWARDS, (account_pid, limit))
            counted = yield from row(COUNT_REWARDS_SINCE, (account_pid, since))
            return [to_record(GrantRecord, r) for r in found], int(counted[0]) if counted else 0

        return await self._run(read())

    async def list_grants_since(self, since: int) -> list[GrantRecord]:
        return await self._records(GrantRecord, LIST_APPLIED_SINCE, (since,))

    async def ledger_position(self, account_pid: str, entry_id: str) -> LedgerPosition | None:
        def find() -> Program[LedgerPosition | None]:
            found = yield from row(GET_GRANT, (entry_id,))
            if found is not None:
                grant = to_record(GrantRecord, found)
                where = LedgerPosition(grant.created_at, grant.seq, entry_id)
                return where if grant.account_pid == account_pid else None
            lapsed = yield from row(GET_EXPIRY, (entry_id,))
            if lapsed is not None:
                expiry = to_record(CreditExpiry, lapsed)
                where = LedgerPosition(expiry.expired_at, 0, entry_id)
                return where if expiry.account_pid == account_pid else None
            return None

        return await self._run(find())

    async def ledger_page(
        self,
        account_pid: str,
        limit: int,
        after: LedgerPosition | None = None,
        kinds: Sequence[str] = (),
    ) -> tuple[list[GrantRecord], list[CreditExpiry]]:
        entry_kinds = [k for k in kinds if k != EXPIRY_KIND]
        with_entries = not kinds or bool(entry_kinds)
        with_lapses = not kinds or EXPIRY_KIND in kinds

        def read() -> Program[tuple[list[GrantRecord], list[CreditExpiry]]]:
            grants: list[Any] = []
            lapsed: list[Any] = []
            if with_entries:
                grants_sql, args = _page(
                    _SELECT, "created_at", "seq", "grant_id", after, entry_kinds
                )
                grants = yield from rows(grants_sql, (account_pid, *args, limit))
            if with_lapses:
                expiry_select = f"SELECT {_EXPIRY_COLUMNS} FROM credit_expiries"
                expiries_sql, args = _page(expiry_select, "expired_at", None, "expiry_id", after)
                lapsed = yield from rows(expiries_sql, (account_pid, *args, limit))
            return (
                [to_record(GrantRecord, r) for r in grants],
                [to_record(CreditExpiry, r) for r in lapsed],
            )

        return await self._run(read())
