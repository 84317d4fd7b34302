"""The ``safety_identifier`` svc sends upstream (issue 35, item 5): a keyed hash of the
account and the client's own identifier of its end user, the same in every worker of one
pepper, never the account id or the client's value; on chat completions, on Responses
translated to chat and on Responses sent to a provider that serves them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from functools import partial

import msgspec
import pytest

from app.apis.chat.request import parse_chat_request
from app.apis.responses.request import parse_responses_request
from app.completion.catalog import DEFAULT_ALIASES, Alias
from app.completion.request import client_identifier
from app.core.pepper import derive_key
from app.upstream.base import UpstreamCall
from app.upstream.openai_http import request_body
from app.upstream.safety import CACHED_VALUE_CHARS, PREFIX, SafetyIdentifiers

PEPPER = b"a pepper of the tests"
ALICE = "acc_7Yq2LmZ0pRt4Wx9Ksd31"
BOB = "acc_Jd82nQ0aZx7LwP4Vbe55"
END_USER = "end-user-4711@example.org"
LIMITS = {"max_messages": 100, "max_message_chars": 100_000, "image_token_bound": 1000}
FORM = re.compile(r"svc_[A-Za-z0-9_-]{43}")


@pytest.fixture
def ids() -> SafetyIdentifiers:
    return SafetyIdentifiers(PEPPER)


def test_the_same_account_gets_the_same_identifier_in_every_worker(
    ids: SafetyIdentifiers,
) -> None:
    other_worker = SafetyIdentifiers(PEPPER)  # another process: nothing shared but the pepper
    assert ids.of(ALICE) == ids.of(ALICE) == other_worker.of(ALICE)
    assert ids.of(ALICE, END_USER) == other_worker.of(ALICE, END_USER)
    uncached = SafetyIdentifiers(PEPPER, cache_size=0)
    assert uncached.of(ALICE) == ids.of(ALICE)


def test_accounts_end_users_and_peppers_get_different_identifiers(
    ids: SafetyIdentifiers,
) -> None:
    made = {
        ids.of(ALICE),
        ids.of(BOB),
        ids.of(ALICE, END_USER),
        ids.of(BOB, END_USER),
        ids.of(ALICE, "another end user"),
        SafetyIdentifiers(b"another pepper").of(ALICE),
    }
    assert len(made) == 6


def test_an_empty_client_value_is_none(ids: SafetyIdentifiers) -> None:
    assert ids.of(ALICE, "") == ids.of(ALICE, None) == ids.of(ALICE)


def test_no_account_and_value_hash_as_another_pair(ids: SafetyIdentifiers) -> None:
    # the account id's length is hashed first: "acc_1" + "2x" is not "acc_12" + "x"
    assert ids.of("acc_1", "2x") != ids.of("acc_12", "x")
    assert ids.of("acc_1", "2") != ids.of("acc_12")


def test_it_fits_the_providers_limit_and_gives_nothing_away(ids: SafetyIdentifiers) -> None:
    for pid, value in [(ALICE, None), (ALICE, END_USER), (BOB, "x" * 10_000)]:
        identifier = ids.of(pid, value)
        assert FORM.fullmatch(identifier), identifier
        assert len(identifier) <= 64
        assert pid not in identifier
        assert pid.removeprefix("acc_") not in identifier
        if value is not None:
            assert value[:12] not in identifier


def test_it_is_the_documented_derivation(ids: SafetyIdentifiers) -> None:
    key = hmac.digest(PEPPER, b"svc safety identifier", hashlib.sha256)
    assert derive_key(PEPPER, "svc safety identifier") == key
    message = f"{len(ALICE)}:{ALICE}{END_USER}".encode()
    mac = hmac.digest(key, message, "sha256")
    assert ids.of(ALICE, END_USER) == PREFIX + base64.urlsafe_b64encode(mac).decode().rstrip("=")


def test_derive_key_is_the_spotlight_intents_derivation() -> None:
    """One derivation for every key made from the pepper: the intents' cipher key is it."""
    expected = hmac.new(PEPPER, b"spotlight-intent", hashlib.sha256).digest()
    assert derive_key(PEPPER, "spotlight-intent") == expected
    assert derive_key(PEPPER, "a") != derive_key(PEPPER, "b")


