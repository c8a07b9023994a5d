"""The JSON values and schemas the OpenAPI conversion emits, checked (:mod:`.openapi`).

A converted tool's arguments are checked here against Draft 2020-12's rules for the keywords the
conversion emits, in microseconds (``jsonschema``'s own ``check_schema`` takes ~10 ms a tool);
the value helpers (finite numbers, counts, JSON values, a type's values) serve the conversion too.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

__all__ = [
    "SCHEMA_TYPES",
    "InvalidSchema",
    "check_emitted_schema",
    "count_value",
    "finite_number",
    "is_json_value",
    "json_type_ok",
    "pattern_compiles",
]

SCHEMA_TYPES = frozenset({"null", "boolean", "object", "array", "number", "string", "integer"})
_PATTERNS: dict[str, bool] = {}


def pattern_compiles(pattern: str) -> bool:
    """Whether ``re`` compiles ``pattern`` without an error or a warning (cached)."""
    ok = _PATTERNS.get(pattern)
    if ok is None:
        try:
            with warnings.catch_warnings():  # a FutureWarning (say, a possible nested set)
                warnings.simplefilter("error")  # counts as a failure: validators warn too
                re.compile(pattern)
            ok = True
        except (re.error, RecursionError, OverflowError, ValueError, Warning):
            ok = False
        if len(_PATTERNS) < 100_000:
            _PATTERNS[pattern] = ok
    return ok


def is_json_value(value: Any) -> bool:
    """Whether ``value`` is JSON: finite numbers, str keys, all the way down."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if isinstance(value, list):
        return all(is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_json_value(v) for k, v in value.items())
    return False


def json_type_ok(value: Any, types: list[str] | None) -> bool:
    """Whether ``value`` is of one of the JSON Schema ``types`` (any when ``None``)."""
    if types is None:
        return True
    if value is None:
        kind = {"null"}
    elif isinstance(value, bool):
        kind = {"boolean"}
    elif isinstance(value, int):
        kind = {"integer", "number"}
    elif isinstance(value, float):
        kind = {"number", "integer"} if value.is_integer() else {"number"}
    elif isinstance(value, str):
        kind = {"string"}
    elif isinstance(value, list):
        kind = {"array"}
    else:
        kind = {"object"}
    return bool(kind.intersection(types))


def finite_number(value: Any) -> int | float | None:
    """``value`` when it is a finite int or float (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value


def count_value(value: Any) -> int | None:
    """``value`` as a non-negative integer count, else ``None``."""
    n = finite_number(value)
    if n is None or n < 0 or (isinstance(n, float) and not n.is_integer()):
        return None
    return int(n)


class InvalidSchema(Exception):
    """A converted schema breaks the rules :func:`check_emitted_schema` applies."""


_NUMBER_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_COUNT_KEYS = frozenset({"minLength", "maxLength", "minItems", "maxItems"})
_STRING_KEYS = frozenset({"format", "description", "title"})
_ANY_KEYS = frozenset({"const", "default"})
_LIST_KEYS = frozenset({"anyOf", "oneOf", "allOf"})


def check_emitted_schema(schema: Any, checked: dict[int, Any] | None = None) -> None:
    """Raise :class:`InvalidSchema` unless ``schema`` is a Draft 2020-12 schema made of the
    keywords the conversion emits, each as the metaschema types it (``check_schema``'s rules
    for this subset, in microseconds: ``jsonschema``'s own check takes ~10 ms a tool)."""
    if isinstance(schema, bool) or (checked is not None and id(schema) in checked):
        return
    if not isinstance(schema, dict):
        raise InvalidSchema(f"not a schema: {schema!r:.80}")
    for key, value in schema.items():
        if key == "type":
            listed = value if isinstance(value, list) else [value]
            if not listed or len(set(map(str, listed))) != len(listed):
                raise InvalidSchema(f"bad type {value!r}")
            if not all(isinstance(t, str) and t in SCHEMA_TYPES for t in listed):
                raise InvalidSchema(f"bad type {value!r}")
        elif key == "properties":
            if not isinstance(value, dict):
                raise InvalidSchema("properties is not an object")
            for sub in value.values():
                check_emitted_schema(sub, checked)
        elif key in ("items", "additionalProperties"):
            check_emitted_schema(value, checked)
        elif key in _LIST_KEYS:
            if not isinstance(value, list) or not value:
                raise InvalidSchema(f"{key} is not a non-empty array")
            for sub in value:
                check_emitted_schema(sub, checked)
        elif key == "required":
            ok = isinstance(value, list) and all(isinstance(r, str) for r in value)
            if not ok or len(set(value)) != len(value):
                raise InvalidSchema(f"bad required {value!r:.80}")
        elif key == "enum":
            if not isinstance(value, list) or not is_json_value(value):
                raise InvalidSchema("bad enum")
        elif key in _ANY_KEYS:
            if not is_json_value(value):
                raise InvalidSchema(f"{key} is not JSON")
        elif key in _STRING_KEYS:
            if not isinstance(value, str):
                raise InvalidSchema(f"{key} is not a string")
        elif key == "pattern":
            if not isinstance(value, str) or not pattern_compiles(value):
                raise InvalidSchema(f"bad pattern {value!r:.80}")
        elif key in _NUMBER_KEYS:
            if finite_number(value) is None:
                raise InvalidSchema(f"{key} is not a number")
        elif key in _COUNT_KEYS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidSchema(f"{key} is not a non-negative integer")
        elif key == "uniqueItems":
            if not isinstance(value, bool):
                raise InvalidSchema("uniqueItems is not a boolean")
        else:
            raise InvalidSchema(f"unexpected keyword {key!r}")
    if checked is not None:
        checked[id(schema)] = schema  # kept alive, so the id is not reused
