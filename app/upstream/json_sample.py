"""A deterministic JSON value that fits a JSON Schema: what the simulated upstream puts in a
tool call's arguments and in a structured reply. This module chooses the value; following
references, merging ``allOf`` and checking a candidate against its schema are
``app.upstream.json_schema``'s.

What it follows:

- references inside the schema (``$ref`` to ``#``, ``#/$defs/…``, ``#/definitions/…`` or any
  other JSON Pointer into it), with the keywords beside a ``$ref`` applied too; a recursive
  schema is filled in full once, and from its second visit to a reference on one path only
  what it requires (``FULL_DEPTH`` says the same of any deep schema);
- ``const``; ``enum`` (a member that fits the rest of the schema, chosen by the seed);
  ``anyOf``/``oneOf`` (the first branch whose sample fits it, and for ``oneOf`` fits no
  other, trying branches that say what they want before a null one and that before one
  admitting anything; null first where only what is required is filled); ``allOf`` (its
  parts merged into one schema);
- ``type`` and type lists (``["string", "null"]``), OpenAPI's ``nullable``;
- objects: ``properties``, ``required`` (always there), ``additionalProperties`` (``false``:
  nothing undeclared; a schema: a map gets one entry), ``minProperties``/``maxProperties``;
- arrays: ``items``, ``prefixItems`` (and draft 7's list of ``items``), ``minItems``/
  ``maxItems``, ``uniqueItems``, ``contains``;
- strings: ``minLength``/``maxLength`` and the common formats (date-time, date, time,
  duration, email, uri, hostname, uuid, ipv4, ipv6);
- numbers: ``minimum``/``maximum``, exclusive bounds (either draft's form), ``multipleOf``.

Not followed: ``pattern``, ``not``, ``if``/``then``/``else``, ``dependentRequired``,
``patternProperties``, ``propertyNames``, and references by anchor or to other documents
(they admit anything); a ``default`` is not copied (it need not fit its schema: pydantic's
``x: str = None``). The same schema and seed always give the same value, and the value
is bounded (``VALUE_BUDGET``, ``MAX_STRING_LENGTH``, ``MAX_DEPTH``) whatever the schema asks.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from app.upstream.json_schema import (
    Schema,
    SchemaDocument,
    as_count,
    as_dict,
    as_list,
    in_bounds,
    int_or_none,
    merge,
    number_bound,
    number_or_none,
    required_names,
)

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
    "time": lambda _: "12:00:00Z",
    "duration": lambda _: "P1D",
    "email": lambda word: f"{word}@example.com",
    "idn-email": lambda word: f"{word}@example.com",
    "uri": lambda word: f"https://example.com/{word}",
    "iri": lambda word: f"https://example.com/{word}",
    "url": lambda word: f"https://example.com/{word}",
    "uri-reference": lambda word: f"/{word}",
    "hostname": lambda word: f"{word}.example.com",
    "idn-hostname": lambda word: f"{word}.example.com",
    "uuid": lambda _: "00000000-0000-4000-8000-000000000000",
    "ipv4": lambda _: "192.0.2.1",
    "ipv6": lambda _: "2001:db8::1",
}

VALUE_BUDGET = 1000
"""Values one sample may hold: a client's schema (``minItems`` on nested arrays) must not
make the gateway build an unbounded value. Past it the sample is cut short (and may then not
fit the schema)."""
MAX_STRING_LENGTH = 512
"""The longest string a ``minLength`` gets, for the same reason."""
FULL_DEPTH = 8
"""Nesting filled in full (every property, an item in every array); deeper, only what the
schema requires (required properties, ``minItems`` items, a null branch where there is one)."""
MAX_DEPTH = 64
"""Nesting past which nothing is built: a schema that requires endless nesting gets a null."""
_OBJECT_WORDS = frozenset({"properties", "required", "additionalProperties", "minProperties"})
_ARRAY_WORDS = frozenset({"items", "prefixItems", "minItems", "maxItems", "contains"})
_NUMBER_WORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})


def sample_json(schema: Schema, seed: int) -> Any:
    """A value that fits ``schema``, chosen by ``seed``."""
    return _Sampler(schema).value(schema, seed, 0, full=True)


def _mix(seed: int, label: str) -> int:
    """A seed for a part of the value (a property, an item), so siblings differ."""
    return zlib.crc32(label.encode("utf-8", "surrogatepass"), seed)


class _Sampler:
    def __init__(self, root: Schema) -> None:
        self.document = SchemaDocument(root)
        self.remaining = VALUE_BUDGET
        self.open: list[str] = []  # the references being filled on the current path

    def value(self, schema: Any, seed: int, depth: int, *, full: bool) -> Any:
        if self.remaining <= 0 or depth > MAX_DEPTH:
            return None
        self.remaining -= 1
        flat, refs = self.document.flatten(schema)
        # a reference already open on this path is a recursion: only what is required from here
        full = full and depth < FULL_DEPTH and not any(ref in self.open for ref in refs)
        self.open += refs
        try:
            return self._flat_value(flat, seed, depth, full=full)
        finally:
            del self.open[len(self.open) - len(refs) :]

    def _flat_value(self, flat: Schema, seed: int, depth: int, *, full: bool) -> Any:
        if not isinstance(flat, dict):  # `true` admits anything (`false` nothing at all)
            return _WORDS[seed % len(_WORDS)] if flat else None
        if "const" in flat:
            return flat["const"]
        enum = flat.get("enum")
        if isinstance(enum, list) and enum:
            rest = {key: value for key, value in flat.items() if key != "enum"}
            members = [member for member in enum if self.document.fits(member, rest)] or enum
            return members[seed % len(members)]
        for union in ("oneOf", "anyOf"):
            options = flat.get(union)
            if isinstance(options, list) and options:
                return self._branch(flat, union, seed, depth, full=full)
        kind = _type_of(flat, full=full)
        if kind == "object":
            return self._object(flat, seed, depth, full=full)
        if kind == "array":
            return self._array(flat, seed, depth, full=full)
        if kind in ("integer", "number"):
            return _number(flat, seed, integer=kind == "integer")
        if kind == "boolean":
            return seed % 2 == 0
        if kind == "null":
            return None
        return _string(flat, seed)

    def _branch(
        self, flat: dict[str, Any], union: str, seed: int, depth: int, *, full: bool
    ) -> Any:
        """A value of the first option (in preference order) whose sample fits it, and for
        ``oneOf`` no other; else the first option's sample."""
        options = [option for option in flat[union] if isinstance(option, dict | bool)]
        parent = {key: value for key, value in flat.items() if key != union}
        first: list[Any] = []
        for option in sorted(options, key=lambda option: _preference(option, full=full)):
            branch = merge(parent, option)
            value = self.value(branch, seed, depth, full=full)
            if not first:
                first.append(value)
            if self.document.fits(value, branch) and (
                union == "anyOf" or sum(self.document.fits(value, other) for other in options) == 1
            ):
                return value
            if self.remaining <= 0:
                break
        return first[0] if first else None

    def _object(self, flat: dict[str, Any], seed: int, depth: int, *, full: bool) -> dict[str, Any]:
        properties = as_dict(flat.get("properties"))
        required = required_names(flat.get("required"))
        extra = flat.get("additionalProperties", True)
        extra_schema = extra if isinstance(extra, dict | bool) else True
        least = min(as_count(flat.get("minProperties")), VALUE_BUDGET)
        most = int_or_none(flat.get("maxProperties"))
        if full and not properties and isinstance(extra, dict) and most != 0:
            least = max(least, 1)  # a map: one entry shows its shape
        optional = [name for name in properties if name not in required]
        wanted = max(len(optional) if full else 0, least - len(required))
        if most is not None:
            wanted = min(wanted, most - len(required))
        chosen = set(required) | set(optional[: max(wanted, 0)])
        names = [name for name in properties if name in chosen]
        names += [name for name in required if name not in properties]
        value: dict[str, Any] = {}
        for name in names:
            schema = properties.get(name, extra_schema)
            value[name] = self.value(schema, _mix(seed, name), depth + 1, full=full)
        index = 0
        while len(value) < least and extra is not False and self.remaining > 0:
            name = _WORDS[index % len(_WORDS)] + (f"_{index // len(_WORDS)}" if index >= 12 else "")
            index += 1
            if name not in value:
                value[name] = self.value(extra_schema, _mix(seed, name), depth + 1, full=full)
        return value

    def _array(self, flat: dict[str, Any], seed: int, depth: int, *, full: bool) -> list[Any]:
        items = flat.get("items")
        prefix: list[Any]
        if isinstance(items, list):  # draft 7's tuple
            prefix, rest = items, flat.get("additionalItems", True)
        else:
            prefix = as_list(flat.get("prefixItems"))
            rest = items if isinstance(items, dict | bool) else True
        contains = flat.get("contains")
        least = min(as_count(flat.get("minItems")), VALUE_BUDGET)
        count = max(least, len(prefix) or 1) if full else least
        if contains is not None:
            count = max(count, 1)
        if rest is False:
            count = min(count, len(prefix))
        most = int_or_none(flat.get("maxItems"))
        if most is not None:
            count = min(count, max(most, 0))
        unique = flat.get("uniqueItems") is True
        values: list[Any] = []
        seen: set[str] = set()
        retries = 0
        while len(values) < count and self.remaining > 0:
            i = len(values)
            schema = prefix[i] if i < len(prefix) else rest
            if i == 0 and contains is not None:
                schema = {"allOf": [schema, contains]}
            # a retry takes the next seed: enum members, booleans and words come in turn
            item = self.value(schema, _mix(seed, str(i)) + retries, depth + 1, full=full)
            text = json.dumps(item, sort_keys=True)
            if unique and text in seen:
                retries += 1
                if retries > 8:
                    break  # no more distinct items to be had: a shorter array
                continue
            seen.add(text)
            values.append(item)
        return values


