"""The JSON Schema plumbing under the schema sampler (``json_sample``): references followed,
``allOf`` merged, and whether a value fits a schema.

What it owns:

- references inside one schema document (``$ref`` to ``#``, ``#/$defs/…``, ``#/definitions/…``
  or any other JSON Pointer into it, escapes undone), with the keywords beside a ``$ref``
  applied too; a reference by anchor or to another document admits anything, and a loop of
  references ends;
- ``allOf`` and a reference's siblings merged into one schema (``merge``): properties and
  required names added up, types, enums and bounds narrowed, subschemas both applied; what
  does not merge (a second reference, another union) stays in an ``allOf``;
- ``fits``: whether a value fits a schema, for the keywords the sampler follows (formats,
  ``pattern``, ``not`` and ``if``/``then``/``else`` are not checked), within ``CHECK_BUDGET``;
- reading keywords: numeric bounds in either draft's form, counts, ``required`` names.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

__all__ = [
    "CHECK_BUDGET",
    "Schema",
    "SchemaDocument",
    "as_count",
    "as_dict",
    "as_list",
    "in_bounds",
    "int_or_none",
    "merge",
    "number_bound",
    "number_or_none",
    "required_names",
]

Schema = dict[str, Any] | bool

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
    "number": lambda v: number_or_none(v) is not None,
    "integer": lambda v: int_or_none(v) is not None or (isinstance(v, float) and v.is_integer()),
}
_LOWER_BOUNDS = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"})
_UPPER_BOUNDS = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"})
_SUBSCHEMAS = frozenset({"items", "additionalProperties", "additionalItems", "propertyNames"})
_BOTH_APPLY = frozenset({"$ref", "anyOf", "oneOf", "allOf", "not", "contains"})


class SchemaDocument:
    """A schema and all its root reaches, with the budgets one sample spends on it:
    references and ``allOf`` parts followed (``_HOPS`` a flattening) and checks made
    (``CHECK_BUDGET`` in all)."""

    def __init__(self, root: Schema) -> None:
        self.root = root
        self.checks = CHECK_BUDGET
        self.hops = _HOPS

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
            schema = merge(self.resolve(schema["$ref"]), siblings)
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
            merged = merge(merged, self._flat(part, refs, nesting + 1))
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

    def fits(self, value: Any, schema: Any, hops: int = 0) -> bool:
        """Whether ``value`` fits ``schema``, for the keywords the sampler follows (formats
        are not checked)."""
        if isinstance(schema, bool):
            return schema
        if not isinstance(schema, dict) or hops > _HOPS or self.checks <= 0:
            return True
        self.checks -= 1
        ref = schema.get("$ref")
        if isinstance(ref, str) and not self.fits(value, self.resolve(ref), hops + 1):
            return False
        if not all(self.fits(value, part, hops + 1) for part in as_list(schema.get("allOf"))):
            return False
        any_of, one_of = as_list(schema.get("anyOf")), as_list(schema.get("oneOf"))
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
        return number_or_none(value) is None or _number_fits(value, schema)

    def _object_fits(self, value: dict[str, Any], schema: dict[str, Any]) -> bool:
        properties = as_dict(schema.get("properties"))
        extra = True if "patternProperties" in schema else schema.get("additionalProperties", True)
        if not set(required_names(schema.get("required"))) <= value.keys():
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
            prefix, rest = as_list(schema.get("prefixItems")), True if items is None else items
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


# -- merging two schemas into one ------------------------------------------------------------


def merge(a: Any, b: Any) -> Schema:
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
        merged["allOf"] = [*as_list(merged.get("allOf")), *later]
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
        return required_names([*as_list(old), *as_list(new)])
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
    olds = [old] if isinstance(old, str) else as_list(old)
    news = [new] if isinstance(new, str) else as_list(new)
    common = [kind for kind in olds if kind in news]
    if not common and "integer" in olds + news and "number" in olds + news:
        common = ["integer"]  # an integer is a number
    return (common[0] if len(common) == 1 else common) if common else new


def _tighter(key: str, old: Any, new: Any) -> Any:
    if number_or_none(old) is None or number_or_none(new) is None:
        return old
    return max(old, new) if key in _LOWER_BOUNDS else min(old, new)


# -- checks of one keyword or a few -----------------------------------------------------------


def _has_type(value: Any, schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else as_list(kind)
    if not kinds or (value is None and schema.get("nullable") is True):
        return True
    return any(_TYPES.get(k, lambda _: True)(value) for k in kinds if isinstance(k, str))


def _number_fits(value: float, schema: dict[str, Any]) -> bool:
    if not in_bounds(value, number_bound(schema, lower=True), number_bound(schema, lower=False)):
        return False
    multiple = number_or_none(schema.get("multipleOf"))
    try:
        return multiple is None or multiple <= 0 or float(value / multiple).is_integer()
    except OverflowError:
        return True  # past what a float holds: not checked


def _within(count: int, schema: dict[str, Any], least: str, most: str) -> bool:
    high = int_or_none(schema.get(most))
    return as_count(schema.get(least)) <= count and (high is None or count <= high)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    return isinstance(a, bool) == isinstance(b, bool) and bool(a == b)


def number_bound(schema: dict[str, Any], *, lower: bool) -> tuple[float | None, bool]:
    """The tighter of the inclusive and the exclusive bound on one side, and whether it is
    exclusive (draft 4's ``exclusiveMinimum: true`` makes ``minimum`` so)."""
    inclusive = number_or_none(schema.get("minimum" if lower else "maximum"))
    exclusive = schema.get("exclusiveMinimum" if lower else "exclusiveMaximum")
    if exclusive is True:
        return inclusive, inclusive is not None
    bound = number_or_none(exclusive)
    if bound is None:
        return inclusive, False
    if inclusive is not None and (bound < inclusive if lower else bound > inclusive):
        return inclusive, False  # the inclusive bound is the tighter
    return bound, True


def in_bounds(
    value: float, low: tuple[float | None, bool], high: tuple[float | None, bool]
) -> bool:
    """Whether ``value`` is inside two ``number_bound`` results."""
    (lo, lo_open), (hi, hi_open) = low, high
    above = lo is None or value > lo or (value == lo and not lo_open)
    return above and (hi is None or value < hi or (value == hi and not hi_open))


# -- keyword values read as what they should be -----------------------------------------------


def number_or_none(value: Any) -> float | None:
    # bool is an int in Python; in JSON Schema it is not a number
    return None if isinstance(value, bool) or not isinstance(value, int | float) else value


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_count(value: Any) -> int:
    """A ``min…`` keyword's value as a count (0 when it is missing or not a whole number)."""
    return max(int_or_none(value) or 0, 0)


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def required_names(value: Any) -> list[str]:
    """The property names a ``required`` lists, each once."""
    return list(dict.fromkeys(name for name in as_list(value) if isinstance(name, str)))
