"""An account's webhooks (``/v1/webhooks``): made, listed, changed, deleted; their
deliveries; and the events they are sent (``emit``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from app.core.errors import ApiError, ErrorKind, TargetRefused, invalid_value
from app.core.ids import random_id
from app.credits.money import Money
from app.store import DeliveryRecord, Store, WebhookEventRecord, WebhookRecord
from app.webhooks.events import EVENT_TYPES
from app.webhooks.signing import new_salt, webhook_secret
from app.webhooks.targets import AllowList, check_url

MAX_WEBHOOKS = 10  # per account
MAX_DESCRIPTION_CHARS = 256
MAX_DELIVERIES_LISTED = 100
MAX_THRESHOLD = 999_999_999_999_999  # the largest count the scripts take
ID_PREFIX = "wh_"


Credits = Annotated[int, msgspec.Meta(ge=0, le=MAX_THRESHOLD)]


class WebhookCreateRequest(msgspec.Struct, forbid_unknown_fields=True):
    url: Annotated[str, msgspec.Meta(min_length=1)]
    events: Annotated[list[str], msgspec.Meta(min_length=1)]
    description: str = ""
    # the account's credits.low threshold (one per account: every webhook shows it)
    low_balance_credits: Credits | UnsetType | None = UNSET


class WebhookUpdateRequest(msgspec.Struct, forbid_unknown_fields=True):
    url: str | UnsetType = UNSET
    events: list[str] | UnsetType = UNSET
    description: str | UnsetType = UNSET
    low_balance_credits: Credits | UnsetType | None = UNSET


class WebhookItem(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["webhook"] = "webhook"
    url: str
    events: list[str]
    description: str
    created_at: int
    low_balance_credits: int | None = None  # the account's credits.low threshold


class WebhookCreated(WebhookItem, kw_only=True):
    """The create response: the only place the signing secret ever appears."""

    secret: str


class WebhookList(msgspec.Struct):
    data: list[WebhookItem]
    object: Literal["list"] = "list"


class WebhookDeleted(msgspec.Struct):
    id: str
    object: Literal["webhook"] = "webhook"
    deleted: bool = True


class DeliveryItem(msgspec.Struct, kw_only=True):
    """One event's delivery to a webhook, as its last attempt left it."""

    event_id: str
    type: str
    created: int  # when the event happened
    status: str  # pending | delivered | failed (given up 24 hours after the event)
    attempt: int  # attempts made so far
    status_code: int | None  # the receiver's answer to the last attempt
    error: str | None  # why the last attempt got no answer (timeout, refused, …)
    next_retry_at: int | None  # unix seconds; None once delivered or given up


class DeliveryList(msgspec.Struct):
    data: list[DeliveryItem]
    object: Literal["list"] = "list"


def webhook_item(rec: WebhookRecord, low: int | None) -> WebhookItem:
    return WebhookItem(
        id=rec.id,
        url=rec.url,
        events=rec.events.split(" "),
        description=rec.description,
        created_at=rec.created_at,
        low_balance_credits=low,
    )


def delivery_item(rec: DeliveryRecord) -> DeliveryItem:
    return DeliveryItem(
        event_id=rec.event_id,
        type=rec.type,
        created=rec.created,
        status=rec.status,
        attempt=rec.attempt,
        status_code=rec.status_code,
        error=rec.error,
        next_retry_at=rec.next_attempt_at if rec.status == "pending" else None,
    )


def _events(types: list[str]) -> str:
    unknown = [t for t in types if t not in EVENT_TYPES]
    if unknown or not types:
        raise invalid_value(
            "events", f"'events' must list event types from: {', '.join(EVENT_TYPES)}."
        )
    return " ".join(sorted(set(types)))


def _description(text: str) -> str:
    if len(text) > MAX_DESCRIPTION_CHARS or not text.isprintable():
        raise invalid_value(
            "description",
            f"'description' must be printable and at most {MAX_DESCRIPTION_CHARS} characters.",
        )
    return text


