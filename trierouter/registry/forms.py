"""The input forms of a tool registry: OpenAI, Anthropic and MCP dicts, BFCL function docs
(:mod:`trierouter.registry.bfcl_schema`), pydantic models, LangChain tools and plain Python
callables, each converted to a :class:`~trierouter.registry.tool.Tool` that is not validated
yet (the registry validates every tool of a call before it registers any).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

from trierouter.errors import missing
from trierouter.registry.bfcl_schema import BfclConversionError, bfcl_to_openai, is_bfcl_function
from trierouter.registry.docstrings import parse_docstring
from trierouter.registry.tool import Tool

__all__ = [
    "ConversionError",
    "field_of",
    "from_anthropic",
    "from_bfcl",
    "from_callable",
    "from_dict",
    "from_langchain",
    "from_mcp",
    "from_openai",
    "from_pydantic",
    "is_langchain_tool",
    "is_pydantic_model",
]


class ConversionError(Exception):
    """Internal: a tool could not be read; the registry rewords it with the tool's position."""

    def __init__(self, message: str, *, name: str | None = None):
        super().__init__(message)
        self.name = name


def _tool(
    name: Any,
    description: Any,
    parameters: Any,
    *,
    title: Any = None,
    source: str,
    strict: Any = None,
) -> Tool:

    if not isinstance(name, str):
        raise ConversionError(f"its name must be a string, got {type(name).__name__}")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise ConversionError(
            f"its description must be a string, got {type(description).__name__}", name=name
        )
    if title is not None and not isinstance(title, str):
        raise ConversionError(f"its title must be a string, got {type(title).__name__}", name=name)
    if strict is not None and not isinstance(strict, bool):
        raise ConversionError(
            f"its strict flag must be true, false or absent, got {strict!r:.40}", name=name
        )
    return Tool(name, description, parameters, title=title, source=source, strict=strict)


def field_of(obj: Any, *keys: str) -> Any:
    """The first of ``keys`` present on a mapping or as an attribute (camelCase or snake_case)."""
    for key in keys:
        if isinstance(obj, Mapping):
            if key in obj:
                return obj[key]
        elif hasattr(obj, key):
            return getattr(obj, key)
    return None


# -- dict forms ----------------------------------------------------------------------------------
def from_openai(spec: Any) -> Tool:
    """``{"type": "function", "function": {name, description, parameters}}``; also the flat
    Responses-API form ``{"type": "function", "name": ..., "parameters": ...}`` and the legacy
    ``functions=[{name, description, parameters}]`` form."""
    if not isinstance(spec, Mapping):
        raise ConversionError(f"an OpenAI tool is a dict, got {type(spec).__name__}")
    fn = spec.get("function") if "function" in spec else spec
    if spec.get("type", "function") != "function" or not isinstance(fn, Mapping):
        raise ConversionError(
            'an OpenAI tool is {"type": "function", "function": {"name": ..., '
            '"description": ..., "parameters": {...}}}',
            name=_name_hint(spec),
        )
    if "name" not in fn:
        raise ConversionError("an OpenAI tool needs function.name")
    return _tool(
        fn["name"],
        fn.get("description"),
        fn.get("parameters"),
        source="openai",
        strict=fn.get("strict"),
    )


def from_anthropic(spec: Any) -> Tool:
    """``{"name", "description", "input_schema"}`` (Anthropic Messages API)."""
    if not isinstance(spec, Mapping) or "name" not in spec:
        raise ConversionError(
            'an Anthropic tool is {"name": ..., "description": ..., "input_schema": {...}}',
            name=_name_hint(spec),
        )
    return _tool(
        spec["name"],
        spec.get("description"),
        spec.get("input_schema"),
        source="anthropic",
        strict=spec.get("strict"),
    )


def from_mcp(spec: Any) -> Tool:
    """An MCP ``Tool`` (``name``, ``title``, ``description``, ``inputSchema``), as the dict of a
    ``tools/list`` result or as the ``mcp`` package's object (either attribute spelling)."""
    name = field_of(spec, "name")
    if name is None:
        raise ConversionError('an MCP tool needs a "name"')
    params = field_of(spec, "inputSchema", "input_schema")
    title = field_of(spec, "title")
    return _tool(name, field_of(spec, "description"), params, title=title, source="mcp")


