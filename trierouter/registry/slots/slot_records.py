"""The records of a slot analysis, and the analyses a registry keeps while it adds tools.

A :class:`Slot` names one argument slot and the engine that serves it (what ``explain()``
prints, via :func:`slot_table`); :class:`SchemaRefused` lists what no engine serves exactly;
:func:`canonical` / :func:`_leaf_key` key sub-schemas. Inside :func:`analyses_kept`, each
analysis :func:`~trierouter.registry.slots.dispatch.unserved_problems` makes is kept
(:func:`keep_analysis`) for :func:`kept_analysis`, so one walk per tool serves both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from trierouter.registry.slots.normalize import Problem

__all__ = [
    "Analysis",
    "SchemaRefused",
    "Slot",
    "analyses_kept",
    "canonical",
    "keep_analysis",
    "keeping_analyses",
    "kept_analysis",
    "slot_table",
]


def canonical(schema: Any) -> str:
    """A key for a sub-schema: its JSON with sorted keys."""
    return json.dumps(schema, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


_SCALARS = (str, int, bool, type(None))
"""Exact scalars (no float: ``0.0 == -0.0`` while their JSON differs)."""


def _leaf_key(schema: dict[str, Any]) -> str:
    """A cache key for a sub-schema, equal exactly when :func:`canonical` is: for a flat
    schema of strings, integers, booleans and nulls, the ``repr`` of its items with each
    value's type (``1`` and ``true`` stay apart), sorted; else its canonical JSON (slower)."""
    items = []
    for k, v in schema.items():
        if v.__class__ not in _SCALARS:
            return canonical(schema)
        items.append((k, v.__class__.__name__, v))
    items.sort()
    return repr(items)


@dataclass(frozen=True, slots=True)
class Slot:
    """One slot of a tool's arguments and the engine that serves it."""

    path: str
    engine: str
    detail: str
    key: str = ""
    """The XGrammar slot key (``xgrammar`` engine only)."""


def slot_table(slots: list[Slot], n_tools: int) -> str:
    """The aligned table ``explain`` prints: the name slot, then each argument slot."""
    rows = [("slot", "engine", "what"), ("(name)", "trie", f"one of {n_tools} tool names")]
    rows += [(s.path, s.engine, s.detail) for s in slots]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join(f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows)


class SchemaRefused(ValueError):
    """A tool's schema holds constructs no engine serves exactly (``problems``)."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = list(problems)


Analysis = tuple[list[Slot], list[Problem], dict[str, dict[str, Any]]]
"""A tool's slots, the problems relaxed, and the XGrammar sub-schemas of its slots."""
_kept: ContextVar[dict[str, Analysis] | None] = ContextVar("trierouter_kept", default=None)


def keeping_analyses() -> bool:
    """Whether an analysis made now is kept (inside :func:`analyses_kept`)."""
    return _kept.get() is not None


def keep_analysis(schema: dict[str, Any], analysis: Analysis) -> None:
    """Keep the analysis of ``schema`` for :func:`kept_analysis` (outside
    :func:`analyses_kept`: nothing is kept)."""
    memo = _kept.get()
    if memo is not None:
        memo[canonical(schema)] = analysis


@contextmanager
def analyses_kept() -> Iterator[None]:
    """Within it, each schema :func:`~trierouter.registry.slots.dispatch.unserved_problems`
    analyses (a registry adding tools) is kept, so that the slot analysis of the same tools
    that follows (:func:`kept_analysis`) does not walk them again: one walk per tool instead
    of two."""
    token = _kept.set({})
    try:
        yield
    finally:
        _kept.reset(token)


def kept_analysis(schema: dict[str, Any]) -> Analysis | None:
    """The analysis of ``schema`` kept by
    :func:`~trierouter.registry.slots.dispatch.unserved_problems` inside
    :func:`analyses_kept` (copies), or ``None``: slots, problems and the XGrammar
    sub-schemas of its slots, as a fresh dry
    :class:`~trierouter.registry.slots.dispatch.SlotCompiler` finds them."""
    memo = _kept.get()
    kept = None if not memo else memo.get(canonical(schema))
    return None if kept is None else (list(kept[0]), list(kept[1]), dict(kept[2]))
