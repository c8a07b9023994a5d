"""Running a tool call: the registered Python callable with the call's arguments.

A call comes in OpenAI's form (``{"function": {"name", "arguments"}}`` with arguments as JSON
text, or an object with ``.function``), LangChain's ``{"name", "args"}``, or
:class:`~trierouter.router.tool_calls.plan.ToolCall`; the arguments are checked against the tool's
schema (``jsonschema`` with its format checker) before anything runs.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from typing import Any

from trierouter.errors import ToolError
from trierouter.registry import forms as convert
from trierouter.registry.call_text import load_arguments

__all__ = ["ainvoke_tool", "call_parts", "invoke_tool"]


def call_parts(call: Any) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments dict) of a tool call in any of the forms above."""
    fn = call.get("function") if isinstance(call, Mapping) else getattr(call, "function", None)
    if fn is not None:
        name = fn.get("name") if isinstance(fn, Mapping) else getattr(fn, "name", None)
        raw = fn.get("arguments") if isinstance(fn, Mapping) else getattr(fn, "arguments", None)
    elif isinstance(call, Mapping):
        name, raw = call.get("name"), call.get("args", call.get("arguments"))
    else:
        name, raw = getattr(call, "name", None), getattr(call, "args", None)
    if not isinstance(name, str):
        raise ToolError(f"not a tool call (no name): {call!r:.120}")
    if isinstance(raw, str):
        try:
            raw = load_arguments(raw)
        except ValueError as exc:
            raise ToolError(f"arguments of {name!r} are not JSON: {exc}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ToolError(f"arguments of {name!r} must be an object, got {type(raw).__name__}")
    return name, dict(raw)


def _bound(registry: Any, call: Any) -> tuple[Any, dict[str, Any]]:
    name, args = call_parts(call)
    tool = registry[name]
    runner = registry.runner(name)
    if runner is None:
        raise ToolError(
            f"tool {name!r} came from {tool.source} and has no Python callable: register "
            "the function, pydantic model or LangChain tool itself to invoke it"
        )
    import jsonschema

    cls = jsonschema.Draft202012Validator
    errors = sorted(
        cls(tool.parameters, format_checker=cls.FORMAT_CHECKER).iter_errors(args), key=str
    )
    if errors:
        raise ToolError(f"arguments of {name!r} do not match its schema: {errors[0].message}")
    return runner, args


def invoke_tool(registry: Any, call: Any) -> Any:
    """What the callable returns; a pydantic model returns the validated instance, a LangChain
    tool runs through its ``invoke``; an async function is refused (use :func:`ainvoke_tool`)."""
    runner, args = _bound(registry, call)
    if convert.is_pydantic_model(runner):
        return runner.model_validate(args)
    if convert.is_langchain_tool(runner):
        return runner.invoke(args)
    if inspect.iscoroutinefunction(runner):
        raise ToolError(f"tool {call_parts(call)[0]!r} is async: use ainvoke")
    return runner(**args)


async def ainvoke_tool(registry: Any, call: Any) -> Any:
    """:func:`invoke_tool` for event loops: coroutine functions are awaited, LangChain tools run
    through ``ainvoke``, plain functions in a worker thread."""
    runner, args = _bound(registry, call)
    if convert.is_pydantic_model(runner):
        return runner.model_validate(args)
    if convert.is_langchain_tool(runner):
        return await runner.ainvoke(args)
    if inspect.iscoroutinefunction(runner):
        return await runner(**args)
    return await asyncio.to_thread(runner, **args)
