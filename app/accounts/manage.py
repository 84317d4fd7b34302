"""Account, grant and API key operations shared by the admin API, the CLI and ``/v1``.

Creating an account, a key or a grant writes the durable store first (the record of truth),
then Redis. Revoking a key writes Redis first, so every worker refuses the key from that
moment, then the durable record. Redis's writes are idempotent, so a retried call converges.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from app.core.clock import DAY_S, iso_utc, parse_iso_utc
from app.core.errors import (
    ApiError,
    ErrorKind,
    account_not_found,
    invalid_value,
    service_unavailable,
)
from app.core.ids import random_id
from app.core.settings import MAX_RATE_LIMIT_RPM
from app.core.validation import decode_json
from app.credits.key_records import KeyRecords, KeyUse
from app.credits.money import Money
from app.credits.outcomes import Balance, ScriptStatus
from app.keys.format import (
    digest,
    generate_key,
    hash_secret,
    kid_from_public_id,
    new_kid,
    public_id,
)
from app.keys.roles import API_DEFAULT_ROLE, OPERATOR_DEFAULT_ROLE, Role, check_within
from app.store import (
    AccountRecord,
    GrantRecord,
    KeyRecord,
    KeyRotation,
    Store,
    WebhookEventRecord,
)
from app.webhooks.events import KEY_REVOKED, KEY_ROTATED, encode_data, event_id
from app.webhooks.registry import Webhooks


class CreditBalance(msgspec.Struct):
    """Spec 2.5."""

    earned_available: int
    earned_expires_at: str | None
    purchased_available: int
    total_available: int


class ApiKeyCreated(msgspec.Struct):
    """The create (and rotate) response: the only place the secret ever appears."""

    id: str
    object: str
    name: str
    environment: str
    daily_cap_credits: int | None
    created_at: int
    key: str
    expires_at: str | None = None  # ISO 8601 UTC; None: never
    allowed_models: list[str] | None = None  # None: every model
    rate_limit_rpm: int | None = None  # None: no limit
    replaces: str | None = None  # the id of the key it was rotated from
    role: str = "admin"  # admin | inference (app.keys.roles)


class ApiKeyItem(msgspec.Struct):
    """A key in a list: never the secret, never a hash."""

    id: str
    object: str
    name: str
    environment: str
    daily_cap_credits: int | None
    created_at: int
    last4: str
    status: str
    expires_at: str | None = None  # ISO 8601 UTC; None: never
    last_used_at: str | None = None  # ISO 8601 UTC of its last request; None: never
    allowed_models: list[str] | None = None  # None: every model
    rate_limit_rpm: int | None = None  # None: no limit
    replaces: str | None = None  # the id of the key it was rotated from
    used_today_credits: int = 0  # held and spent today (UTC), as its daily cap counts them
    role: str = "admin"  # admin | inference (app.keys.roles)


class ApiKeyDeleted(msgspec.Struct):
    id: str
    object: str
    deleted: bool


class ApiKeyList(msgspec.Struct):
    object: str
    data: list[ApiKeyItem]


MAX_KEY_NAME = 100
MAX_ROTATION_GRACE_S = 7 * DAY_S
_KEY_SYNC_ROUNDS = 5  # writes of a key update to Redis, racing other updates, before a 503
MAX_GRANT = 10**12
# The limits of the request bodies, declared once: decoding enforces them and the OpenAPI
# document states them (both read these annotations).
KeyName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY_NAME)]
Credits = Annotated[int, msgspec.Meta(ge=1, le=MAX_GRANT)]
DailyCap = Annotated[int, msgspec.Meta(ge=0, le=MAX_GRANT)]
RateLimit = Annotated[
    int,
    msgspec.Meta(
        ge=1,
        le=MAX_RATE_LIMIT_RPM,
        description="Requests the key may start in any 60 seconds; null: no limit.",
    ),
]
ModelIds = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]],
    msgspec.Meta(
        max_length=64,
        description="The models (aliases) the key may use; null: all. svc-auto is allowed "
        "when every alias it may route to is.",
    ),
]
GraceSeconds = Annotated[int, msgspec.Meta(ge=0, le=MAX_ROTATION_GRACE_S)]
KeyRole = Annotated[
    Role,
    msgspec.Meta(
        description="admin: manages keys and webhooks, and everything else; inference: "
        "requests and reads only. Left out: inference through /v1, admin for operators."
    ),
]
Timestamp = Annotated[
    str,
    msgspec.Meta(
        max_length=40,
        description="An ISO 8601 time with its offset, such as 2027-01-31T00:00:00Z.",
    ),
]


class KeyCreateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of a key creation (``POST /v1/api-keys`` and the admin API). Left out,
    ``rate_limit_rpm`` is the service's default for new keys (``SVC_KEY_RATE_LIMIT``)."""

    name: KeyName
    environment: Literal["live", "test"]
    daily_cap_credits: DailyCap | None
    expires_at: Timestamp | None = None
    allowed_models: ModelIds | None = None
    rate_limit_rpm: RateLimit | UnsetType | None = UNSET
    role: KeyRole | UnsetType = UNSET


class KeyUpdateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of a key update (``PATCH /v1/api-keys/{id}`` and the admin API): the fields to
    change, each left out to keep it (``daily_cap_credits: null`` removes the cap). A key's
    environment never changes; any other field is refused by name."""

    name: KeyName | UnsetType = UNSET
    daily_cap_credits: DailyCap | UnsetType | None = UNSET
    expires_at: Timestamp | UnsetType | None = UNSET
    allowed_models: ModelIds | UnsetType | None = UNSET
    rate_limit_rpm: RateLimit | UnsetType | None = UNSET
    role: KeyRole | UnsetType = UNSET


class KeyRotateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of a rotation (``POST /v1/api-keys/{id}/rotate``, optional): how long the old
    key keeps working, in seconds (0: it stops at once), and the new key's role (left out:
    the old key's)."""

    grace_seconds: GraceSeconds = 0
    role: KeyRole | UnsetType = UNSET


class GrantRequest(msgspec.Struct):
    credits: Credits


def rotate_request(body: bytes) -> KeyRotateRequest:
    """A rotation's body, which may be left out (or empty) for the defaults."""
    return decode_json(body, KeyRotateRequest) if body.strip() else KeyRotateRequest()


def validate_key_request(req: KeyCreateRequest) -> KeyCreateRequest:
    """What decoding cannot check: a key's name is printable text (``str.isprintable``),
    its expiry a time with its offset (the models a key may use are checked by
    ``Accounts``, which knows them)."""
    _check_name(req.name)
    if req.expires_at is not None:
        expiry_seconds(req.expires_at)
    return req


def validate_key_update(req: KeyUpdateRequest) -> KeyUpdateRequest:
    """As ``validate_key_request``, for the fields an update sets."""
    if isinstance(req.name, str):
        _check_name(req.name)
    if isinstance(req.expires_at, str):
        expiry_seconds(req.expires_at)
    return req


def expiry_seconds(text: str) -> int:
    """An ``expires_at`` as unix seconds, or the 400 naming it."""
    seconds = parse_iso_utc(text)
    if seconds is None or seconds <= 0:
        raise invalid_value(
            "expires_at",
            "'expires_at' must be an ISO 8601 time with its offset, "
            "such as 2027-01-31T00:00:00Z, or null.",
        )
    return seconds


def _check_name(name: str) -> None:
    if not name.isprintable():
        raise invalid_value("name", f"'name' must be 1 to {MAX_KEY_NAME} printable characters.")


def credit_balance(balance: Balance) -> CreditBalance:
    expires = iso_utc(balance.earned_exp) if balance.earned > 0 and balance.earned_exp else None
    return CreditBalance(
        earned_available=balance.earned,
        earned_expires_at=expires,
        purchased_available=balance.purchased,
        total_available=balance.total,
    )