def _preference(option: Any, *, full: bool) -> int:
    """The order options are tried in: those that say what they want, then null, then one
    that admits anything (a reference a tool inlined as ``{}``: null is the safer guess);
    where only what is required is filled, null first, then options that refer nowhere
    (the way out of a recursion)."""
    if not isinstance(option, dict) or not option:
        return 3
    if option.get("type") == "null":
        return 2 if full else 0
    return 0 if full or "$ref" not in option else 1


def _type_of(schema: dict[str, Any], *, full: bool) -> str:
    """The type to produce: the schema's (the first that is not null; null where only what
    is required is filled and null is allowed), else what its keywords imply."""
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else [k for k in as_list(kind) if isinstance(k, str)]
    solid = [k for k in kinds if k != "null"]
    nullable = "null" in kinds or schema.get("nullable") is True
    if (nullable and not full) or (kinds and not solid):
        return "null"
    if solid:
        return solid[0]
    if not _OBJECT_WORDS.isdisjoint(schema):
        return "object"
    if not _ARRAY_WORDS.isdisjoint(schema):
        return "array"
    if not _NUMBER_WORDS.isdisjoint(schema):
        return "number"
    return "string"


def _number(schema: dict[str, Any], seed: int, *, integer: bool) -> int | float:
    try:
        value = _bounded_number(schema, seed, integer=integer)
    except (OverflowError, ValueError):  # bounds or a multiple past what a float holds
        return 0
    return value if not isinstance(value, float) or math.isfinite(value) else 0


