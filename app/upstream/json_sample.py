"""A deterministic JSON value that fits a JSON Schema: what the simulated upstream puts in a
tool call's arguments and in a structured reply.

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
from urllib.parse import unquote

Schema = dict[str, Any] | bool

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
CHECK_BUDGET = 4000
"""Schema checks one sample may make choosing branches and enum members; past it a value is
taken as fitting (unions nested in unions must not cost more than a reply)."""
_HOPS = 256  # references and allOf parts followed for one schema (a loop of references ends)
_NESTING = 32  # allOf in allOf

_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: _number_or_none(v) is not None,
    "integer": lambda v: _int_or_none(v) is not None or (isinstance(v, float) and v.is_integer()),
}
_LOWER_BOUNDS = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"})
_UPPER_BOUNDS = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"})
_SUBSCHEMAS = frozenset({"items", "additionalProperties", "additionalItems", "propertyNames"})
_BOTH_APPLY = frozenset({"$ref", "anyOf", "oneOf", "allOf", "not", "contains"})
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
        self.root = root
        self.remaining = VALUE_BUDGET
        self.checks = CHECK_BUDGET
        self.open: list[str] = []  # the references being filled on the current path
        self.hops = _HOPS

    def value(self, schema: Any, seed: int, depth: int, *, full: bool) -> Any:
        if self.remaining <= 0 or depth > MAX_DEPTH:
            return None
        self.remaining -= 1
        flat, refs = self.flatten(schema)
        # a reference already open on this path is a recursion: only what is required from here
        full = full and depth < FULL_DEPTH and not any(ref in self.open for ref in refs)
        self.open += refs
        try:
            return self._flat_value(flat, seed, depth, full=full)
        finally:
            del self.open[len(self.open) - len(refs) :]

    def flatten(self, schema: Any) -> tuple[Schema, list[str]]:
        """``schema`` with its references followed and its ``allOf`` merged in (what does
        not merge, a union in two parts, stays in an ``allOf`` for the branch chosen to take
        in), and the references followed."""
        refs: list[str] = []
        self.hops = _HOPS
        return self._flat(schema, refs, 0), refs

    def _flat(self, schema: Any, refs: list[str], nesting: int) -> Schema:
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and self.hops > 0:
            self.hops -= 1
            refs.append(schema["$ref"])
            siblings = {key: value for key, value in schema.items() if key != "$ref"}
            schema = _merge(self.resolve(schema["$ref"]), siblings)
        if not isinstance(schema, dict) or "$ref" in schema:  # a loop of references
            return schema if isinstance(schema, bool) else True
        parts = schema.get("allOf")
        if not isinstance(parts, list):
            return schema
        merged: Schema = {key: value for key, value in schema.items() if key != "allOf"}
        for part in parts:
            self.hops -= 1
            if self.hops < 0 or nesting >= _NESTING:
                return True
            merged = _merge(merged, self._flat(part, refs, nesting + 1))
        return merged

    def resolve(self, ref: str) -> Schema:
        """What a reference inside the schema points at (``#`` and JSON Pointers); anything
        for one it cannot follow."""
        if not ref.startswith("#"):
            return True
        pointer = unquote(ref[1:])
        node: Any = self.root
        if pointer and not pointer.startswith("/"):
            return True  # an anchor
        for token in pointer.split("/")[1:]:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return True
        return node if isinstance(node, dict | bool) else True

    def _flat_value(self, flat: Schema, seed: int, depth: int, *, full: bool) -> Any:
        if not isinstance(flat, dict):  # `true` admits anything (`false` nothing at all)
            return _WORDS[seed % len(_WORDS)] if flat else None
        if "const" in flat:
            return flat["const"]
        enum = flat.get("enum")
        if isinstance(enum, list) and enum:
            rest = {key: value for key, value in flat.items() if key != "enum"}
            members = [member for member in enum if self.fits(member, rest)] or enum
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
            branch = _merge(parent, option)
            value = self.value(branch, seed, depth, full=full)
            if not first:
                first.append(value)
            if self.fits(value, branch) and (
                union == "anyOf" or sum(self.fits(value, other) for other in options) == 1
            ):
                return value
            if self.remaining <= 0:
                break
        return first[0] if first else None

    def _object(self, flat: dict[str, Any], seed: int, depth: int, *, full: bool) -> dict[str, Any]:
        properties = _dict(flat.get("properties"))
        required = _names(flat.get("required"))
        extra = flat.get("additionalProperties", True)
        extra_schema = extra if isinstance(extra, dict | bool) else True
        least = min(_count(flat.get("minProperties")), VALUE_BUDGET)
        most = _int_or_none(flat.get("maxProperties"))
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
            prefix = _list(flat.get("prefixItems"))
            rest = items if isinstance(items, dict | bool) else True
        contains = flat.get("contains")
        least = min(_count(flat.get("minItems")), VALUE_BUDGET)
        count = max(least, len(prefix) or 1) if full else least
        if contains is not None:
            count = max(count, 1)
        if rest is False:
            count = min(count, len(prefix))
        most = _int_or_none(flat.get("maxItems"))
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

    # -- checking a value against a schema --------------------------------------------------

    def fits(self, value: Any, schema: Any, hops: int = 0) -> bool:
        """Whether ``value`` fits ``schema``, for the keywords this module follows (formats
        are not checked)."""
        if isinstance(schema, bool):
            return schema
        if not isinstance(schema, dict) or hops > _HOPS or self.checks <= 0:
            return True
        self.checks -= 1
        ref = schema.get("$ref")
        if isinstance(ref, str) and not self.fits(value, self.resolve(ref), hops + 1):
            return False
        if not all(self.fits(value, part, hops + 1) for part in _list(schema.get("allOf"))):
            return False
        any_of, one_of = _list(schema.get("anyOf")), _list(schema.get("oneOf"))
        if any_of and not any(self.fits(value, option, hops + 1) for option in any_of):
            return False
        if one_of and sum(self.fits(value, option, hops + 1) for option in one_of) != 1:
            return False
        if "const" in schema and not _same(value, schema["const"]):
            return False
        enum = schema.get("enum")
        if isinstance(enum, list) and not any(_same(value, member) for member in enum):
            return False
        return _has_type(value, schema) and self._fits_kind(value, schema)

    def _fits_kind(self, value: Any, schema: dict[str, Any]) -> bool:
        if isinstance(value, dict):
            return self._object_fits(value, schema)
        if isinstance(value, list):
            return self._array_fits(value, schema)
        if isinstance(value, str):
            return _within(len(value), schema, "minLength", "maxLength")
        return _number_or_none(value) is None or _number_fits(value, schema)

    def _object_fits(self, value: dict[str, Any], schema: dict[str, Any]) -> bool:
        properties = _dict(schema.get("properties"))
        extra = True if "patternProperties" in schema else schema.get("additionalProperties", True)
        if not set(_names(schema.get("required"))) <= value.keys():
            return False
        return _within(len(value), schema, "minProperties", "maxProperties") and all(
            self.fits(item, properties.get(name, extra)) for name, item in value.items()
        )

    def _array_fits(self, value: list[Any], schema: dict[str, Any]) -> bool:
        items = schema.get("items")
        prefix: list[Any]
        if isinstance(items, list):
            prefix, rest = items, schema.get("additionalItems", True)
        else:
            prefix, rest = _list(schema.get("prefixItems")), True if items is None else items
        if not _within(len(value), schema, "minItems", "maxItems"):
            return False
        if schema.get("uniqueItems") is True:
            texts = {json.dumps(item, sort_keys=True) for item in value}
            if len(texts) < len(value):
                return False
        contains = schema.get("contains")
        if contains is not None and not any(self.fits(item, contains) for item in value):
            return False
        return all(
            self.fits(item, prefix[i] if i < len(prefix) else rest) for i, item in enumerate(value)
        )


def _merge(a: Any, b: Any) -> Schema:
    """Two schemas as one that asks what both ask: properties and required names added up,
    types, enums and bounds narrowed, subschemas both applied; what cannot be merged (a
    second ``$ref``, another union) goes into an ``allOf`` for ``flatten`` to take next."""
    if a is False or b is False:
        return False
    if not isinstance(b, dict):
        return a if isinstance(a, dict | bool) else True
    if not isinstance(a, dict):
        return b
    merged = dict(a)
    later: list[dict[str, Any]] = []
    for key, new in b.items():
        if key not in merged:
            merged[key] = new
        elif key in _BOTH_APPLY:
            later.append({key: new})
        else:
            merged[key] = _combined(key, merged[key], new)
    if later:
        merged["allOf"] = [*_list(merged.get("allOf")), *later]
    return merged


def _combined(key: str, old: Any, new: Any) -> Any:
    """A keyword both schemas give, as one; the first schema's where it is an annotation or
    a keyword not merged."""
    if key == "properties" and isinstance(old, dict) and isinstance(new, dict):
        return {
            **old,
            **{name: _both(old[name], s) if name in old else s for name, s in new.items()},
        }
    if key == "required":
        return _names([*_list(old), *_list(new)])
    if key == "type":
        return _common_types(old, new)
    if key == "enum" and isinstance(old, list) and isinstance(new, list):
        return [member for member in old if member in new] or old
    if key in _LOWER_BOUNDS or key in _UPPER_BOUNDS:
        return _tighter(key, old, new)
    if key in _SUBSCHEMAS:
        return False if False in (old, new) else _both(old, new)
    return old


def _both(old: Any, new: Any) -> Any:
    """Two subschemas that both apply: one ``allOf`` (grown, not nested, as parts add up)."""
    if old == new:
        return old
    if isinstance(old, dict) and list(old) == ["allOf"] and isinstance(old["allOf"], list):
        return {"allOf": [*old["allOf"], new]}
    return {"allOf": [old, new]}


def _common_types(old: Any, new: Any) -> Any:
    olds = [old] if isinstance(old, str) else _list(old)
    news = [new] if isinstance(new, str) else _list(new)
    common = [kind for kind in olds if kind in news]
    if not common and "integer" in olds + news and "number" in olds + news:
        common = ["integer"]  # an integer is a number
    return (common[0] if len(common) == 1 else common) if common else new


def _tighter(key: str, old: Any, new: Any) -> Any:
    if _number_or_none(old) is None or _number_or_none(new) is None:
        return old
    return max(old, new) if key in _LOWER_BOUNDS else min(old, new)


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
    kinds = [kind] if isinstance(kind, str) else [k for k in _list(kind) if isinstance(k, str)]
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


def _bound(schema: dict[str, Any], *, lower: bool) -> tuple[float | None, bool]:
    """The tighter of the inclusive and the exclusive bound on one side, and whether it is
    exclusive (draft 4's ``exclusiveMinimum: true`` makes ``minimum`` so)."""
    inclusive = _number_or_none(schema.get("minimum" if lower else "maximum"))
    exclusive = schema.get("exclusiveMinimum" if lower else "exclusiveMaximum")
    if exclusive is True:
        return inclusive, inclusive is not None
    bound = _number_or_none(exclusive)
    if bound is None:
        return inclusive, False
    if inclusive is not None and (bound < inclusive if lower else bound > inclusive):
        return inclusive, False  # the inclusive bound is the tighter
    return bound, True


def _inside(value: float, low: tuple[float | None, bool], high: tuple[float | None, bool]) -> bool:
    (lo, lo_open), (hi, hi_open) = low, high
    above = lo is None or value > lo or (value == lo and not lo_open)
    return above and (hi is None or value < hi or (value == hi and not hi_open))


def _number(schema: dict[str, Any], seed: int, *, integer: bool) -> int | float:
    try:
        value = _bounded_number(schema, seed, integer=integer)
    except (OverflowError, ValueError):  # bounds or a multiple past what a float holds
        return 0
    return value if not isinstance(value, float) or math.isfinite(value) else 0


def _bounded_number(schema: dict[str, Any], seed: int, *, integer: bool) -> int | float:
    low, high = _bound(schema, lower=True), _bound(schema, lower=False)
    multiple = _number_or_none(schema.get("multipleOf"))
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
    if _inside(guess, low, high):
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
        if exact and _inside(value, low, high) and (not integer or isinstance(value, int)):
            return value
    return round(first * multiple, digits)


def _string(schema: dict[str, Any], seed: int) -> str:
    word = _WORDS[seed % len(_WORDS)]
    least = min(_count(schema.get("minLength")), MAX_STRING_LENGTH)
    most = _int_or_none(schema.get("maxLength"))
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


def _has_type(value: Any, schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else _list(kind)
    if not kinds or (value is None and schema.get("nullable") is True):
        return True
    return any(_TYPES.get(k, lambda _: True)(value) for k in kinds if isinstance(k, str))


def _number_fits(value: float, schema: dict[str, Any]) -> bool:
    if not _inside(value, _bound(schema, lower=True), _bound(schema, lower=False)):
        return False
    multiple = _number_or_none(schema.get("multipleOf"))
    try:
        return multiple is None or multiple <= 0 or float(value / multiple).is_integer()
    except OverflowError:
        return True  # past what a float holds: not checked


def _within(count: int, schema: dict[str, Any], least: str, most: str) -> bool:
    high = _int_or_none(schema.get(most))
    return _count(schema.get(least)) <= count and (high is None or count <= high)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    return isinstance(a, bool) == isinstance(b, bool) and bool(a == b)


def _number_or_none(value: Any) -> float | None:
    # bool is an int in Python; in JSON Schema it is not a number
    return None if isinstance(value, bool) or not isinstance(value, int | float) else value


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _count(value: Any) -> int:
    """A ``min…`` keyword's value as a count (0 when it is missing or not a whole number)."""
    return max(_int_or_none(value) or 0, 0)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _names(value: Any) -> list[str]:
    """The property names a ``required`` lists, each once."""
    return list(dict.fromkeys(name for name in _list(value) if isinstance(name, str)))
