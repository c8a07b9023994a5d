"""BFCL function docs as tools: the Berkeley Function Calling Leaderboard's types to JSON Schema.

BFCL describes functions as ``{"name", "description", "parameters": {"type": "dict",
"properties": {...}, "required": [...]}}`` with Python-flavoured types (``dict``, ``float``,
``tuple``, ``any``; Java and JavaScript ones in the ``simple_java`` / ``simple_javascript``
categories). Converted the way BFCL's own function-calling handlers convert them before a
request (``bfcl_eval.model_handler.utils.convert_to_tool`` with ``GORILLA_TO_OPENAPI``, after
``_func_doc_language_specific_pre_processing``)::

    dict -> object   float -> number (+ "format": "float", and the description says so)
    tuple, list -> array   any -> string   bool -> boolean   a missing or unknown type -> string

with the language hint appended to the function's description (" Note that the provided
function is in Python 3 syntax."), and for Java / JavaScript every parameter a string holding
that language's literal (its type said in its description), as BFCL does. One difference: BFCL
rewrites nested types only two levels deep; here every level is rewritten, so each schema is
valid JSON Schema throughout. Dots in names are kept (trierouter allows them; BFCL renames
``a.b`` to ``a_b`` only for APIs that refuse dots, and its checker compares names as given).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BFCL_TYPES",
    "BfclConversionError",
    "bfcl_to_openai",
    "bfcl_to_schema",
    "is_bfcl_function",
]

BFCL_TYPES: dict[str, str] = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "double": "number",
    "char": "string",
    "ArrayList": "array",
    "Array": "array",
    "HashMap": "object",
    "Hashtable": "object",
    "Queue": "array",
    "Stack": "array",
    "Any": "string",
    "String": "string",
    "Bigint": "integer",
}
"""BFCL type name -> JSON Schema type (BFCL's ``GORILLA_TO_OPENAPI``)."""

_HINTS = {
    "python": " Note that the provided function is in Python 3 syntax.",
    "java": " Note that the provided function is in Java 8 SDK syntax.",
    "javascript": " Note that the provided function is in JavaScript syntax.",
}
_FLOAT_NOTE = " This is a float type value."


class BfclConversionError(ValueError):
    """A BFCL function doc is malformed (the message names the function and the field)."""


def is_bfcl_function(obj: Any) -> bool:
    """A BFCL function doc: a ``name`` and ``parameters`` whose top-level type is ``"dict"``."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("name"), str):
        return False
    params = obj.get("parameters")
    return isinstance(params, Mapping) and params.get("type") == "dict"


def _cast(node: dict[str, Any], where: str) -> None:
    """Rewrites one property schema in place, and everything under it."""
    kind = node.get("type")
    if kind is None:
        node["type"] = "string"
    elif isinstance(kind, str):
        if kind == "float":
            node["format"] = "float"
            node["description"] = str(node.get("description", "")) + _FLOAT_NOTE
        node["type"] = BFCL_TYPES.get(kind, "string")
    else:
        raise BfclConversionError(f"{where}: type {kind!r} is not a BFCL type name")
    props = node.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            raise BfclConversionError(f"{where}.properties is not an object")
        for key, sub in props.items():
            if not isinstance(sub, dict):
                raise BfclConversionError(f"{where}.properties.{key} is not an object")
            _cast(sub, f"{where}.properties.{key}")
    items = node.get("items")
    if isinstance(items, dict):
        _cast(items, f"{where}.items")
    elif items is not None:
        raise BfclConversionError(f"{where}.items is not an object")


def _stringly(props: dict[str, Any], language: str) -> None:
    """BFCL's Java / JavaScript pre-processing: each parameter becomes a string holding a
    literal of that language; what the type was goes into the description."""
    name = "Java" if language == "java" else "JavaScript"
    for value in props.values():
        desc = str(value.get("description", ""))
        kind = value.get("type")
        if kind == "any":
            desc += f" This parameter can be of any type of {name} object in string representation."
        else:
            desc += f" This is {name} {kind} type parameter in string representation."
        list_types = ("ArrayList", "Array") if language == "java" else ("array",)
        if kind in list_types and isinstance(value.get("items"), dict):
            desc += (
                f" The list elements are of type {value['items'].get('type')}; they are not in "
                "string representation."
            )
            del value["items"]
        if language == "javascript" and kind == "dict" and "properties" in value:
            desc += (
                " The dictionary entries have the following schema; they are not in string "
                f"representation. {json.dumps(value['properties'])}"
            )
            del value["properties"]
        value["description"] = desc
        value["type"] = "string"


def bfcl_to_schema(parameters: Mapping[str, Any], *, language: str = "python") -> dict[str, Any]:
    """A BFCL ``parameters`` object as the JSON Schema of the arguments (a deep copy)."""
    if not isinstance(parameters, Mapping):
        raise BfclConversionError("parameters is not an object")
    out = copy.deepcopy(dict(parameters))
    props = out.get("properties", {})
    if not isinstance(props, dict):
        raise BfclConversionError("parameters.properties is not an object")
    if language in ("java", "javascript"):
        _stringly(props, language)
    elif language != "python":
        raise BfclConversionError(
            f"language={language!r}: expected 'python', 'java' or 'javascript'"
        )
    for key, sub in props.items():
        if not isinstance(sub, dict):
            raise BfclConversionError(f"parameters.properties.{key} is not an object")
        _cast(sub, f"parameters.properties.{key}")
    out["type"] = "object"
    out["properties"] = props
    return out


def bfcl_to_openai(
    function: Mapping[str, Any], *, language: str = "python", hint: bool = True
) -> dict[str, Any]:
    """A BFCL function doc as an OpenAI tool ``{"type": "function", "function": {...}}``.

    ``hint``: append BFCL's language hint to the description, as BFCL's inference does (its
    checker reads the docs without it).
    """
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise BfclConversionError("a BFCL function doc needs a string 'name'")
    name = function["name"]
    try:
        schema = bfcl_to_schema(function.get("parameters", {}), language=language)
    except BfclConversionError as err:
        raise BfclConversionError(f"function {name!r}: {err}") from None
    desc = str(function.get("description", ""))
    if hint:
        desc += _HINTS.get(language, "")
    return {
        "type": "function",
        "function": {"name": name, "description": desc, "parameters": schema},
    }
