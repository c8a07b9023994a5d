"""A tool call in OpenAI's format (``message.tool_calls[i]``), and how a call object a model
wrote becomes one: read (:func:`~trierouter.registry.call_text.load_call`), the tool looked up,
the arguments checked with ``jsonschema`` and its format checker."""

from __future__ import annotations

import json
import secrets
from typing import Any, Literal, NamedTuple

from trierouter.errors import ToolCallError, ToolChoiceError
from trierouter.registry.call_text import load_call
from trierouter.registry.compiler import CompiledTools

__all__ = [
    "FunctionCall",
    "ParsedOutput",
    "ToolCall",
    "ToolCallError",
    "parse_tool_call",
    "tool_choice_name",
]

try:
    from pydantic import BaseModel, Field
except ImportError:  # pragma: no cover - pydantic is in the tools extra
    BaseModel = object  # type: ignore[assignment,misc]

    def Field(*a: Any, **k: Any) -> Any:  # type: ignore[no-redef]
        return None


class FunctionCall(BaseModel):
    """OpenAI's ``function`` part of a tool call: ``arguments`` is a JSON string."""

    name: str
    arguments: str


class ToolCall(BaseModel):
    """A tool call in OpenAI's format (``message.tool_calls[i]``), with the parsed arguments."""

    id: str = Field(default_factory=lambda: "call_" + secrets.token_hex(12))
    type: Literal["function"] = "function"
    function: FunctionCall

    @property
    def name(self) -> str:
        return str(self.function.name)

    @property
    def args(self) -> dict[str, Any]:
        """The arguments, parsed."""
        out = json.loads(self.function.arguments)
        assert isinstance(out, dict)
        return out


class ParsedOutput(NamedTuple):
    """What a model wrote in one turn: text, tool calls (OpenAI format), thinking."""

    content: str
    """Text outside the calls (``auto``: before the first call)."""
    calls: list[ToolCall]
    """The calls, in order."""
    reasoning: str = ""
    """The thinking part (``think=True``), without its delimiter."""


def parse_tool_call(text: str, tools: CompiledTools, *, validate: bool = True) -> ToolCall:
    """``{"name": ..., "arguments": {...}}`` (the format's arguments key) → :class:`ToolCall`,
    checked with ``jsonschema`` (its format checker included: a ``date`` must be a real date)."""
    name, args = load_call(text, tools.format.arguments_key)
    try:
        i = tools.tool_index(name)
    except KeyError:
        raise ToolCallError(f"no tool named {name!r} in the registry") from None
    if validate:
        try:
            import jsonschema
        except ImportError as exc:  # pragma: no cover
            from trierouter.errors import missing

            raise missing("jsonschema", "tools") from exc
        schema = tools.specs[i].parameters or {"type": "object"}
        cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
        validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        errors = sorted(validator.iter_errors(args), key=str)
        if errors:
            raise ToolCallError(
                f"arguments of {name!r} do not match its schema: {errors[0].message}"
            )
    return ToolCall(
        function=FunctionCall(name=name, arguments=json.dumps(args, ensure_ascii=False))
    )


def tool_choice_name(choice: Any) -> str:
    """``tool_choice`` as a string: OpenAI's ``{"type": "function", "function": {"name": N}}``
    (and the Responses API's ``{"type": "function", "name": N}``) become ``N``."""
    if isinstance(choice, str):
        return choice
    if isinstance(choice, dict):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else choice.get("name")
        if choice.get("type", "function") == "function" and isinstance(name, str):
            return name
    raise ToolChoiceError(
        f'tool_choice={choice!r:.80}: expected "required", "auto", "none", a tool name, or '
        '{"type": "function", "function": {"name": ...}}'
    )
