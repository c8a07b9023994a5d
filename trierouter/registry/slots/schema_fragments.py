"""The pieces the slot compiler wires, and its verdicts on sub-schemas.

Shared fragments (the free string, one literal, one accepting state, a hand-over to an
XGrammar slot: built once, copied when wired), the union of branches with disjoint first
bytes, and what :class:`~trierouter.registry.slots.dispatch.SlotCompiler` asks of a
sub-schema before choosing its engine: the sub-schema as XGrammar serves it exactly
(:func:`for_xgrammar`), whether a pattern's automaton is built here
(:data:`MAX_PATTERN_STATES`), the bytes a value starts with, an integer bound, a local
``$ref``, and why a slot goes to XGrammar.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np

from trierouter.registry.slots.anchors import xgrammar_pattern
from trierouter.registry.slots.formats import (
    format_and_pattern,
    format_pattern,
    pattern_lengths,
    quoted_pattern_fragment,
)
from trierouter.registry.slots.fragment import Builder, Fragment, exit_fragment, string_fragment
from trierouter.registry.slots.nfa import TooManyStates, lit, nfa_fragment
from trierouter.registry.slots.normalize import Problem, regex_problem
from trierouter.registry.slots.regex import pattern_fragment, pattern_node

__all__ = ["KEPT_EDGES", "MAX_PATTERN_STATES", "for_xgrammar"]


def for_xgrammar(schema: Any, path: str, problems: list[Problem]) -> Any:
    """``schema`` as XGrammar 0.2.8 serves it exactly: exact formats become their patterns;
    what XGrammar would serve loosely is appended to ``problems`` (and, relaxed, removed)."""
    if isinstance(schema, list):
        return [for_xgrammar(v, path, problems) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in ("properties", "$defs") and isinstance(v, dict):
            out[k] = {
                n: for_xgrammar(s, f"{path}.{n}" if path else n, problems) for n, s in v.items()
            }
        elif k in ("items", "additionalProperties", "anyOf"):
            out[k] = for_xgrammar(v, path + ("[]" if k == "items" else ""), problems)
        else:
            out[k] = v
    lengths = "minLength" in out or "maxLength" in out
    fmt = out.get("format")
    where = path or "$"
    exact = None
    if isinstance(fmt, str) and "pattern" not in out:
        exact = format_pattern(fmt, out.get("minLength", 0), out.get("maxLength"))
    elif isinstance(fmt, str) and not lengths:
        exact = format_and_pattern(fmt, str(out["pattern"]))
    if exact is not None:  # the format's language, lengths folded in
        out["pattern"] = "^" + exact + "$"
        for k in ("format", "minLength", "maxLength"):
            out.pop(k, None)
    elif isinstance(fmt, str) and ("pattern" in out or lengths):
        what = f"format {fmt} beside a pattern or a length bound is not served"
        problems.append(Problem(where, "format", what, "drop the pattern or the bounds"))
        out.pop("format")
    elif "pattern" in out:
        why = regex_problem(str(out["pattern"]))
        if why is None and lengths and _lengths_hold(out):
            for k in ("minLength", "maxLength"):  # every full match already fits them
                out.pop(k, None)
            lengths = False
        if why is None and lengths:  # relaxed: the pattern alone (the nearer of the two)
            why = "XGrammar 0.2.8 ignores minLength / maxLength beside a pattern"
            for k in ("minLength", "maxLength"):
                if out.pop(k, None) is not None:
                    fix = "drop the bound, or fold it into the pattern"
                    problems.append(Problem(where, k, why, fix))
        elif why is not None:
            fix = "rewrite the pattern in the supported subset, or drop it"
            text = str(out["pattern"])
            if pattern_node(text) is not None and not _pattern_served(text):  # too large
                why = (
                    f"its automaton here has more than {MAX_PATTERN_STATES:,} states "
                    f"(MAX_PATTERN_STATES), and XGrammar would serve it inexactly: {why}"
                )
                fix = "write a pattern with fewer states (no star before a counted repeat)"
            problems.append(Problem(where, "pattern", why, fix))
            out.pop("pattern")
    if isinstance(out.get("pattern"), str):  # what XGrammar ignores, it also prints
        out["pattern"] = xgrammar_pattern(out["pattern"])
    return out


def _lengths_hold(schema: dict[str, Any]) -> bool:
    """Every full match of the schema's pattern has a length its bounds allow."""
    span = pattern_lengths(str(schema["pattern"]))
    if span is None:
        return False
    lo, hi = span
    top = schema.get("maxLength")
    return bool(
        schema.get("minLength", 0) <= lo and (top is None or (hi is not None and hi <= top))
    )


@functools.lru_cache(maxsize=1)
def _free_string() -> Fragment:
    """The free JSON string (shared: fragments are copied when wired, never changed)."""
    return string_fragment()


@functools.lru_cache(maxsize=4096)
def _exit(key: str) -> Fragment:
    """The hand-over to XGrammar slot ``key`` (shared: fragments are copied when wired)."""
    return exit_fragment(key)


