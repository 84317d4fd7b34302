"""The schema sampler behind the simulated upstream's structured replies and tool arguments:
every sample is checked by a real JSON Schema validator (jsonschema-rs, formats included),
the pydantic ones also by pydantic, on hand-written schemas, on the schemas pydantic and the
OpenAI SDK write, and on random schemas."""

from __future__ import annotations

import datetime
import enum
import json
import uuid
from typing import Annotated, Any, Literal

import jsonschema_rs
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AnyUrl, BaseModel, Field, TypeAdapter

from app.upstream.json_sample import MAX_DEPTH, VALUE_BUDGET, sample_json

SEEDS = [0, 1, 7, 2**32 - 1]


def _errors(value: Any, schema: dict[str, Any] | bool) -> list[str]:
    """What a validator finds wrong with ``value`` (after a JSON round trip), formats too."""
    validator = jsonschema_rs.validator_for(schema, validate_formats=True)
    return [error.message for error in validator.iter_errors(json.loads(json.dumps(value)))]


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


# -- hand-written schemas, a keyword or a few at a time -------------------------------------

NODE_DEFS: dict[str, Any] = {
    "node": {
        "type": "object",
        "properties": {
            "value": {"type": "integer"},
            "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
        },
        "required": ["value", "next", "children"],
        "additionalProperties": False,
    }
}

SCHEMAS: list[dict[str, Any] | bool] = [
    True,
    {},
    {"type": "object", "properties": {}},
    {"type": "object"},
    {"properties": {"a": {"type": "string"}}, "required": ["a", "b"]},
    {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
    {"type": "object", "additionalProperties": {"type": "integer", "minimum": 3}},
    {"type": "object", "minProperties": 3, "additionalProperties": {"type": "boolean"}},
    {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "maxProperties": 1},
    {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 2, "required": []},
    {"type": "array", "items": {"type": "integer", "minimum": 10, "multipleOf": 4}},
    {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3},
    {"type": "array", "maxItems": 0},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
    {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "minItems": 2},
    {"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": True, "minItems": 3},
    {"type": "array", "items": {"type": ["string", "integer"]}, "contains": {"type": "integer"}},
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array",
        "items": [{"type": "string"}, {"type": "null"}],
        "additionalItems": False,
        "minItems": 2,
    },
    {"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 7},
    {"type": "integer", "maximum": -3},
    {"type": "integer", "multipleOf": 7, "minimum": 10, "maximum": 20},
    {"type": "number", "minimum": 0.25, "maximum": 0.5},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.3},
    {"type": "number", "multipleOf": 0.01, "minimum": 0.15, "maximum": 1.15},
    {"type": "number", "multipleOf": 0.25, "exclusiveMinimum": 100},
    {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "integer",
        "minimum": 5,
        "exclusiveMinimum": True,
        "maximum": 6,
    },
    {"type": ["null", "boolean"]},
    {"type": ["string", "null"], "minLength": 3},
    {"type": "string", "minLength": 30, "maxLength": 31},
    {"type": "string", "maxLength": 2},
    {"type": "string", "default": "standard"},
    *(
        {"type": "string", "format": format_}
        for format_ in [
            "date-time",
            "date",
            "time",
            "duration",
            "email",
            "uri",
            "uri-reference",
            "hostname",
            "uuid",
            "ipv4",
            "ipv6",
        ]
    ),
    {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083},
    {"type": "string", "format": "email", "minLength": 40},
    {"type": "string", "format": "uri", "minLength": 100, "maxLength": 120},
    {"enum": ["a", 1, None]},
    {"enum": ["x", 2, None], "type": "integer"},
    {"const": {"nested": [1, "two"]}},
    {"oneOf": [{"type": "null"}, {"type": "object", "properties": {"x": {"type": "number"}}}]},
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    {
        "oneOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}},
            {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ]
    },
    {"anyOf": [{"type": "string", "minLength": 2, "maxLength": 1}, {"type": "integer"}]},
    {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "required": ["x"],
        "allOf": [{"properties": {"x": {"minimum": 100}}}, {"required": ["y"]}],
    },
    {
        "allOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}],
        "$defs": {
            "a": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
            "b": {"properties": {"y": {"type": "string", "minLength": 8}}, "required": ["y"]},
        },
    },
    {
        "allOf": [
            {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
            {"anyOf": [{"type": "integer", "minimum": 5}, {"type": "string"}]},
        ]
    },
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"$ref": "#/properties/a", "minimum": 50}},
        "required": ["a", "b"],
    },
    {
        "type": "object",
        "properties": {
            "a~b": {"type": "integer"},
            "c/d": {"$ref": "#/properties/a~0b"},
            "e": {"$ref": "#/properties/c~1d"},
            "f": {"$ref": "#/$defs/with%20space"},
        },
        "required": ["a~b", "c/d", "e", "f"],
        "$defs": {"with space": {"type": "boolean"}},
    },
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$ref": "#/definitions/pair",
        "definitions": {
            "pair": {
                "type": "object",
                "properties": {"left": {"$ref": "#/definitions/leaf"}, "right": {"type": "null"}},
                "required": ["left", "right"],
            },
            "leaf": {"type": "string", "enum": ["l", "r"]},
        },
    },
    {"$ref": "#/$defs/node", "$defs": NODE_DEFS},
    {
        "type": "object",
        "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["kids"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "owner": {"$ref": "#/$defs/person"},
            "steps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "kind": {"type": "string", "enum": ["move", "wait"]},
                        "seconds": {"type": ["integer", "null"], "minimum": 0},
                        "at": {"type": "string", "format": "date-time"},
                        "who": {"type": "string", "format": "email"},
                    },
                    "required": ["kind", "seconds", "at", "who"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["owner", "steps"],
        "$defs": {
            "person": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "id": {"format": "uuid"}},
                "required": ["name", "id"],
            }
        },
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("seed", SEEDS)
def test_the_sample_fits_its_schema(schema: dict[str, Any] | bool, seed: int) -> None:
    value = sample_json(schema, seed)
    assert _errors(value, schema) == []
    assert sample_json(schema, seed) == value


