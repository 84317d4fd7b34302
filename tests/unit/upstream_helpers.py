"""What the upstream client tests share: a call to the mock upstream (the ``mock`` fixture
in conftest.py runs it in process)."""

from __future__ import annotations

from app.upstream.base import UpstreamCall
from app.upstream.wire import ChatRequest, Message


def upstream_call(model: str = "m") -> UpstreamCall:
    """One short chat request to ``model``, capped at 100 output tokens."""
    request = ChatRequest(model=model, messages=[Message(role="user", content="hi")])
    return UpstreamCall(model=model, request=request, max_tokens=100)
