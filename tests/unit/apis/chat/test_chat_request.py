import json

import msgspec
import pytest

from app.apis.chat.request import parse_chat_request
from app.completion.catalog import DEFAULT_ALIASES, price, route_auto
from app.completion.request import CLAMPED_HEADER
from app.core.errors import ApiError, ErrorKind
from app.core.tokens import estimate_prompt_tokens
from app.upstream.wire import message_text


def _parse(body: bytes):  # type: ignore[no-untyped-def]
    return parse_chat_request(body, DEFAULT_ALIASES)


def test_defaults_and_ignored_fields() -> None:
    p = _parse(
        b'{"model":"svc-fast","messages":[{"role":"user","content":"abcdefgh"}],'
        b'"stream":false,"stream_options":{"include_usage":true},"user":"u","n":1}'
    )
    assert (p.request.temperature, p.request.top_p, p.max_tokens) == (0.7, 1.0, None)
    assert p.prompt_tokens == estimate_prompt_tokens(["abcdefgh"]) == 3 + 4  # 8 letters: 3
    assert p.alias.id == "svc-fast"
    assert p.requested == "svc-fast"


def test_content_parts_and_roles() -> None:
    p = _parse(
        b'{"model":"svc-fast","messages":[{"role":"developer","content":"a"},'
        b'{"role":"assistant","content":null},'
        b'{"role":"user","content":[{"type":"text","text":"b"},{"type":"text","text":"c"}]}]}'
    )
    assert [message_text(m) for m in p.request.messages] == ["a", "", "bc"]


def test_max_completion_tokens_wins() -> None:
    p = _parse(
        b'{"model":"svc-fast","messages":[{"role":"user","content":"a"}],'
        b'"max_tokens":5,"max_completion_tokens":9}'
    )
    assert p.max_tokens == 9


@pytest.mark.parametrize(
    ("body", "kind", "param"),
    [
        (b"nope", ErrorKind.INVALID_VALUE, None),
        (
            b'{"model":"svc-fast","messages":[{"role":"user","content":[{"type":"image_url"}]}]}',
            ErrorKind.INVALID_VALUE,
            "messages[0].content[0]",
        ),
        (
            b'{"model":"svc-fast","messages":[{"role":"user"}]}',
            ErrorKind.INVALID_VALUE,
            "messages[0].content",
        ),
        (b'{"model":"x","messages":[]}', ErrorKind.MODEL_NOT_FOUND, "model"),
        (
            b'{"model":"svc-fast","messages":[{"role":"user","content":"a"}],"top_p":-1}',
            ErrorKind.INVALID_VALUE,
            "top_p",
        ),
        (
            b'{"model":"svc-fast","messages":[{"role":"user","content":"a"}],'
            b'"max_completion_tokens":0}',
            ErrorKind.INVALID_VALUE,
            "max_completion_tokens",
        ),
    ],
)
def test_refusals(body: bytes, kind: ErrorKind, param: str | None) -> None:
    with pytest.raises(ApiError) as info:
        _parse(body)
    assert info.value.kind is kind
    assert info.value.param == param


@pytest.mark.parametrize("field", [b"max_tokens", b"max_completion_tokens"])
def test_an_output_limit_above_the_alias_is_lowered_to_it_and_said(field: bytes) -> None:
    body = b'{"model":"svc-fast","messages":[{"role":"user","content":"a"}],"%s":%d}'
    limit = DEFAULT_ALIASES["svc-fast"].max_output_tokens
    p = _parse(body % (field, 999_999))
    assert (p.max_tokens, p.headers) == (limit, ((CLAMPED_HEADER, str(limit)),))
    assert CLAMPED_HEADER == "svc-max-tokens-clamped"
    at_limit = _parse(body % (field, limit))
    assert (at_limit.max_tokens, at_limit.headers) == (limit, ())
    assert _parse(CHAT % b'"stream":true').headers == ()  # no limit, none lowered


def test_svc_auto_lowers_an_output_limit_to_the_alias_it_routes_to() -> None:
    aliases = dict(DEFAULT_ALIASES)
    aliases["svc-code"] = msgspec.structs.replace(aliases["svc-code"], max_output_tokens=8_000)
    body = b'{"model":"svc-auto","messages":[{"role":"user","content":"import os"}],%s}'
    p = parse_chat_request(body % b'"max_tokens":10000', aliases)
    assert (p.alias.id, p.max_tokens) == ("svc-code", 8_000)
    assert p.headers == ((CLAMPED_HEADER, "8000"),)
    kept = parse_chat_request(body % b'"max_tokens":8000', aliases)
    assert (kept.max_tokens, kept.headers) == (8_000, ())


def test_auto_routing() -> None:
    assert route_auto("write a haiku", 1) == "svc-fast"
    assert route_auto("```js\nx\n```", 1) == "svc-code"
    assert route_auto("def f(x): return x", 1) == "svc-code"
    assert route_auto("word " * 1000, 1) == "svc-smart"
    assert route_auto("hi", 12) == "svc-smart"
    p = _parse(b'{"model":"svc-auto","messages":[{"role":"user","content":"import os"}]}')
    assert p.alias.id == "svc-code"
    assert p.requested == "svc-auto"


