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
from dataclasses import dataclass
from typing import Any

import numpy as np

from trierouter.registry.slots.formats import (
    _DUMMY,
    _counted_string,
    _format_fragment,
    _integer_fragment,
    _length_limited,
    _number_fragment,
    format_node,
)
from trierouter.registry.slots.fragment import (
    MAX_COUNTED,
    Builder,
    Fragment,
    exit_fragment,
    string_fragment,
    trie_fragment,
)
from trierouter.registry.slots.nfa import lit, nfa_fragment, seq
from trierouter.registry.slots.regex import pattern_node

__all__ = ["Slot", "SlotCompiler", "canonical", "slot_table"]


MAX_UNROLL = 8
"""Arrays with ``maxItems`` up to this are unrolled; larger bounded arrays go to XGrammar."""


_ANNOTATIONS = frozenset(
    ("description", "title", "default", "examples", "example", "deprecated", "readOnly",
     "writeOnly", "$comment", "$schema", "$id", "externalDocs", "xml", "discriminator")
)  # fmt: skip

MAX_PROPERTIES = 32
"""Objects with more properties go to XGrammar (a DFA over skippable keys grows as n²)."""


def strip_annotations(schema: Any) -> Any:
    """``schema`` without keywords that do not constrain values (``description``, ``x-*``...)."""
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k in _ANNOTATIONS or (isinstance(k, str) and k.startswith("x-")):
                continue
            if k in ("properties", "$defs", "definitions", "patternProperties") and isinstance(
                v, dict
            ):
                out[k] = {pk: strip_annotations(pv) for pk, pv in v.items()}
            elif k in ("enum", "const"):
                out[k] = v
            else:
                out[k] = strip_annotations(v)
        return out
    if isinstance(schema, list):
        return [strip_annotations(x) for x in schema]
    return schema


