"""The built-in simulated upstream: deterministic replies streamed token by token, no network.

Used by default, by test keys always, and by tests. The reply is a function of the request,
so the same conversation always streams the same pieces:

- a user's turn with ``tools`` offered (and ``tool_choice`` not ``"none"``) gets one tool
  call, its arguments made to fit the function's ``parameters`` schema, so a client can run
  its agent loop against test keys;
- any other turn (a plain one, or the one after a tool's result) gets text: words, or with
  a ``json_object``/``json_schema`` response format a JSON value that fits it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import zlib
from collections.abc import AsyncIterator
from typing import Any

from app.core.errors import UpstreamError
from app.core.ids import base62
from app.upstream.base import Piece, UpstreamCall, Usage
from app.upstream.json_sample import sample_json
from app.upstream.wire import (
    ChatRequest,
    Delta,
    FunctionDefinition,
    JsonObjectFormat,
    JsonSchemaResponseFormat,
    NamedToolChoice,
    ToolCallDelta,
    ToolCallFunctionDelta,
    message_text,
)

_WORDS = [
    "svc",
    "simulated",
    "reply:",
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "credits",
    "are",
    "reserved",
    "before",
    "work",
    "starts",
    "and",
    "settled",
    "after,",
    "so",
    "none",
    "is",
    "ever",
    "lost",
    "doubled",
    "or",
    "overspent",
    "and",
    "every",
    "stream",
    "ends",
    "with",
    "one",
    "metadata",
    "chunk",
]

_TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]+|\s+")
"""Roughly how a tokenizer cuts JSON: a word or a run of punctuation, with the spaces before
it (the pieces join back to the whole text)."""

CALL_ID_LENGTH = 24


def _prompt_tokens(texts: list[str]) -> int:
    """The simulated tokenizer's prompt count: characters / 4 + 4 per message (what it has
    always reported; svc's own estimate, ``app.core.tokens``, bills upstreams that report
    nothing)."""
    return sum(len(t) for t in texts) // 4 + 4 * len(texts)


class SimulatedProvider:
    """Streams ``reply_tokens`` words (fewer when max_tokens is lower), a tool call, or JSON."""

    def __init__(self, reply_tokens: int = 24, delay_ms: float = 0.0) -> None:
        self.reply_tokens = reply_tokens
        self.delay_s = delay_ms / 1000

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        pieces = self.reply(call)
        if not self.delay_s:
            yield pieces  # all of it is there at once, like one fast network read
            return
        for piece in pieces:
            if _carries_output(piece):
                await asyncio.sleep(self.delay_s)
            yield [piece]

    def reply(self, call: UpstreamCall) -> list[Piece]:
        """Every piece of the reply, the usage last.

        Raises ``UpstreamError`` (a client error) when ``tool_choice`` names a function that
        is not among the tools, as the OpenAI API refuses such a request.
        """
        texts = [message_text(m) for m in call.request.messages]
        prompt = "\n".join(texts)
        # surrogatepass: a lone surrogate in a client's text must not fail the reply
        prompt_crc = zlib.crc32(prompt.encode("utf-8", "surrogatepass"))
        prompt_tokens = _prompt_tokens(texts)
        function = _function_to_call(call.request, prompt_crc)
        if function is None:
            output, whole = self._text(call, prompt_crc)
            usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=len(output))
            # plain text that stopped says so only by its end; text cut at max_tokens says
            # "length", as real upstreams do
            return [*output, usage] if whole else [*output, Delta(finish_reason="length"), usage]
        deltas = _tool_call_deltas(function, prompt, prompt_crc)
        output = deltas[: _cap(call)]
        finish = "tool_calls" if len(output) == len(deltas) else "length"
        usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=len(output))
        return [*output, Delta(finish_reason=finish), usage]

    def _text(self, call: UpstreamCall, prompt_crc: int) -> tuple[list[Piece], bool]:
        """The text pieces of a reply that calls no tool, cut at ``max_tokens``, and whether
        that left it whole."""
        response_format = call.request.response_format
        if isinstance(response_format, JsonSchemaResponseFormat) and isinstance(
            response_format.json_schema.schema, dict
        ):
            value = sample_json(response_format.json_schema.schema, prompt_crc)
            pieces = _json_pieces(value)
        elif isinstance(response_format, JsonObjectFormat | JsonSchemaResponseFormat):
            # json_object, or a json_schema format that gives no schema: any object will do
            words = _words(prompt_crc, self.reply_tokens)
            pieces = _json_pieces({"answer": "".join(words)})
        else:
            pieces = _words(prompt_crc, self.reply_tokens)
        cap = _cap(call)
        return list(pieces[:cap]), len(pieces) <= cap

    async def close(self) -> None:
        return None


def _cap(call: UpstreamCall) -> int:
    """The most output pieces (tokens) the reply may have."""
    return max(call.max_tokens, 0)


def _words(prompt_crc: int, count: int) -> list[str]:
    """``count`` words from a place in the list the prompt picks, each after a space but the
    first."""
    start = prompt_crc % len(_WORDS)
    return [(" " if i else "") + _WORDS[(start + i) % len(_WORDS)] for i in range(count)]


def _json_pieces(value: Any) -> list[str]:
    """``value`` as JSON text, cut into token-sized pieces."""
    return _TOKEN.findall(json.dumps(value))


def _function_to_call(request: ChatRequest, prompt_crc: int) -> FunctionDefinition | None:
    """The function the reply calls: on a user's turn, when tools are offered and not
    refused, the one ``tool_choice`` names or else one the prompt picks. None for text."""
    tools = request.tools
    last_role = request.messages[-1].role if request.messages else None
    if not tools or request.tool_choice == "none" or last_role != "user":
        return None
    choice = request.tool_choice
    if not isinstance(choice, NamedToolChoice):  # "auto", "required" or unset: call one
        return tools[prompt_crc % len(tools)].function
    for tool in tools:
        if tool.function.name == choice.function.name:
            return tool.function
    raise UpstreamError(
        f"tool_choice names the function '{choice.function.name[:64]}', which is not in tools",
        client_error=True,
    )


def _tool_call_deltas(function: FunctionDefinition, prompt: str, prompt_crc: int) -> list[Piece]:
    """The call as OpenAI streams it: its id, type and name first, then its arguments in
    pieces."""
    head = ToolCallDelta(
        index=0,
        id=_call_id(function.name, prompt),
        type="function",
        function=ToolCallFunctionDelta(name=function.name, arguments=""),
    )
    arguments = _json_pieces(sample_json(_arguments_schema(function), prompt_crc))
    return [
        Delta(tool_calls=[head]),
        *(
            Delta(tool_calls=[ToolCallDelta(index=0, function=ToolCallFunctionDelta(arguments=a))])
            for a in arguments
        ),
    ]


def _arguments_schema(function: FunctionDefinition) -> dict[str, Any]:
    """The function's ``parameters``; an object whatever they leave out (arguments are always
    a JSON object)."""
    parameters = function.parameters or {}
    return parameters if "type" in parameters else {"type": "object", **parameters}


def _call_id(name: str, prompt: str) -> str:
    """``call_`` and 24 base62 characters, a function of the conversation and the tool (so a
    later turn's call has another id)."""
    text = f"{name}\n{prompt}".encode("utf-8", "surrogatepass")
    number = int.from_bytes(hashlib.blake2b(text, digest_size=18).digest(), "big")
    return "call_" + base62(number, CALL_ID_LENGTH)


def _carries_output(piece: Piece) -> bool:
    return isinstance(piece, str) or (isinstance(piece, Delta) and piece.carries_output())
