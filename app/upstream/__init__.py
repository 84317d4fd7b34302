"""Upstream providers: where completions come from, behind one small interface."""

from app.upstream.base import Provider, UpstreamCall, UpstreamError, Usage

__all__ = ["Provider", "UpstreamCall", "UpstreamError", "Usage"]