def canonical(schema: Any) -> str:
    """A key for a sub-schema: its JSON with sorted keys."""
    return json.dumps(schema, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Slot:
    """One slot of a tool's arguments and the engine that serves it."""

    path: str
    engine: str
    detail: str


def slot_table(slots: list[Slot], n_tools: int) -> str:
    """The aligned table ``explain`` prints: the name slot, then each argument slot."""
    rows = [("slot", "engine", "what"), ("(name)", "trie", f"one of {n_tools} tool names")]
    rows += [(s.path, s.engine, s.detail) for s in slots]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join(f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows)


# -- slots -----------------------------------------------------------------------------------


class SlotCompiler:
    """Compile sub-schemas to fragments, caching by canonical JSON; collect the XGrammar slots.

    ``xgrammar_slots`` maps a key to the sub-schema (with the root's ``$defs`` attached) that an
    XGrammar grammar serves.
    """

    def __init__(self, *, dry: bool = False) -> None:
        self.dry = dry
        """Only decide the engines (``slots``, ``xgrammar_slots``); build no automata."""
        self._cache: dict[str, tuple[Fragment, str, str]] = {}
        self.xgrammar_slots: dict[str, dict[str, Any]] = {}
        self._string = string_fragment()
        self._refs: list[str] = []

    def tool(
        self, schema: dict[str, Any], tail: bytes, head: bytes = b""
    ) -> tuple[Fragment, list[Slot]]:
        """The automaton for ``head``, a tool's arguments object, then ``tail``; its slots."""
        slots: list[Slot] = []
        if not self.dry:
            schema = strip_annotations(schema)
        root = schema
        frag, _, _ = self._piece(schema, root, "", slots, depth=0)
        if self.dry:
            return frag, slots
        b = Builder()
        if head:
            lead = nfa_fragment(lit(head))
            b.add(lead)
        at = b.add(frag)
        if head:
            b.link(b.accepting(0, lead), at)
        end = b.add(nfa_fragment(lit(tail)) if tail else _accepting())
        b.link(b.accepting(at, frag), end)
        return b.finish(), slots

    # -- dispatch ----------------------------------------------------------------------------
    def _piece(
        self, schema: Any, root: dict[str, Any], path: str, slots: list[Slot], depth: int
    ) -> tuple[Fragment, str, str]:
        """(fragment, engine, detail) for ``schema``; leaf slots are appended to ``slots``."""
        if schema is True or schema == {}:
            return self._xgrammar({}, root, path, slots, "any JSON value")
        if not isinstance(schema, dict):
            return self._xgrammar({"not": {}} if schema is False else {}, root, path, slots, "?")
        if "$ref" in schema:
            ref = schema["$ref"]
            target = _resolve(ref, root)
            if target is None or ref in self._refs:
                why = "recursive $ref" if target is not None else "unresolved $ref"
                return self._xgrammar(schema, root, path, slots, why)
            merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            self._refs.append(ref)
            try:
                return self._piece(merged, root, path, slots, depth + 1)
            finally:
                self._refs.pop()
        is_object = schema.get("type") == "object" or "properties" in schema
        key = "" if self.dry or is_object else canonical(schema)
        hit = self._cache.get(key) if key else None
        if hit is not None and not is_object:
            slots.append(Slot(path or "$", hit[1], hit[2]))
            return hit
        made = self._make(schema, root, path, slots, depth)
        if made is None:
            return self._xgrammar(schema, root, path, slots, _why(schema))
        frag, engine, detail = made
        if not is_object:
            slots.append(Slot(path or "$", engine, detail))
            if key and frag is not _DUMMY:
                self._cache[key] = made
        return made

    def _xgrammar(
        self, schema: Any, root: dict[str, Any], path: str, slots: list[Slot], why: str
    ) -> tuple[Fragment, str, str]:
        sub = dict(schema) if isinstance(schema, dict) else {}
        if self.dry:  # the build strips the whole schema first: key what it will key
            sub = strip_annotations(sub)
        if "allOf" in sub:  # XGrammar 0.2 ignores an allOf of several parts: give it one
            merged = _merge_all_of(sub, root)
            if merged is not None:
                sub = merged
        key = canonical(sub)
        if '"$ref"' in key:  # local references need the root's definitions
            for defs in ("$defs", "definitions"):
                if defs in root and defs not in sub:
                    sub[defs] = strip_annotations(root[defs]) if self.dry else root[defs]
            key = canonical(sub)
        self.xgrammar_slots.setdefault(key, sub)
        slots.append(Slot(path or "$", "xgrammar", why))
        return (_DUMMY if self.dry else exit_fragment(key)), "xgrammar", why

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
        if "allOf" in schema:
            merged = _merge_all_of(schema, root)
            if merged is None:
                return None
            return self._make(merged, root, path, slots, depth)
        for k in ("not", "if", "dependentSchemas", "patternProperties"):
            if k in schema:
                return None
        if "anyOf" in schema or "oneOf" in schema:
            branches = schema.get("anyOf") or schema.get("oneOf")
            if not isinstance(branches, list) or not branches:
                return None
            if self.dry:
                seen: list[Slot] = []
                for i, br in enumerate(branches):
                    _, engine, _ = self._piece(br, root, f"{path}|{i}", seen, depth + 1)
                    if engine == "xgrammar" or any(s.engine == "xgrammar" for s in seen):
                        return None
                if _first_bytes({"anyOf": branches}, root) is None:
                    return None
                return _DUMMY, "automaton", f"one of {len(branches)} branches"
            pieces = []
            dry, self.dry = self.dry, False  # disjointness needs the automata
            try:
                for i, br in enumerate(branches):
                    sub: list[Slot] = []
                    frag, engine, _ = self._piece(br, root, f"{path}|{i}", sub, depth + 1)
                    if engine == "xgrammar" or any(s.engine == "xgrammar" for s in sub):
                        return None
                    pieces.append(frag)
            finally:
                self.dry = dry
            u = _union(pieces)
            return None if u is None else (u, "automaton", f"one of {len(pieces)} branches")
        t = schema.get("type")
        if isinstance(t, list):
            if not t:
                return None
            if self.dry:
                for one in t:
                    if self._make({**schema, "type": one}, root, path, [], depth) is None:
                        return None
                if _first_bytes(schema, root) is None:
                    return None
                return _DUMMY, "automaton", "type " + " | ".join(map(str, t))
            frags = []
            dry, self.dry = self.dry, False
            try:
                for one in t:
                    made = self._make({**schema, "type": one}, root, path, [], depth)
                    if made is None:
                        return None
                    frags.append(made[0])
            finally:
                self.dry = dry
            u = _union(frags)
            return None if u is None else (u, "automaton", "type " + " | ".join(map(str, t)))
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
            if max_length < min_length:
                return None
        fmt = schema.get("format")
        pattern = schema.get("pattern")
        if (min_length > 0 or max_length is not None) and fmt is not None:
            return None
        if (min_length > 0 or max_length is not None) and pattern is not None:
            if max_length is not None and max_length > MAX_COUNTED:
                return None
            if pattern_node(str(pattern)) is None:
                return None
            if self.dry:
                return _DUMMY, "format", f"pattern {pattern}, {min_length}..{max_length} chars"
            frag = _length_limited(str(pattern), min_length, max_length)
            return frag, "format", f"pattern {pattern}, {min_length}..{max_length} chars"
        if pattern is not None:
            if fmt is not None:
                return None
            node = pattern_node(str(pattern))
            if node is None:
                return None
            if self.dry:
                return _DUMMY, "format", f"pattern {pattern}"
            return nfa_fragment(seq(lit('"'), node, lit('"'))), "format", f"pattern {pattern}"
        if fmt is not None:
            if format_node(str(fmt)) is None:
                return None
            fmt_frag = _DUMMY if self.dry else _format_fragment(str(fmt))
            if fmt_frag is None:
                return None
            return fmt_frag, "format", f"format {fmt}"
        if min_length > 0 or max_length is not None:
            top = None if max_length is None else min(max_length, MAX_COUNTED)
            frag = _DUMMY if self.dry else _counted_string(min_length, top)
            what = f"string of {min_length}..{'' if max_length is None else max_length} chars"
            if max_length is not None and max_length > MAX_COUNTED:
                what += f" (served as at most {MAX_COUNTED})"
            return frag, "format", what
        return self._string, "automaton", "string"

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
        if hi is not None and int(hi) < lo:
            return None
        sub: list[Slot] = []
        item, engine, _ = self._piece(items, root, path + "[]", sub, depth + 1)
        slots.extend(sub)
        if self.dry:
            return _DUMMY, "automaton", f"array of {engine}"
        b = Builder()
        opened = b.add(nfa_fragment(lit("[")))
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
            count = int(hi) if hi is not None else lo
            starts = [b.add(item) for _ in range(max(count, 1))]
            if count == 0:
                b.edge(opened + 1, ord("]"), close)
            else:
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
        keys = list(props)
        if len(keys) > MAX_PROPERTIES:
            return None
        values: list[Fragment] = []
        for k in keys:
            frag, _, _ = self._piece(props[k], root, f"{path}.{k}" if path else k, slots, depth + 1)
            values.append(frag)
        n = len(keys)
        if self.dry:
            return _DUMMY, "automaton", f"object of {n} properties"
        b = Builder()
        tries: list[int] = []
        for i in range(n + 1):
            head = b"{" if i == 0 else b", "
            options: list[bytes] = []
            labels: list[Any] = []
            all_optional = True
            for j in range(i, n):
                options.append(head + json.dumps(keys[j], ensure_ascii=False).encode() + b": ")
                labels.append(("v", j))
                if keys[j] in required:
                    all_optional = False
                    break
            if all_optional:
                options.append(b"{}" if i == 0 else b"}")
                labels.append(("end",))
            tries.append(b.add(trie_fragment(options, labels=labels)))
        starts = [b.add(v) for v in values]
        close = b.add(_accepting())
        for j, v in enumerate(values):
            b.link(b.accepting(starts[j], v), tries[j + 1])
        for s, label in list(b.exits.items()):
            if isinstance(label, tuple) and label[0] == "v":
                b.link([s], starts[label[1]])
            elif isinstance(label, tuple) and label[0] == "end":
                b.link([s], close)
        frag = b.finish()
        return frag, "automaton", f"object of {n} properties"


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
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list):
        out: set[int] = set()
        for br in branches:
            fb = _first_bytes(br, root, depth + 1)
            if fb is None or fb & out:
                return None
            out |= fb
        return out
    t = schema.get("type")
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