def _bounded_number(schema: dict[str, Any], seed: int, *, integer: bool) -> int | float:
    low, high = number_bound(schema, lower=True), number_bound(schema, lower=False)
    multiple = number_or_none(schema.get("multipleOf"))
    if multiple is not None and multiple > 0:
        return _multiple(multiple, low, high, seed, integer=integer)
    (lo, lo_open), (hi, hi_open) = low, high
    if integer:
        value = seed % 9 + 1
        if lo is not None:
            value = max(value, math.floor(lo) + 1 if lo_open else math.ceil(lo))
        if hi is not None:
            value = min(value, math.ceil(hi) - 1 if hi_open else math.floor(hi))
        return value
    guess = seed % 9 + 1.5
    if in_bounds(guess, low, high):
        return guess
    if lo is not None and hi is not None:
        return lo if lo == hi else lo / 2 + hi / 2
    if lo is not None:
        return lo + 1 if lo_open else lo
    if hi is None:  # not reached: with no bound at all the guess is inside
        return guess
    return hi - 1 if hi_open else hi


def _multiple(
    multiple: float,
    low: tuple[float | None, bool],
    high: tuple[float | None, bool],
    seed: int,
    *,
    integer: bool,
) -> int | float:
    """A multiple of ``multiple`` inside the bounds near the seed's guess (or the lower
    bound), with no more decimals than ``multiple`` has and dividing by it exactly in
    floating point, as validators check it."""
    start = float(seed % 9 + 1)
    if low[0] is not None:
        start = max(start, low[0])
    if high[0] is not None:
        start = min(start, high[0])
    exponent = Decimal(repr(multiple)).as_tuple().exponent
    digits = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    first = math.ceil(start / multiple)
    steps = (0, 1, -1, 2, -2, 3, -3)
    whole = [math.ceil(start) + step for step in steps]  # a whole number divides best
    for value in [*whole, *(round((first + step) * multiple, digits) for step in steps)]:
        if float(value).is_integer():
            value = int(value)
        exact = float(value / multiple).is_integer()
        if exact and in_bounds(value, low, high) and (not integer or isinstance(value, int)):
            return value
    return round(first * multiple, digits)


def _string(schema: dict[str, Any], seed: int) -> str:
    word = _WORDS[seed % len(_WORDS)]
    least = min(as_count(schema.get("minLength")), MAX_STRING_LENGTH)
    most = int_or_none(schema.get("maxLength"))
    format_ = schema.get("format")
    if isinstance(format_, str) and format_ in _FORMATTED:
        shape = _FORMATTED[format_]
        # a longer word where the format has one (the user of an email, a URI's path)
        text = shape(_lengthened(word, least - len(shape(word)) + len(word)))
        if least <= len(text) and (most is None or len(text) <= most):
            return text
    text = _lengthened(word, least)
    return text[: max(most, 0)] if most is not None else text


def _lengthened(word: str, least: int) -> str:
    return word * (least // len(word) + 1) if len(word) < least else word
