"""JSON Schema → byte automaton, slot by slot, with the engine chosen for each slot.

Each slot (property value) of a tool's argument schema goes to the cheapest engine that is exact
for it:

- ``trie``: ``enum``, ``const``, booleans, ``null`` — a trie over the JSON text of each value;
- ``format``: fixed formats — ``date``, ``time``, ``date-time``, ``uuid``, ``ipv4``, integers with
  bounds, strings whose ``pattern`` is a plain regular expression — a position automaton with the
  same language as XGrammar's rule for it (:mod:`~trierouter.registry.slots.formats`,
  :mod:`~trierouter.registry.slots.regex`);
- ``automaton``: free strings, integers, numbers, and objects / arrays / unions built from the
  above — deterministic automata wired together;
- ``xgrammar``: everything else (free-form objects, recursive ``$ref``, number ranges, patterns
  outside the supported regex subset, ``email`` / ``uri`` / ``ipv6``...) — an XGrammar grammar
  for that slot's sub-schema, compiled once per distinct sub-schema.

The text layout is XGrammar's with ``any_whitespace=False``: ``{"a": 1, "b": [true, null]}``,
properties in schema order, optional ones skippable.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from trierouter.registry.slots.anchors import xgrammar_pattern
from trierouter.registry.slots.formats import (
    _DUMMY,
    FORMAT_PATTERNS,
    _counted_string,
    _format_fragment,
    _integer_fragment,
    _length_limited,
    _number_fragment,
    format_and_pattern,
    format_and_pattern_fragment,
    format_node,
    format_pattern,
    pattern_lengths,
    quoted_pattern_fragment,
)
from trierouter.registry.slots.fragment import (
    MAX_COUNTED,
    Fragment,
    builder,
    exit_fragment,
    string_fragment,
    trie_fragment,
)
from trierouter.registry.slots.nfa import TooManyStates, lit, nfa_fragment
from trierouter.registry.slots.normalize import Problem, normalize_schema, regex_problem
from trierouter.registry.slots.objects import key_automaton
from trierouter.registry.slots.pieces import tag
from trierouter.registry.slots.regex import pattern_fragment, pattern_node

__all__ = [
    "SchemaRefused",
    "Slot",
    "SlotCompiler",
    "analyses_kept",
    "canonical",
    "kept_analysis",
    "slot_table",
    "unserved_problems",
]


MAX_UNROLL = 8
"""Arrays with ``maxItems`` up to this are unrolled; larger bounded arrays go to XGrammar."""


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


# -- slots -----------------------------------------------------------------------------------


class SchemaRefused(ValueError):
    """A tool's schema holds constructs no engine serves exactly (``problems``)."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = list(problems)


def unserved_problems(parameters: dict[str, Any]) -> list[Problem]:
    """What no engine serves exactly in an argument schema (the same analysis as
    ``explain()`` and the compiler: normalization, then the engine of every slot). Inside
    :func:`analyses_kept`, the whole analysis is kept for :func:`kept_analysis`."""
    memo = _kept.get()
    if memo is None:
        return SlotCompiler(dry=True, strict=False).analyze(parameters)[1]
    dry = SlotCompiler(dry=True, strict=False)
    slots, problems = dry.analyze(parameters)
    memo[canonical(parameters)] = (slots, list(problems), dict(dry.xgrammar_slots))
    return problems


Analysis = tuple[list["Slot"], list[Problem], dict[str, dict[str, Any]]]
_kept: ContextVar[dict[str, Analysis] | None] = ContextVar("trierouter_kept", default=None)


@contextmanager
def analyses_kept() -> Iterator[None]:
    """Within it, each schema :func:`unserved_problems` analyses (a registry adding tools) is
    kept, so that the slot analysis of the same tools that follows (:func:`kept_analysis`)
    does not walk them again: one walk per tool instead of two."""
    token = _kept.set({})
    try:
        yield
    finally:
        _kept.reset(token)


