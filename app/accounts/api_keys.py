"""An account's API keys: creation, listing, updates, rotation and revocation, and the key
events they send to the account's webhooks.

A new key is written to the durable store first (the record of truth), then Redis. An update
writes the store, then Redis, until Redis holds what the store says. A revocation writes
Redis first, so every worker refuses the key from that moment, then the durable record.
Redis's writes are idempotent, so a retried call converges.

A key is made, listed and changed only on an account that exists: ``ApiKeys`` asks the
account's owner (``app.accounts.accounts.Accounts``) for its record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from app.accounts import audit
from app.accounts.accounts import Accounts
from app.accounts.answers import (
    ApiKeyCreated,
    ApiKeyDeleted,
    ApiKeyItem,
    ApiKeyList,
    key_created,
    key_deleted,
    key_item,
)
from app.accounts.bodies import (
    KeyCreateRequest,
    KeyUpdateRequest,
    expiry_seconds,
    validate_key_request,
    validate_key_update,
)
from app.core.errors import ApiError, ErrorKind, invalid_value, service_unavailable
from app.credits.key_records import KeyRecords
from app.credits.outcomes import ScriptStatus
from app.keys.format import (
    digest,
    generate_key,
    hash_secret,
    kid_from_public_id,
    new_kid,
    public_id,
)
from app.keys.roles import DEFAULT_ROLE, Role, check_within, lineage_of_keys_made_by
from app.store import KeyRecord, KeyRotation, Store, WebhookEventRecord
from app.webhooks.events import KEY_REVOKED, KEY_ROTATED, encode_data, event_id
from app.webhooks.registry import Webhooks

_KEY_SYNC_ROUNDS = 5  # writes of a key update to Redis, racing other updates, before a 503


def _hot_fields(rec: KeyRecord) -> tuple[str | int | None, ...]:
    """What an update may change of the key's Redis record."""
    return (
        rec.name,
        rec.daily_cap_credits,
        rec.expires_at,
        rec.allowed_models,
        rec.rate_limit_rpm,
        rec.max_credits_per_request,
    )


class ApiKeys:
    """Operations on an account's keys."""

    def __init__(
        self,
        store: Store,
        key_records: KeyRecords,
        accounts: Accounts,
        pepper: bytes,
        *,
        max_active_keys: int = 100,
        default_rate_limit_rpm: int | None = None,
        model_ids: tuple[str, ...] = (),
        webhooks: Webhooks | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``accounts``: whose ``require_account`` answers the 404 of an unknown account;
        ``pepper``: the keys' digests' secret; ``default_rate_limit_rpm``: a new key's when its
        creator sets none; ``model_ids``: the aliases a key's ``allowed_models`` may name;
        ``webhooks``: where key events go (revoked, rotated)."""
        self.store = store
        self.key_records = key_records
        self.require_account = accounts.require_account
        self.pepper = pepper
        self.max_active_keys = max_active_keys
        self.default_rate_limit_rpm = default_rate_limit_rpm
        self.model_ids = model_ids
        self.webhooks = webhooks
        self.clock = clock

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
        creating it through ``/v1`` (the new key stays within its limits, and shares its
        daily cap and rate limit when it has either: ``lineage_of_keys_made_by``); None: an
        operator. The key is ``inference`` unless the request names a role."""
        req = validate_key_request(req)
        expires = None if req.expires_at is None else expiry_seconds(req.expires_at)
        if expires is not None and expires <= self.clock():
            raise invalid_value("expires_at", "'expires_at' must be in the future.")
        models = None if req.allowed_models is None else self._allowed_models(req.allowed_models)
        rpm = req.rate_limit_rpm
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
            max_credits_per_request=req.max_credits_per_request,
            role=DEFAULT_ROLE if req.role is UNSET else req.role,
            lineage=lineage_of_keys_made_by(granter),
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
        made = {"name": record.name, "environment": record.environment, "role": record.role}
        entry = audit.audit_entry(audit.KEY_CREATE, pid, public_id(kid), made, now)
        if not await self.store.insert_key(record, max_active=self.max_active_keys, audit=entry):
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
        allowed models, rate limit or credit ceiling; each holds from the very next request
        on every worker (every request reads them in Redis). The durable record is written
        first, then Redis (the update is idempotent: a retry converges); the status is never changed
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
        changed = {name: value for name, value in sent.items() if value is not UNSET}
        entry = audit.audit_entry(
            audit.KEY_UPDATE, pid, public_id(record.kid), changed, self.clock()
        )
        updated = await self.store.update_key(pid, record.kid, columns, entry)
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
        expiry, allowed models, rate limit and credit ceiling, sharing the old key's daily
        cap and rate limit (its lineage's), so a rotation neither resets nor doubles them,
        nor lifts an expiry. The old key works for ``grace_seconds`` more (unless it expires
        sooner), then answers 401 ``api_key_expired``. The new key is usable before the old
        one's end reaches Redis, so a client switching keys never meets a gap. 409 for a
        revoked or expired key, or one rotated before; 400 ``api_key_limit_reached`` when
        the old key's grace would take the account past its active keys (the old key counts
        until it ends). ``role``: the new key's (left out: the old key's); ``granter`` as
        for updates."""
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
            expires_at=old.expires_at,  # a rotation never lifts an expiry
            lineage=old.cap_kid,
            replaces=old.kid,
            role=old.role if role is UNSET else role,
        )
        check_within(new, granter)
        rotation = {
            "new_key_id": public_id(new.kid),
            "grace_seconds": grace_seconds,
            "role": new.role,
        }
        entry = audit.audit_entry(audit.KEY_ROTATE, pid, public_id(old.kid), rotation, now)
        rotated = await self.store.rotate_key(
            new, now + grace_seconds, max_active=self.max_active_keys, audit=entry
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
        revoked_now = int(self.clock())
        named = {"name": record.name, "environment": record.environment}
        entry = audit.audit_entry(audit.KEY_REVOKE, pid, public_id(record.kid), named, revoked_now)
        stored = await self.store.revoke_key(pid, record.kid, revoked_now, entry)
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
        return key_deleted(record)