def _accepting() -> Fragment:
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


def _merge_all_of(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any] | None:
    """``allOf`` of object schemas as one object schema (properties and ``required`` merged);
    None when the parts are not all plain objects or a property is defined twice."""
    parts = [strip_annotations({k: v for k, v in schema.items() if k != "allOf"})]
    for p in schema["allOf"]:
        p = strip_annotations(p)
        seen: set[str] = set()
        while isinstance(p, dict) and "$ref" in p and len(p) == 1:
            ref = p["$ref"]
            if ref in seen:
                return None
            seen.add(ref)
            p = _resolve(ref, root)
        if not isinstance(p, dict):
            return None
        if "allOf" in p:
            p = _merge_all_of(p, root)
            if p is None:
                return None
        parts.append(p)
    parts = [p for p in parts if p]
    if not parts:
        return {}
    if len(parts) == 1:
        single: dict[str, Any] = parts[0]
        return single
    props: dict[str, Any] = {}
    required: list[str] = []
    extra: Any = None
    for p in parts:
        if not set(p) <= {"type", "properties", "required", "additionalProperties"}:
            return None
        if p.get("type", "object") != "object":
            return None
        for k, v in (p.get("properties") or {}).items():
            if k in props and props[k] != v:
                return None
            props[k] = v
        required += [r for r in p.get("required") or [] if r not in required]
        if p.get("additionalProperties") is False:
            extra = False
    out: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    if extra is False:
        out["additionalProperties"] = False
    return out


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
    for k in ("allOf", "not", "patternProperties", "minLength", "maxLength", "multipleOf"):
        if k in schema:
            return k
    t = schema.get("type")
    if t == "object" and len(schema.get("properties") or {}) > MAX_PROPERTIES:
        return f"object of more than {MAX_PROPERTIES} properties"
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
