"""Anthropic's Messages API (``POST /v1/messages``): requests translated into svc's chat
completions, and their streams written as Anthropic's events."""
