"""``SQLStore``: the ``Store`` methods, written once for every SQL engine.

Each method is a program (``app.store.program``) of shared statements
(``app.store.statements``); an engine subclass runs programs (``SQLCore._run``) and names
the locks it needs where its write transactions do not serialize enough by themselves.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from app.store import migrations as schema
from app.store import statements as sql
from app.store.accounts import AccountsSQL
from app.store.audit import AuditRecord, AuditSQL, write_audit
from app.store.books import UPSERT_COSTS, BooksSQL, UpstreamCostRollup
from app.store.contract import END_OF_TIME, stream_id_key
from app.store.ledger import LedgerSQL
from app.store.program import Program, Transaction, each, execute, row, rows, take
from app.store.purchases import PurchasesSQL
from app.store.records import (
    AccountRecord,
    ActivityQuery,
    ActivityRecord,
    CreditExpiry,
    KeyRecord,
    KeyRotation,
    LedgerSnapshot,
    Row,
    UsageRollup,
    WebhookEventRecord,
    grouped_sums,
    ledger_snapshot,
    to_record,
    to_row,
    usage_sums,
)
from app.store.usage_batch import ANY_CURSOR, UsageBatch
from app.store.webhooks import WebhooksSQL, write_webhook_events


class SQLStore(AccountsSQL, AuditSQL, BooksSQL, LedgerSQL, PurchasesSQL, WebhooksSQL):
    """``Store`` on a SQL database; what each method promises is in ``Store``'s docstrings.

    A subclass adds only its engine: ``_run``, ``close``, and the locks (``SQLCore``). The
    accounts', the audit log's, the credit ledger's and the webhooks' methods are parts of
    their own (``app.store.accounts``, ``app.store.audit``, ``app.store.ledger``,
    ``app.store.webhooks``); the keys', usage's and activity's are here.
    """

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
        costs: Sequence[UpstreamCostRollup] = (),
    ) -> bool:
        batch = UsageBatch(
            shard=shard,
            last_stream_id=last_stream_id,
            rollups=rollups,
            after=after,
            expiries=expiries,
            activity=activity,
            webhook_events=webhook_events,
            costs=costs,
        )
        return (await self.apply_usage_batches([batch]))[0]

    async def apply_usage_batches(self, batches: Sequence[UsageBatch]) -> list[bool]:
        # The shards in one order (their locks taken in it: two writers never deadlock);
        # each batch's rows made before the transaction (a bad id fails before any I/O).
        ordered = [(b, stream_id_key(b.last_stream_id), _usage_rows(b)) for b in batches]
        ordered.sort(key=lambda prepared: prepared[0].shard)

        def apply() -> Program[set[int]]:
            kept: list[tuple[UsageBatch, tuple[list[Row], ...]]] = []
            for batch, position, batch_rows in ordered:
                # Concurrent batches of a shard take turns; the cursor read after the lock
                # sees what the previous holder committed.
                yield from take(self.SHARD_LOCK, batch.shard)
                found = yield from row(sql.GET_CURSOR, (batch.shard,))
                cursor = found[0] if found else None
                stale = cursor is not None and position <= stream_id_key(cursor)
                if not stale and batch.after in (ANY_CURSOR, cursor):
                    kept.append((batch, batch_rows))
            now = int(time.time())
            for n, query in enumerate(USAGE_INSERTS):
                yield from each(query, [r for _, batch_rows in kept for r in batch_rows[n]])
            yield from write_webhook_events([e for b, _ in kept for e in b.webhook_events], now)
            yield from each(sql.UPSERT_CURSOR, [(b.shard, b.last_stream_id, now) for b, _ in kept])
            return {b.shard for b, _ in kept}

        applied = await self._write(apply())
        return [b.shard in applied for b in batches]

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


USAGE_INSERTS = (sql.UPSERT_USAGE, UPSERT_COSTS, sql.INSERT_EXPIRY, sql.INSERT_ACTIVITY)
"""The statements of a usage batch's rows, in the order ``_usage_rows`` makes them."""


def _usage_rows(batch: UsageBatch) -> tuple[list[Row], ...]:
    return (
        [to_row(u) for u in batch.rollups],
        [to_row(c) for c in batch.costs],
        [to_row(e) for e in batch.expiries],
        [to_row(a) for a in batch.activity],
    )
