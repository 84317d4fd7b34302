"""``SQLStore``: the ``Store`` methods, written once for every SQL engine.

Each method is a program (``app.store.program``) of shared statements
(``app.store.statements``); an engine subclass runs programs (``_run``) and names the
locks it needs where its write transactions do not serialize enough by themselves.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar, TypeVar

import msgspec

from app.store import ANY_CURSOR, END_OF_TIME, stream_id_key
from app.store import audit as audit_log
from app.store import migrations as schema
from app.store import statements as sql
from app.store.audit import AuditQuery, AuditRecord, write_audit
from app.store.program import Program, Transaction, each, execute, row, rows, take
from app.store.records import (
    AccountQuery,
    AccountRecord,
    ActivityQuery,
    ActivityRecord,
    CreditExpiry,
    DeliveryRecord,
    DueDelivery,
    GrantRecord,
    KeyRecord,
    KeyRotation,
    LedgerSnapshot,
    Row,
    UsageRollup,
    WebhookEventRecord,
    WebhookRecord,
    deliveries_of,
    due_delivery,
    grouped_sums,
    ledger_snapshot,
    recorded_delivery,
    subscriptions,
    to_record,
    to_row,
    usage_sums,
)

T = TypeVar("T")
R = TypeVar("R", bound=msgspec.Struct)


class SQLStore(ABC):
    """``Store`` on a SQL database; what each method promises is in ``Store``'s docstrings.

    A subclass adds only its engine: ``_run``, ``close``, and the locks below.
    """

    # Locks (shared-dialect statements, run first in the transaction), None where every
    # write transaction holds the database's one write lock, which serializes them all.
    MIGRATION_LOCK: ClassVar[str | None] = None
    """Taken by each migration step: processes starting at once apply a version once."""
    SHARD_LOCK: ClassVar[str | None] = None
    """Taken (argument: the shard) by a usage batch before it reads the shard's cursor."""
    ACCOUNT_LOCK: ClassVar[str | None] = None
    """Taken (argument: the pid) before an account's keys or webhooks are counted or added."""
    SCHEMA_PRESENT: ClassVar[str]
    """A row when svc's migrations table exists (the catalogue's own words for it)."""

    @abstractmethod
    async def _run(self, program: Program[T], transaction: Transaction = Transaction.NONE) -> T:
        """Run ``program`` on one connection in ``transaction``: its result, or
        ``StoreConflict`` / ``StoreError`` for what the engine raised."""

    async def _write(self, program: Program[T]) -> T:
        return await self._run(program, Transaction.WRITE)

    async def _rows(self, query: str, args: Row = ()) -> list[Row]:
        return await self._run(rows(query, args))

    async def _record(self, record: type[R], query: str, args: Row) -> R | None:
        found = await self._rows(query, args)
        return to_record(record, found[0]) if found else None

    async def _records(self, record: type[R], query: str, args: Row = ()) -> list[R]:
        return [to_record(record, r) for r in await self._rows(query, args)]

    # -- lifecycle --------------------------------------------------------------------

    async def migrate(self) -> None:
        await self._write(self._migrations_table())
        for version, statements in schema.MIGRATIONS:
            await self._write(self._migration(version, statements))

    def _migrations_table(self) -> Program[None]:
        yield from take(self.MIGRATION_LOCK)
        yield from execute(schema.CREATE_SCHEMA_MIGRATIONS)

    def _migration(self, version: int, statements: Sequence[str]) -> Program[None]:
        yield from take(self.MIGRATION_LOCK)
        # Checked under the lock: of several processes migrating at once, the first
        # applies the version and the others find it recorded.
        if (yield from row(schema.MIGRATION_APPLIED, (version,))) is not None:
            return
        for statement in statements:
            yield from execute(statement)
        yield from execute(schema.RECORD_MIGRATION, (version, int(time.time())))

    async def ping(self) -> None:
        await self._rows(sql.PING)

    async def has_schema(self) -> bool:
        return bool(await self._rows(self.SCHEMA_PRESENT))

    # -- accounts ---------------------------------------------------------------------

    async def create_account(self, rec: AccountRecord, audit: AuditRecord | None = None) -> bool:
        def create() -> Program[bool]:
            # ON CONFLICT (external_id) DO NOTHING: a taken id writes no row, so no entry
            if (yield from execute(sql.INSERT_ACCOUNT, to_row(rec))) != 1:
                return False
            yield from write_audit(audit)
            return True

        return await self._write(create())

    async def delete_new_account(self, pid: str) -> bool:
        def delete() -> Program[bool]:
            if (yield from execute(sql.DELETE_NEW_ACCOUNT, (pid, pid, pid))) != 1:
                return False
            yield from execute(audit_log.DELETE_AUDIT_OF_ACCOUNT, (pid,))
            return True

        return await self._write(delete())

    async def get_account(self, pid: str) -> AccountRecord | None:
        return await self._record(AccountRecord, sql.GET_ACCOUNT, (pid,))

    async def list_accounts(self) -> list[AccountRecord]:
        return await self._records(AccountRecord, sql.LIST_ACCOUNTS)

    async def set_low_balance(self, pid: str, low: int | None) -> None:
        await self._write(execute(sql.SET_LOW_BALANCE, (low, pid)))

    async def list_accounts_page(self, query: AccountQuery) -> list[AccountRecord]:
        return await self._records(AccountRecord, *sql.account_page(query))

    async def set_account_status(
        self, pid: str, status: str, audit: AuditRecord | None = None
    ) -> AccountRecord | None:
        return await self._write(self._set_account(sql.SET_ACCOUNT_STATUS, status, pid, audit))

    async def set_external_id(
        self, pid: str, external_id: str | None, audit: AuditRecord | None = None
    ) -> AccountRecord | None:
        return await self._write(self._set_account(sql.SET_EXTERNAL_ID, external_id, pid, audit))

    def _set_account(
        self, update: str, value: str | None, pid: str, audit: AuditRecord | None
    ) -> Program[AccountRecord | None]:
        if (yield from execute(update, (value, pid))) != 1:
            return None  # no such account: nothing changed, nothing audited
        yield from write_audit(audit)
        found = yield from row(sql.GET_ACCOUNT, (pid,))
        return None if found is None else to_record(AccountRecord, found)

    async def find_external_id(self, external_id: str) -> AccountRecord | None:
        return await self._record(AccountRecord, sql.GET_ACCOUNT_BY_EXTERNAL_ID, (external_id,))

    # -- keys -------------------------------------------------------------------------

    def _active_keys(self, pid: str, now: int) -> Program[int]:
        counted = yield from row(sql.COUNT_ACTIVE_KEYS, (pid, now))
        return 0 if counted is None else int(counted[0])

    def _at_key_limit(self, pid: str, now: int, max_active: int | None) -> Program[bool]:
        if max_active is None:
            return False
        return (yield from self._active_keys(pid, now)) >= max_active

    async def insert_key(
        self, rec: KeyRecord, *, max_active: int | None = None, audit: AuditRecord | None = None
    ) -> bool:
        pid = rec.account_pid

        def insert() -> Program[bool]:
            yield from take(self.ACCOUNT_LOCK, pid)
            if (yield from self._at_key_limit(pid, rec.created_at, max_active)):
                return False
            # The account again, for the seq subquery.
            yield from execute(sql.INSERT_KEY, (*to_row(rec), pid))
            yield from write_audit(audit)
            return True

        return await self._write(insert())

    async def get_key(self, kid: str) -> KeyRecord | None:
        return await self._record(KeyRecord, sql.GET_KEY, (kid,))

    async def list_keys(self, account_pid: str) -> list[KeyRecord]:
        return await self._records(KeyRecord, sql.LIST_KEYS, (account_pid,))

    async def list_all_keys(self) -> list[KeyRecord]:
        return await self._records(KeyRecord, sql.LIST_ALL_KEYS)

    async def count_active_keys(self, account_pid: str, now: int) -> int:
        return await self._run(self._active_keys(account_pid, now))

    def _account_key(self, account_pid: str, kid: str) -> Program[KeyRecord | None]:
        found = yield from row(sql.GET_ACCOUNT_KEY, (kid, account_pid))
        return None if found is None else to_record(KeyRecord, found)

    async def update_key(
        self,
        account_pid: str,
        kid: str,
        changes: Mapping[str, str | int | None],
        audit: AuditRecord | None = None,
    ) -> KeyRecord | None:
        def update() -> Program[KeyRecord | None]:
            for column, value in changes.items():
                yield from execute(sql.UPDATE_KEY[column], (value, kid, account_pid))
            found = yield from self._account_key(account_pid, kid)
            if found is not None:
                yield from write_audit(audit)
            return found

        return await self._write(update())

    async def revoke_key(
        self, account_pid: str, kid: str, revoked_at: int, audit: AuditRecord | None = None
    ) -> KeyRecord | None:
        def revoke() -> Program[KeyRecord | None]:
            # only the revocation that ends an active key is an action (a repeat is not)
            if (yield from execute(sql.REVOKE_KEY, (revoked_at, kid, account_pid))) == 1:
                yield from write_audit(audit)
            return (yield from self._account_key(account_pid, kid))

        return await self._write(revoke())

    async def rotate_key(
        self,
        new: KeyRecord,
        old_expires_at: int,
        *,
        max_active: int | None = None,
        audit: AuditRecord | None = None,
    ) -> KeyRotation:
        old, pid, now = new.replaces, new.account_pid, new.created_at

        def rotate() -> Program[KeyRotation]:
            # Under the account's lock a key gets one successor.
            yield from take(self.ACCOUNT_LOCK, pid)
            if (yield from row(sql.ROTATABLE_KEY, (old, pid, now))) is None:
                return KeyRotation.NOT_ACTIVE
            if (yield from row(sql.KEY_SUCCESSOR, (pid, old))) is not None:
                return KeyRotation.ROTATED_BEFORE
            # A key in its grace period is active: only a rotation with a grace counts.
            if old_expires_at > now and (yield from self._at_key_limit(pid, now, max_active)):
                return KeyRotation.LIMIT_REACHED
            yield from execute(sql.END_ROTATED_KEY, (old_expires_at, old, pid, old_expires_at))
            yield from execute(sql.INSERT_KEY, (*to_row(new), pid))
            yield from write_audit(audit)
            return KeyRotation.ROTATED

        return await self._write(rotate())

    # -- grants -----------------------------------------------------------------------

    async def insert_grant(
        self,
        rec: GrantRecord,
        events: Sequence[WebhookEventRecord] = (),
        audit: AuditRecord | None = None,
    ) -> bool:
        def write() -> Program[bool]:
            if (yield from execute(sql.INSERT_GRANT, to_row(rec))) != 1:
                return False
            yield from _add_webhook_events(events, rec.created_at)
            yield from write_audit(audit)
            return True

        return await self._write(write())

    async def delete_grant(self, grant_id: str) -> bool:
        def delete() -> Program[bool]:
            found = yield from row(sql.GET_GRANT, (grant_id,))
            if found is None:
                return False
            grant = to_record(GrantRecord, found)
            yield from execute(sql.DELETE_GRANT, (grant_id,))
            target = (grant.account_pid, grant_id)
            yield from execute(audit_log.DELETE_AUDIT_OF_TARGET, target)
            return True

        return await self._write(delete())

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        return await self._record(GrantRecord, sql.GET_GRANT, (grant_id,))

    async def list_grants(self, account_pid: str) -> list[GrantRecord]:
        return await self._records(GrantRecord, sql.LIST_GRANTS, (account_pid,))

    async def list_rewards(
        self, account_pid: str, limit: int, since: int
    ) -> tuple[list[GrantRecord], int]:
        def read() -> Program[tuple[list[GrantRecord], int]]:
            found = yield from rows(sql.LIST_REWARDS, (account_pid, limit))
            counted = yield from row(sql.COUNT_REWARDS_SINCE, (account_pid, since))
            return [to_record(GrantRecord, r) for r in found], int(counted[0]) if counted else 0

        return await self._run(read())

    async def list_grants_since(self, since: int) -> list[GrantRecord]:
        return await self._records(GrantRecord, sql.LIST_GRANTS_SINCE, (since,))

    # -- usage ------------------------------------------------------------------------

    async def apply_usage(
        self,
        shard: int,
        last_stream_id: str,
        rollups: list[UsageRollup],
        *,
        after: str | None = ANY_CURSOR,
        expiries: Sequence[CreditExpiry] = (),
        activity: Sequence[ActivityRecord] = (),
        webhook_events: Sequence[WebhookEventRecord] = (),
    ) -> bool:
        position = stream_id_key(last_stream_id)  # a bad id fails before any I/O
        usage_rows = [to_row(u) for u in rollups]
        expiry_rows = [to_row(e) for e in expiries]
        activity_rows = [to_row(a) for a in activity]

        def apply() -> Program[bool]:
            # Concurrent batches of a shard take turns; the cursor read after the lock
            # sees what the previous holder committed.
            yield from take(self.SHARD_LOCK, shard)
            cursor = yield from row(sql.GET_CURSOR, (shard,))
            if cursor is not None and position <= stream_id_key(cursor[0]):
                return False
            if after != ANY_CURSOR and (cursor[0] if cursor else None) != after:
                return False
            yield from each(sql.UPSERT_USAGE, usage_rows)
            yield from each(sql.INSERT_EXPIRY, expiry_rows)
            yield from each(sql.INSERT_ACTIVITY, activity_rows)
            yield from _add_webhook_events(webhook_events, int(time.time()))
            yield from execute(sql.UPSERT_CURSOR, (shard, last_stream_id, int(time.time())))
            return True

        return await self._write(apply())

    async def get_cursor(self, shard: int) -> str | None:
        found = await self._rows(sql.GET_CURSOR, (shard,))
        return str(found[0][0]) if found else None

    async def usage_daily(
        self,
        account_pid: str,
        since_day: str,
        environment: str = "live",
        *,
        group_by: str | None = None,
    ) -> list[UsageRollup]:
        args = (account_pid, since_day, environment)
        if group_by is None:
            days = await self._rows(sql.USAGE_DAILY, args)
            return [usage_sums(account_pid, environment, r[0], r[1:]) for r in days]
        groups = await self._rows(sql.USAGE_DAILY_GROUPED[group_by], args)
        return [grouped_sums(account_pid, environment, group_by, r) for r in groups]

    async def usage_totals(
        self, account_pid: str, environment: str = "live", before_day: str = END_OF_TIME
    ) -> UsageRollup | None:
        found = await self._rows(sql.USAGE_TOTALS, (account_pid, environment, before_day))
        if not found or found[0][0] == 0:
            return None
        return usage_sums(account_pid, environment, "", found[0][1:])

    async def last_usage_day(self) -> str | None:
        found = await self._rows(sql.LAST_USAGE_DAY)
        return str(found[0][0]) if found and found[0][0] is not None else None

    async def ledger_snapshot(self, since_day: str = END_OF_TIME) -> LedgerSnapshot:
        def read() -> Program[LedgerSnapshot]:
            accounts = [to_record(AccountRecord, r) for r in (yield from rows(sql.LIST_ACCOUNTS))]
            sums = []
            for query in (
                sql.LIST_CURSORS,
                sql.GRANT_TOTALS,
                sql.USAGE_BY_ACCOUNT,
                sql.EXPIRY_TOTALS,
            ):
                sums.append((yield from rows(query)))
            days = yield from rows(sql.USAGE_DAYS_BY_ACCOUNT, (since_day,))
            return ledger_snapshot(accounts, *sums, usage_days=days)

        return await self._run(read(), Transaction.SNAPSHOT)

    # -- activity ---------------------------------------------------------------------

    async def list_activity(self, query: ActivityQuery) -> list[ActivityRecord]:
        return await self._records(ActivityRecord, *sql.activity_page(query))

    async def activity_position(self, account_pid: str, id: str) -> tuple[int, str] | None:
        found = await self._rows(sql.ACTIVITY_POSITION, (account_pid, id))
        return (int(found[0][0]), str(found[0][1])) if found else None

    async def get_activity(self, account_pid: str, id: str) -> ActivityRecord | None:
        return await self._record(ActivityRecord, sql.GET_ACTIVITY, (account_pid, id))

    async def prune_activity(self, before: int, limit: int) -> int:
        return await self._write(execute(sql.PRUNE_ACTIVITY, (before, limit)))

    # -- audit log --------------------------------------------------------------------

    async def list_audit(self, query: AuditQuery) -> list[AuditRecord]:
        return await self._records(AuditRecord, *audit_log.audit_page(query))

    async def get_audit(self, seq: int) -> AuditRecord | None:
        return await self._record(AuditRecord, audit_log.GET_AUDIT, (seq,))

    # -- webhooks ---------------------------------------------------------------------

    async def create_webhook(self, rec: WebhookRecord, *, max_per_account: int) -> bool:
        def create() -> Program[bool]:
            yield from take(self.ACCOUNT_LOCK, rec.account_pid)
            counted = yield from row(sql.COUNT_WEBHOOKS, (rec.account_pid,))
            if counted is not None and int(counted[0]) >= max_per_account:
                return False
            yield from execute(sql.INSERT_WEBHOOK, to_row(rec))
            return True

        return await self._write(create())

    async def list_webhooks(self, account_pid: str) -> list[WebhookRecord]:
        return await self._records(WebhookRecord, sql.LIST_WEBHOOKS, (account_pid,))

    async def get_webhook(self, account_pid: str, webhook_id: str) -> WebhookRecord | None:
        return await self._record(WebhookRecord, sql.GET_WEBHOOK, (account_pid, webhook_id))

    async def update_webhook(
        self, account_pid: str, webhook_id: str, changes: Mapping[str, str]
    ) -> WebhookRecord | None:
        def update() -> Program[WebhookRecord | None]:
            for column, value in changes.items():
                yield from execute(sql.UPDATE_WEBHOOK[column], (value, webhook_id, account_pid))
            found = yield from row(sql.GET_WEBHOOK, (account_pid, webhook_id))
            return None if found is None else to_record(WebhookRecord, found)

        return await self._write(update())

    async def delete_webhook(
        self, account_pid: str, webhook_id: str, deleted_at: int
    ) -> WebhookRecord | None:
        def delete() -> Program[WebhookRecord | None]:
            found = yield from row(sql.GET_WEBHOOK, (account_pid, webhook_id))
            if found is None:
                return None
            yield from execute(sql.DELETE_WEBHOOK, (deleted_at, webhook_id, account_pid))
            return to_record(WebhookRecord, found)

        return await self._write(delete())

    async def webhook_subscriptions(self) -> dict[str, set[str]]:
        return subscriptions(await self._rows(sql.WEBHOOK_SUBSCRIPTIONS))

    async def add_webhook_events(self, events: Sequence[WebhookEventRecord], now: int) -> int:
        return await self._write(_add_webhook_events(events, now)) if events else 0

    async def claim_deliveries(self, now: int, lease_until: int, limit: int) -> list[DueDelivery]:
        def claim() -> Program[list[DueDelivery]]:
            taken = []
            for found in (yield from rows(sql.DUE_DELIVERIES, (now, now, limit))):
                due = due_delivery(found)
                key = (due.delivery.event_id, due.delivery.webhook_id)
                # Taken by the claim that changed the row: a concurrent one finds it leased.
                if (yield from execute(sql.CLAIM_DELIVERY, (lease_until, *key, now))):
                    taken.append(due)
            return taken

        return await self._write(claim())

    async def record_delivery(self, delivery: DeliveryRecord) -> None:
        await self._write(execute(sql.RECORD_DELIVERY, recorded_delivery(delivery)))

    async def list_deliveries(self, webhook_id: str, limit: int) -> list[DeliveryRecord]:
        return await self._records(DeliveryRecord, sql.LIST_DELIVERIES, (webhook_id, limit))

    async def prune_deliveries(self, before: int, limit: int) -> int:
        return await self._write(execute(sql.PRUNE_DELIVERIES, (before, limit)))


def _add_webhook_events(events: Sequence[WebhookEventRecord], now: int) -> Program[int]:
    """``Store.add_webhook_events`` in the caller's transaction."""
    added = 0
    for event in events:
        webhooks = yield from rows(sql.ACCOUNT_WEBHOOK_EVENTS, (event.account_pid,))
        for delivery in deliveries_of(event, webhooks, now):
            added += yield from execute(sql.INSERT_DELIVERY, to_row(delivery))
    return added
