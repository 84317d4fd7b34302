"""The webhooks' ``Store`` methods on SQL (a part of ``SQLStore``): subscriptions, and the
deliveries an event makes, claims and records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.store import statements as sql
from app.store.core import SQLCore
from app.store.program import Program, execute, row, rows, take
from app.store.records import (
    DeliveryRecord,
    DueDelivery,
    WebhookEventRecord,
    WebhookRecord,
    deliveries_of,
    due_delivery,
    recorded_delivery,
    subscriptions,
    to_record,
    to_row,
)


class WebhooksSQL(SQLCore):
    """``Store``'s webhook methods; what each promises is in ``Store``'s docstrings."""

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
        return await self._write(write_webhook_events(events, now)) if events else 0

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


def write_webhook_events(events: Sequence[WebhookEventRecord], now: int) -> Program[int]:
    """``Store.add_webhook_events`` in the caller's transaction."""
    added = 0
    for event in events:
        webhooks = yield from rows(sql.ACCOUNT_WEBHOOK_EVENTS, (event.account_pid,))
        for delivery in deliveries_of(event, webhooks, now):
            added += yield from execute(sql.INSERT_DELIVERY, to_row(delivery))
    return added
