"""A disabled account (issue 33 item 3): every key check refuses its keys, in the scripts
(reserve, balance) and in the read made outside them (``key_access``), on fakeredis, a real
Valkey and a Valkey Cluster (the ``redis`` fixture runs each); enabled again, they serve."""

from __future__ import annotations

import pytest

from app.core.errors import ApiError, ErrorKind
from app.credits.outcomes import Hold, Refusal, ScriptStatus
from app.keys.refusals import key_refusal, refusal_error
from app.kv.fields import ACCOUNT_ACTIVE, ACCOUNT_DISABLED, AccountField
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, reserve, reserved, snapshot


async def _status(ledger: Ledgers, pid: str) -> bytes | None:
    name = ledger.layout.account(ledger.layout.shard(pid), pid)
    raw: bytes | None = await ledger.redis.hget(name, AccountField.STATUS)
    return raw


async def test_a_new_account_is_active(ledger: Ledgers) -> None:
    await account(ledger, "acct_A", purchased=10)
    assert await _status(ledger, "acct_A") == b"active"
    opened = await ledger.money.open_account("acct_B", purchased=5, status=ACCOUNT_DISABLED)
    assert opened.status is ScriptStatus.OK
    assert await _status(ledger, "acct_B") == b"disabled"
    # an existing hash keeps its status: open_account never changes it
    again = await ledger.money.open_account("acct_B", purchased=99)
    assert again.status is ScriptStatus.DUPLICATE
    assert await _status(ledger, "acct_B") == b"disabled"


@pytest.mark.parametrize("environment", ["live", "test"])
async def test_a_disabled_account_refuses_every_key_check_and_changes_nothing(
    ledger: Ledgers, clock: Clock, environment: str
) -> None:
    await account(ledger, "acct_A", purchased=100)
    ident = await key(ledger, "acct_A", "k1", environment=environment, cap=50, rpm=5)
    written = await ledger.money.set_account_status("acct_A", ACCOUNT_DISABLED)
    assert written.status is ScriptStatus.OK
    before = await snapshot(ledger)
    refused = await reserved(ledger, ident, "r1", clock())
    assert isinstance(refused, Refusal)
    assert refused.status is ScriptStatus.ACCOUNT_DISABLED
    error = refusal_error(refused)
    assert (error.status, error.kind) == (403, ErrorKind.ACCOUNT_DISABLED)
    assert error.kind.value == (403, "permission_error", "account_disabled")
    read = await ledger.money.balance(ident, clock())
    assert read.status is ScriptStatus.ACCOUNT_DISABLED
    access = await ledger.keys.key_access(ident, clock())
    assert access.status is ScriptStatus.ACCOUNT_DISABLED
    assert await snapshot(ledger) == before  # no hold, no cap, no rate log, no last use
    # enabled again: served at once
    assert (await ledger.money.set_account_status("acct_A", ACCOUNT_ACTIVE)).status is (
        ScriptStatus.OK
    )
    hold = await reserve(ledger, ident, "r2", clock())
    assert isinstance(hold, Hold)
    assert (await ledger.money.balance(ident, clock())).status is ScriptStatus.OK
    assert (await ledger.keys.key_access(ident, clock())).status is ScriptStatus.OK


async def test_a_key_refusal_comes_before_the_account_s(ledger: Ledgers, clock: Clock) -> None:
    """A revoked key of a disabled account says revoked (the key's own state first)."""
    await account(ledger, "acct_A", purchased=100)
    ident = await key(ledger, "acct_A", "k1")
    await ledger.money.set_account_status("acct_A", ACCOUNT_DISABLED)
    await ledger.redis.hset(ledger.layout.api_key(ident.shard, "k1"), "status", "revoked")
    refused = await reserved(ledger, ident, "r1", clock())
    assert isinstance(refused, Refusal)
    assert refused.status is ScriptStatus.KEY_REVOKED
    assert (await ledger.keys.key_access(ident, clock())).status is ScriptStatus.KEY_REVOKED


async def test_a_hash_without_a_status_is_active(ledger: Ledgers, clock: Clock) -> None:
    """Account hashes written before the field was read count as active."""
    await account(ledger, "acct_A", purchased=100)
    ident = await key(ledger, "acct_A", "k1")
    await ledger.redis.hdel(ledger.layout.account(ident.shard, "acct_A"), AccountField.STATUS)
    assert isinstance(await reserve(ledger, ident, "r1", clock()), Hold)
    assert (await ledger.keys.key_access(ident, clock())).status is ScriptStatus.OK


async def test_a_status_is_never_written_without_the_account_s_hash(ledger: Ledgers) -> None:
    """No partial hash: it would stop open_account (and rebuild-redis) writing the pools."""
    before = await snapshot(ledger)
    written = await ledger.money.set_account_status("acct_gone", ACCOUNT_DISABLED)
    assert written.status is ScriptStatus.ACCOUNT_MISSING
    assert await snapshot(ledger) == before


async def test_a_resent_reserve_still_answers_its_own_hold(ledger: Ledgers, clock: Clock) -> None:
    """A reserve sent again after its reply was lost answers the hold it made, even when the
    account was disabled in between (the request was accepted before)."""
    await account(ledger, "acct_A", purchased=100)
    ident = await key(ledger, "acct_A", "k1")
    first = await reserve(ledger, ident, "r1", clock())
    await ledger.money.set_account_status("acct_A", ACCOUNT_DISABLED)
    again = await reserve(ledger, ident, "r1", clock())
    assert (again.amount, again.out_tokens) == (first.amount, first.out_tokens)


def test_the_refusal_is_an_openai_shaped_403() -> None:
    error = key_refusal(ScriptStatus.ACCOUNT_DISABLED)
    assert isinstance(error, ApiError)
    body = error.body().decode()
    assert '"type":"permission_error"' in body
    assert '"code":"account_disabled"' in body
