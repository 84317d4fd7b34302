"""The Responses API (``POST /v1/responses``): requests translated into svc's completions,
and their streams written as Responses events."""

from app.apis.dialect import Dialect
from app.apis.responses.operation import responses_operation
from app.apis.responses.request import parse_responses_completion

RESPONSES = Dialect("/v1/responses", parse_responses_completion, responses_operation)

__all__ = ["RESPONSES"]
