"""svc's errors in Anthropic's shape (``app.apis.messages.errors``): the type by status, the
body, the headers kept, and what the anthropic SDK makes of them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.apis.messages.errors import error_body, error_response, error_type
from app.core.errors import ApiError, ErrorKind, invalid_value, service_unavailable

ANTHROPIC_TYPES = {
    "invalid_request_error",
    "authentication_error",
    "billing_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "timeout_error",
    "overloaded_error",
}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (402, "billing_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (405, "invalid_request_error"),
        (409, "invalid_request_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
        (507, "api_error"),
    ],
)
def test_the_type_goes_by_status(status: int, expected: str) -> None:
    assert error_type(status) == expected


@pytest.mark.parametrize("kind", list(ErrorKind), ids=lambda kind: kind.name)
def test_every_error_svc_answers_has_anthropics_shape(kind: ErrorKind) -> None:
    error = ApiError(kind, "Something is wrong.")
    body = json.loads(error_body(error, "req_1"))
    assert body == {
        "type": "error",
        "error": {"type": error_type(kind.status), "message": "Something is wrong."},
        "request_id": "req_1",
    }
    assert body["error"]["type"] in ANTHROPIC_TYPES


def test_the_param_is_named_in_the_message() -> None:
    error = invalid_value("messages[2].content[0].source", "svc does not keep files.")
    body = json.loads(error_body(error))
    assert body["error"]["message"] == "messages[2].content[0].source: svc does not keep files."
    assert body["request_id"] is None
    # a message that names it already is left as it is
    named = invalid_value("max_tokens", "'max_tokens' must be 1 or more.")
    assert json.loads(error_body(named))["error"]["message"] == named.message


def test_the_response_keeps_the_status_and_the_errors_headers() -> None:
    response = error_response(service_unavailable(), "req_9")
    assert response.status == 503
    headers = dict(response.headers)
    assert headers["retry-after"] == "1"
    assert headers["request-id"] == "req_9"
    assert headers["content-type"] == "application/json"
    assert json.loads(response.body)["error"]["type"] == "overloaded_error"
    credits = ApiError(ErrorKind.INSUFFICIENT_CREDITS, "Not enough credits.")
    response = error_response(credits, "req_2")
    assert (response.status, dict(response.headers)["x-should-retry"]) == (402, "false")
    assert json.loads(response.body)["error"]["type"] == "billing_error"


@pytest.mark.parametrize(
    ("kind", "exception"),
    [
        (ErrorKind.INVALID_VALUE, "BadRequestError"),
        (ErrorKind.INVALID_API_KEY, "AuthenticationError"),
        (ErrorKind.MODEL_NOT_ALLOWED, "PermissionDeniedError"),
        (ErrorKind.MODEL_NOT_FOUND, "NotFoundError"),
        (ErrorKind.DAILY_CAP_EXCEEDED, "RateLimitError"),
        (ErrorKind.UPSTREAM_UNAVAILABLE, "InternalServerError"),
    ],
)
def test_the_sdk_raises_its_own_exception_with_the_message(kind: ErrorKind, exception: str) -> None:
    anthropic = pytest.importorskip("anthropic")
    httpx2 = pytest.importorskip("httpx2")
    response = error_response(ApiError(kind, "Refused here."), "req_5")

    def answer(request: Any) -> Any:
        return httpx2.Response(response.status, headers=response.headers, content=response.body)

    client = anthropic.Anthropic(
        api_key="svc_test_x",
        base_url="http://svc.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
        max_retries=0,
    )
    with pytest.raises(getattr(anthropic, exception)) as info:
        client.messages.create(
            model="svc-fast", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )
    assert info.value.status_code == kind.status
    assert "Refused here." in str(info.value)
    assert info.value.request_id == "req_5"
