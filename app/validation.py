"""Decoding request bodies into typed structs, with errors that name the bad field."""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from app.errors import ApiError, ErrorKind, invalid_value

T = TypeVar("T")
_PATH = re.compile(r" - at `\$\.?(.*)`$")
_decoders: dict[type, msgspec.json.Decoder[object]] = {}


def decode_json(body: bytes, kind: type[T]) -> T:
    """``body`` as a ``kind``, or a 400 whose ``param`` names the field at fault."""
    decoder = _decoders.get(kind)
    if decoder is None:
        # Lax: JSON Schema's ``integer`` includes 1.0 (the OpenAPI document says ``integer``,
        # and clients that compute a value send floats); 1.5 is still refused.
        decoder = _decoders[kind] = msgspec.json.Decoder(kind, strict=False)
    try:
        return decoder.decode(body)  # type: ignore[return-value]
    except msgspec.ValidationError as exc:
        text = str(exc)
        match = _PATH.search(text)
        param = match.group(1) if match else None
        message = _PATH.sub("", text)
        if param is None and message.startswith("Object missing required field"):
            param = message.split("`")[1]
        where = f" at '{param}'" if param else ""
        raise invalid_value(param or "body", f"Invalid request{where}: {message}.") from exc
    except msgspec.DecodeError as exc:
        raise ApiError(
            ErrorKind.INVALID_VALUE,
            "We could not parse the JSON body of your request. Send a valid JSON object.",
        ) from exc