def test_seeds_vary_the_sample_within_the_schema() -> None:
    schema = {"type": "object", "properties": {"w": {"type": "string"}, "n": {"type": "integer"}}}
    assert len({json.dumps(sample_json(schema, seed)) for seed in range(20)}) > 5
    assert {sample_json({"enum": ["a", "b", "c"]}, seed) for seed in range(20)} == {"a", "b", "c"}


def test_an_enum_member_is_one_of_the_schemas_type() -> None:
    assert all(sample_json({"enum": ["x", 2, None], "type": "integer"}, s) == 2 for s in SEEDS)


def test_a_one_of_takes_the_branch_only_its_value_fits() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert all(not float(sample_json(schema, seed)).is_integer() for seed in SEEDS)


def test_a_union_tries_what_says_what_it_wants_then_null_then_anything() -> None:
    # LangChain inlines a recursive model's reference as {}: null is what the model reads
    assert all(sample_json({"anyOf": [{}, {"type": "null"}]}, seed) is None for seed in SEEDS)
    assert all(type(sample_json({"anyOf": [True, {"type": "integer"}]}, s)) is int for s in SEEDS)
    assert sample_json({"anyOf": [{"type": "null"}, {"type": "string"}]}, 0) == "alpha"


def test_an_all_of_of_many_parts_is_merged_into_one() -> None:
    part = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    parts = [{"$ref": "#/$defs/part"}, *({"properties": {"a": {"maximum": -i}}} for i in range(99))]
    schema = {"allOf": parts, "$defs": {"part": part}}
    value = sample_json(schema, 0)
    assert value == {"a": -98}
    assert _errors(value, schema) == []


def test_a_recursive_schema_nests_once_then_takes_the_way_out() -> None:
    value = sample_json({"$ref": "#/$defs/node", "$defs": NODE_DEFS}, 3)
    assert value["next"]["next"] is None  # the second visit takes the null branch
    assert value["children"][0]["children"] == []  # and no item it does not have to
    assert _depth(value) == 4  # the node, its children, a child, the child's children


def test_a_schema_that_requires_endless_nesting_stops_at_max_depth() -> None:
    schema = {
        "$ref": "#/$defs/p",
        "$defs": {
            "p": {"type": "object", "properties": {"p": {"$ref": "#/$defs/p"}}, "required": ["p"]}
        },
    }
    assert _depth(sample_json(schema, 0)) == MAX_DEPTH + 1


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
        {"$ref": "#/$defs/a", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}},
        {"$ref": "#/$defs/missing"},
        {"$ref": "other.json#/x"},
        {"$ref": "#anchor"},
        {"$ref": "#/$defs/list/9", "$defs": {"list": [{"type": "string"}]}},
    ],
)
def test_references_that_lead_nowhere_admit_anything(schema: dict[str, Any]) -> None:
    assert isinstance(sample_json(schema, 0), str)


def test_a_schema_asking_for_a_huge_value_gets_a_bounded_one() -> None:
    schema: dict[str, Any] = {"type": "string", "minLength": 10**9}
    for _ in range(6):
        schema = {"type": "array", "items": schema, "minItems": 10**6}
    text = json.dumps(sample_json(schema, 0))
    assert len(text) < VALUE_BUDGET * 600
    wide = {"type": "object", "minProperties": 10**9, "additionalProperties": {"type": "null"}}
    assert len(sample_json(wide, 0)) < VALUE_BUDGET


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "number", "multipleOf": 5e-324},
        {"type": "integer", "multipleOf": 10**400},
        {"type": "number", "multipleOf": 3, "minimum": 10**400},
        {"type": "number", "exclusiveMinimum": 1e308, "exclusiveMaximum": 1.7e308},
        {"enum": [10**400, 1], "type": "integer", "multipleOf": 7},
    ],
)
def test_numbers_past_a_floats_range_still_give_json(schema: dict[str, Any]) -> None:
    json.dumps(sample_json(schema, 3), allow_nan=False)


