"""OpenAI's Chat Completions API (``POST /v1/chat/completions``): svc's own wire format,
read as it came and streamed as chunks."""

from app.apis.chat.operation import chat_operation
from app.apis.chat.request import parse_chat_request
from app.apis.dialect import Dialect

CHAT = Dialect("/v1/chat/completions", parse_chat_request, chat_operation)

__all__ = ["CHAT"]
