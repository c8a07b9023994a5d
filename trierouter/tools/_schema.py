"""JSON Schema checks for tool parameters, fast enough for registries of 100,000+ tools.

``jsonschema``'s ``check_schema`` costs about 1 ms per schema, and real registries rarely share
whole schemas (property names and descriptions differ). Validity against the metaschema does not
depend on those free-form parts, though: a schema is checked through its *skeleton*, the same
schema with annotation strings emptied, property maps reduced to their distinct subschemas and
value lists (``enum``, ``required``, ``examples``) emptied, each only after its type was checked to
be what the metaschema demands. Skeletons repeat massively and are checked once, cached. A
skeleton that fails is never trusted: the original schema is then checked by ``jsonschema`` itself,
which also words the error.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from trierouter.errors import missing

__all__ = ["schema_problem"]

# keywords whose value is one schema / a map of name -> schema / a list of schemas (2020-12 and
# the draft-07 spellings that a ``$schema`` may select)
_ONE = frozenset(
    {
        "additionalProperties",
        "items",
        "additionalItems",
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
_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
_TEXT = frozenset({"description", "title", "$comment", "format"})  # any string is valid


def _skeleton(node: Any) -> Any:
    """The schema with every part the metaschema does not constrain made uniform."""
    if not isinstance(node, dict):
        return node  # booleans stay; anything else stays invalid as it is
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _TEXT and isinstance(value, str):
            out[key] = ""
        elif key in _ONE:
            out[key] = _skeleton(value)
        elif key in _MAP and isinstance(value, dict):
            distinct: dict[str, Any] = {}
            for sub in value.values():
                skel = _skeleton(sub)
                distinct.setdefault(json.dumps(skel, sort_keys=True), skel)
            out[key] = {str(i): s for i, s in enumerate(distinct.values())}
        elif key in _LIST and isinstance(value, list):
            out[key] = [_skeleton(v) for v in value]
        elif key in ("default", "const"):
            out[key] = None  # any JSON value is valid
        elif key in ("enum", "examples") and isinstance(value, list):
            out[key] = []  # 2020-12: any array
        elif (
            key == "required"
            and isinstance(value, list)
            and all(isinstance(v, str) for v in value)
            and len(set(value)) == len(value)
        ):
            out[key] = []
        else:
            out[key] = value
    return out


@lru_cache(maxsize=1 << 16)
def _checked(text: str) -> str | None:
    """``None`` if the schema in ``text`` is valid for the metaschema it names, else the error."""
    try:
        from jsonschema import Draft202012Validator, SchemaError, validators
    except ImportError as err:  # pragma: no cover - the tools extra installs it
        raise missing("jsonschema", "tools") from err
    schema = json.loads(text)
    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        return f"{err.message} (at {where})"
    return None


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (draft 2020-12 unless its ``$schema`` names
    another), or ``None`` if it is."""
    try:
        # the skeleton's rules are those of the 2020-12 metaschema; other drafts are checked whole
        if schema.get("$schema", _DRAFT_2020_12) in (_DRAFT_2020_12, _DRAFT_2020_12 + "#"):
            skeleton = json.dumps(_skeleton(schema), sort_keys=True)
            if _checked(skeleton) is None:
                return None
        return _checked(json.dumps(schema, sort_keys=True))
    except RecursionError:
        return "nested too deeply"
