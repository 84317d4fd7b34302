"""Which tool the simulated upstream (``app.upstream.simulated``) calls, and the call's
head; its arguments are a value that fits the tool's ``parameters`` (``json_sample``).

The simulated upstream calls a tool only on a user's turn (the last message that is not a
system or developer one is the user's), with tools offered, and then:

- under a named ``tool_choice``, the tool it names;
- under ``"required"``, one of the tools, the prompt picks which;
- under ``"auto"`` (or no ``tool_choice``, OpenAI's default with tools), only when the
  user's message names a tool: the tool's name written in it as a word of its own, in any
  case ("run bash", "Use get_weather", "Describe a person." for LlamaIndex's tool
  ``Person``); of several, the one named first. A message that
  names none ("Say hello.") gets text, as a real model answers a greeting: an agent run
  against ``make run``'s simulated upstream must not act on the user's files unasked.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from app.core.errors import UpstreamError
from app.core.ids import base62
from app.upstream.wire import (
    ChatRequest,
    FunctionDefinition,
    NamedToolChoice,
    ToolCallDelta,
    ToolCallFunctionDelta,
    message_text,
)

CALL_ID_LENGTH = 24
_NAME_CHARS = r"[\w-]"
"""What a tool's name is made of (letters, digits, ``_``, ``-``): a name is written in a
message as a word only where none of them is just before or after it."""


def function_to_call(request: ChatRequest, prompt_crc: int) -> FunctionDefinition | None:
    """The function the reply calls (the rules above); None for text.

    Raises ``UpstreamError`` (a client error) when ``tool_choice`` names a function that is
    not among the tools, as the OpenAI API refuses such a request.
    """
    tools = request.tools
    # instructions after the user's message (Claude Code sends a system turn there) leave it
    # the user's turn
    turns = [m for m in request.messages if m.role not in ("system", "developer")]
    last = turns[-1] if turns else None
    if not tools or request.tool_choice == "none" or last is None or last.role != "user":
        return None
    functions = [tool.function for tool in tools]
    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice):
        for function in functions:
            if function.name == choice.function.name:
                return function
        raise UpstreamError(
            f"tool_choice names the function '{choice.function.name[:64]}', which is not in tools",
            client_error=True,
        )
    if choice == "required":
        return functions[prompt_crc % len(functions)]
    return _named_in(message_text(last), functions)


def _named_in(text: str, functions: list[FunctionDefinition]) -> FunctionDefinition | None:
    """The function whose name ``text`` writes first as a word of its own (any case)."""
    by_name = {function.name.lower(): function for function in reversed(functions)}
    # the longest names first, so that of two names starting at one place the whole wins
    names = "|".join(re.escape(name) for name in sorted(by_name, key=len, reverse=True))
    pattern = re.compile(f"(?<!{_NAME_CHARS})(?:{names})(?!{_NAME_CHARS})", re.IGNORECASE)
    found = pattern.search(text)
    return by_name[found.group(0).lower()] if found else None


def call_head(function: FunctionDefinition, prompt: str) -> ToolCallDelta:
    """The call's first piece as OpenAI streams it: its id, type and name."""
    return ToolCallDelta(
        index=0,
        id=_call_id(function.name, prompt),
        type="function",
        function=ToolCallFunctionDelta(name=function.name, arguments=""),
    )


def arguments_schema(function: FunctionDefinition) -> dict[str, Any]:
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