def test_price_defaults_cached_to_a_quarter_rounded_up_and_writes_to_input() -> None:
    assert [
        (p.cached_input, p.cache_write) for p in (price(i, 0) for i in (0, 1, 4, 5, 20, 50))
    ] == [
        (0, 0),
        (1, 1),
        (1, 4),
        (2, 5),
        (5, 20),
        (13, 50),
    ]
    assert price(20, 60, cached_input=0, cache_write=30).prompt_worst == 30
    assert price(20, 60).rates == (20, 5, 20, 60)
    assert {a.price.cached_input for a in DEFAULT_ALIASES.values()} == {2, 5, 13}


def test_message_count_and_length_limits() -> None:
    aliases = dict(DEFAULT_ALIASES)

    def body(messages: list[dict[str, str]]) -> bytes:
        return json.dumps({"model": "svc-fast", "messages": messages}).encode()

    ok = parse_chat_request(
        body([{"role": "user", "content": "x" * 10}] * 3),
        aliases,
        max_messages=3,
        max_message_chars=10,
    )
    assert len(ok.request.messages) == 3
    with pytest.raises(ApiError) as info:
        parse_chat_request(body([{"role": "user", "content": "x"}] * 4), aliases, max_messages=3)
    assert info.value.param == "messages"
    with pytest.raises(ApiError) as info:
        parse_chat_request(
            body([{"role": "user", "content": "ok"}, {"role": "user", "content": "x" * 11}]),
            aliases,
            max_message_chars=10,
        )
    assert info.value.param == "messages[1].content"


def test_auto_never_routes_to_a_disabled_alias() -> None:
    import msgspec

    aliases = dict(DEFAULT_ALIASES)
    aliases["svc-code"] = msgspec.structs.replace(aliases["svc-code"], enabled=False)
    body = json.dumps(
        {"model": "svc-auto", "messages": [{"role": "user", "content": "```python\nx\n```"}]}
    ).encode()
    assert parse_chat_request(body, aliases).alias.id == "svc-fast"
    assert parse_chat_request(body, dict(DEFAULT_ALIASES)).alias.id == "svc-code"


def test_integers_may_be_written_as_whole_floats() -> None:
    """JSON Schema's ``integer`` (the OpenAPI document) includes 1.0; 1.5 stays an error."""
    body = b'{"model":"svc-fast","messages":[{"role":"user","content":"a"}],"max_tokens":%s}'
    assert _parse(body % b"64.0").max_tokens == 64
    assert _parse(body % b"1e2").max_tokens == 100
    with pytest.raises(ApiError) as info:
        _parse(body % b"64.5")
    assert info.value.param == "max_tokens"


CHAT = b'{"model":"svc-fast","messages":[{"role":"user","content":"a"}],%s}'


@pytest.mark.parametrize(
    ("field", "param"),
    [
        (b'"max_tokens":"5"', "max_tokens"),
        (b'"max_completion_tokens":"5"', "max_completion_tokens"),
        (b'"temperature":"0.5"', "temperature"),
        (b'"top_p":"1"', "top_p"),
        (b'"stream":"true"', "stream"),
        (b'"stream":1', "stream"),
        (b'"max_tokens":true', "max_tokens"),
    ],
)
def test_strings_are_never_numbers_or_booleans(field: bytes, param: str) -> None:
    with pytest.raises(ApiError) as info:
        _parse(CHAT % field)
    assert info.value.kind is ErrorKind.INVALID_VALUE
    assert info.value.param == param
    assert f"'{param}'" in info.value.message


def test_a_whole_float_is_an_integer_even_when_another_field_is_refused() -> None:
    """The lenient retry converts whole floats only: the string next to one is still refused,
    and named."""
    with pytest.raises(ApiError) as info:
        _parse(CHAT % b'"max_tokens":64.0,"temperature":"1"')
    assert info.value.param == "temperature"
    p = _parse(CHAT % b'"max_tokens":64.0,"temperature":1,"top_p":1.0,"extra":[1.0,{"a":2.0}]')
    assert (p.max_tokens, p.request.temperature, p.request.top_p) == (64, 1.0, 1.0)


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"svc-fast","messages":[{"role":"user","content":"\xff\xfe"}]}',
        b'{"model":"svc-\xc3","messages":[]}',
        b'{"model":"svc-fast","messages":[{"role":"user","content":"\xed\xa0\x80"}]}',
        CHAT % (b'"metadata":' + b"[" * 1000 + b"]" * 1000),
        CHAT % (b'"max_tokens":"5","metadata":' + b"[" * 1000 + b"]" * 1000),
        b"[" * 100_000 + b"]" * 100_000,
        b'{"model":7,"messages":' + b"{}" * 2 + b"}",
    ],
    ids=[
        "bad-utf8",
        "cut-utf8",
        "surrogate",
        "deep-ignored",
        "deep-after-bad",
        "deep",
        "malformed-after-bad-field",
    ],
)
def test_undecodable_bodies_are_a_400_without_a_param(body: bytes) -> None:
    with pytest.raises(ApiError) as info:
        _parse(body)
    assert info.value.kind is ErrorKind.INVALID_VALUE
    assert info.value.param is None
    assert info.value.message.startswith(("We could not parse", "The JSON body"))