def from_bfcl(spec: Any, *, language: str = "python", hint: bool = True) -> Tool:
    """A BFCL function doc (``"parameters": {"type": "dict", ...}`` with BFCL's types), converted
    as BFCL's own handlers convert it (see :mod:`trierouter.registry.bfcl_schema`)."""
    try:
        fn = bfcl_to_openai(spec, language=language, hint=hint)["function"]
    except BfclConversionError as err:
        raise ConversionError(str(err), name=_name_hint(spec)) from None
    return _tool(fn["name"], fn["description"], fn["parameters"], source="bfcl")


def from_dict(spec: Mapping[str, Any]) -> Tool:
    """Auto-detects the dict form by its keys (OpenAI, Anthropic, MCP, BFCL, our own ``save``
    rows)."""
    if is_bfcl_function(spec):
        return from_bfcl(spec)
    if spec.get("type") == "function" or ("function" in spec and "name" not in spec):
        return from_openai(spec)
    if "input_schema" in spec:
        return from_anthropic(spec)
    if "inputSchema" in spec:
        return from_mcp(spec)
    if "tools" in spec and "name" not in spec:
        raise ConversionError(
            "this looks like an MCP tools/list result, not a tool: use add_mcp(result)"
        )
    if "name" in spec and set(spec) <= {
        "name", "description", "parameters", "title", "source", "strict"
    }:  # fmt: skip
        source = spec.get("source", "dict")
        if not isinstance(source, str):
            raise ConversionError("its source must be a string", name=_name_hint(spec))
        return _tool(
            spec["name"],
            spec.get("description"),
            spec.get("parameters"),
            title=spec.get("title"),
            source=source,
            strict=spec.get("strict"),
        )
    raise ConversionError(
        f"a dict with keys {sorted(spec)[:8]} is no known tool form: expected OpenAI "
        '{"type": "function", "function": {...}}, Anthropic {"name", "input_schema"}, MCP '
        '{"name", "inputSchema"}, BFCL {"name", "parameters": {"type": "dict", ...}} or '
        '{"name", "description", "parameters"}',
        name=_name_hint(spec),
    )


def _name_hint(spec: Any) -> str | None:
    if isinstance(spec, Mapping):
        fn = spec.get("function")
        for source in (spec, fn if isinstance(fn, Mapping) else {}):
            if isinstance(source.get("name"), str):
                return str(source["name"])
    return None


# -- pydantic ------------------------------------------------------------------------------------
def is_pydantic_model(obj: Any) -> bool:
    """A pydantic ``BaseModel`` subclass (checked without importing pydantic)."""
    return (
        isinstance(obj, type)
        and hasattr(obj, "model_json_schema")
        and hasattr(obj, "model_fields")
        and any(c.__module__.startswith("pydantic") for c in obj.__mro__[1:])
    )


def _object_schema_of_model(model: Any) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema()
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and len(schema) <= 2:
        # a recursive model's schema is a bare $ref to itself: inline that one level
        defs = schema.get("$defs", {})
        schema = {**defs.get(ref.removeprefix("#/$defs/"), {}), "$defs": defs}
    return schema


def from_pydantic(model: Any, *, name: str | None = None, description: str | None = None) -> Tool:
    """A pydantic model class: its fields are the parameters; name and description default to the
    class name and docstring (the shape of ``openai.pydantic_function_tool``)."""
    if not is_pydantic_model(model):
        raise ConversionError(f"expected a pydantic BaseModel subclass, got {model!r}")
    schema = _object_schema_of_model(model)
    schema.pop("title", None)
    doc = schema.pop("description", None)
    return _tool(
        name if name is not None else model.__name__,
        description if description is not None else doc,
        schema,
        source="pydantic",
    )


# -- LangChain (duck-typed) ----------------------------------------------------------------------
def is_langchain_tool(obj: Any) -> bool:
    """A LangChain ``BaseTool`` or anything shaped like one: a ``name``, a ``description`` and one
    of ``tool_call_schema`` / ``args_schema`` / ``get_input_schema``."""
    return (
        not isinstance(obj, type)
        and isinstance(getattr(obj, "name", None), str)
        and hasattr(obj, "description")
        and any(hasattr(obj, a) for a in ("tool_call_schema", "args_schema", "get_input_schema"))
    )


def _schema_from(obj: Any) -> dict[str, Any] | None:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return dict(obj)
    if is_pydantic_model(obj):
        return _object_schema_of_model(obj)
    if hasattr(obj, "model_json_schema"):  # a pydantic v1 shim or a look-alike
        schema: dict[str, Any] = obj.model_json_schema()
        return schema
    if hasattr(obj, "schema") and callable(obj.schema):  # pydantic.v1 models
        v1: dict[str, Any] = obj.schema()
        return v1
    return None


