"""How a function tool of a Responses ``namespace`` is named where namespaces do not exist.

A Chat Completions upstream knows plain function names only, so svc offers a namespaced
function (``multi_agent_v1`` / ``spawn_agent``) under one name joining the two; a provider
that serves the Responses API itself names its calls' namespace apart, and its calls are
read back into the same joined name, so one mapping (``app.apis.responses.tools``) turns every
call into the client's own namespace and name.
"""

from __future__ import annotations

NAMESPACE_SEPARATOR = "__"
"""Between a namespace and its function's name (what Codex's own prompts call them)."""


def namespaced(namespace: str, name: str) -> str:
    """The joined name of function ``name`` of ``namespace``."""
    return namespace + NAMESPACE_SEPARATOR + name
