"""The headers an error answers with are its kind's (``app.core.error_kinds``): an
``ApiError`` carries the values its kind fixes, and the OpenAPI document lists every kind's
headers on each response of the kind's status, with the kind's description."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.errors import ApiError, ErrorKind
from app.core.settings import Settings
from app.http.app import create_app
from app.http.openapi_document import complete_document

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
MODELS = ["svc-fast"]


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    generated = create_app(Settings()).openapi_schema.to_schema()
    return complete_document(
        generated, models=MODELS, key_models=MODELS, max_messages=8, max_message_chars=100
    )


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_an_error_answers_with_the_headers_its_kind_fixes(kind: ErrorKind) -> None:
    assert ApiError(kind, "refused").headers == kind.fixed_headers
    given = {name: "given" for name in kind.fixed_headers}
    assert ApiError(kind, "refused", headers=given).headers == given  # the raiser's win


def test_every_response_documents_the_headers_of_its_status_kinds(
    document: dict[str, Any],
) -> None:
    checked = 0
    for item in document["paths"].values():
        for operation in item.values():
            for status, response in operation["responses"].items():
                for kind in ErrorKind:
                    if kind.status != int(status):
                        continue
                    for header in kind.headers:
                        documented = response["headers"][header.name]
                        assert not documented["required"]
                        assert documented["schema"] == {"type": "string"}
                        checked += 1
    assert checked


def test_a_header_is_described_as_its_kind_says(
    document: dict[str, Any],
) -> None:
    headers = document["paths"]["/v1/credits"]["get"]["responses"]["503"]["headers"]
    (retry_after,) = [h for h in ErrorKind.SERVICE_UNAVAILABLE.headers if h.name == "retry-after"]
    assert headers["retry-after"]["description"] == retry_after.description
