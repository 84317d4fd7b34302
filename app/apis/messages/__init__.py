"""Anthropic's Messages API (``POST /v1/messages``): requests translated into svc's
completions, and their streams written as Anthropic's events."""

from app.apis.dialect import Dialect, JsonRoute
from app.apis.messages.count import PATH as COUNT_TOKENS_PATH
from app.apis.messages.count import count_answer
from app.apis.messages.errors import anthropic_error, bearer_or_api_key
from app.apis.messages.operation import count_tokens_operation, messages_operation
from app.apis.messages.request import parse_messages_request

MESSAGES = Dialect(
    "/v1/messages",
    parse_messages_request,
    messages_operation,
    credentials=bearer_or_api_key,
    error_shape=anthropic_error,
    beside=(JsonRoute(COUNT_TOKENS_PATH, count_answer, count_tokens_operation),),
)

__all__ = ["COUNT_TOKENS_PATH", "MESSAGES"]
