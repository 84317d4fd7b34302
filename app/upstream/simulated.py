"""The built-in simulated upstream: deterministic replies streamed token by token, no network.

Used by default, by test keys always, and by tests. The reply is a function of the request,
so the same conversation always streams the same pieces:

- a user's turn with ``tools`` offered gets one tool call when ``tool_choice`` requires one
  or, under ``"auto"``, when the user's message names a tool (``simulated_tools`` says
  which), its arguments made to fit the function's ``parameters`` schema, so a client can
  run its agent loop against test keys;
- any other turn (a plain one, or the one after a tool's result) gets text: a JSON value
  that fits a ``json_schema`` response format; a JSON object when the response format is
  ``json_object`` or the instructions ask for JSON (following the JSON Schema they show, as
  instructor's JSON modes, pydantic-ai's prompted output and LangChain's format instructions
  write one, or DSPy's JSON adapter's field list); else words.

A text reply stops before the first of the request's ``stop`` sequences it holds (the one
that begins first), and says which, as vLLM does; a reply that holds none is cut at
``max_tokens`` only.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import zlib
from collections.abc import AsyncIterator
from typing import Any

from app.upstream.base import ChoiceEnd, Piece, UpstreamCall, Usage
from app.upstream.json_sample import sample_json
from app.upstream.simulated_tools import arguments_schema, call_head, function_to_call
from app.upstream.wire import (
    ChatRequest,
    Delta,
    FunctionDefinition,
    JsonObjectFormat,
    JsonSchemaResponseFormat,
    Message,
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

_ANY_OBJECT: dict[str, Any] = {"type": "object"}
"""What ``_reply_schema`` gives for a JSON reply of no shape in particular (then it is one
``answer``: the words)."""

_ASKS_FOR_JSON = re.compile(
    r"\bjson(?:[ _-]?(?:object|schema|format|instance|response|output|only|mode)\b)"
    r"|```json"
    r"|\b(?:in|as|with|return|respond|reply|output|valid|only|using)\s+"
    r"(?:(?:a|an|the|valid|only)\s+)?json\b",
    re.IGNORECASE,
)
"""Instructions that ask for JSON: "respond in JSON", "a JSON object", "json_schema", ..."""

_SCANNED_CHARS = 128 * 1024
"""How much of a message is searched for a JSON Schema (from its start)."""
_SCAN_TRIES = 128
"""How many '{' of a message are tried as the start of a JSON object."""
_DECODER = json.JSONDecoder()
_DSPY_NOTE = re.compile(r"\s*# note: the value you produce (.*)", re.DOTALL)
_DSPY_TYPES: dict[str, dict[str, Any]] = {
    "must be True or False": {"type": "boolean"},
    "must be a single int value": {"type": "integer"},
    "must be a single float value": {"type": "number"},
}


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
        is not among the tools (``simulated_tools.function_to_call``).
        """
        texts = [message_text(m) for m in call.request.messages]
        prompt = "\n".join(texts)
        # surrogatepass: a lone surrogate in a client's text must not fail the reply
        prompt_crc = zlib.crc32(prompt.encode("utf-8", "surrogatepass"))
        prompt_tokens = _prompt_tokens(texts)
        function = function_to_call(call.request, prompt_crc)
        if function is None:
            output, whole, matched = self._text(call, prompt_crc)
            usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=len(output))
            # plain text that stopped says so only by its end, or by the stop sequence it
            # stopped at; text cut at max_tokens says "length", as real upstreams do
            if not whole:
                return [*output, Delta(finish_reason="length"), usage]
            return [*output, usage] if matched is None else [*output, ChoiceEnd(matched), usage]
        deltas = _tool_call_deltas(function, prompt, prompt_crc)
        output = deltas[: _cap(call)]
        finish = "tool_calls" if len(output) == len(deltas) else "length"
        usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=len(output))
        return [*output, Delta(finish_reason=finish), usage]

    def _text(self, call: UpstreamCall, prompt_crc: int) -> tuple[list[Piece], bool, str | None]:
        """The text pieces of a reply that calls no tool, stopped before a stop sequence and
        cut at ``max_tokens``; whether the cap left it whole, and the stop sequence it
        stopped at."""
        schema = _reply_schema(call.request)
        if schema is None:
            pieces = _words(prompt_crc, self.reply_tokens)
        elif schema is _ANY_OBJECT:
            words = _words(prompt_crc, self.reply_tokens)
            pieces = _json_pieces({"answer": "".join(words)})
        else:
            pieces = _json_pieces(sample_json(schema, prompt_crc))
        pieces, matched = _stopped(pieces, call.request.stop)
        cap = _cap(call)
        if len(pieces) > cap:
            return list(pieces[:cap]), False, None
        return list(pieces), True, matched

    async def close(self) -> None:
        return None


def _cap(call: UpstreamCall) -> int:
    """The most output pieces (tokens) the reply may have."""
    return max(call.max_tokens, 0)


def _stopped(pieces: list[str], stop: object) -> tuple[list[str], str | None]:
    """``pieces`` up to the first of the ``stop`` sequences their text holds (the one that
    begins first; of two beginning there, the one sent first), the piece it begins in cut
    before it, and that sequence; as they are, and None, when the text holds none."""
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    text = "".join(pieces)
    found = [(text.find(s), n) for n, s in enumerate(stops) if s and s in text]
    if not found:
        return pieces, None
    at, n = min(found)
    kept: list[str] = []
    length = 0
    for piece in pieces:
        if length + len(piece) >= at:
            if at > length:
                kept.append(piece[: at - length])
            break
        kept.append(piece)
        length += len(piece)
    return kept, stops[n]