def test_unions_nested_in_unions_cost_a_bounded_number_of_checks() -> None:
    schema: dict[str, Any] = {"type": "integer"}
    for level in range(12):
        options = [{"type": "object", "properties": {f"k{i}": schema}} for i in range(3)]
        schema = {"oneOf": options} if level % 2 else {"anyOf": options}
    sample_json(schema, 0)  # returns (pytest's timeout would say otherwise)


# -- what pydantic and the OpenAI SDK write --------------------------------------------------


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    street: str
    city: str = Field(min_length=2, max_length=20)
    postcode: str | None = None


class Tag(BaseModel):
    name: Literal["urgent", "later"]
    weight: float = Field(ge=0, le=1)


class Person(BaseModel):
    name: str
    age: int = Field(ge=0, lt=150)
    home: Address
    work: Address | None = None
    tags: list[Tag] = Field(min_length=1, max_length=3)
    colour: Colour
    priority: Priority
    born: datetime.date
    seen: datetime.datetime
    wakes: datetime.time
    waited: datetime.timedelta
    ident: uuid.UUID
    site: AnyUrl
    nickname: str | None
    kind: Literal["person"] = "person"
    scores: dict[str, int] = {}
    ratio: Annotated[float, Field(gt=0, lt=1, multiple_of=0.05)] = 0.5
    pair: tuple[int, str]


class Node(BaseModel):
    value: int
    children: list[Node] = []
    parent: Node | None = None


class Forest(BaseModel):
    trees: list[Node]
    biggest: Node | None


class Cat(BaseModel):
    pet_type: Literal["cat"]
    meows: int


class Dog(BaseModel):
    pet_type: Literal["dog"]
    barks: float


class Owner(BaseModel):
    pet: Cat | Dog = Field(discriminator="pet_type")
    pets: list[Cat | Dog]
    favourite: Cat | Dog | None


class Department(BaseModel):
    name: str
    head: Employee | None
    staff: list[Employee]


class Employee(BaseModel):
    name: str
    department: Department | None


MODELS: list[type[BaseModel]] = [Address, Person, Node, Forest, Owner, Department]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("seed", SEEDS)
def test_pydantics_schemas_are_filled_as_pydantic_reads_them(
    model: type[BaseModel], seed: int
) -> None:
    schema = model.model_json_schema()
    value = sample_json(schema, seed)
    assert _errors(value, schema) == []
    model.model_validate_json(json.dumps(value))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("seed", SEEDS)
def test_the_openai_sdks_strict_schemas_are_filled(model: type[BaseModel], seed: int) -> None:
    # what `response_format=Model` and `pydantic_function_tool(Model)` send: every property
    # required, no additional ones, $defs kept
    tool: Any = openai.pydantic_function_tool(model)
    schema = tool["function"]["parameters"]
    value = sample_json(schema, seed)
    assert _errors(value, schema) == []
    model.model_validate_json(json.dumps(value))


def test_optional_fields_and_nested_models_are_filled_in() -> None:
    person = Person.model_validate(sample_json(Person.model_json_schema(), 5))
    assert person.work is not None  # an optional field takes its value, not the null
    assert person.nickname is not None
    assert person.scores  # a map gets an entry
    assert person.tags[0].name in ("urgent", "later")


@pytest.mark.parametrize(
    "annotation", [list[int], dict[str, Address], Literal[3, "x"], Node | None]
)
def test_type_adapters_schemas_are_filled(annotation: Any) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    adapter.validate_json(json.dumps(sample_json(adapter.json_schema(), 1)))


# -- random schemas -----------------------------------------------------------------------

