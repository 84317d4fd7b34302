"""The instructor recipes of docs/clients.md, run as written there against a real svc server
(tests/e2e/test_client_recipes_isolated.py drives them; common.py: how to run one by hand):

    SVC_API_KEY=... .venv/clients/bin/python instructor_recipes.py \
        BASE_URL MODEL RECIPE [NAME=VALUE ...]

RECIPE, on ``instructor.from_openai(OpenAI(base_url=..., api_key=...), mode=...)``, for the
nested model common.Person:
  partial      create_partial: the object as it streams, the last one complete and validated
  stream       create(response_model=Partial[Person], stream=True): the same as create_partial
  iterable     create_iterable: each object once it is complete
  create       create without stream: what instructor makes of svc's stream
  full-stream  create(response_model=Person, stream=True): a whole model does not stream
  validation   create_partial of a model whose validator the simulated model never satisfies:
               instructor asks again with the error, as often as its max_retries says

Settings (NAME=VALUE): mode = tools (the default), json, md_json or json_schema (instructor's
Mode); max_retries = instructor's, on the call (validation retries; its default is 3);
http_retries = the OpenAI client's max_retries (HTTP retries; its default is 2).
"""

from __future__ import annotations

from typing import Any

import instructor
from common import Job, Person, main
from instructor.core import InstructorRetryException
from openai import OpenAI
from pydantic import BaseModel, field_validator

MODES = {
    "tools": instructor.Mode.TOOLS,
    "json": instructor.Mode.JSON,
    "md_json": instructor.Mode.MD_JSON,
    "json_schema": instructor.Mode.JSON_SCHEMA,
}
ASK = [{"role": "user", "content": "Describe one person."}]


class ShoutedPerson(BaseModel):
    name: str
    age: int

    @field_validator("name")
    @classmethod
    def in_capitals(cls, name: str) -> str:
        if not name.isupper():
            raise ValueError("the name must be in capital letters")
        return name


def client(job: Job) -> Any:
    http_retries = job.setting("http_retries")
    openai = OpenAI(
        base_url=job.base_url,
        api_key=job.api_key,
        http_client=job.http_client(),
        **({"max_retries": int(http_retries)} if http_retries else {}),
    )
    return instructor.from_openai(openai, mode=MODES[job.setting("mode") or "tools"])


def run(job: Job, seen: dict[str, Any]) -> None:
    completions = client(job).chat.completions
    max_retries = job.setting("max_retries")
    call = {
        "model": job.model,
        "messages": ASK,
        **({"max_retries": int(max_retries)} if max_retries else {}),
    }
    if job.recipe in ("partial", "validation"):
        model = ShoutedPerson if job.recipe == "validation" else Person
        objects = list(completions.create_partial(response_model=model, **call))
    elif job.recipe == "stream":
        partial = instructor.Partial[Person]
        objects = list(completions.create(response_model=partial, stream=True, **call))
    elif job.recipe == "iterable":
        objects = list(completions.create_iterable(response_model=Person, **call))
    elif job.recipe == "create":
        objects = [completions.create(response_model=Person, **call)]
    elif job.recipe == "full-stream":
        objects = [completions.create(response_model=Person, stream=True, **call)]
    else:
        raise SystemExit(f"no recipe {job.recipe!r}")
    seen["objects"] = objects


def describe(error: Exception) -> dict[str, Any]:
    """What instructor's InstructorRetryException adds: how many attempts, what each failed
    with, what the last one got from the OpenAI SDK."""
    if not isinstance(error, InstructorRetryException):
        return {}
    return {
        "attempts": error.n_attempts,
        "failed": [str(attempt.exception) for attempt in error.failed_attempts or []],
        "last_completion": type(error.last_completion).__name__,
    }


if __name__ == "__main__":
    main("instructor_recipes.py", run, {"objects": [], "error": None}, describe)
