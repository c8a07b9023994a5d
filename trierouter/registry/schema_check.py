"""JSON Schema checks for tool parameters, fast enough for registries of 100,000+ tools.

``jsonschema``'s ``check_schema`` costs about 1 ms per schema, and the schemas of real registries
are rarely identical (property names and descriptions differ). In draft 2020-12 the metaschema
applies itself to every subschema (``properties`` values, ``items``, ``anyOf`` members ...), so a
schema is valid exactly when each of its nodes is valid with its subschemas replaced by ``{}``
(draft 7's metaschema works the same way). Those *shallow nodes* are also made uniform where the
metaschema allows anything (annotation strings, ``default``, ``const``, ``enum`` and
``required`` lists once their type is right), and then repeat massively: each distinct one is
checked by ``jsonschema`` once and cached.

A decomposition that finds a problem is never trusted on its own: the whole schema is then checked
by ``jsonschema``, which decides and words the error. Schemas that name another draft in
``$schema`` (other than 2020-12 and draft 7) are always checked whole.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from trierouter.errors import missing

__all__ = ["schema_problem"]

# drafts whose metaschema applies itself to every subschema with these same rules: a schema's
# nodes are checked one by one with that draft's metaschema ("$schema" absent: 2020-12)
_DIALECTS = {
    "https://json-schema.org/draft/2020-12/schema": "2020-12",
    "https://json-schema.org/draft/2020-12/schema#": "2020-12",
    "http://json-schema.org/draft-07/schema": "7",
    "http://json-schema.org/draft-07/schema#": "7",
}
# the 2020-12 keywords whose value is one schema / a map of name -> schema / a list of schemas
_ONE = frozenset(
    {
        "additionalProperties",
        "items",
        "contains",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    }
)
_MAP = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_TEXT = frozenset({"description", "title", "$comment", "format"})  # any string is valid
_ANY = frozenset({"default", "const"})  # any JSON value is valid
_ARRAY = frozenset({"enum", "examples"})  # any array is valid
_SCALARS = (str, int, float, bool, type(None))

_VALID_NODES: set[tuple[Any, ...]] = set()  # shallow nodes known valid
_CACHE_LIMIT = 1 << 17
_VALID_SCHEMAS: set[str] = set()  # whole schemas known valid, by their JSON text
_SCHEMA_CACHE_CHARS = 1 << 25  # ~32 MB of JSON text at most
_valid_schema_chars = 0


def _subschema(value: Any) -> bool:
    return type(value) is dict or type(value) is bool


def _node_key(node: dict[str, Any], todo: list[dict[str, Any]]) -> tuple[Any, ...]:
    """The shallow node as a hashable key; pushes its dict subschemas onto ``todo``."""
    items: list[tuple[Any, ...]] = []
    for key, value in node.items():
        if key in _ONE and _subschema(value):
            if type(value) is dict:
                todo.append(value)
            items.append((key, "one"))
        elif key in _MAP and type(value) is dict and all(map(_subschema, value.values())):
            todo.extend(v for v in value.values() if type(v) is dict)
            items.append((key, "map"))
        elif key in _LIST and type(value) is list and value and all(map(_subschema, value)):
            todo.extend(v for v in value if type(v) is dict)
            items.append((key, "list"))
        elif key in _TEXT and type(value) is str:
            items.append((key, "text"))
        elif key in _ANY:
            items.append((key, "any"))
        elif (key in _ARRAY and type(value) is list) or (
            key == "required"
            and type(value) is list
            and all(type(v) is str for v in value)
            and len(set(value)) == len(value)
        ):
            items.append((key, "array"))
        elif isinstance(value, _SCALARS):
            items.append((key, "=", type(value).__name__, value))
        else:
            items.append((key, "json", json.dumps(value, sort_keys=True)))
    items.sort()
    return tuple(items)


def _node_from_key(key: tuple[Any, ...]) -> dict[str, Any]:
    shapes: dict[str, Any] = {
        "one": {},
        "map": {"x": {}},
        "list": [{}],
        "text": "",
        "any": None,
        "array": [],
    }
    out: dict[str, Any] = {}
    for item in key:
        name, kind = item[0], item[1]
        if kind == "=":
            out[name] = item[3]
        elif kind == "json":
            out[name] = json.loads(item[2])
        else:
            out[name] = shapes[kind]
    return out


@lru_cache(maxsize=1 << 12)
def _checked(text: str, dialect: str | None = None) -> str | None:
    """``None`` if the schema in ``text`` is valid, else the error. Checked against the
    metaschema it names, or ``dialect``'s for a shallow node (by its whole schema's rules)."""
    try:
        from jsonschema import Draft7Validator, Draft202012Validator, SchemaError, validators
    except ImportError as err:  # pragma: no cover - the tools extra installs it
        raise missing("jsonschema", "tools") from err
    schema = json.loads(text)
    if dialect is None:
        cls = validators.validator_for(schema, Draft202012Validator)
    else:
        cls = Draft7Validator if dialect == "7" else Draft202012Validator
    try:
        cls.check_schema(schema)
    except SchemaError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        return f"{err.message} (at {where})"
    return None


def _nodes_valid(schema: dict[str, Any], dialect: str) -> bool:
    todo = [schema]
    while todo:
        key = (dialect, *_node_key(todo.pop(), todo))
        if key in _VALID_NODES:
            continue
        node = json.dumps(_node_from_key(key[1:]), sort_keys=True)
        if _checked(node, dialect) is not None:
            return False
        if len(_VALID_NODES) >= _CACHE_LIMIT:
            _VALID_NODES.clear()
        _VALID_NODES.add(key)
    return True


def schema_problem(schema: dict[str, Any], text: str | None = None) -> str | None:
    """Why ``schema`` (plain JSON; ``text`` its JSON, a cache key, if at hand) is not a valid
    JSON Schema (draft 2020-12 unless its ``$schema`` names another), or ``None`` if it is."""
    if text is not None and text in _VALID_SCHEMAS:
        return None
    try:
        dialect = _DIALECTS.get(
            schema.get("$schema", "https://json-schema.org/draft/2020-12/schema")
        )
        if dialect is not None and _nodes_valid(schema, dialect):
            problem = None
        else:
            problem = _checked(json.dumps(schema, sort_keys=True))
    except RecursionError:
        return "nested too deeply"
    if problem is None and text is not None:
        global _valid_schema_chars
        if _valid_schema_chars + len(text) > _SCHEMA_CACHE_CHARS:
            _VALID_SCHEMAS.clear()
            _valid_schema_chars = 0
        _VALID_SCHEMAS.add(text)
        _valid_schema_chars += len(text)
    return problem


def clear_caches() -> None:
    """Forgets every schema checked so far (benchmarks measure the cold path with it)."""
    global _valid_schema_chars
    _VALID_NODES.clear()
    _VALID_SCHEMAS.clear()
    _valid_schema_chars = 0
    _checked.cache_clear()