FORMATS = ["date-time", "date", "time", "email", "uri", "uuid", "ipv4", "hostname"]
NAMES = st.sampled_from(["a", "b", "c", "d"])
FIRST_NAMES, LAST_NAMES = st.sampled_from(["a", "b"]), st.sampled_from(["c", "d"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from("xyz"))


@st.composite
def strings(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"type": "string", "format": draw(st.sampled_from(FORMATS))}
    schema: dict[str, Any] = {"type": "string"}
    least = draw(st.integers(0, 40))
    if draw(st.booleans()):
        schema["minLength"] = least
    if draw(st.booleans()):
        schema["maxLength"] = least + draw(st.integers(0, 5))
    return schema


@st.composite
def numbers(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["integer", "number"]))
    schema: dict[str, Any] = {"type": kind}
    multiples = [None, 1, 2, 5] if kind == "integer" else [None, 0.5, 0.25, 0.1]
    multiple = draw(st.sampled_from(multiples))
    if multiple is not None:
        schema["multipleOf"] = multiple
    decimals = st.floats(-100, 100).map(lambda f: round(f, 2))
    low = draw(st.one_of(st.none(), st.integers(-100, 100), decimals))
    width = 2 * (multiple or 1) + draw(st.integers(2, 40))  # room for a multiple inside
    if low is not None:
        schema["exclusiveMinimum" if draw(st.booleans()) else "minimum"] = low
    if draw(st.booleans()):
        schema["exclusiveMaximum" if draw(st.booleans()) else "maximum"] = (low or 0) + width
    return schema


LEAVES = st.one_of(
    strings(),
    numbers(),
    st.sampled_from([{"type": "boolean"}, {"type": "null"}, {}, {"type": ["string", "null"]}]),
    st.lists(SCALARS, min_size=1, max_size=4, unique=True).map(lambda m: {"enum": m}),
    SCALARS.map(lambda c: {"const": c}),
)


def _composites(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        _objects(children),
        _arrays(children),
        st.lists(children, min_size=1, max_size=3).map(lambda options: {"anyOf": options}),
        _one_ofs(children),
        st.tuples(_objects(children, FIRST_NAMES), _objects(children, LAST_NAMES)).map(_all_of),
    )


def _all_of(parts: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """Object schemas of different property names as one ``allOf`` (without what would
    count the other part's properties against this one's)."""
    counting = ("additionalProperties", "minProperties", "maxProperties")
    return {"allOf": [{k: v for k, v in p.items() if k not in counting} for p in parts]}


@st.composite
def _objects(
    draw: st.DrawFn,
    children: st.SearchStrategy[dict[str, Any]],
    names: st.SearchStrategy[str] = NAMES,
) -> dict[str, Any]:
    properties = draw(st.dictionaries(names, children, max_size=3))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    schema["required"] = [name for name in properties if draw(st.booleans())]
    extra = draw(st.sampled_from(["absent", "false", "schema"]))
    if extra == "false":
        schema["additionalProperties"] = False
    elif extra == "schema":
        schema["additionalProperties"] = draw(children)
    room = len(properties) if extra == "false" else len(properties) + 2
    least = draw(st.integers(0, room))
    if draw(st.booleans()):
        schema["minProperties"] = least
    if draw(st.booleans()):
        schema["maxProperties"] = max(least, len(schema["required"])) + draw(st.integers(0, 2))
    return schema


@st.composite
def _arrays(draw: st.DrawFn, children: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": draw(children)}
    least = draw(st.integers(0, 3))
    if draw(st.booleans()):
        schema["minItems"] = least
    if draw(st.booleans()):
        schema["maxItems"] = least + draw(st.integers(0, 2))
    return schema


@st.composite
def _one_ofs(draw: st.DrawFn, children: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """A ``oneOf`` whose branches have different types, so exactly one can fit."""
    names = st.sampled_from(["string", "boolean", "null", "array", "object"])
    kinds = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    shapes: dict[str, dict[str, Any]] = {
        "string": {"type": "string"},
        "boolean": {"type": "boolean"},
        "null": {"type": "null"},
        "array": {"type": "array", "items": draw(children)},
        "object": {"type": "object", "properties": {"o": draw(children)}, "required": ["o"]},
    }
    return {"oneOf": [shapes[kind] for kind in kinds]}


@st.composite
def schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A satisfiable schema, some of its parts moved under ``$defs`` behind a ``$ref`` (with
    a sibling keyword now and then)."""
    schema = draw(st.recursive(LEAVES, _composites, max_leaves=12))
    defs: dict[str, Any] = {}

    def hoist(node: Any) -> Any:
        if isinstance(node, list):
            return [hoist(item) for item in node]
        if not isinstance(node, dict):
            return node
        node = {
            key: value if key in ("enum", "const") else hoist(value) for key, value in node.items()
        }
        if "type" not in node or not draw(st.booleans()):
            return node
        name = f"d{len(defs)}"
        defs[name] = node
        sibling = {"description": "moved"} if draw(st.booleans()) else {}
        return {"$ref": f"#/$defs/{name}", **sibling}

    top = hoist(schema)
    return {**top, "$defs": defs} if defs else top


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=schemas(), seed=st.integers(0, 2**32 - 1))
def test_a_random_satisfiable_schemas_sample_fits_it(schema: dict[str, Any], seed: int) -> None:
    value = sample_json(schema, seed)
    assert _errors(value, schema) == [], json.dumps(value)
