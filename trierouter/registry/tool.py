"""One tool: a name, a description and a JSON Schema for its arguments."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_NAME_LENGTH", "NAMESPACE_SEPARATOR", "Tool", "empty_object", "name_problem"]


MAX_NAME_LENGTH = 256
"""Longest tool name, in characters (OpenAI allows 64, MCP recommends 128)."""
NAMESPACE_SEPARATOR = "."
"""``github.create_issue`` is tool ``create_issue`` in namespace ``github``."""

_BAD_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def empty_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool: what a model sees and fills. The registry hands these out normalized."""

    name: str
    """Unique name, namespaces included (``github.create_issue``)."""
    description: str = ""
    """What the tool does (may be empty)."""
    parameters: dict[str, Any] = field(default_factory=empty_object)
    """JSON Schema of the arguments object; always ``"type": "object"`` with ``properties`` once
    registered (``$defs`` and local ``$ref`` kept). Shared, not copied: do not mutate."""
    title: str | None = None
    """Human-readable display name (MCP's ``title``), if any."""
    source: str = "dict"
    """The form it came from: openai, anthropic, mcp, bfcl, pydantic, callable, langchain or
    dict."""
    strict: bool | None = None
    """OpenAI's (and Anthropic's) ``strict`` flag of the function: ``True``, its schema is served
    exactly or the tool is refused; ``None`` / ``False`` (the APIs' default), a construct no
    engine serves exactly is relaxed to the nearest exact form and recorded
    (:class:`~trierouter.registry.tool_registry.ToolRegistry` ``strict=`` overrides it)."""

    def to_openai(self) -> dict[str, Any]:
        """OpenAI Chat Completions form: ``{"type": "function", "function": {...}}``."""
        fn: dict[str, Any] = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        fn["parameters"] = self.parameters
        if self.strict is not None:
            fn["strict"] = self.strict
        return {"type": "function", "function": fn}

    def to_anthropic(self) -> dict[str, Any]:
        """Anthropic Messages form: ``{"name", "description", "input_schema"}``."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["input_schema"] = self.parameters
        return out

    def to_mcp(self) -> dict[str, Any]:
        """MCP ``Tool`` form, as in a ``tools/list`` result: ``name``, ``title``,
        ``description``, ``inputSchema``."""
        out: dict[str, Any] = {"name": self.name}
        if self.title is not None:
            out["title"] = self.title
        if self.description:
            out["description"] = self.description
        out["inputSchema"] = self.parameters
        return out


def name_problem(name: str) -> str | None:
    if not name:
        return "the name is empty: give every tool a non-empty name"
    if name != name.strip():
        return "the name has leading or trailing whitespace: strip it"
    if len(name) > MAX_NAME_LENGTH:
        return f"the name has {len(name)} characters, more than {MAX_NAME_LENGTH}: shorten it"
    bad = _BAD_CHARS.search(name)
    if bad:
        return (
            f"the name holds the control character or lone surrogate {bad.group()!r} at "
            f"{bad.start()}: remove it"
        )
    return None