def webhook_not_found(webhook_id: str) -> ApiError:
    return ApiError(
        ErrorKind.WEBHOOK_NOT_FOUND, f"No webhook '{webhook_id[:64]}'.", param="webhook_id"
    )


class Webhooks:
    """The webhooks of accounts, in the durable store."""

    def __init__(
        self,
        store: Store,
        money: Money,
        pepper: bytes,
        allow: AllowList,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.money = money
        self.pepper = pepper
        self.allow = allow
        self.clock = clock

    async def _url(self, url: str) -> str:
        try:
            await check_url(url, self.allow)
        except TargetRefused as exc:
            raise invalid_value("url", exc.reason) from exc
        return url

    async def create(self, pid: str, req: WebhookCreateRequest) -> WebhookCreated:
        """A new webhook, with its signing secret (shown this once)."""
        events = _events(req.events)
        description = _description(req.description)
        url = await self._url(req.url)
        rec = WebhookRecord(
            id=random_id(ID_PREFIX),
            account_pid=pid,
            url=url,
            events=events,
            description=description,
            secret_salt=new_salt(),
            created_at=int(self.clock()),
        )
        if not await self.store.create_webhook(rec, max_per_account=MAX_WEBHOOKS):
            raise ApiError(
                ErrorKind.WEBHOOK_LIMIT,
                f"An account may have at most {MAX_WEBHOOKS} webhooks; delete one first.",
            )
        low = await self._threshold(pid, req.low_balance_credits)
        secret = webhook_secret(self.pepper, rec.id, rec.secret_salt)
        return WebhookCreated(**msgspec.structs.asdict(webhook_item(rec, low)), secret=secret)

    async def _threshold(self, pid: str, change: int | UnsetType | None) -> int | None:
        """The account's threshold after ``change`` (UNSET: as it is): the store first,
        then Redis, where settle compares each balance with it."""
        if change is UNSET:
            account = await self.store.get_account(pid)
            return None if account is None else account.low_balance_credits
        await self.store.set_low_balance(pid, change)
        await self.money.set_low_balance(pid, change, self.clock())
        return change

    async def list(self, pid: str) -> WebhookList:
        low = await self._threshold(pid, UNSET)
        return WebhookList([webhook_item(r, low) for r in await self.store.list_webhooks(pid)])

    async def update(self, pid: str, webhook_id: str, req: WebhookUpdateRequest) -> WebhookItem:
        """Change what the request sets (the secret stays)."""
        changes: dict[str, str] = {}
        if req.events is not UNSET:
            changes["events"] = _events(req.events)
        if req.description is not UNSET:
            changes["description"] = _description(req.description)
        if req.url is not UNSET:
            changes["url"] = await self._url(req.url)
        updated = await self.store.update_webhook(pid, webhook_id, changes)
        if updated is None:
            raise webhook_not_found(webhook_id)
        return webhook_item(updated, await self._threshold(pid, req.low_balance_credits))

    async def delete(self, pid: str, webhook_id: str) -> WebhookDeleted:
        """Delete a webhook: nothing more is sent to it."""
        if await self.store.delete_webhook(pid, webhook_id, int(self.clock())) is None:
            raise webhook_not_found(webhook_id)
        return WebhookDeleted(id=webhook_id)

    async def deliveries(self, pid: str, webhook_id: str) -> DeliveryList:
        """The webhook's most recent deliveries, newest event first."""
        if await self.store.get_webhook(pid, webhook_id) is None:
            raise webhook_not_found(webhook_id)
        found = await self.store.list_deliveries(webhook_id, MAX_DELIVERIES_LISTED)
        return DeliveryList([delivery_item(d) for d in found])

    async def emit(self, events: Sequence[WebhookEventRecord]) -> int:
        """Queue the events for each webhook that receives them; how many deliveries."""
        return await self.store.add_webhook_events(events, int(self.clock()))
