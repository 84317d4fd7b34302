"""The ``Store`` protocol: what svc keeps outside Redis, and what each method promises
(its docstrings are the contract ``app.store.base.SQLStore`` implements for both engines),
with the constants and the stream-id order its usage methods take."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from app.store.audit import AuditQuery, AuditRecord
from app.store.books import BooksSums, UpstreamCostRollup
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
    KeyRecord,
    KeyRotation,
    LedgerSnapshot,
    UsageRollup,
    WebhookEventRecord,
    WebhookRecord,
)
from app.store.usage_batch import ANY_CURSOR, UsageBatch

END_OF_TIME = "9999-12-31"
"""A day after every real one: ``usage_totals`` sums all time up to it."""


def stream_id_key(stream_id: str) -> tuple[int, int]:
    """A Redis stream id (``ms-seq``) as a tuple that orders like the stream.

    Raises ``ValueError`` for anything that is not a stream id.
    """
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class Store(Protocol):
    """What svc keeps outside Redis: accounts, keys, grants, usage rollups, flush cursors.

    ``audit``: the operator's action a write records (``app.store.audit``), written in the
    write's own transaction, only when the write changes something: both commit, or
    neither does (an action is never done unaudited). None: the write is no operator's."""

    async def migrate(self) -> None:
        """Create or upgrade the schema; idempotent and safe from several processes."""

    async def close(self) -> None:
        """Release the connection; the store cannot be used afterwards."""

    async def ping(self) -> None:
        """A cheap round trip; raises ``StoreError`` when the store is unreachable."""

    async def has_schema(self) -> bool:
        """Whether svc's schema is there (``migrate`` made it); creates nothing (a SQLite
        file that does not exist stays so). ``StoreError`` when unreachable."""

    async def create_account(self, rec: AccountRecord, audit: AuditRecord | None = None) -> bool:
        """Add an account, and ``audit`` (its creation's entry) in the same transaction;
        False (nothing written, no entry either) when another account has its
        ``external_id``, even one created at the same moment; ``StoreConflict`` when the pid
        exists."""

    async def delete_new_account(self, pid: str) -> bool:
        """Remove an account that nothing refers to yet (no key, no grant), and its
        creation's audit entry: one whose creation failed half-way. False (nothing
        removed) otherwise."""

    async def get_account(self, pid: str) -> AccountRecord | None:
        """The account, or None."""

    async def list_accounts(self) -> list[AccountRecord]:
        """Every account, oldest first."""

    async def list_accounts_page(self, query: AccountQuery) -> list[AccountRecord]:
        """One page of accounts, newest first (``account_page``): those ``query`` matches
        (all when it names nothing), after its position, at most ``query.limit``."""

    async def set_account_status(
        self, pid: str, status: str, audit: AuditRecord | None = None
    ) -> AccountRecord | None:
        """The account with its status set (``active`` or ``disabled``); None when there is
        no such account."""

    async def set_external_id(
        self, pid: str, external_id: str | None, audit: AuditRecord | None = None
    ) -> AccountRecord | None:
        """The account with its external id set (None: cleared), and ``audit`` written in
        the same transaction; None when there is no such account (no entry);
        ``StoreConflict`` (nothing written) when another account has that id."""

    async def find_external_id(self, external_id: str) -> AccountRecord | None:
        """The account with that external id, or None."""

    async def insert_key(
        self, rec: KeyRecord, *, max_active: int | None = None, audit: AuditRecord | None = None
    ) -> bool:
        """Add a key; ``StoreConflict`` when the kid exists or the account does not. With
        ``max_active``, False (nothing written) when the account has that many active keys
        already: counted and inserted in one transaction, so concurrent creates cannot
        pass the limit together."""

    async def get_key(self, kid: str) -> KeyRecord | None:
        """The key (whatever its status or account), or None."""

    async def list_keys(self, account_pid: str) -> list[KeyRecord]:
        """The account's keys, revoked ones included: newest first (then by kid)."""

    async def count_active_keys(self, account_pid: str, now: int) -> int:
        """How many of the account's keys are neither revoked nor expired at ``now``."""

    async def update_key(
        self,
        account_pid: str,
        kid: str,
        changes: Mapping[str, str | int | None],
        audit: AuditRecord | None = None,
    ) -> KeyRecord | None:
        """The key with ``changes`` set (columns of ``KEY_UPDATABLE``: only those a client
        sent), in one transaction; None when that account has no such key. The status is
        left as it is."""

    async def revoke_key(
        self, account_pid: str, kid: str, revoked_at: int, audit: AuditRecord | None = None
    ) -> KeyRecord | None:
        """The key after revocation; None when that account has no such key.

        Idempotent: a revoked key is returned unchanged (it keeps its first revoked_at).
        """

    async def rotate_key(
        self,
        new: KeyRecord,
        old_expires_at: int,
        *,
        max_active: int | None = None,
        audit: AuditRecord | None = None,
    ) -> KeyRotation:
        """Write ``new``, the successor of key ``new.replaces``, and end the old key at
        ``old_expires_at`` (unless it expires sooner), in one transaction; only when the old
        key is the account's, active and unexpired at ``new.created_at``, and has no
        active successor (else nothing is written: a revoked successor allows another, the
        way out of a rotation whose answer was lost). With ``max_active``: a key in its
        grace period is active, so a rotation with a grace (the old key outlives
        ``new.created_at``) is refused (``LIMIT_REACHED``, nothing written) when the
        account would have more active keys than that; one without a grace never is (the
        old key ends as the new one starts)."""

    async def insert_grant(
        self,
        rec: GrantRecord,
        events: Sequence[WebhookEventRecord] = (),
        audit: AuditRecord | None = None,
    ) -> bool:
        """Write a ledger entry (pending unless ``rec.applied_at`` is set): True when
        written, with ``events`` queued for the account's webhooks and ``audit`` in the
        same transaction; False (and nothing written) when the entry's id exists."""

    async def delete_grant(self, grant_id: str) -> bool:
        """Remove an entry Redis refused to apply (its account's hash was lost; a reward
        past its limit), and its audit entry, so that its retry is the only one; False when
        there is no such entry."""

    async def mark_applied(
        self,
        grant_id: str,
        *,
        credits: int,
        debt_change: int,
        applied_at: int,
        events: Sequence[WebhookEventRecord] = (),
    ) -> bool:
        """Record that Redis applied the pending entry: how its pools and debt moved (their
        difference is what it asked), when, and ``events`` queued in the same transaction;
        False (nothing written) when it is not pending (applied before, or gone)."""

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        """The ledger entry, or None."""

    async def list_grants(self, account_pid: str) -> list[GrantRecord]:
        """The account's ledger entries, oldest first."""

    async def record_purchase(
        self, rec: PurchaseRecord, entry: GrantRecord | None
    ) -> tuple[PurchaseRecord, bool]:
        """Write a purchase and (when it grants: matched to an account) its pending ledger
        entry in one transaction, unless its ``(source, reference)`` is stored: the purchase
        as stored, and whether this call wrote it (False: nothing written)."""

    async def get_purchase(self, purchase_id: str) -> PurchaseRecord | None:
        """The purchase, or None."""

    async def purchase_of_payment(self, source: str, payment: str) -> PurchaseRecord | None:
        """The purchase of a store's payment (its refunds and disputes name it), or None."""

    async def change_purchase(self, before: PurchaseRecord, change: PurchaseChange) -> str:
        """Set what refunds and disputes took of a purchase and write the change's ledger
        entry, in one transaction, if the purchase is still ``before``: "written";
        "duplicate" (nothing written) when the entry exists; "changed" (nothing written)
        when another change came first (read it again and decide anew)."""

    async def keep_event(self, event: KeptEvent) -> bool:
        """Keep an event about a payment whose purchase is not stored yet; False when kept
        before."""

    async def kept_events(self, source: str, payment: str) -> list[KeptEvent]:
        """The events kept for a payment, oldest first."""

    async def drop_kept_event(self, event_id: str) -> None:
        """Forget a kept event (applied)."""

    async def list_purchases(self, query: PurchaseQuery) -> list[PurchaseRecord]:
        """A page of purchases, newest first, of one status or all."""

    async def save_account_token(self, token: str, account_pid: str, now: int) -> None:
        """Remember which account an app account token is (kept when known)."""

    async def account_of_token(self, token: str) -> str | None:
        """The pid of the account whose app account token this is, or None."""

    async def notice_seen(self, notice_id: str) -> bool:
        """Whether a store's notification of this id was applied."""

    async def mark_notice(self, notice_id: str, source: str, now: int) -> bool:
        """Record a store's notification as applied; False when it was before."""

    async def list_applied_after(self, since: int, after_id: str, limit: int) -> list[GrantRecord]:
        """At most ``limit`` applied entries after ``(since, after_id)`` in the order of
        their ``(applied_at, grant_id)`` (``after_id`` "": from ``since`` on)."""

    async def list_pending(self, created_before: int, limit: int) -> list[GrantRecord]:
        """At most ``limit`` pending entries created at or before ``created_before``, oldest
        first."""

    async def ledger_position(self, account_pid: str, entry_id: str) -> LedgerPosition | None:
        """Where the account's ledger entry (or lapse) ``entry_id`` stands, for a page
        after it; None when the account has none of that id."""

    async def ledger_page(
        self,
        account_pid: str,
        limit: int,
        after: LedgerPosition | None = None,
        kinds: Sequence[str] = (),
    ) -> tuple[list[GrantRecord], list[CreditExpiry]]:
        """The account's latest ``limit`` entries and ``limit`` lapses (before ``after``),
        each newest first, of ``kinds`` when it names some (``expiry``: the lapses): the
        caller merges them."""

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
        """``apply_usage_batches`` of the one batch these make (``UsageBatch``)."""

    async def apply_usage_batches(self, batches: Sequence[UsageBatch]) -> list[bool]:
        """In one transaction, each batch (a shard at most once): its rows (deliveries for
        its webhook events, as ``add_webhook_events``) added and its shard's cursor moved to
        ``last_stream_id``; or nothing of it, when that is at or below the cursor (a replay
        is never counted twice) or ``after`` is given and the cursor is not ``after`` (None:
        no cursor; of two drainers that read overlapping batches, one applies). Whether each
        batch was applied, in order."""

    async def list_audit(self, query: AuditQuery) -> list[AuditRecord]:
        """One page of the audit log (``audit_page``), newest first."""

    async def get_audit(self, seq: int) -> AuditRecord | None:
        """The audit entry ``seq``, or None."""

    async def get_cursor(self, shard: int) -> str | None:
        """The last stream id applied for the shard, or None."""

    async def set_low_balance(self, pid: str, low: int | None) -> None:
        """Set (None: clear) the account's low-balance threshold."""

    async def create_webhook(self, rec: WebhookRecord, *, max_per_account: int) -> bool:
        """Add a webhook; False (nothing written) when the account has ``max_per_account``
        already (counted and inserted in one transaction)."""

    async def list_webhooks(self, account_pid: str) -> list[WebhookRecord]:
        """The account's webhooks (not deleted), oldest first."""

    async def get_webhook(self, account_pid: str, webhook_id: str) -> WebhookRecord | None:
        """The account's webhook, unless there is none or it was deleted."""

    async def update_webhook(
        self, account_pid: str, webhook_id: str, changes: Mapping[str, str]
    ) -> WebhookRecord | None:
        """The webhook with ``changes`` (columns of ``WEBHOOK_UPDATABLE``) set, in one
        transaction; None when the account has no such webhook."""

    async def delete_webhook(
        self, account_pid: str, webhook_id: str, deleted_at: int
    ) -> WebhookRecord | None:
        """Mark the webhook deleted (its deliveries stop); the record as it was, or None."""

    async def webhook_subscriptions(self) -> dict[str, set[str]]:
        """The event types each account's webhooks (not deleted) receive, by account."""

    async def add_webhook_events(self, events: Sequence[WebhookEventRecord], now: int) -> int:
        """One delivery of each event to each webhook of its account that receives its
        type, due at ``now`` (one already there is left as it is), in one transaction;
        returns how many it added."""

    async def claim_deliveries(self, now: int, lease_until: int, limit: int) -> list[DueDelivery]:
        """Up to ``limit`` deliveries due at ``now`` (of webhooks not deleted), each taken
        until ``lease_until`` by this caller alone, oldest due first."""

    async def record_delivery(self, delivery: DeliveryRecord) -> None:
        """Write a delivery's state after an attempt (and let go of its lease)."""

    async def list_deliveries(self, webhook_id: str, limit: int) -> list[DeliveryRecord]:
        """A webhook's most recent deliveries, newest event first."""

    async def prune_deliveries(self, before: int, limit: int) -> int:
        """Delete up to ``limit`` deliveries of events created before ``before`` (unix
        seconds; long past their retry window); returns how many."""

    async def list_activity(self, query: ActivityQuery) -> list[ActivityRecord]:
        """One page of an account's activity, newest first (``activity_page``)."""

    async def activity_position(self, account_pid: str, id: str) -> tuple[int, str] | None:
        """Where the account's row with response id ``id`` is in the page order
        (``(created, event_key)``; the newest such row), or None when there is none."""

    async def get_activity(self, account_pid: str, id: str) -> ActivityRecord | None:
        """The account's row with response id ``id`` (the newest such row), or None."""

    async def prune_activity(self, before: int, limit: int) -> int:
        """Delete up to ``limit`` activity rows of the UTC days before the day of
        ``before`` (unix seconds); returns how many it deleted."""

    async def ledger_snapshot(self, since_day: str = END_OF_TIME) -> LedgerSnapshot:
        """Accounts, flush cursors and the sums of grants, usage and expiries per account,
        and the usage sums per account, environment and day from ``since_day`` on (none
        by default), all read in one transaction (one consistent instant, even while the
        flusher writes)."""

    async def list_all_keys(self) -> list[KeyRecord]:
        """Every key of every account, revoked ones included."""

    async def list_rewards(
        self, account_pid: str, limit: int, since: int
    ) -> tuple[list[GrantRecord], int]:
        """The account's ``limit`` latest spotlight rewards, newest first, and how many it
        received at or after ``since`` (unix seconds)."""

    async def list_grants_since(self, since: int) -> list[GrantRecord]:
        """Every ledger entry Redis applied created at or after ``since`` (unix seconds),
        oldest first."""

    async def usage_daily(
        self,
        account_pid: str,
        since_day: str,
        environment: str = "live",
        *,
        group_by: str | None = None,
    ) -> list[UsageRollup]:
        """One sum per day (kid, alias and api empty) from ``since_day`` on, newest first;
        days without usage are absent. With ``group_by`` (one of ``USAGE_GROUPS``, a
        UsageRollup field) one sum per day and value of that field, the field set."""

    async def usage_totals(
        self, account_pid: str, environment: str = "live", before_day: str = END_OF_TIME
    ) -> UsageRollup | None:
        """Sums (kid, alias and day empty) of the days before ``before_day``, all time by
        default; None when there is no such usage. One statement: consistent even while
        the flusher writes."""

    async def books_sums(self, first_day: str, last_day: str) -> BooksSums:
        """The sums the books of the UTC days ``first_day`` to ``last_day`` (``YYYY-MM-DD``,
        both included) are made of, read in one transaction: live upstream costs per day,
        alias, provider's model and currency; revenue per day, store, currency and kind;
        what the applied ledger entries asked per day and kind; live credits charged and
        earned credits lapsed per day."""

    async def spend_by_account(self, since_day: str) -> dict[str, int]:
        """The live credits each account was charged from ``since_day`` on (accounts that
        were charged nothing are absent)."""

    async def last_usage_day(self) -> str | None:
        """The latest day any rollup covers (``YYYY-MM-DD``), or None when there are none."""
