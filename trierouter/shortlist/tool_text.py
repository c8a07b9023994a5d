"""What a tool search indexes: a tool as text (its name in words, description, parameters).

A tool's name is an identifier (``weather.getForecastByCity``, ``get_user_v2``): a search over
words matches it only split into words. Its parameters say what it acts on (``city``,
``ticker``, ``patient_id``) often better than its one-line description, and a user's question
names those things. :func:`tool_text` renders the three into one text, bounded in length so a
huge API schema does not drown its own name; :func:`name_words` splits an identifier.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["TOOL_TEXT_MAX_CHARS", "name_words", "tool_text"]

TOOL_TEXT_MAX_CHARS = 1_500
"""Default bound on :func:`tool_text` (characters): name and description first, then the
parameters in schema order, cut at a parameter boundary."""

_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_]+")


def name_words(name: str) -> str:
    """An identifier as lower-case words: ``"weather.getForecastByCity_v2"`` ->
    ``"weather get forecast by city v 2"``."""
    return " ".join(p.lower() for p in _PARTS.findall(name))


def _param_lines(schema: Any, prefix: str, depth: int, out: list[str]) -> None:
    if not isinstance(schema, Mapping) or depth > 1:
        return
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return
    for pname, p in props.items():
        if not isinstance(pname, str):
            continue
        words = name_words(prefix + " " + pname if prefix else pname)
        line = words
        if isinstance(p, Mapping):
            desc = p.get("description")
            if isinstance(desc, str) and desc.strip():
                line += ": " + " ".join(desc.split())
            enum = p.get("enum")
            if isinstance(enum, list) and enum:
                line += " (" + ", ".join(str(v) for v in enum[:8]) + ")"
        out.append(line)
        if isinstance(p, Mapping):
            _param_lines(p, words, depth + 1, out)


def tool_text(
    name: str,
    description: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    *,
    max_chars: int = TOOL_TEXT_MAX_CHARS,
) -> str:
    """``name`` (as written and in words), ``description``, then one line per parameter
    (its name in words, description and first enum values; nested object properties one level
    down), at most ``max_chars`` characters (the name and description always whole)."""
    head = f"{name} ({name_words(name)})"
    desc = " ".join((description or "").split())
    text = f"{head}. {desc}" if desc else head
    lines: list[str] = []
    _param_lines(parameters, "", 0, lines)
    sep = ". Parameters: "
    for line in lines:
        if len(text) + len(sep) + len(line) > max_chars:
            break
        text += sep + line
        sep = "; "
    return text