def kept_analysis(schema: dict[str, Any]) -> Analysis | None:
    """The analysis of ``schema`` kept by :func:`unserved_problems` inside
    :func:`analyses_kept` (copies), or ``None``: slots, problems and the XGrammar
    sub-schemas of its slots, as a fresh dry :class:`SlotCompiler` finds them."""
    memo = _kept.get()
    kept = None if not memo else memo.get(canonical(schema))
    return None if kept is None else (list(kept[0]), list(kept[1]), dict(kept[2]))


class SlotCompiler:
    """Compile sub-schemas to fragments, caching by canonical JSON; collect the XGrammar slots.

    Every schema is normalized first (:func:`~trierouter.tools.normalize.normalize_schema`);
    the engine of each slot is then decided by one code path, whether automata are built
    (``dry=False``) or not (``dry=True``, what ``explain()`` and registration use), so the two
    always agree. ``xgrammar_slots`` maps a key to the sub-schema (with its ``$defs``) that an
    XGrammar grammar serves. ``strict`` (default): a construct no engine serves exactly raises
    :class:`SchemaRefused`; ``strict=False`` serves the schema without it and lists it in the
    result's problems (what was relaxed).
    """

    def __init__(self, *, dry: bool = False, strict: bool = True) -> None:
        self.dry = dry
        """Only decide the engines (``slots``, ``xgrammar_slots``); build no automata."""
        self.strict = strict
        self._cache: dict[str, tuple[Fragment, str, str]] = {}
        self.xgrammar_slots: dict[str, dict[str, Any]] = {}
        self._refs: list[str] = []
        self._problems: list[Problem] = []

    def analyze(self, schema: dict[str, Any]) -> tuple[list[Slot], list[Problem]]:
        """The slots of a tool's argument schema and the problems relaxed (strict: raises)."""
        saved, self.dry = self.dry, True
        try:
            _, slots, problems = self._tool(schema, b"")
        finally:
            self.dry = saved
        return slots, problems

    def tool(
        self, schema: dict[str, Any], tail: bytes, head: bytes = b"", defer: bool = False
    ) -> tuple[Fragment, list[Slot]]:
        """The automaton for ``head``, a tool's arguments object, then ``tail``; its slots
        (``defer``: its last wiring left to the core call of its masks, ``Fragment.wire``)."""
        frag, slots, _ = self._tool(schema, tail, head, defer)
        return frag, slots

    _frame: tuple[dict[str, Any], bytes, bytes, bool] | None = None
    """(root schema, head, tail, defer) while a tool's root object is still to be built."""

    def _tool(
        self, schema: dict[str, Any], tail: bytes, head: bytes = b"", defer: bool = False
    ) -> tuple[Fragment, list[Slot], list[Problem]]:
        norm = normalize_schema(schema)
        self._problems = list(norm.problems)
        root = dict(norm.schema)
        if norm.defs:
            root["$defs"] = norm.defs
        slots: list[Slot] = []
        # an object at the root wires ``head`` and ``tail`` in its own builder (the same
        # states, edges and numbering as wrapping it below: one wiring pass fewer)
        self._frame = None if self.dry else (root, head, tail, defer)
        try:
            frag, _, _ = self._piece(root, root, "", slots, depth=0)
            framed = self._frame is None and not self.dry
        finally:
            self._frame = None
        problems, self._problems = self._problems, []
        if problems and self.strict:
            raise SchemaRefused(problems)
        if self.dry or framed:
            return frag, slots, problems
        b = builder()
        if head:
            lead = _literal(head)
            b.add(lead)
        at = b.add(frag)
        if head:
            b.link(b.accepting(0, lead), at)
        end = b.add(_literal(tail) if tail else _accepting())
        b.link(b.accepting(at, frag), end)
        return b.finish(defer), slots, problems

    # -- dispatch ----------------------------------------------------------------------------
    def _piece(
        self, schema: Any, root: dict[str, Any], path: str, slots: list[Slot], depth: int
    ) -> tuple[Fragment, str, str]:
        """(fragment, engine, detail) for ``schema``; leaf slots are appended to ``slots``."""
        if not isinstance(schema, dict) or not schema or set(schema) == {"$defs"}:
            return self._xgrammar({}, root, path, slots, "any JSON value")
        if "$ref" in schema:  # normalized: only recursive references are left
            ref = schema["$ref"]
            target = _resolve(ref, root)
            if target is None or ref in self._refs:
                return self._xgrammar(schema, root, path, slots, "recursive $ref")
            self._refs.append(ref)
            try:
                return self._piece(target, root, path, slots, depth + 1)
            finally:
                self._refs.pop()
        is_object = schema.get("type") == "object" or "properties" in schema
        key = "" if self.dry or is_object else _leaf_key(schema)
        hit = self._cache.get(key) if key else None
        if hit is not None and not is_object:
            slots.append(Slot(path or "$", hit[1], hit[2]))
            return hit
        before = len(slots)
        made = self._make(schema, root, path, slots, depth)
        if made is None:
            return self._xgrammar(schema, root, path, slots, _why(schema))
        frag, engine, detail = made
        if not is_object:
            # only leaves are cached: a hit must list the same slots as a build
            leaf = len(slots) == before
            if leaf and not self.dry and frag is not _DUMMY:
                made = (tag(frag), engine, detail)  # a quoted piece: masks shared by tools
            slots.append(Slot(path or "$", engine, detail))
            if key and leaf and frag is not _DUMMY:
                self._cache[key] = made
        return made

    def _xgrammar(
        self, schema: Any, root: dict[str, Any], path: str, slots: list[Slot], why: str
    ) -> tuple[Fragment, str, str]:
        sub = {k: v for k, v in schema.items() if k != "$defs"} if isinstance(schema, dict) else {}
        sub = self._for_xgrammar(sub, path)
        if "$defs" in root and '"$ref"' in canonical(sub):  # local references need the defs
            sub["$defs"] = {
                k: self._for_xgrammar(v, f"{path}$defs.{k}") for k, v in root["$defs"].items()
            }
        key = canonical(sub)
        self.xgrammar_slots.setdefault(key, sub)
        slots.append(Slot(path or "$", "xgrammar", why, key))
        return (_DUMMY if self.dry else _exit(key)), "xgrammar", why

    def _for_xgrammar(self, schema: Any, path: str) -> Any:
        """``schema`` as XGrammar 0.2.8 serves it exactly: exact formats become their patterns;
        what XGrammar would serve loosely is a problem (and, relaxed, removed)."""
        if isinstance(schema, list):
            return [self._for_xgrammar(v, path) for v in schema]
        if not isinstance(schema, dict):
            return schema
        out: dict[str, Any] = {}
        for k, v in schema.items():
            if k in ("properties", "$defs") and isinstance(v, dict):
                out[k] = {
                    n: self._for_xgrammar(s, f"{path}.{n}" if path else n) for n, s in v.items()
                }
            elif k in ("items", "additionalProperties", "anyOf"):
                out[k] = self._for_xgrammar(v, path + ("[]" if k == "items" else ""))
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
            self._problems.append(Problem(where, "format", what, "drop the pattern or the bounds"))
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
                        self._problems.append(Problem(where, k, why, fix))
            elif why is not None:
                fix = "rewrite the pattern in the supported subset, or drop it"
                text = str(out["pattern"])
                if pattern_node(text) is not None and not _pattern_served(text):  # too large
                    why = (
                        f"its automaton here has more than {MAX_PATTERN_STATES:,} states "
                        f"(MAX_PATTERN_STATES), and XGrammar would serve it inexactly: {why}"
                    )
                    fix = "write a pattern with fewer states (no star before a counted repeat)"
                self._problems.append(Problem(where, "pattern", why, fix))
                out.pop("pattern")
        if isinstance(out.get("pattern"), str):  # what XGrammar ignores, it also prints
            out["pattern"] = xgrammar_pattern(out["pattern"])
        return out

    def _make(
        self, schema: dict[str, Any], root: dict[str, Any], path: str, slots: list[Slot], depth: int
    ) -> tuple[Fragment, str, str] | None:
        if "const" in schema:
            return self._literals([schema["const"]]), "trie", "const"
        if "enum" in schema:
            values = list(schema["enum"])
            if not values:
                return None
            return self._literals(values), "trie", f"enum of {len(values)}"
        if "anyOf" in schema or isinstance(schema.get("type"), list):
            return self._union_of(schema, root, path, depth)
        t = schema.get("type")
        if t == "boolean":
            return self._literals([True, False]), "trie", "boolean"
        if t == "null":
            return self._literals([None]), "trie", "null"
        if t == "integer":
            return self._integer(schema)
        if t == "number":
            if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum",
                                         "exclusiveMaximum", "multipleOf")):  # fmt: skip
                return None
            return _number_fragment(), "automaton", "number"
        if t == "string":
            return self._string_slot(schema)
        if t == "array":
            return self._array(schema, root, path, slots, depth)
        if t == "object" or "properties" in schema:
            return self._object(schema, root, path, slots, depth)
        return None

    def _union_of(
        self, schema: dict[str, Any], root: dict[str, Any], path: str, depth: int
    ) -> tuple[Fragment, str, str] | None:
        """``anyOf`` / a list of types: one automaton when every branch is one and their first
        bytes are disjoint (decided by :func:`_first_bytes`, built or dry alike)."""
        saved = (dict(self.xgrammar_slots), len(self._problems))

        def undo() -> None:
            self.xgrammar_slots = saved[0]
            del self._problems[saved[1] :]

        if "anyOf" in schema:
            branches = schema["anyOf"]
            what = f"one of {len(branches)} branches"
        else:
            branches = [{**schema, "type": one} for one in schema["type"]]
            what = "type " + " | ".join(map(str, schema["type"]))
        if not branches or _first_bytes(schema, root) is None:
            return None
        pieces: list[Fragment] = []
        for i, br in enumerate(branches):
            sub: list[Slot] = []
            if "anyOf" in schema:
                frag, engine, _ = self._piece(br, root, f"{path}|{i}", sub, depth + 1)
            else:
                made = self._make(br, root, path, sub, depth)
                if made is None:
                    undo()
                    return None
                frag, engine, _ = made
            if engine == "xgrammar" or any(s.engine == "xgrammar" for s in sub):
                undo()
                return None
            pieces.append(frag)
        if self.dry:
            return _DUMMY, "automaton", what
        u = _union(pieces)
        if u is None:  # pragma: no cover - disjoint first bytes always make a union
            raise AssertionError(f"{path}: first bytes disjoint, yet no union")
        return u, "automaton", what

    def _literals(self, values: list[Any]) -> Fragment:
        if self.dry:
            return _DUMMY
        texts = list(dict.fromkeys(json.dumps(v, ensure_ascii=False).encode() for v in values))
        return trie_fragment(texts)

    def _integer(self, schema: dict[str, Any]) -> tuple[Fragment, str, str] | None:
        if "multipleOf" in schema:
            return None
        lo = _bound(schema, "minimum", "exclusiveMinimum", +1)
        hi = _bound(schema, "maximum", "exclusiveMaximum", -1)
        if lo is False or hi is False:
            return None
        assert not isinstance(lo, bool) and not isinstance(hi, bool)
        if lo is not None and hi is not None and lo > hi:
            return None

        frag = _DUMMY if self.dry else _integer_fragment(lo, hi)
        if frag is None:
            return None
        if lo is None and hi is None:
            return frag, "automaton", "integer"
        return frag, "format", f"integer in [{lo}, {hi}]"

    def _string_slot(self, schema: dict[str, Any]) -> tuple[Fragment, str, str] | None:
        if "contentEncoding" in schema:
            return None
        min_length = schema.get("minLength", 0)
        max_length = schema.get("maxLength")
        if not isinstance(min_length, int) or isinstance(min_length, bool):
            return None
        if min_length > MAX_COUNTED:
            return None
        if max_length is not None:
            if not isinstance(max_length, int) or isinstance(max_length, bool):
                return None
            if max_length < min_length or max_length > MAX_COUNTED:
                return None  # XGrammar counts any length exactly
        fmt = schema.get("format")
        pattern = schema.get("pattern")
        if fmt in FORMAT_PATTERNS and pattern is not None:
            if min_length > 0 or max_length is not None or not _pattern_served(str(pattern)):
                return None
            both = _DUMMY if self.dry else format_and_pattern_fragment(fmt, str(pattern))
            if both is None:
                return None
            return both, "format", f"format {fmt} and pattern {pattern}"
        if fmt in FORMAT_PATTERNS:
            exact = format_pattern(fmt, min_length, max_length)
            if exact is None:
                return None
            what = f"format {fmt}" + (
                f", {min_length}..{max_length} chars" if min_length or max_length else ""
            )
            if self.dry:
                return _DUMMY, "format", what
            return _pattern_fragment(exact), "format", what
        if (min_length > 0 or max_length is not None) and fmt is not None:
            return None
        if (min_length > 0 or max_length is not None) and pattern is not None:
            if max_length is not None and max_length > MAX_COUNTED:
                return None
            if not _pattern_served(str(pattern)):
                return None
            if self.dry:
                return _DUMMY, "format", f"pattern {pattern}, {min_length}..{max_length} chars"
            frag = _length_limited(str(pattern), min_length, max_length)
            return frag, "format", f"pattern {pattern}, {min_length}..{max_length} chars"
        if pattern is not None:
            if fmt is not None:
                return None
            served = _served(str(pattern))
            if served is None:
                return None
            if self.dry:
                return _DUMMY, "format", f"pattern {pattern}"
            (kept,) = served  # the verdict's automaton, when small (not built again)
            frag = kept if kept is not None else quoted_pattern_fragment(str(pattern))
            return frag, "format", f"pattern {pattern}"
        if fmt is not None:
            if format_node(str(fmt)) is None:
                return None
            fmt_frag = _DUMMY if self.dry else _format_fragment(str(fmt))
            if fmt_frag is None:
                return None
            return fmt_frag, "format", f"format {fmt}"
        if min_length > 0 or max_length is not None:
            frag = _DUMMY if self.dry else _counted_string(min_length, max_length)
            what = f"string of {min_length}..{'' if max_length is None else max_length} chars"
            return frag, "format", what
        return _free_string(), "automaton", "string"

    def _array(
        self, schema: dict[str, Any], root: dict[str, Any], path: str, slots: list[Slot], depth: int
    ) -> tuple[Fragment, str, str] | None:
        items = schema.get("items")
        if not isinstance(items, dict) or "prefixItems" in schema or "contains" in schema:
            return None
        if schema.get("uniqueItems"):
            return None
        lo = int(schema.get("minItems", 0))
        hi = schema.get("maxItems")
        if hi is not None and int(hi) > MAX_UNROLL:
            return None
        if lo > MAX_UNROLL:  # each required item is a copy of the item automaton
            return None
        if hi is not None and int(hi) < lo:
            return None
        sub: list[Slot] = []
        item, engine, _ = self._piece(items, root, path + "[]", sub, depth + 1)
        slots.extend(sub)
        if self.dry:
            return _DUMMY, "automaton", f"array of {engine}"
        if hi is not None and int(hi) == 0:  # no item: exactly "[]" ("[" alone was accepted)
            return _literal(b"[]"), "automaton", f"array of {engine}"
        b = builder()
        opened = b.add(_literal(b"["))
        close = b.add(_accepting())
        if hi is None and lo <= 1:
            first = b.add(item)
            sep = b.add(trie_fragment([b", ", b"]"], labels=["item", "end"]))
            b.link([opened + 1], first)
            if lo == 0:
                b.edge(opened + 1, ord("]"), close)
            b.link(b.accepting(first, item), sep)
            for s, label in list(b.exits.items()):
                if label == "item":
                    b.link([s], first)
                elif label == "end":
                    b.link([s], close)
        else:
            count = int(hi) if hi is not None else lo  # >= 1 here
            starts = [b.add(item) for _ in range(count)]
            b.link([opened + 1], starts[0])
            if lo == 0:
                b.edge(opened + 1, ord("]"), close)
            for k in range(count):
                options: list[bytes] = []
                labels: list[Any] = []
                if k + 1 < count or (hi is None and k + 1 == count):
                    options.append(b", ")
                    labels.append(("item", k + 1))
                if k + 1 >= lo:
                    options.append(b"]")
                    labels.append(("end",))
                sep = b.add(trie_fragment(options, labels=labels))
                b.link(b.accepting(starts[k], item), sep)
            loop = None
            if hi is None:  # minItems > 1, unbounded: the last copy loops
                loop = starts[-1]
            for s, label in list(b.exits.items()):
                if isinstance(label, tuple) and label[0] == "item":
                    nxt = label[1]
                    b.link([s], starts[nxt] if nxt < len(starts) else loop)  # type: ignore[arg-type]
                elif isinstance(label, tuple) and label[0] == "end":
                    b.link([s], close)
        return b.finish(), "automaton", f"array of {engine}"

    def _object(
        self, schema: dict[str, Any], root: dict[str, Any], path: str, slots: list[Slot], depth: int
    ) -> tuple[Fragment, str, str] | None:
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            return None
        extra = schema.get("additionalProperties")
        if not props and extra is not False and depth > 0:
            return None  # a free-form object: any JSON object
        if any(k in schema for k in ("minProperties", "maxProperties", "propertyNames")):
            return None
        required = set(schema.get("required") or [])
        if not required <= set(props):
            return None
        keys = list(props)  # no limit: the key automaton grows as the key bytes (.objects)
        values: list[Fragment] = []
        for k in keys:
            frag, _, _ = self._piece(props[k], root, f"{path}.{k}" if path else k, slots, depth + 1)
            values.append(frag)
        n = len(keys)
        if self.dry:
            return _DUMMY, "automaton", f"object of {n} properties"
        shape, entries = key_automaton(keys, required)
        frame = self._frame
        head = tail = b""
        defer = False
        if frame is not None and frame[0] is schema:  # the tool's root: head and tail here
            _, head, tail, defer = frame
            self._frame = None
        else:
            frame = None
        b = builder()
        if head:
            lead = _literal(head)
            b.add(lead)
        at = b.add(shape, entries[1:])
        if head:
            b.link(b.accepting(0, lead), at)
        starts = [b.add(v) for v in values]
        close = b.add(_accepting())
        closing: list[int] = []
        for j, v in enumerate(values):
            b.link(b.accepting(starts[j], v), at + entries[j + 1])
        for s, label in list(b.exits.items()):
            if isinstance(label, tuple) and label[0] == "v":
                b.link([s], starts[label[1]])
            elif isinstance(label, tuple) and label[0] == "end":
                b.link([s], close)
                closing.append(s)
        if frame is not None:  # what accepts now (close and the states copying it): the tail
            b.link([*closing, close], b.add(_literal(tail) if tail else _accepting()))
        frag = b.finish(defer)
        return frag, "automaton", f"object of {n} properties"


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
    b = builder()
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