def _hot_fields(rec: KeyRecord) -> tuple[str | int | None, ...]:
    """What an update may change of the key's Redis record."""
    return (
        rec.name,
        rec.daily_cap_credits,
        rec.expires_at,
        rec.allowed_models,
        rec.rate_limit_rpm,
    )


def _iso_or_none(ts: int | None) -> str | None:
    return None if ts is None else iso_utc(ts)


def _model_list(models: str | None) -> list[str] | None:
    return None if models is None else models.split()


def _public_or_none(kid: str | None) -> str | None:
    return None if kid is None else public_id(kid)


def _shown(rec: KeyRecord) -> dict[str, Any]:
    """What every answer about a key shows of it."""
    return {
        "id": public_id(rec.kid),
        "object": "api_key",
        "name": rec.name,
        "environment": rec.environment,
        "daily_cap_credits": rec.daily_cap_credits,
        "created_at": rec.created_at,
        "expires_at": _iso_or_none(rec.expires_at),
        "allowed_models": _model_list(rec.allowed_models),
        "rate_limit_rpm": rec.rate_limit_rpm,
        "replaces": _public_or_none(rec.replaces),
        "role": rec.role,
    }


def key_item(rec: KeyRecord, use: KeyUse) -> ApiKeyItem:
    return ApiKeyItem(
        **_shown(rec),
        last4=rec.last4,
        status=rec.status,
        last_used_at=_iso_or_none(use.last_used),
        used_today_credits=use.today,
    )


def key_created(rec: KeyRecord, secret: str) -> ApiKeyCreated:
    """The answer to a creation or rotation: ``rec`` and its secret, shown this once."""
    return ApiKeyCreated(**_shown(rec), key=secret)


