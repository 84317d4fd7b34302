"""A Responses request's tools, as a Chat Completions upstream takes them, and the names of
its calls, as the client defined them.

- ``function`` tools go as they are.
- ``namespace`` tools (a group of function tools, as Codex CLI sends its ``multi_agent_v1``
  tools) have each of their functions offered under a name of its own: ``<namespace>__<name>``
  (``app.upstream.tool_names``) when that is a valid Chat Completions function name and no
  other tool's; otherwise (too long, a character chat names do not take, a collision) that
  name cut to fit and ended with a digest of the namespace and name, so it is still
  deterministic and still one tool's. A call to it is written back to the client with its
  own ``name`` and ``namespace``, as OpenAI's function_call items carry them.
- Hosted tools (``HOSTED_TOOLS``: what OpenAI runs on its side, such as web search) cannot
  run behind a chat upstream: they are left out, and the response's
  ``OMITTED_TOOLS_HEADER`` names them, so a client that offers them anyway (Codex offers
  ``web_search`` by default) is served without them.
- Any other tool (``custom``, ``local_shell``, ``shell``, ``apply_patch``, ``computer``,
  ``tool_search``: the client runs them, but their calls are items of their own types,
  which a chat upstream cannot make) is a 400 naming it: leaving out a tool the client
  runs would change what its agent can do without a word.
"""

from __future__ import annotations

import hashlib
import re

import msgspec

from app.apis.responses.wire import ResponsesTool
from app.core.errors import invalid_value
from app.upstream.tool_names import namespaced
from app.upstream.wire import FunctionDefinition, Tool

HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "mcp",
    }
)
"""The tool types OpenAI runs itself: left out of what reaches a chat upstream."""

OMITTED_TOOLS_HEADER = "svc-omitted-tools"
"""The response header naming the hosted tool types left out (comma-separated)."""

_CHAT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_NOT_CHAT = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # Chat Completions' longest function name
_DIGEST_CHARS = 10

ClientName = tuple[str, str]
"""A namespaced function as the client defined it: (namespace, name)."""


class ChatTools(msgspec.Struct, frozen=True):
    """The tools a chat upstream is offered, and how its calls' names map back."""

    tools: list[Tool]
    names: dict[str, ClientName]
    """The upstream name of each namespaced function (and its plain joined name, which a
    Responses provider's calls are read as) -> the client's (namespace, name)."""
    upstream: dict[ClientName, str]
    """The client's (namespace, name) -> the name the upstream knows it by."""
    omitted: tuple[str, ...]
    """The hosted tool types left out, each once, in the order sent."""

    def upstream_name(self, namespace: str, name: str) -> str:
        """The name a namespaced function has upstream (the plain joined name for one the
        request no longer offers, as an earlier turn's call may name)."""
        return self.upstream.get((namespace, name), namespaced(namespace, name))


NO_TOOLS = ChatTools([], {}, {}, ())


def chat_tools(tools: list[ResponsesTool]) -> ChatTools:
    """``tools`` as a chat upstream takes them, or the ``ApiError`` naming what cannot be."""
    out: list[Tool] = []
    grouped: list[tuple[str, ResponsesTool, str]] = []  # namespace, function, its param
    omitted: list[str] = []
    for i, tool in enumerate(tools):
        if tool.type == "function":
            out.append(Tool(function=_definition(tool, f"tools[{i}]")))
        elif tool.type == "namespace":
            grouped.extend(_namespace_functions(tool, f"tools[{i}]"))
        elif tool.type in HOSTED_TOOLS:
            if tool.type not in omitted:
                omitted.append(tool.type)
        else:
            raise invalid_value(
                f"tools[{i}].type",
                f"svc serves function, namespace and hosted tools; '{tool.type[:64]}' tools "
                "are not available.",
            )
    taken = {tool.function.name for tool in out}
    names: dict[str, ClientName] = {}
    upstream: dict[ClientName, str] = {}
    for namespace, inner, where in grouped:
        definition = _definition(inner, where)
        client = (namespace, definition.name)
        if client in upstream:
            raise invalid_value(
                f"{where}.name",
                f"Namespace '{namespace[:64]}' has two tools named '{definition.name}'.",
            )
        name = _upstream_name(namespace, definition.name, taken)
        taken.add(name)
        upstream[client] = name
        names[name] = client
        out.append(Tool(function=msgspec.structs.replace(definition, name=name)))
    for (namespace, name), given in upstream.items():
        joined = namespaced(namespace, name)
        if joined != given and joined not in taken:
            names[joined] = (namespace, name)
    return ChatTools(out, names, upstream, tuple(omitted))


def _namespace_functions(tool: ResponsesTool, where: str) -> list[tuple[str, ResponsesTool, str]]:
    """The functions of namespace ``tool``: its name, each function, and where it was sent."""
    namespace = tool.name
    if not isinstance(namespace, str) or not namespace:
        raise invalid_value(f"{where}.name", "A namespace tool needs a 'name'.")
    if not isinstance(tool.tools, list) or not tool.tools:
        raise invalid_value(f"{where}.tools", "A namespace tool needs 'tools'.")
    functions = []
    for j, inner in enumerate(tool.tools):
        if inner.type != "function":
            raise invalid_value(
                f"{where}.tools[{j}].type",
                f"svc serves the function tools of a namespace; '{inner.type[:64]}' tools "
                "are not available.",
            )
        functions.append((namespace, _described(tool, inner), f"{where}.tools[{j}]"))
    return functions


def _upstream_name(namespace: str, name: str, taken: set[str]) -> str:
    """``<namespace>__<name>`` if a chat upstream takes it and no other tool has it; else
    that cut to fit and ended with a digest of the pair (and a number past the digest in
    the unlikely case another tool has that name too): one tool's, and the same every time
    the same tools are sent."""
    joined = namespaced(namespace, name)
    if _CHAT_NAME.match(joined) and joined not in taken:
        return joined
    digest = hashlib.sha256(f"{namespace}\0{name}".encode()).hexdigest()[:_DIGEST_CHARS]
    head = _NOT_CHAT.sub("_", joined)[: _MAX_NAME - _DIGEST_CHARS - 4]
    candidate = f"{head}_{digest}"
    n = 0
    while candidate in taken:
        n += 1
        candidate = f"{head}_{digest}{n}"
    return candidate


def _described(namespace: ResponsesTool, tool: ResponsesTool) -> ResponsesTool:
    """A namespace's function, its description led by the namespace's (which a Responses
    model is shown, and a chat model would not be otherwise)."""
    parts = [d for d in (namespace.description, tool.description) if isinstance(d, str) and d]
    if not parts:
        return tool
    return msgspec.structs.replace(tool, description="\n\n".join(parts))


def _definition(tool: ResponsesTool, where: str) -> FunctionDefinition:
    fields = msgspec.to_builtins(tool)
    fields.pop("type")
    fields.pop("tools", None)
    if fields.get("parameters") is None:
        fields.pop("parameters", None)
    try:
        return msgspec.convert(fields, FunctionDefinition)
    except msgspec.ValidationError as exc:
        raise invalid_value(where, f"Invalid function tool: {exc}") from exc
