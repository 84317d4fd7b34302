"""The relay loop against a scripted provider: what is written, when, and what is charged."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from app.apis.chat.chunks import ChatStream
from app.apis.chat.request import parse_chat_request
from app.completion.catalog import default_catalog
from app.completion.output import StreamEnd
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.completion.settlement import drain_background
from app.core.errors import UpstreamError
from app.upstream.base import CHOICE_END, ChoiceEnd, Piece, UpstreamCall, Usage
from app.upstream.simulated import SimulatedProvider
from app.upstream.wire import Delta, ToolCallDelta, ToolCallFunctionDelta
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key

Script = list[tuple[float, list[Piece] | Exception]]  # (delay before, batch or failure)


class ScriptedProvider:
    def __init__(self, script: Script) -> None:
        self.script = script

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        for delay, item in self.script:
            await asyncio.sleep(delay)
            if isinstance(item, Exception):
                raise item
            yield item

    async def close(self) -> None:
        return None


async def _relay(
    ledger: Ledgers, clock: Clock, script: Script, body: dict[str, object] | None = None
) -> tuple[list[bytes], int]:
    await account(ledger, "acct_R", purchased=100_000)
    ident = await key(ledger, "acct_R", "kidR00000000")
    aliases = default_catalog().aliases
    router = UpstreamRouter({"simulated": ScriptedProvider(script)}, SimulatedProvider())  # type: ignore[dict-item]
    service = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    body = body or {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}
    completion = await service.open(ident, parse_chat_request(json.dumps(body).encode(), aliases))
    writes: list[bytes] = []

    async def send(data: bytes, more: bool) -> None:
        writes.append(data)
        assert more == (data[-14:] != b"data: [DONE]\n\n")

    await completion.relay(send)
    _status, balance = await ledger.money.balance(ident, clock())
    return writes, balance.total


def _chunks(writes: list[bytes]) -> list[dict[str, object]]:
    events = b"".join(writes).decode().split("\n\n")
    return [json.loads(e[6:]) for e in events if e.startswith("data: {")]


def _finishes(chunks: list[dict[str, object]]) -> list[tuple[str | None, str | None]]:
    return [
        (c["choices"][0]["delta"].get("content"), c["choices"][0]["finish_reason"])  # type: ignore[index]
        for c in chunks
        if c.get("choices")
    ]


async def test_what_arrives_together_is_written_together(ledger: Ledgers, clock: Clock) -> None:
    writes, _ = await _relay(ledger, clock, [(0, ["a", "b", "c"]), (0, ["d", Usage(4, 4)])])
    # a, b and c at once; d came with the usage report, the end: it carries stop itself
    # and goes out with the metadata chunk
    assert [w.count(b'"content"') for w in writes] == [3, 1]
    assert _finishes(_chunks(writes)) == [("a", None), ("b", None), ("c", None), ("d", "stop")]


async def test_no_token_waits_for_the_next_read(ledger: Ledgers, clock: Clock) -> None:
    # the upstream ends 0.1 s after its last token: "b" went out when it arrived
    writes, balance = await _relay(ledger, clock, [(0, ["a"]), (0.1, ["b"]), (0.1, [Usage(4, 2)])])
    assert [w.count(b'"content"') for w in writes] == [1, 1, 1]
    chunks = _chunks(writes)
    assert _finishes(chunks) == [("a", None), ("b", None), ("", "stop")]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"  # type: ignore[index]
    assert chunks[-1]["svc"]["credits_used"] == 1  # type: ignore[index]
    assert balance == 100_000 - 1


@pytest.mark.parametrize(
    ("script", "finishes"),
    [
        # the upstream's finish in the same read as the last token: that token says stop
        ([(0, ["a"]), (0, ["b", CHOICE_END]), (0.05, [Usage(4, 2)])], [("a", None), ("b", "stop")]),
        # the finish in a read of its own: an empty-content chunk says stop
        (
            [(0, ["a"]), (0, ["b"]), (0, [CHOICE_END, Usage(4, 2)])],
            [("a", None), ("b", None), ("", "stop")],
        ),
        # a one-token answer that arrives whole: one chunk with role, text and stop
        ([(0, ["a", CHOICE_END, Usage(4, 1)])], [("a", "stop")]),
        # output after the upstream's finish is still relayed; the last of it says stop
        ([(0, ["a", CHOICE_END]), (0, ["b"]), (0, [Usage(4, 2)])], [("a", None), ("b", "stop")]),
    ],
)
async def test_the_read_that_ends_the_choice_decides_where_stop_goes(
    ledger: Ledgers,
    clock: Clock,
    script: Script,
    finishes: list[tuple[str | None, str | None]],
) -> None:
    writes, _ = await _relay(ledger, clock, script)
    chunks = _chunks(writes)
    assert _finishes(chunks) == finishes
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"  # type: ignore[index]
    assert (
        sum(c["choices"][0]["delta"].get("role") is not None for c in chunks if c["choices"]) == 1
    )  # type: ignore[index]


async def test_an_upstream_failure_after_a_held_token(ledger: Ledgers, clock: Clock) -> None:
    writes, balance = await _relay(
        ledger, clock, [(0, ["a", "b"]), (0, UpstreamError("stream failed: boom"))]
    )
    chunks = _chunks(writes)
    assert _finishes(chunks) == [("a", None), ("b", None)]
    errors = [c for c in chunks if "error" in c]
    assert len(errors) == 1
    meta = chunks[-1]["svc"]
    assert meta["credits_used"] == 1  # type: ignore[index]
    assert balance == 100_000 - 1


@pytest.mark.parametrize("hold_expires", [False, True])
async def test_cancelling_mid_read_settles_and_closes(
    ledger: Ledgers, clock: Clock, hold_expires: bool
) -> None:
    await account(ledger, "acct_C", purchased=100_000)
    ident = await key(ledger, "acct_C", "kidC00000000")
    closed = asyncio.Event()

    class Stalling:
        async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
            try:
                yield ["a"]
                await asyncio.sleep(3600)
                yield ["never"]
            finally:
                closed.set()

        async def close(self) -> None:
            return None

    router = UpstreamRouter({"simulated": Stalling()}, SimulatedProvider())  # type: ignore[dict-item]
    service = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    body = b'{"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}'
    completion = await service.open(ident, parse_chat_request(body, default_catalog().aliases))

    async def send(data: bytes, more: bool) -> None:
        return None

    relay = asyncio.ensure_future(completion.relay(send))
    await asyncio.sleep(0.05 if hold_expires else 0.001)
    relay.cancel()
    with pytest.raises(asyncio.CancelledError):
        await relay
    assert closed.is_set()
    assert await ledger.redis.zcard(ledger.layout.reservations(ident.shard)) == 0
    _, balance = await ledger.money.balance(ident, clock())
    assert balance.total == 100_000 - 1  # one token delivered or generated: charged once


def _tool_piece(**fields: object) -> Delta:
    return Delta(tool_calls=[ToolCallDelta(**fields)])  # type: ignore[arg-type]


TOOL_STREAM: Script = [
    (
        0,
        [
            _tool_piece(
                index=0,
                id="call_upstream_1",
                type="function",
                function=ToolCallFunctionDelta(name="get_weather", arguments=""),
            )
        ],
    ),
    (0, [_tool_piece(index=0, function=ToolCallFunctionDelta(arguments='{"city":'))]),
    (0, [_tool_piece(index=0, function=ToolCallFunctionDelta(arguments=' "Oslo"}'))]),
    (0, [Delta(finish_reason="tool_calls"), Usage(7, 3)]),
]


async def test_tool_calls_are_relayed_and_end_with_tool_calls(
    ledger: Ledgers, clock: Clock
) -> None:
    writes, balance = await _relay(ledger, clock, TOOL_STREAM)
    chunks = _chunks(writes)
    choices = [c["choices"][0] for c in chunks if c.get("choices")]  # type: ignore[index]
    calls = [c["delta"]["tool_calls"][0] for c in choices if "tool_calls" in c["delta"]]
    assert calls[0] == {
        "index": 0,
        "id": "call_upstream_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Oslo"}'
    assert choices[0]["delta"]["role"] == "assistant"
    assert [c["finish_reason"] for c in choices] == [None] * (len(choices) - 1) + ["tool_calls"]
    assert "content" not in choices[-1]["delta"]  # no text part for a tool-call answer
    assert all(c["id"] == chunks[0]["id"] and c["model"] == "svc-fast" for c in chunks)
    meta = chunks[-1]["svc"]
    assert meta["credits_used"] == 1  # type: ignore[index]
    assert balance == 100_000 - 1
    assert chunks[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


@pytest.mark.parametrize(
    "stream_options",
    [None, {"include_usage": True}, {"include_usage": False}],
    ids=["not-asked", "asked", "declined"],
)
async def test_usage_reaches_every_client_once_on_the_final_chunk(
    ledger: Ledgers, clock: Clock, stream_options: dict[str, bool] | None
) -> None:
    """As OpenRouter's streams do: whether or not ``include_usage`` was asked, the last chunk
    (svc's metadata chunk, empty choices) carries OpenAI's usage object, in the shape it has
    when asked; no other chunk carries one (clients that add it up count it once)."""
    usage = Usage(7, 2, {"cached_tokens": 3}, {"reasoning_tokens": 1})
    body: dict[str, object] = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}
    if stream_options is not None:
        body["stream_options"] = stream_options
    writes, _ = await _relay(ledger, clock, [(0, ["a", "b", usage])], body=body)
    chunks = _chunks(writes)
    final = chunks[-1]
    assert final["choices"] == []
    assert final["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 2,
        "total_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    assert [c for c in chunks if "usage" in c] == [final]
    assert list(final) == ["id", "object", "created", "model", "choices", "usage", "svc"]
    assert set(final["svc"]) == {"requested_model", "credits_used", "balance_remaining"}  # type: ignore[arg-type]


async def test_refusals_and_reasoning_are_relayed(ledger: Ledgers, clock: Clock) -> None:
    script: Script = [(0, [Delta(reasoning_content="think")]), (0, [Delta(refusal="no")])]
    writes, _ = await _relay(ledger, clock, [*script, (0, [Usage(1, 2)])])
    deltas = [c["choices"][0]["delta"] for c in _chunks(writes) if c.get("choices")]  # type: ignore[index]
    assert deltas[0] == {"role": "assistant", "reasoning_content": "think"}
    assert deltas[1] == {"refusal": "no"}
    assert _chunks(writes)[-2]["choices"][0]["finish_reason"] == "stop"  # type: ignore[index]


class _BrokenEnding:
    """A chat stream whose ending fails."""

    def __init__(self, inner: ChatStream) -> None:
        self.inner = inner

    @property
    def id(self) -> str:
        return self.inner.id

    def opening(self, started: Usage | None = None) -> bytes:
        return self.inner.opening(started)

    def piece(self, piece: str | Delta) -> bytes:
        return self.inner.piece(piece)

    def closing(self, pending: str | Delta | None, *, tool_calls: bool) -> bytes:
        return self.inner.closing(pending, tool_calls=tool_calls)

    def ending(self, end: StreamEnd) -> bytes:
        raise RuntimeError("a bug in an output")


async def test_a_failing_ending_still_settles(ledger: Ledgers, clock: Clock) -> None:
    """The ending is written before settling (with marks for its numbers): a fault there
    must not leave the reservation open."""
    await account(ledger, "acct_E", purchased=100_000)
    ident = await key(ledger, "acct_E", "kidE00000000")
    provider = ScriptedProvider([(0, ["a", Usage(4, 4)])])
    router = UpstreamRouter({"simulated": provider}, SimulatedProvider())  # type: ignore[dict-item]
    service = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    body = b'{"model":"svc-fast","messages":[{"role":"user","content":"hi"}]}'
    completion = await service.open(ident, parse_chat_request(body, default_catalog().aliases))

    async def send(data: bytes, more: bool) -> None:
        return None

    with pytest.raises(RuntimeError):
        await completion.relay(send, _BrokenEnding(completion.stream_output()))
    await drain_background()  # the settlement the relay started
    assert await ledger.redis.zcard(ledger.layout.reservations(ident.shard)) == 0
    _status, balance = await ledger.money.balance(ident, clock())
    assert balance.total < 100_000  # charged for what was served, not left to the sweeper


# -- how the upstream ended, told to the ending ----------------------------------------------


class _EndSeen(_BrokenEnding):
    """A chat stream that keeps the ``StreamEnd`` it was given."""

    end: StreamEnd

    def ending(self, end: StreamEnd) -> bytes:
        self.end = end
        return self.inner.ending(end)


async def _end_of(
    ledger: Ledgers, clock: Clock, batch: list[Piece], stop: object, name: str
) -> tuple[StreamEnd, list[dict[str, object]]]:
    """The ``StreamEnd`` of a chat request sending ``stop`` whose upstream sends ``batch``,
    and the chunks written (their ids and times left out)."""
    await account(ledger, f"acct_{name}", purchased=100_000)
    ident = await key(ledger, f"acct_{name}", f"kid{name}".ljust(12, "0"))
    provider = ScriptedProvider([(0, batch)])
    router = UpstreamRouter({"simulated": provider}, SimulatedProvider())  # type: ignore[dict-item]
    service = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    body: dict[str, object] = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}
    if stop is not None:
        body["stop"] = stop
    params = parse_chat_request(json.dumps(body).encode(), default_catalog().aliases)
    completion = await service.open(ident, params)
    output = _EndSeen(completion.stream_output())
    writes: list[bytes] = []

    async def send(data: bytes, more: bool) -> None:
        writes.append(data)

    await completion.relay(send, output)
    chunks = [{k: v for k, v in c.items() if k not in ("id", "created")} for c in _chunks(writes)]
    return output.end, chunks


@pytest.mark.parametrize(
    ("batch", "stop", "finish", "sequence"),
    [
        (["a", CHOICE_END, Usage(4, 1)], ["END"], None, None),
        # the stop the upstream said it matched: one the request sent
        (["a", ChoiceEnd("END"), Usage(4, 1)], ["\n", "END"], None, "END"),
        (["a", ChoiceEnd("END"), Usage(4, 1)], "END", None, "END"),
        # a stop of the upstream's own (a stop token's text), or no stop sent: none
        (["a", ChoiceEnd("</s>"), Usage(4, 1)], ["END"], None, None),
        (["a", ChoiceEnd("END"), Usage(4, 1)], None, None, None),
        (
            ["a", Delta(finish_reason="content_filter"), CHOICE_END, Usage(4, 1)],
            None,
            "content_filter",
            None,
        ),
        (["a", Delta(finish_reason="length"), CHOICE_END, Usage(4, 1)], None, "length", None),
    ],
)
async def test_the_ending_is_told_the_upstreams_finish_and_the_stop_it_matched(
    ledger: Ledgers,
    clock: Clock,
    batch: list[Piece],
    stop: object,
    finish: str | None,
    sequence: str | None,
) -> None:
    end, chunks = await _end_of(ledger, clock, batch, stop, "S")
    assert (end.finish_reason, end.stop_sequence) == (finish, sequence)
    # the chat stream is written as it always was, whatever the upstream named
    plain = [CHOICE_END if isinstance(piece, ChoiceEnd) else piece for piece in batch]
    _end, same = await _end_of(ledger, clock, plain, stop, "P")
    assert chunks == same