def from_langchain(tool: Any) -> Tool:
    """A LangChain tool (``@tool`` function, ``StructuredTool``, ``BaseTool`` subclass). Uses
    ``tool_call_schema`` (the arguments a model fills, injected ones left out), then
    ``args_schema``, then ``get_input_schema()``; no import of LangChain."""
    if not is_langchain_tool(tool):
        raise ConversionError(
            "expected a LangChain tool (an object with .name, .description and .args_schema / "
            f".tool_call_schema / .get_input_schema()), got {type(tool).__name__}"
        )
    schema = None
    for attr in ("tool_call_schema", "args_schema"):
        schema = _schema_from(getattr(tool, attr, None))
        if schema is not None:
            break
    if schema is None and hasattr(tool, "get_input_schema"):
        schema = _schema_from(tool.get_input_schema())
    if schema is None:
        raise ConversionError(
            "its argument schema could not be read (tool_call_schema / args_schema / "
            "get_input_schema() gave neither a dict nor a pydantic model)",
            name=tool.name,
        )
    schema.pop("title", None)
    schema.pop("description", None)  # a copy of the tool's description
    return _tool(tool.name, tool.description, schema, source="langchain")


# -- plain callables -----------------------------------------------------------------------------


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    target: Any = fn
    if isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isfunction(target) or inspect.ismethod(target)) and callable(target):
        target = target.__call__
    return typing.get_type_hints(target, include_extras=True)


def _doc(fn: Any) -> str | None:
    """The docstring that describes calling ``fn``."""
    if isinstance(fn, functools.partial):
        return _doc(fn.func)
    if inspect.isroutine(fn):
        return inspect.getdoc(fn)
    return inspect.getdoc(fn.__call__) or inspect.getdoc(type(fn))  # a callable object


def from_callable(
    fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> Tool:
    """A plain function (or method, partial, callable object): its signature and type hints give
    the parameters (through pydantic, as ``pydantic.validate_call`` validates them), its docstring
    the description (first paragraph) and each parameter's description. Parameters with a default
    are optional; ``*args`` / ``**kwargs`` are left out (a call passes arguments by name)."""
    if not callable(fn):
        raise ConversionError(f"expected a callable, got {type(fn).__name__}")
    fname = name if name is not None else getattr(fn, "__name__", None)
    if fname is None and isinstance(fn, functools.partial):
        fname = getattr(fn.func, "__name__", None)
    if fname is None and not inspect.isroutine(fn):
        fname = type(fn).__name__  # a callable object: its class names it
    if fname == "<lambda>":
        raise ConversionError("a lambda has no name: add_function(fn, name=...)", name=fname)
    try:
        from pydantic import TypeAdapter
    except ImportError as err:  # pragma: no cover - the tools extra installs it
        raise missing("pydantic", "tools") from err
    try:
        sig = inspect.signature(fn)
        hints = _hints(fn)
    except (ValueError, TypeError, NameError) as err:
        raise ConversionError(
            f"its signature or type hints cannot be read: {err}", name=fname
        ) from err
    params = []
    annotations: dict[str, Any] = {}
    open_ended = False  # **kwargs: more arguments are welcome
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            open_ended = open_ended or p.kind is p.VAR_KEYWORD
            continue
        if p.kind is p.POSITIONAL_ONLY:
            raise ConversionError(
                f"parameter {p.name!r} is positional-only, but a tool is called with arguments by "
                "name: drop the '/' or wrap the function",
                name=fname,
            )
        annotations[p.name] = hints.get(p.name, Any)
        params.append(p.replace(kind=p.KEYWORD_ONLY, annotation=annotations[p.name]))

    def stub(**kwargs: Any) -> None:  # pragma: no cover - never called, only described
        return None

    stub.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    stub.__annotations__ = annotations
    try:
        schema: dict[str, Any] = TypeAdapter(stub).json_schema()  # type: ignore[arg-type]
    except Exception as err:  # pydantic raises several types for unsupported hints
        raise ConversionError(
            f"no JSON Schema for its parameters: {type(err).__name__}: {err}", name=fname
        ) from err
    if open_ended:
        schema.pop("additionalProperties", None)
    summary, docs = parse_docstring(_doc(fn))
    props = schema.get("properties", {})
    for pname, prop in props.items():
        if prop.get("title") == pname.replace("_", " ").strip().title():
            del prop["title"]  # pydantic's generated title adds nothing
        if pname in docs and docs[pname] and "description" not in prop:
            prop["description"] = docs[pname]
    schema.setdefault("properties", props)
    return _tool(
        fname,
        description if description is not None else summary,
        schema,
        source="callable",
    )