class Accounts:
    """Operations on accounts, their credits and their keys."""

    def __init__(
        self,
        store: Store,
        money: Money,
        key_records: KeyRecords,
        pepper: bytes,
        *,
        max_active_keys: int = 100,
        default_rate_limit_rpm: int | None = None,
        model_ids: tuple[str, ...] = (),
        webhooks: Webhooks | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``default_rate_limit_rpm``: a new key's when its creator sets none;
        ``model_ids``: the aliases a key's ``allowed_models`` may name; ``webhooks``:
        where key events go (revoked, rotated)."""
        self.store = store
        self.money = money
        self.key_records = key_records
        self.pepper = pepper
        self.max_active_keys = max_active_keys
        self.default_rate_limit_rpm = default_rate_limit_rpm
        self.model_ids = model_ids
        self.webhooks = webhooks
        self.clock = clock

    async def create_account(self) -> str:
        """A new account with empty pools; returns its public id."""
        pid = random_id("acct_", 16)
        await self.store.create_account(AccountRecord(pid=pid, created_at=int(self.clock())))
        await self.money.open_account(pid)
        return pid

    async def require_account(self, pid: str) -> AccountRecord:
        record = await self.store.get_account(pid)
        if record is None:
            raise account_not_found(pid)
        return record

    async def grant_purchased(
        self, pid: str, credits: int, *, grant_id: str | None = None, source: str = "admin"
    ) -> CreditBalance:
        """Add purchased credits (they never expire); written to the ledger table first."""
        await self.require_account(pid)
        now = self.clock()
        grant = GrantRecord(
            grant_id=grant_id or random_id("grant_", 20),
            account_pid=pid,
            pool="purchased",
            credits=credits,
            source=source,
            reference=None,
            created_at=int(now),
        )
        await self.store.insert_grant(grant)
        await self.money.open_account(pid)
        status, balance, _granted_at = await self.money.grant(
            pid, pool="purchased", credits=credits, grant_id=grant.grant_id, now=now
        )
        if status not in (ScriptStatus.OK, ScriptStatus.DUPLICATE):
            raise service_unavailable()
        return credit_balance(balance)

    async def balance(self, pid: str) -> CreditBalance:
        """An account's pools, read straight from Redis."""
        await self.require_account(pid)
        balance = await self.money.account_balance(pid, self.clock())
        return credit_balance(balance or Balance(0, 0, 0))

    async def caller(self, pid: str, kid: str) -> KeyRecord:
        """The durable record of the key a ``/v1`` request was made with (its role and
        limits bound what it may do to other keys: ``app.keys.roles``)."""
        record = await self.store.get_key(kid)
        if record is None or record.account_pid != pid:
            raise service_unavailable()  # authenticated a moment ago: keys are never deleted
        return record

    async def create_key(
        self, pid: str, req: KeyCreateRequest, *, granter: KeyRecord | None = None
    ) -> ApiKeyCreated:
        """A new key; the secret is returned here and never again. ``expires_at`` (ISO
        8601, in the future) is when it stops working; None: never. ``granter``: the key
        creating it through ``/v1`` (the new key stays within its limits, and is an
        ``inference`` key unless the request names a role); None: an operator."""
        req = validate_key_request(req)
        expires = None if req.expires_at is None else expiry_seconds(req.expires_at)
        if expires is not None and expires <= self.clock():
            raise invalid_value("expires_at", "'expires_at' must be in the future.")
        models = None if req.allowed_models is None else self._allowed_models(req.allowed_models)
        rpm = req.rate_limit_rpm
        default_role = OPERATOR_DEFAULT_ROLE if granter is None else API_DEFAULT_ROLE
        await self.require_account(pid)
        now = int(self.clock())
        kid = new_kid()
        settings = KeyRecord(
            kid=kid,
            account_pid=pid,
            name=req.name,
            environment=req.environment,
            daily_cap_credits=req.daily_cap_credits,
            secret_hash="",
            last4="",
            created_at=now,
            expires_at=expires,
            allowed_models=models,
            rate_limit_rpm=self.default_rate_limit_rpm if rpm is UNSET else rpm,
            role=default_role if req.role is UNSET else req.role,
        )
        check_within(settings, granter)
        if await self.store.count_active_keys(pid, now) >= self.max_active_keys:
            raise self._key_limit()  # before the cost of hashing; the insert checks again
        secret = generate_key(req.environment, kid)
        record = msgspec.structs.replace(
            settings,
            secret_hash=await asyncio.to_thread(hash_secret, secret),
            last4=secret[-4:],
        )
        if not await self.store.insert_key(record, max_active=self.max_active_keys):
            raise self._key_limit()
        await self._publish(record, secret)
        return key_created(record, secret)

    async def _publish(self, record: KeyRecord, secret: str) -> None:
        """Make a new key usable: its hot-path record and its secret's digest in Redis."""
        ident = self.key_records.identity(record)
        await self.key_records.put_key(ident, record)
        await self.key_records.map_digest(digest(self.pepper, secret), ident)

    def _allowed_models(self, models: list[str]) -> str:
        """A key's ``allowed_models`` as the store keeps them (space-separated, each once),
        or the 400 naming the field."""
        unknown = [m for m in models if m not in self.model_ids]
        if unknown:
            raise invalid_value(
                "allowed_models",
                f"'allowed_models' may name {', '.join(self.model_ids)} "
                f"(not '{unknown[0][:64]}'); svc-auto is allowed when every alias it may "
                "route to is.",
            )
        return " ".join(dict.fromkeys(models))

    def _key_limit(self, *, rotating: bool = False) -> ApiError:
        way_out = (
            "Revoke one first, or rotate with grace_seconds 0 (the old key then ends at once)."
            if rotating
            else "Revoke one first."
        )
        return ApiError(
            ErrorKind.KEY_LIMIT,
            f"This account has {self.max_active_keys} active keys (keys in a rotation's "
            f"grace period included), the most allowed. {way_out}",
        )

    async def list_keys(self, pid: str) -> ApiKeyList:
        """The account's keys, newest first: never a secret, never a hash."""
        records = await self.store.list_keys(pid)
        uses = await self.key_records.keys_use(pid, records, self.clock())
        return ApiKeyList(
            object="list", data=[key_item(r, u) for r, u in zip(records, uses, strict=True)]
        )

    async def _account_key(self, pid: str, key_id: str) -> KeyRecord:
        """The key ``key_id`` of ``pid``; 404 for another account's or an unknown key."""
        kid = kid_from_public_id(key_id)
        record = await self.store.get_key(kid) if kid else None
        if record is None or record.account_pid != pid:
            raise ApiError(
                ErrorKind.API_KEY_NOT_FOUND, f"No API key '{key_id[:40]}' on this account."
            )
        return record

    async def update_key(
        self,
        pid: str,
        key_id: str,
        changes: KeyUpdateRequest,
        *,
        granter: KeyRecord | None = None,
    ) -> ApiKeyItem:
        """Change a key's name, daily cap, expiry (a time already past expires it at once),
        allowed models or rate limit; each holds from the very next request on every worker
        (every request reads them in Redis). The durable record is written first, then
        Redis (the update is idempotent: a retry converges); the status is never changed
        here, so an update racing a revocation cannot undo it. ``granter``: the key making
        the change through ``/v1``: the key changed, before and after, stays within its
        limits (a key cannot lift its own); None: an operator."""
        changes = validate_key_update(changes)
        record = await self._account_key(pid, key_id)
        check_within(record, granter, acting_on=True)
        sent = msgspec.structs.asdict(changes)
        columns = {name: value for name, value in sent.items() if value is not UNSET}
        if isinstance(changes.expires_at, str):
            columns["expires_at"] = expiry_seconds(changes.expires_at)
        if isinstance(changes.allowed_models, list):
            columns["allowed_models"] = self._allowed_models(changes.allowed_models)
        check_within(msgspec.structs.replace(record, **columns), granter)
        updated = await self.store.update_key(pid, record.kid, columns)
        if updated is None:
            raise service_unavailable()  # the key was there a moment ago: never deleted
        synced = await self._sync_key(updated)
        (use,) = await self.key_records.keys_use(pid, [synced], self.clock())
        return key_item(synced, use)

    async def _sync_key(self, updated: KeyRecord) -> KeyRecord:
        """Write a key's changed settings to Redis; returns the record Redis then holds.

        Redis follows the durable record; two updates racing may write Redis in the other
        order than the store, so the record is read again until Redis holds what it says."""
        ident = self.key_records.identity(updated)
        for _ in range(_KEY_SYNC_ROUNDS):
            written = await self.key_records.update_key(ident, updated)
            if written.status is ScriptStatus.KEY_UNKNOWN:
                raise service_unavailable()  # the Redis record names another account: never
            now = await self.store.get_key(updated.kid)
            if now is None:
                raise service_unavailable()  # keys are never deleted
            if _hot_fields(now) == _hot_fields(updated):
                return now
            updated = now
        raise service_unavailable()

    async def rotate_key(
        self,
        pid: str,
        key_id: str,
        grace_seconds: int,
        *,
        role: Role | UnsetType = UNSET,
        granter: KeyRecord | None = None,
    ) -> ApiKeyCreated:
        """A successor of key ``key_id``: a new secret with the same name, environment, cap,
        allowed models and rate limit, sharing the old key's daily cap and rate limit (its
        lineage's), so a rotation neither resets nor doubles them. The old key works for
        ``grace_seconds`` more (unless it expires sooner), then answers 401
        ``api_key_expired``. The new key is usable before the old one's end reaches
        Redis, so a client switching keys never meets a gap. 409 for a revoked or expired
        key, or one rotated before; 400 ``api_key_limit_reached`` when the old key's grace
        would take the account past its active keys (the old key counts until it ends).
        ``role``: the new key's (left out: the old key's); ``granter`` as for updates."""
        old = await self._account_key(pid, key_id)
        check_within(old, granter, acting_on=True)
        now = int(self.clock())
        kid = new_kid()
        secret = generate_key(old.environment, kid)
        new = msgspec.structs.replace(
            old,
            kid=kid,
            secret_hash=await asyncio.to_thread(hash_secret, secret),
            last4=secret[-4:],
            created_at=now,
            status="active",
            revoked_at=None,
            expires_at=None,
            lineage=old.cap_kid,
            replaces=old.kid,
            role=old.role if role is UNSET else role,
        )
        check_within(new, granter)
        rotated = await self.store.rotate_key(
            new, now + grace_seconds, max_active=self.max_active_keys
        )
        if rotated is KeyRotation.LIMIT_REACHED:
            raise self._key_limit(rotating=True)
        if rotated is not KeyRotation.ROTATED:
            raise self._not_rotatable(key_id, rotated)
        await self._publish(new, secret)
        ended = await self.store.get_key(old.kid)
        if ended is None:
            raise service_unavailable()  # keys are never deleted
        await self._sync_key(ended)
        await self._tell(
            KEY_ROTATED,
            old.account_pid,
            now,
            (old.kid, new.kid),
            {
                "key_id": public_id(old.kid),
                "new_key_id": public_id(new.kid),
                "name": new.name,
                "environment": new.environment,
                "old_key_expires_at": ended.expires_at,
            },
        )
        return key_created(new, secret)

    async def _tell(
        self, kind: str, pid: str, at: int, occurrence: tuple[str, ...], data: dict[str, Any]
    ) -> None:
        """Send a key event to the account's webhooks (its id is the occurrence's: a
        retried call queues it once)."""
        if self.webhooks is None:
            return
        event = WebhookEventRecord(
            event_id=event_id(kind, *occurrence),
            account_pid=pid,
            type=kind,
            created=at,
            data=encode_data(data),
        )
        await self.webhooks.emit([event])

    @staticmethod
    def _not_rotatable(key_id: str, why: KeyRotation) -> ApiError:
        if why is KeyRotation.ROTATED_BEFORE:
            message = (
                f"The API key '{key_id[:40]}' was rotated already: rotate its successor "
                "(or revoke the successor, then rotate this key again)."
            )
        else:
            message = f"The API key '{key_id[:40]}' is revoked or expired: it cannot be rotated."
        return ApiError(ErrorKind.KEY_NOT_ROTATABLE, message)

    async def revoke_key(
        self, pid: str, key_id: str, *, granter: KeyRecord | None = None
    ) -> ApiKeyDeleted:
        """Revoke a key of ``pid`` at once; 404 for another account's or an unknown key;
        ``granter`` (the key revoking it through ``/v1``) may revoke only keys within its own
        limits.

        Redis is written first: from that moment every worker refuses the key, because every
        request reads its status there. The durable record follows; a retry is harmless.
        """
        record = await self._account_key(pid, key_id)
        check_within(record, granter, acting_on=True)
        revoked = await self.key_records.revoke_key(self.key_records.identity(record), record)
        if revoked.status is ScriptStatus.KEY_UNKNOWN:
            raise service_unavailable()  # the Redis record names another account: never here
        stored = await self.store.revoke_key(pid, record.kid, int(self.clock()))
        revoked_at = stored.revoked_at if stored and stored.revoked_at else int(self.clock())
        await self._tell(
            KEY_REVOKED,
            pid,
            revoked_at,
            (record.kid,),
            {
                "key_id": public_id(record.kid),
                "name": record.name,
                "environment": record.environment,
                "revoked_at": revoked_at,
            },
        )
        return ApiKeyDeleted(id=public_id(record.kid), object="api_key", deleted=True)
