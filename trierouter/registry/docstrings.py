"""Parameter descriptions from Google, NumPy and reST docstrings."""

from __future__ import annotations

import inspect
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

__all__ = ["parse_docstring"]


_GOOGLE = re.compile(
    r"^(\s*)(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters)"
    r"\s*:\s*$"
)
_GOOGLE_ANY_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_NUMPY_RULE = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(\w+)(?:\s*,\s*\*{0,2}\w+)*\s*(?::\s*(.*))?$")
_REST = re.compile(
    r"^\s*:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?(\w+)\s*:(.*)$"
)
_REST_ANY = re.compile(r"^\s*:\w+")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph of a docstring and the description of each parameter, from Google
    (``Args:``), NumPy (``Parameters`` + dashes) or reST (``:param x:``) sections."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if (
            not line.strip()
            or _GOOGLE_ANY_SECTION.match(line)
            or _REST_ANY.match(line)
            or _NUMPY_RULE.match(nxt)
        ):
            if summary or line.strip():
                break
            continue
        summary.append(line.strip())
    params: dict[str, str] = {}
    _google(lines, params)
    _numpy(lines, params)
    _rest(lines, params)
    return " ".join(summary), params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google(lines: list[str], out: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        head = _GOOGLE.match(lines[i])
        i += 1
        if not head:
            continue
        base = len(head.group(1))
        entry_indent: int | None = None
        current: str | None = None
        while i < len(lines):
            line = lines[i]
            if line.strip() and _indent(line) <= base:
                break  # the next section
            i += 1
            if not line.strip():
                continue
            if entry_indent is None:
                entry_indent = _indent(line)
            m = _GOOGLE_ENTRY.match(line.strip())
            if _indent(line) == entry_indent and m:
                current = m.group(1)
                out[current] = m.group(3).strip()
            elif current is not None:
                out[current] = f"{out[current]} {line.strip()}".strip()


def _numpy(lines: list[str], out: dict[str, str]) -> None:
    for i in range(len(lines) - 1):
        if lines[i].strip() not in ("Parameters", "Other Parameters") or not _NUMPY_RULE.match(
            lines[i + 1]
        ):
            continue
        base = _indent(lines[i])
        current: str | None = None
        j = i + 2
        while j < len(lines):
            line = lines[j]
            if j + 1 < len(lines) and _NUMPY_RULE.match(lines[j + 1]):
                break  # the next section's title
            j += 1
            if not line.strip():
                continue
            m = _NUMPY_ENTRY.match(line.strip())
            if _indent(line) == base and m:
                current = m.group(1)
                out[current] = ""
            elif current is not None and _indent(line) > base:
                out[current] = f"{out[current]} {line.strip()}".strip()


def _rest(lines: list[str], out: dict[str, str]) -> None:
    current: str | None = None
    for line in lines:
        m = _REST.match(line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif _REST_ANY.match(line) or not line.strip():
            current = None
        elif current is not None:
            out[current] = f"{out[current]} {line.strip()}".strip()
