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

import json
from typing import Any

from trierouter.registry.slots.formats import (
    _DUMMY,
    FORMAT_PATTERNS,
    _counted_string,
    _format_fragment,
    _integer_fragment,
    _length_limited,
    _number_fragment,
    format_and_pattern_fragment,
    format_node,
    format_pattern,
    quoted_pattern_fragment,
)
from trierouter.registry.slots.fragment import MAX_COUNTED, Builder, Fragment, trie_fragment
from trierouter.registry.slots.normalize import Problem, normalize_schema
from trierouter.registry.slots.objects import key_automaton
from trierouter.registry.slots.pieces import tag
from trierouter.registry.slots.schema_fragments import (
    _accepting,
    _bound,
    _exit,
    _first_bytes,
    _free_string,
    _literal,
    _pattern_fragment,
    _pattern_served,
    _resolve,
    _served,
    _union,
    _why,
    for_xgrammar,
)
from trierouter.registry.slots.slot_records import (
    SchemaRefused,
    Slot,
    _leaf_key,
    canonical,
    keep_analysis,
    keeping_analyses,
)

__all__ = ["MAX_UNROLL", "SlotCompiler", "unserved_problems"]


MAX_UNROLL = 8
"""Arrays with ``maxItems`` up to this are unrolled; larger bounded arrays go to XGrammar."""


def unserved_problems(parameters: dict[str, Any]) -> list[Problem]:
    """What no engine serves exactly in an argument schema (the same analysis as
    ``explain()`` and the compiler: normalization, then the engine of every slot). Inside
    :func:`~trierouter.registry.slots.slot_records.analyses_kept`, the whole analysis is kept
    for :func:`~trierouter.registry.slots.slot_records.kept_analysis`."""
    dry = SlotCompiler(dry=True, strict=False)
    slots, problems = dry.analyze(parameters)
    if keeping_analyses():
        keep_analysis(parameters, (slots, list(problems), dict(dry.xgrammar_slots)))
    return problems


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
        b = Builder()
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
        sub = for_xgrammar(sub, path, self._problems)
        if "$defs" in root and '"$ref"' in canonical(sub):  # local references need the defs
            sub["$defs"] = {
                k: for_xgrammar(v, f"{path}$defs.{k}", self._problems)
                for k, v in root["$defs"].items()
            }
        key = canonical(sub)
        self.xgrammar_slots.setdefault(key, sub)
        slots.append(Slot(path or "$", "xgrammar", why, key))
        return (_DUMMY if self.dry else _exit(key)), "xgrammar", why

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
        b = Builder()
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
        b = Builder()
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
