"""Decoding request bodies into typed structs, and query parameters, with errors that
name the bad field."""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from app.core.errors import ApiError, ErrorKind, invalid_value

T = TypeVar("T")
_PATH = re.compile(r" - at `\$\.?(.*)`$")
_decoders: dict[type, msgspec.json.Decoder[object]] = {}
_untyped = msgspec.json.Decoder()


def query_int(raw: str | None, name: str, *, low: int, high: int, default: int) -> int:
    """A whole-number query parameter from ``low`` to ``high`` (``default`` when absent or
    empty); a 400 naming ``name`` otherwise."""
    if raw is None or raw == "":
        return default
    # isdigit() alone admits digits int() refuses, such as '²'
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise invalid_value(name, f"'{name}' must be an integer from {low} to {high}.")
    return int(raw)


def decode_json(body: bytes, kind: type[T]) -> T:
    """``body`` as a ``kind``, or a 400: its ``param`` names the field at fault, and no
    body, however malformed, gets anything else (a string is never a number or a bool)."""
    try:
        try:
            return _strict_decoder(kind).decode(body)  # type: ignore[return-value]
        except msgspec.ValidationError:
            # Off the hot path, only for a body the strict decoder refused: JSON Schema's
            # ``integer`` includes 1.0 (the OpenAPI document says ``integer``, schemathesis
            # and clients that compute a value send floats), so retry with whole-number
            # floats as ints; 1.5 is still refused.
            value = _whole_floats_as_ints(_untyped.decode(body))
            return msgspec.convert(value, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise _field_error(exc) from exc
    except msgspec.DecodeError as exc:
        raise _body_error("We could not parse the JSON body of your request.") from exc
    except UnicodeDecodeError as exc:  # msgspec checks the UTF-8 of strings as it reads them
        raise _body_error("The JSON body of your request is not valid UTF-8.") from exc
    except RecursionError as exc:  # msgspec's depth limit, even inside an ignored field
        raise _body_error("The JSON body of your request is nested too deeply.") from exc


def convert_fields(fields: dict[str, Any], kind: type[T]) -> T:
    """``fields`` (from a command line, say) as a ``kind``, checked as a JSON body would be:
    the same limits, the same 400."""
    try:
        return msgspec.convert(fields, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise _field_error(exc) from exc


def _strict_decoder(kind: type) -> msgspec.json.Decoder[object]:
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind, strict=True)
    return decoder


def _whole_floats_as_ints(root: Any) -> Any:
    """``root`` (decoded untyped JSON) with every whole-number float replaced by its int,
    in place; iterative, so any depth the decoder accepted is walked."""
    if isinstance(root, float):
        return int(root) if root.is_integer() else root
    if not isinstance(root, dict | list):
        return root
    pending = [root]
    while pending:
        node = pending.pop()
        slots = node.items() if isinstance(node, dict) else enumerate(node)
        for slot, item in slots:
            if isinstance(item, float) and item.is_integer():
                node[slot] = int(item)  # replaces a value: the dict's size does not change
            elif isinstance(item, dict | list):
                pending.append(item)
    return root


def _field_error(exc: msgspec.ValidationError) -> ApiError:
    text = str(exc)
    match = _PATH.search(text)
    param = match.group(1) if match else None
    message = _PATH.sub("", text)
    if param is None and message.startswith("Object missing required field"):
        param = message.split("`")[1]
    elif message.startswith("Object contains unknown field"):
        field = message.split("`")[1]  # named in the message: the path is its object's
        param = f"{param}.{field}" if param else field
    where = f" at '{param}'" if param else ""
    return invalid_value(param or "body", f"Invalid request{where}: {message}.")


def _body_error(problem: str) -> ApiError:
    return ApiError(ErrorKind.INVALID_VALUE, f"{problem} Send a valid JSON object.")