@functools.lru_cache(maxsize=256)
def _literal(text: bytes) -> Fragment:
    """The automaton of one literal (shared: fragments are copied when wired)."""
    return nfa_fragment(lit(text))


MAX_PATTERN_STATES = 20_000
"""A pattern whose quoted automaton would have more states goes to XGrammar (exact, built
lazily): determinizing can grow exponentially (``(a|b)*a(a|b){19}``: 2**20 states, 43 s here;
a pattern past this budget costs at most ~0.5 s to find out, once per process)."""


KEPT_EDGES = 1024
"""A served pattern's quoted automaton with at most this many edges (~12 KB) is kept with its
verdict, and the slot's build takes it instead of determinizing the pattern a second time."""


@functools.lru_cache(maxsize=4096)
def _served(pattern: str) -> tuple[Fragment | None] | None:
    """``(its quoted automaton,)`` (None past :data:`KEPT_EDGES`) when the automaton of
    ``pattern`` is built here: in the supported subset and within :data:`MAX_PATTERN_STATES`
    (the same verdict whether or not automata are built); else None."""
    try:
        frag = pattern_fragment(pattern, max_states=MAX_PATTERN_STATES)
    except TooManyStates:
        return None
    if frag is None:
        return None
    return (frag if len(frag.src) <= KEPT_EDGES else None,)


def _pattern_served(pattern: str) -> bool:
    """Whether the automaton of ``pattern`` is built here (see :func:`_served`)."""
    return _served(pattern) is not None


@functools.lru_cache(maxsize=1024)
def _pattern_fragment(pattern: str) -> Fragment:
    """The quoted full matches of ``pattern`` (one in the supported subset; a fixed format's
    from its constant table)."""
    return quoted_pattern_fragment(pattern)


def _first_bytes(schema: Any, root: dict[str, Any], depth: int = 0) -> set[int] | None:
    """The bytes a value of ``schema`` can start with (None: unknown or anything)."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    if "$ref" in schema:
        target = _resolve(schema["$ref"], root)
        return None if target is None else _first_bytes(target, root, depth + 1)
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        return {json.dumps(v, ensure_ascii=False).encode()[0] for v in values} or None
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        out: set[int] = set()
        for br in branches:
            fb = _first_bytes(br, root, depth + 1)
            if fb is None or fb & out:
                return None
            out |= fb
        return out
    t = schema.get("type")
    if t is None and "properties" in schema:
        t = "object"
    types = t if isinstance(t, list) else [t]
    out = set()
    for one in types:
        fb = _TYPE_FIRST.get(one) if isinstance(one, str) else None
        if fb is None:
            return None
        if fb & out:
            return None
        out |= fb
    return out


_TYPE_FIRST: dict[str, set[int]] = {
    "string": {ord('"')},
    "integer": set(b"-0123456789"),
    "number": set(b"-0123456789"),
    "boolean": set(b"tf"),
    "null": set(b"n"),
    "object": {ord("{")},
    "array": {ord("[")},
}


@functools.lru_cache(maxsize=1)
def _accepting() -> Fragment:
    """One accepting state (shared: fragments are copied when wired, never changed)."""
    return Fragment.empty([True])


def _union(frags: list[Fragment]) -> Fragment | None:
    """One fragment accepting any of ``frags`` if their first bytes are disjoint, else None."""
    b = Builder()
    start = b.add(Fragment.empty([False]))
    seen: set[int] = set()
    for f in frags:
        if f.accept[0] or 0 in f.exits:
            return None
        first = set(f.start_edges()[0].tolist())
        if first & seen:
            return None
        seen |= first
        b.link([start], b.add(f))
    return b.finish()


def _bound(schema: dict[str, Any], inc: str, exc: str, step: int) -> int | bool | None:
    """An inclusive integer bound from ``inc`` / ``exc`` (False when not an integer bound)."""
    out: int | None = None
    for key, shift in ((inc, 0), (exc, step)):
        if key not in schema:
            continue
        v = schema[key]
        if isinstance(v, bool) or not isinstance(v, int | float):
            return False
        if isinstance(v, float) and not v.is_integer():
            if key == exc:
                return False
            v = int(np.ceil(v)) if step > 0 else int(np.floor(v))
        cand = int(v) + shift
        if out is not None:
            cand = max(out, cand) if step > 0 else min(out, cand)
        out = cand
    return out


def _resolve(ref: Any, root: dict[str, Any]) -> dict[str, Any] | None:
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None


def _why(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return "anyOf with branches that share first bytes or need XGrammar"
    for k in ("minLength", "maxLength", "multipleOf"):
        if k in schema:
            return k
    t = schema.get("type")
    if t == "object":
        return "free-form object"
    if t == "string" and "format" in schema:
        return f"format {schema['format']}"
    if t == "string" and "pattern" in schema:
        return "pattern outside the regex subset"
    if t == "number":
        return "number with bounds"
    if t == "array":
        return "array bounds / items"
    if t is None:
        return "no type"
    return str(t)
