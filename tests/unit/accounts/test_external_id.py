"""An account's external id (issue 45 item 5): what one may be, the accounts made and
changed with one (a taken one is a 409 that writes nothing, Redis included), and naming an
account by either of its ids (``account_reference``, for purchases)."""

from __future__ import annotations

import pytest

from app.accounts.accounts import Accounts
from app.accounts.bodies import account_create_request, account_update_request
from app.accounts.external import MAX_EXTERNAL_ID, check_external_id, is_external_id
from app.core.errors import ApiError, ErrorKind
from app.store import Store
from tests.support.ledgers import Ledgers


@pytest.mark.parametrize(
    "value",
    [
        "7f9c2ba4-e88f-4a1c-b3d0-5f1e2a9c0d11",  # a UUID
        "jane.doe+svc@example.com",  # an email
        "1234567890",  # a number
        "auth0|5f1e2a9c0d11",
        "x",
        "a" * MAX_EXTERNAL_ID,
        "account_7",  # only the account ids' own prefix is refused
    ],
)
def test_an_app_s_user_ids_are_external_ids(value: str) -> None:
    assert is_external_id(value)
    assert check_external_id(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "a" * (MAX_EXTERNAL_ID + 1),
        "jane doe",  # a space
        " u1",
        "u1\n",  # a control character, even last
        "u1\x00",
        "u\t1",
        "ü1",  # not ASCII
        "acct_0123456789abcdef",  # would read as an account id
    ],
)
def test_anything_else_is_400_naming_external_id(value: str) -> None:
    assert not is_external_id(value)
    with pytest.raises(ApiError) as info:
        check_external_id(value)
    assert info.value.kind is ErrorKind.INVALID_VALUE
    assert info.value.param == "external_id"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"external_id": "has space"}', "external_id"),
        (b'{"external_id": ""}', "external_id"),
        (b'{"external_id": 42}', "external_id"),
        (b'{"external_id": "u1", "name": "x"}', "name"),
    ],
)
def test_bad_bodies_name_the_field(body: bytes, param: str) -> None:
    for parse in (account_create_request, account_update_request):
        with pytest.raises(ApiError) as info:
            parse(body)
        assert (info.value.kind, info.value.param) == (ErrorKind.INVALID_VALUE, param)


def test_bodies_may_leave_it_out_or_clear_it() -> None:
    assert account_create_request(b"").external_id is None
    assert account_create_request(b"{}").external_id is None
    assert account_create_request(b'{"external_id": "u1"}').external_id == "u1"
    assert account_update_request(b'{"external_id": null}').external_id is None


async def test_a_taken_external_id_is_409_and_opens_nothing(store: Store, ledger: Ledgers) -> None:
    accounts = Accounts(store, ledger.money)
    pid = await accounts.create_account("user-1")
    assert (await accounts.require_account(pid)).external_id == "user-1"
    before = await store.list_accounts()
    redis_before = {k async for k in ledger.redis.scan_iter()}
    with pytest.raises(ApiError) as info:
        await accounts.create_account("user-1")
    assert info.value.kind is ErrorKind.EXTERNAL_ID_TAKEN
    assert (info.value.status, info.value.param) == (409, "external_id")
    assert info.value.headers["x-should-retry"] == "false"
    assert await store.list_accounts() == before
    assert {k async for k in ledger.redis.scan_iter()} == redis_before  # no account opened


async def test_set_change_clear_and_a_taken_one(store: Store, ledger: Ledgers) -> None:
    accounts = Accounts(store, ledger.money)
    a, b = await accounts.create_account("u1"), await accounts.create_account()
    assert (await accounts.set_external_id(b, "u2")).external_id == "u2"
    with pytest.raises(ApiError) as info:
        await accounts.set_external_id(b, "u1")
    assert info.value.kind is ErrorKind.EXTERNAL_ID_TAKEN
    assert (await accounts.require_account(b)).external_id == "u2"
    assert (await accounts.set_external_id(a, None)).external_id is None
    assert (await accounts.set_external_id(b, "u1")).external_id == "u1"  # free now
    with pytest.raises(ApiError) as missing:
        await accounts.set_external_id("acct_nope", "u9")
    assert missing.value.kind is ErrorKind.ACCOUNT_NOT_FOUND


async def test_an_account_reference_is_its_id_or_its_external_id(
    store: Store, ledger: Ledgers
) -> None:
    accounts = Accounts(store, ledger.money)
    a, b = await accounts.create_account("user-1"), await accounts.create_account()
    assert await accounts.account_reference(a) == a
    assert await accounts.account_reference(b) == b
    assert await accounts.account_reference("user-1") == a
    for unknown in ("user-2", "acct_nope", "User-1"):
        with pytest.raises(ApiError) as info:
            await accounts.account_reference(unknown)
        assert info.value.kind is ErrorKind.ACCOUNT_NOT_FOUND
