"""A deterministic JSON value that fits a JSON Schema: what the simulated upstream puts in a
tool call's arguments and in a ``json_schema`` reply.

It covers what tool and response schemas use (``type`` and nullable types, ``properties`` and
``required``, ``items``, ``enum``/``const``/``default``, numeric bounds, string lengths and
common formats, ``anyOf``/``oneOf``/``allOf``); a ``$ref`` becomes an empty object and
``pattern`` is not honoured. The same schema and seed always give the same value.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import Any

_WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]

_FORMATTED: dict[str, Callable[[str], str]] = {
    "date-time": lambda _: "2025-01-01T12:00:00Z",
    "date": lambda _: "2025-01-01",
    "time": lambda _: "12:00:00",
    "email": lambda word: f"{word}@example.com",
    "uri": lambda word: f"https://example.com/{word}",
    "url": lambda word: f"https://example.com/{word}",
    "hostname": lambda word: f"{word}.example.com",
    "uuid": lambda _: "00000000-0000-4000-8000-000000000000",
}

VALUE_BUDGET = 1000
"""Values one sample may hold: a client's schema (``minItems`` on nested arrays) must not
make the gateway build an unbounded value. Past it the sample is cut short (and may then not
fit the schema)."""
MAX_STRING_LENGTH = 512
"""The longest string a ``minLength`` gets, for the same reason."""


def sample_json(schema: dict[str, Any] | bool, seed: int) -> Any:
    """A value that fits ``schema``, chosen by ``seed``."""
    return _Sampler().sample(schema, seed)


def _mix(seed: int, label: str) -> int:
    """A seed for a part of the value (a property, an item), so siblings differ."""
    return zlib.crc32(label.encode(), seed)


def _number_or_none(value: Any) -> float | None:
    # bool is an int in Python; in JSON Schema it is not a number
    return None if isinstance(value, bool) or not isinstance(value, int | float) else value


class _Sampler:
    def __init__(self) -> None:
        self.remaining = VALUE_BUDGET

    def sample(self, schema: dict[str, Any] | bool, seed: int) -> Any:
        if self.remaining <= 0:
            return None
        self.remaining -= 1
        if not isinstance(schema, dict):  # `true` admits anything (`false` nothing at all)
            return _WORDS[seed % len(_WORDS)]
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[0]
        if "default" in schema:
            return schema["default"]
        if "$ref" in schema:
            return {}
        for choice in ("anyOf", "oneOf"):
            options = schema.get(choice)
            if isinstance(options, list) and options:
                return self.sample(_first_not_null(options), seed)
        if isinstance(schema.get("allOf"), list):
            return self.sample(_merged(schema), seed)
        return self._of_type(_type_of(schema), schema, seed)

    def _of_type(self, kind: str, schema: dict[str, Any], seed: int) -> Any:
        if kind == "object":
            return self._object(schema, seed)
        if kind == "array":
            return self._array(schema, seed)
        if kind in ("integer", "number"):
            return _number(schema, seed, integer=kind == "integer")
        if kind == "boolean":
            return seed % 2 == 0
        if kind == "null":
            return None
        return _string(schema, seed)

    def _object(self, schema: dict[str, Any], seed: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        names = list(properties)
        if isinstance(required, list):
            names += [name for name in required if isinstance(name, str) and name not in names]
        return {name: self.sample(properties.get(name, True), _mix(seed, name)) for name in names}

    def _array(self, schema: dict[str, Any], seed: int) -> list[Any]:
        items = schema.get("items")
        items = items if isinstance(items, dict | bool) else True
        count = max(_int_or_none(schema.get("minItems")) or 1, 1)
        max_items = _int_or_none(schema.get("maxItems"))
        if max_items is not None:
            count = min(count, max_items)
        values: list[Any] = []
        while len(values) < count and self.remaining > 0:
            values.append(self.sample(items, _mix(seed, str(len(values)))))
        return values


def _first_not_null(options: list[Any]) -> dict[str, Any] | bool:
    """The first option of an ``anyOf``/``oneOf`` that is not ``{"type": "null"}``."""
    for option in options:
        if not (isinstance(option, dict) and option.get("type") == "null"):
            return option if isinstance(option, dict | bool) else True
    return {"type": "null"}


def _merged(schema: dict[str, Any]) -> dict[str, Any]:
    """An ``allOf`` as one schema: its parts' keywords together, properties and required
    names added up (enough for the object schemas it composes)."""
    merged = {key: value for key, value in schema.items() if key != "allOf"}
    for part in schema["allOf"]:
        if not isinstance(part, dict):
            continue
        properties = {**merged.get("properties", {}), **part.get("properties", {})}
        required = [*merged.get("required", []), *part.get("required", [])]
        merged = {**merged, **part, "properties": properties, "required": required}
    return merged


def _type_of(schema: dict[str, Any]) -> str:
    """The type to produce: the schema's (the first that is not null), else what its keywords
    imply."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"] or ["null"]
        kind = kinds[0]
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def _number(schema: dict[str, Any], seed: int, *, integer: bool) -> int | float:
    low = _number_or_none(schema.get("minimum"))
    high = _number_or_none(schema.get("maximum"))
    exclusive_low = _number_or_none(schema.get("exclusiveMinimum"))
    exclusive_high = _number_or_none(schema.get("exclusiveMaximum"))
    step = 1 if integer else 0.5  # how far inside an exclusive bound to stay
    if exclusive_low is not None:
        low = exclusive_low + step if low is None else max(low, exclusive_low + step)
    if exclusive_high is not None:
        high = exclusive_high - step if high is None else min(high, exclusive_high - step)
    value: int | float = low if low is not None else seed % 9 + (1 if integer else 1.5)
    if integer:
        multiple = _int_or_none(schema.get("multipleOf"))
        if multiple is not None and multiple > 0:
            value = math.ceil(value / multiple) * multiple
        value = math.ceil(value)
    if high is not None and value > high:
        value = math.floor(high) if integer else high
    return value


def _string(schema: dict[str, Any], seed: int) -> str:
    word = _WORDS[seed % len(_WORDS)]
    format_ = schema.get("format")
    if isinstance(format_, str) and format_ in _FORMATTED:
        return _FORMATTED[format_](word)
    min_length = min(_int_or_none(schema.get("minLength")) or 0, MAX_STRING_LENGTH)
    max_length = _int_or_none(schema.get("maxLength"))
    text = word * (min_length // len(word) + 1) if len(word) < min_length else word
    return text[:max_length] if max_length is not None else text


def _int_or_none(value: Any) -> int | None:
    # bool is an int in Python; in JSON Schema it is not a number
    return value if isinstance(value, int) and not isinstance(value, bool) else None