def _words(prompt_crc: int, count: int) -> list[str]:
    """``count`` words from a place in the list the prompt picks, each after a space but the
    first."""
    start = prompt_crc % len(_WORDS)
    return [(" " if i else "") + _WORDS[(start + i) % len(_WORDS)] for i in range(count)]


def _json_pieces(value: Any) -> list[str]:
    """``value`` as JSON text, cut into token-sized pieces."""
    return _TOKEN.findall(json.dumps(value))


def _reply_schema(request: ChatRequest) -> dict[str, Any] | None:
    """The schema a text reply's JSON must fit: the ``json_schema`` response format's; for
    ``json_object`` or instructions that ask for JSON, the last JSON Schema of an object
    they show (or ``_ANY_OBJECT``). None for a reply in words."""
    response_format = request.response_format
    if isinstance(response_format, JsonSchemaResponseFormat) and isinstance(
        response_format.json_schema.schema, dict
    ):
        return response_format.json_schema.schema
    texts = _instructions(request.messages)
    asked = isinstance(response_format, JsonObjectFormat | JsonSchemaResponseFormat)
    if not asked and not any(_asks_for_json(text) for text in texts):
        return None
    schemas = [schema for text in texts for schema in _object_schemas(text)]
    return schemas[-1] if schemas else _ANY_OBJECT


def _asks_for_json(text: str) -> bool:
    """Whether ``text`` asks for JSON: the pattern tried around each "json" in it (a
    search of the whole text would cost as much per character as a long prompt has)."""
    lowered = text.lower()
    start = lowered.find("json")
    for _ in range(_SCAN_TRIES):
        if start < 0:
            break
        if _ASKS_FOR_JSON.search(lowered, max(start - 40, 0), start + 20):
            return True
        start = lowered.find("json", start + 4)
    return False


def _instructions(messages: list[Message]) -> list[str]:
    """The texts that say what the reply should be: the system and developer messages and
    the last user message, in order."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    return [
        message_text(message)
        for i, message in enumerate(messages)
        if message.role in ("system", "developer") or i == last_user
    ]


def _object_schemas(text: str) -> list[dict[str, Any]]:
    """The JSON Schemas of an object written in ``text`` (as JSON), in order, and the
    schemas DSPy's JSON adapter's field lists stand for."""
    schemas = []
    for value in _json_objects(text[:_SCANNED_CHARS]):
        properties = value.get("properties")
        if isinstance(properties, dict) and properties:
            if all(isinstance(schema, dict) for schema in properties.values()):
                schemas.append(value)
        elif value.get("type") == "object" or isinstance(value.get("$ref"), str):
            schemas.append(value)
        elif value and all(
            isinstance(v, str) and v.startswith(f"{{{k}}}") for k, v in value.items()
        ):
            schemas.append(_dspy_fields_schema(value))
    return schemas


def _json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects written in ``text``, outermost only, in order."""
    found = []
    start = text.find("{")
    for _ in range(_SCAN_TRIES):
        if start < 0:
            break
        try:
            value, end = _DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        start = text.find("{", end)
    return found


def _dspy_fields_schema(fields: dict[str, str]) -> dict[str, Any]:
    """The schema of the object DSPy's JSON adapter asks for, from the fields it lists:
    ``{"name": "{name}"}``, with a note after the placeholder for a field that is not a
    string (a Python type, a set of values, or a JSON Schema whose ``$defs`` are moved to
    the top)."""
    properties: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for name, text in fields.items():
        note = _DSPY_NOTE.match(text, len(name) + 2)
        properties[name] = _dspy_field_schema(note.group(1).strip() if note else "")
        defs.update(properties[name].pop("$defs", None) or {})
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return {**schema, "$defs": defs} if defs else schema


def _dspy_field_schema(note: str) -> dict[str, Any]:
    if note in _DSPY_TYPES:
        return dict(_DSPY_TYPES[note])
    if note.startswith("must adhere to the JSON schema:"):
        try:
            schema = json.loads(note.partition(":")[2])
        except (ValueError, RecursionError):
            schema = None
        return dict(schema) if isinstance(schema, dict) else {}
    if " one of: " in note:
        return {"enum": [_literal(member) for member in note.partition(" one of: ")[2].split("; ")]}
    return {"type": "string"}


def _literal(text: str) -> Any:
    """A member of a DSPy list of values: a number where it reads as one, else the text."""
    try:
        number = json.loads(text)
    except ValueError:
        return text
    is_number = isinstance(number, int | float) and not isinstance(number, bool)
    return number if is_number and math.isfinite(number) else text


def _tool_call_deltas(function: FunctionDefinition, prompt: str, prompt_crc: int) -> list[Piece]:
    """The call as OpenAI streams it: its id, type and name first, then its arguments in
    pieces."""
    arguments = _json_pieces(sample_json(arguments_schema(function), prompt_crc))
    return [
        Delta(tool_calls=[call_head(function, prompt)]),
        *(
            Delta(tool_calls=[ToolCallDelta(index=0, function=ToolCallFunctionDelta(arguments=a))])
            for a in arguments
        ),
    ]


def _carries_output(piece: Piece) -> bool:
    return isinstance(piece, str) or (isinstance(piece, Delta) and piece.carries_output())
