"""Anthropic's Messages API (``POST /v1/messages``): requests translated into svc's
completions, and their streams written as Anthropic's events."""

from app.apis.dialect import Dialect
from app.apis.messages.errors import anthropic_error, bearer_or_api_key
from app.apis.messages.operation import count_tokens_operation, messages_operation
from app.apis.messages.request import parse_messages_request

COUNT_TOKENS_PATH = "/v1/messages/count_tokens"

MESSAGES = Dialect(
    "/v1/messages",
    parse_messages_request,
    messages_operation,
    credentials=bearer_or_api_key,
    error_shape=anthropic_error,
    beside=((COUNT_TOKENS_PATH, count_tokens_operation),),
)

__all__ = ["COUNT_TOKENS_PATH", "MESSAGES"]
