"""What reaches the provider of fields that change the operator's cost or the user's
privacy (issue 30, item 8): ``service_tier``, ``store`` and ``metadata`` go upstream only
when the models file allows them for the alias (``allow_service_tier``, ``allow_store``),
on chat, on Responses translated to chat, and on Responses sent to a provider that serves
them; ``top_k``, which only some servers take, likewise (``allow_top_k``), and spoken
output and predictions (``allow_audio``, ``allow_prediction``, issue 44). What the
in-process mock upstream received is what is checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from app.apis.chat.request import parse_chat_request
from app.apis.responses.request import parse_responses_request
from app.completion.catalog import Alias, load_catalog
from app.completion.request import CompletionRequest
from app.core.errors import ModelsFileError
from app.upstream.base import UpstreamCall
from app.upstream.config import ProviderConfig
from app.upstream.http11 import StreamingProvider
from bench.mock_upstream import MockUpstream

LIMITS = {"max_messages": 100, "max_message_chars": 100_000, "image_token_bound": 1000}
CLIENT_SENDS = {"service_tier": "priority", "store": True, "metadata": {"job": "7"}}
GATED = tuple(CLIENT_SENDS)


def _aliases(tmp_path: Path, base_url: str, flags: str = "") -> dict[str, Alias]:
    """svc-fast on a chat provider, svc-code on one that serves Responses, both with
    ``flags`` (models-file lines) when given."""
    path = tmp_path / "models.toml"
    path.write_text(
        f'[providers.chat]\nbase_url = "{base_url}"\n'
        f'[providers.native]\nbase_url = "{base_url}"\nresponses_api = true\n'
        f'[aliases.svc-fast]\nupstreams = [{{ provider = "chat", model = "m" }}]\n{flags}\n'
        f'[aliases.svc-code]\nupstreams = [{{ provider = "native", model = "m" }}]\n{flags}\n'
    )
    return load_catalog(path).aliases


async def _sent(
    mock: MockUpstream, params: CompletionRequest, *, responses_api: bool
) -> dict[str, Any]:
    """The request the mock received for ``params``, sent as the relay sends it."""
    call = UpstreamCall(model="m", request=params.request, max_tokens=50, native=params.native)
    provider = StreamingProvider(
        ProviderConfig(base_url=mock.base_url, responses_api=responses_api)
    )
    try:
        async for _pieces in provider.stream(call):
            pass
    finally:
        await provider.close()
    request = mock.stats.last_request
    assert isinstance(request, dict)
    return request


def _chat(alias: str, **fields: object) -> bytes:
    return msgspec.json.encode(
        {"model": alias, "messages": [{"role": "user", "content": "hi"}], **fields}
    )


def _responses(alias: str, **fields: object) -> bytes:
    return msgspec.json.encode({"model": alias, "input": "hi", **fields})


async def test_chat_sends_no_service_tier_store_or_metadata_by_default(
    mock: MockUpstream, tmp_path: Path
) -> None:
    aliases = _aliases(tmp_path, mock.base_url)
    params = parse_chat_request(_chat("svc-fast", **CLIENT_SENDS, user="u1"), aliases)
    sent = await _sent(mock, params, responses_api=False)
    assert not set(GATED) & set(sent), sent
    assert sent["user"] == "u1"  # what costs nothing and keeps nothing still passes


async def test_chat_sends_them_as_the_client_did_when_the_alias_allows(
    mock: MockUpstream, tmp_path: Path
) -> None:
    aliases = _aliases(tmp_path, mock.base_url, "allow_service_tier = true\nallow_store = true")
    params = parse_chat_request(_chat("svc-fast", **CLIENT_SENDS), aliases)
    sent = await _sent(mock, params, responses_api=False)
    assert {name: sent.get(name) for name in GATED} == CLIENT_SENDS


async def test_each_flag_allows_its_own_fields_only(mock: MockUpstream, tmp_path: Path) -> None:
    tier_only = _aliases(tmp_path, mock.base_url, "allow_service_tier = true")
    sent = await _sent(
        mock, parse_chat_request(_chat("svc-fast", **CLIENT_SENDS), tier_only), responses_api=False
    )
    assert (sent.get("service_tier"), "store" in sent, "metadata" in sent) == (
        "priority",
        False,
        False,
    )
    store_only = _aliases(tmp_path, mock.base_url, "allow_store = true")
    sent = await _sent(
        mock, parse_chat_request(_chat("svc-fast", **CLIENT_SENDS), store_only), responses_api=False
    )
    assert ("service_tier" in sent, sent.get("store"), sent.get("metadata")) == (
        False,
        True,
        {"job": "7"},
    )


@pytest.mark.parametrize("allowed", [False, True])
async def test_responses_translated_to_chat_follow_the_same_rule(
    mock: MockUpstream, tmp_path: Path, allowed: bool
) -> None:
    flags = "allow_service_tier = true\nallow_store = true" if allowed else ""
    aliases = _aliases(tmp_path, mock.base_url, flags)
    params = parse_responses_request(_responses("svc-fast", **CLIENT_SENDS), aliases, **LIMITS)
    sent = await _sent(mock, params.chat, responses_api=False)
    assert "messages" in sent  # the chat translation
    if allowed:
        assert {name: sent.get(name) for name in GATED} == CLIENT_SENDS
    else:
        assert not set(GATED) & set(sent), sent
    assert params.settings.metadata == {"job": "7"}  # echoed on the response either way


async def test_a_native_responses_request_is_not_stored_and_has_no_tier_by_default(
    mock: MockUpstream, tmp_path: Path
) -> None:
    aliases = _aliases(tmp_path, mock.base_url)
    params = parse_responses_request(_responses("svc-code", **CLIENT_SENDS), aliases, **LIMITS)
    sent = await _sent(mock, params.chat, responses_api=True)
    assert sent["input"] == "hi"  # the Responses form
    assert sent["store"] is False  # the Responses API stores unless told not to
    assert not {"service_tier", "metadata"} & set(sent), sent


async def test_a_native_responses_request_carries_them_when_the_alias_allows(
    mock: MockUpstream, tmp_path: Path
) -> None:
    aliases = _aliases(tmp_path, mock.base_url, "allow_service_tier = true\nallow_store = true")
    params = parse_responses_request(_responses("svc-code", **CLIENT_SENDS), aliases, **LIMITS)
    sent = await _sent(mock, params.chat, responses_api=True)
    assert {name: sent.get(name) for name in GATED} == CLIENT_SENDS
    # allowed, not asked for: still not stored (svc keeps no state upstream by default)
    params = parse_responses_request(_responses("svc-code"), aliases, **LIMITS)
    sent = await _sent(mock, params.chat, responses_api=True)
    assert sent["store"] is False
    assert "service_tier" not in sent


async def test_svc_auto_follows_the_alias_it_routes_to(mock: MockUpstream, tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(
        f'[providers.chat]\nbase_url = "{mock.base_url}"\n'
        '[aliases.svc-fast]\nupstreams = [{ provider = "chat", model = "m" }]\n'
        "allow_service_tier = true\nallow_store = true\n"
    )
    aliases = load_catalog(path).aliases
    params = parse_chat_request(_chat("svc-auto", **CLIENT_SENDS), aliases)
    assert params.alias.id == "svc-fast"  # a short prompt without code
    sent = await _sent(mock, params, responses_api=False)
    assert {name: sent.get(name) for name in GATED} == CLIENT_SENDS


@pytest.mark.parametrize("allowed", [False, True])
async def test_top_k_is_sent_only_where_the_alias_allows_it(
    mock: MockUpstream, tmp_path: Path, allowed: bool
) -> None:
    aliases = _aliases(tmp_path, mock.base_url, "allow_top_k = true" if allowed else "")
    params = parse_chat_request(_chat("svc-fast", top_k=40, **CLIENT_SENDS), aliases)
    sent = await _sent(mock, params, responses_api=False)
    assert sent.get("top_k") == (40 if allowed else None)
    assert not set(GATED) & set(sent), sent  # the other flags stay as they were


AUDIO = {"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}
PREDICTION = {"prediction": {"type": "content", "content": "def f(): pass"}}


@pytest.mark.parametrize(
    ("flags", "sent_on"),
    [
        ("", {}),
        ("allow_audio = true", AUDIO),
        ("allow_prediction = true", PREDICTION),
        ("allow_audio = true\nallow_prediction = true", {**AUDIO, **PREDICTION}),
    ],
)
async def test_audio_output_and_prediction_are_sent_only_where_the_alias_allows_them(
    mock: MockUpstream, tmp_path: Path, flags: str, sent_on: dict[str, object]
) -> None:
    """Spoken output costs the operator several times text per token, a prediction's
    rejected tokens are billed as output none of which reaches the client (issue 44, item
    13): each is left out unless its flag allows it, on chat and on svc-auto alike."""
    aliases = _aliases(tmp_path, mock.base_url, flags)
    for alias in ("svc-fast", "svc-auto"):  # svc-auto routes a short prompt to svc-fast
        params = parse_chat_request(_chat(alias, **AUDIO, **PREDICTION), aliases)
        sent = await _sent(mock, params, responses_api=False)
        assert {name: sent[name] for name in (*AUDIO, *PREDICTION) if name in sent} == sent_on
        assert not set(GATED) & set(sent)  # the other flags stay as they were


def test_the_flags_default_to_false_and_are_read_from_the_models_file(tmp_path: Path) -> None:
    aliases = _aliases(tmp_path, "http://x/v1", "allow_store = true")
    assert (aliases["svc-fast"].allow_store, aliases["svc-fast"].allow_service_tier) == (
        True,
        False,
    )
    assert not load_catalog(_write(tmp_path, "")).aliases["svc-smart"].allow_store
    assert not aliases["svc-fast"].allow_top_k
    top_k = _aliases(tmp_path, "http://x/v1", "allow_top_k = true")["svc-fast"]
    assert (top_k.allow_top_k, top_k.allow_store) == (True, False)


@pytest.mark.parametrize(
    "flag",
    ["allow_service_tier", "allow_store", "allow_top_k", "allow_audio", "allow_prediction"],
)
def test_a_flag_that_is_not_a_boolean_stops_start_up_naming_line_and_field(
    tmp_path: Path, flag: str
) -> None:
    with pytest.raises(ModelsFileError) as info:
        load_catalog(_write(tmp_path, f'[aliases.svc-fast]\ninput_price = 3\n{flag} = "yes"\n'))
    message = str(info.value)
    assert f"models.toml:3: field 'aliases.svc-fast.{flag}': Expected `bool" in message
    assert "\n" not in message


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path