def test_long_client_values_are_not_kept(ids: SafetyIdentifiers) -> None:
    long_value = "v" * (CACHED_VALUE_CHARS + 1)
    assert ids.of(ALICE, long_value) == ids.of(ALICE, long_value)
    assert ids._cached.cache_info().currsize == 0
    ids.of(ALICE, "v" * CACHED_VALUE_CHARS)
    assert ids._cached.cache_info().currsize == 1


def test_the_cache_is_bounded() -> None:
    ids = SafetyIdentifiers(PEPPER, cache_size=8)
    for n in range(100):
        ids.of(f"acc_{n}")
    assert ids._cached.cache_info().currsize == 8
    assert ids.of("acc_0") == SafetyIdentifiers(PEPPER).of("acc_0")


def test_client_identifier_prefers_safety_identifier() -> None:
    assert client_identifier("u", "s") == "s"
    assert client_identifier("u", msgspec.UNSET) == "u"
    assert client_identifier(None, "") is None
    assert client_identifier(msgspec.UNSET, msgspec.UNSET) is None


# -- the request svc forwards ---------------------------------------------------------------


def _chat(**fields: object) -> bytes:
    return msgspec.json.encode(
        {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}], **fields}
    )


def _forwarded_chat(ids: SafetyIdentifiers, pid: str, **fields: object) -> dict[str, object]:
    params = parse_chat_request(_chat(**fields), DEFAULT_ALIASES, identify=partial(ids.of, pid))
    call = UpstreamCall(model="m", request=params.request, max_tokens=16)
    sent: dict[str, object] = msgspec.json.decode(request_body(call))
    return sent


def test_chat_sends_the_accounts_identifier(ids: SafetyIdentifiers) -> None:
    sent = _forwarded_chat(ids, ALICE)
    assert sent["safety_identifier"] == ids.of(ALICE)
    assert "user" not in sent
    assert _forwarded_chat(ids, BOB)["safety_identifier"] == ids.of(BOB)


def test_chat_combines_the_clients_safety_identifier_and_never_forwards_it(
    ids: SafetyIdentifiers,
) -> None:
    sent = _forwarded_chat(ids, ALICE, safety_identifier=END_USER)
    assert sent["safety_identifier"] == ids.of(ALICE, END_USER)
    assert END_USER not in msgspec.json.encode(sent).decode()


def test_chat_combines_the_clients_user_and_forwards_it_as_before(
    ids: SafetyIdentifiers,
) -> None:
    sent = _forwarded_chat(ids, ALICE, user=END_USER)
    assert sent["safety_identifier"] == ids.of(ALICE, END_USER)
    assert sent["user"] == END_USER
    both = _forwarded_chat(ids, ALICE, user="u1", safety_identifier=END_USER)
    assert (both["safety_identifier"], both["user"]) == (ids.of(ALICE, END_USER), "u1")


def test_without_an_account_the_request_is_parsed_as_it_came() -> None:
    params = parse_chat_request(_chat(safety_identifier=END_USER), DEFAULT_ALIASES)
    assert params.request.safety_identifier == END_USER


def _native_aliases() -> dict[str, Alias]:
    fast = msgspec.structs.replace(DEFAULT_ALIASES["svc-fast"], native_responses=True)
    return {**DEFAULT_ALIASES, "svc-fast": fast}


@pytest.mark.parametrize("native", [False, True], ids=["translated", "native"])
def test_responses_send_the_accounts_identifier_whichever_api_the_provider_speaks(
    ids: SafetyIdentifiers, native: bool
) -> None:
    aliases = _native_aliases() if native else DEFAULT_ALIASES
    for fields, client_value in [
        ({}, None),
        ({"safety_identifier": END_USER}, END_USER),
        ({"user": END_USER}, END_USER),
        ({"safety_identifier": None, "user": None}, None),
    ]:
        body = msgspec.json.encode({"model": "svc-fast", "input": "hi", **fields})
        params = parse_responses_request(
            body, aliases, identify=partial(ids.of, ALICE), **LIMITS
        ).chat
        expected = ids.of(ALICE, client_value)
        assert params.request.safety_identifier == expected
        if native:
            assert params.native is not None
            sent = msgspec.json.decode(params.native.body("m", 16))
            assert sent["safety_identifier"] == expected
            assert sent.get("user") == fields.get("user")  # forwarded as it came
        else:
            assert params.native is None
