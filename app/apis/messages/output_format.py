"""Anthropic's structured outputs as Chat Completions asks for them.

``output_config: {"format": {"type": "json_schema", "schema": {...}}}`` (what the anthropic
SDK's ``output_format=`` and ``messages.parse`` send) is the chat request's
``response_format: {"type": "json_schema", "json_schema": {"name", "schema", "strict":
true}}``: strict, as Anthropic's constrained decoding is; named after the schema's
``title`` where it is a name OpenAI takes (Anthropic's format has none, Chat Completions'
requires one), else ``OUTPUT_FORMAT_NAME``. A schema that is not a JSON object is refused
when the body is decoded; one longer, as JSON, than a message may be (``max_message_chars``)
is refused here, naming ``output_config.format.schema``. A provider that serves the
Messages API is sent ``output_config`` as the client wrote it (``app.apis.messages.request``).
"""

from __future__ import annotations

import re

import msgspec
from msgspec import UNSET

from app.apis.messages.wire import JsonOutputFormat, OutputConfig
from app.core.errors import invalid_value
from app.upstream.wire import JsonSchemaFormat, JsonSchemaResponseFormat

OUTPUT_FORMAT_NAME = "output"
"""The ``json_schema`` name of a schema without a ``title`` OpenAI takes as a name."""
_FORMAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""The names OpenAI takes for a ``json_schema`` response format."""


def response_format(
    config: OutputConfig | object, max_chars: int
) -> JsonSchemaResponseFormat | msgspec.UnsetType:
    """The chat ``response_format`` of ``output_config`` (``config``); left out when it asks
    for no format."""
    fmt = config.format if isinstance(config, OutputConfig) else None
    if not isinstance(fmt, JsonOutputFormat):
        return UNSET
    schema = fmt.schema
    if len(msgspec.json.encode(schema)) > max_chars:
        raise invalid_value(
            "output_config.format.schema",
            f"A schema may hold at most {max_chars} characters (as JSON).",
        )
    title = schema.get("title")
    name = title if isinstance(title, str) and _FORMAT_NAME.fullmatch(title) else None
    return JsonSchemaResponseFormat(
        json_schema=JsonSchemaFormat(name=name or OUTPUT_FORMAT_NAME, schema=schema, strict=True)
    )
