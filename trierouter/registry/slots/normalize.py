"""One pass over a tool's argument schema before any engine sees it: exact, or a problem.

Every ``$ref`` is resolved (a dangling or remote one is a problem; a recursive one stays a
``$ref`` into ``$defs``, normalized too); ``allOf``, the siblings of ``$ref`` and the keywords
beside ``anyOf`` / ``oneOf`` are *intersected* (JSON Schema's semantics: a value must satisfy
all of them); ``enum`` / ``const`` keep only the values the other keywords accept; annotations
and unknown keywords (which constrain nothing) are dropped. What no engine serves exactly is a
:class:`Problem` naming the slot, the keyword, why and the fix: the caller refuses the tool
(``strict``, the default) or serves the schema without that keyword and records it.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from trierouter.registry.slots.anchors import inner_anchor

__all__ = [
    "MAX_MIN_ITEMS",
    "MAX_NODES",
    "Normalized",
    "Problem",
    "normalize_schema",
    "regex_problem",
]

MAX_NODES = 20_000
"""Schema nodes one tool may have once its ``$ref``s are inlined (a schema must not be able to
exhaust memory by referencing a definition many times over)."""

MAX_MIN_ITEMS = 64
"""Largest ``minItems`` served (each required item is a copy of the item's automaton or
grammar rule)."""

# 2020-12 and draft 7 keywords that constrain values, as this pass handles them
_LOCAL = frozenset(
    {
        "type", "enum", "const", "maximum", "exclusiveMaximum", "minimum",
        "exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "maxItems",
        "minItems", "required", "properties", "additionalProperties", "items",
    }
)  # fmt: skip
_APPLICATORS = frozenset({"$ref", "allOf", "anyOf", "oneOf"})
_UNSERVED: dict[str, str] = {
    "not": "remove it, or list the allowed values with enum",
    "multipleOf": "remove it, or list the allowed values with enum",
    "if": "remove if/then/else, or split the alternatives into anyOf branches",
    "then": "remove if/then/else, or split the alternatives into anyOf branches",
    "else": "remove if/then/else, or split the alternatives into anyOf branches",
    "dependentRequired": "make the properties required, or split the variants into anyOf branches",
    "dependencies": "make the properties required, or split the variants into anyOf branches",
    "dependentSchemas": "split the variants into anyOf branches",
    "patternProperties": "declare the properties under properties",
    "propertyNames": "declare the properties under properties with additionalProperties: false",
    "minProperties": "make the properties required",
    "maxProperties": "declare fewer optional properties",
    "contains": "remove it, or constrain items instead",
    "minContains": "remove it, or constrain items instead",
    "maxContains": "remove it, or constrain items instead",
    "prefixItems": "use one items schema (an anyOf of the alternatives)",
    "additionalItems": "use one items schema (an anyOf of the alternatives)",
    "uniqueItems": "remove it, or validate uniqueness after the call",
    "unevaluatedProperties": "use additionalProperties",
    "unevaluatedItems": "use items",
    "$dynamicRef": "use a plain $ref",
    "$recursiveRef": "use a plain $ref",
}
EXACT_FORMATS = frozenset({"date", "time", "date-time", "ipv4", "uuid"})
"""Formats served by their exact language (:mod:`formats`), by either engine."""
XGRAMMAR_FORMATS = frozenset({"email", "ipv6", "uri", "uri-reference", "hostname"})
"""Formats served by XGrammar's own rule (each a subset of the format's language)."""
CHECKED_FORMATS = frozenset(
    {
        "date", "date-time", "duration", "email", "hostname", "idn-email", "idn-hostname",
        "ipv4", "ipv6", "iri", "iri-reference", "json-pointer", "regex", "relative-json-pointer",
        "time", "uri", "uri-reference", "uri-template", "uuid",
    }
)  # fmt: skip
"""Formats that ``jsonschema``'s format checker knows (others are annotations: unchecked)."""
_REGEX_UNSAFE = re.compile(r"\\[SDWbBpPZAzGk0-9]|\(\?[^:]|\[:|\)[?*+{]")
"""Regex constructs whose meaning differs between Python's ``re`` (the validators') and
XGrammar's, or that XGrammar cannot serve: negated shorthands (ASCII in XGrammar, Unicode in
``re``), word boundaries, backreferences, flags and lookarounds, POSIX classes, and quantified
groups (XGrammar 0.2.8 reads ``(?:xy+)?`` as if ``x`` were optional too)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """A construct of a tool's schema that no engine serves exactly."""

    path: str
    """The slot (``body.items[]``; ``$`` for the arguments object itself)."""
    keyword: str
    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path or '$'}: {self.keyword}: {self.why}; {self.fix}"

    @property
    def kind(self) -> str:
        """The keyword relaxed (``type`` beside a contradicting ``enum``, ``pattern``...)."""
        return self.keyword

    def to_dict(self) -> dict[str, str]:
        """``{"kind", "path", "why"}``: a relaxation as reported on a response."""
        return {"kind": self.keyword, "path": self.path or "$", "why": self.why}


@dataclass
class Normalized:
    schema: dict[str, Any]
    """The normalized schema (``$ref`` only where recursive, into :attr:`defs`)."""
    defs: dict[str, Any]
    """Normalized targets of the recursive ``$ref``s, by name (``#/$defs/<name>``)."""
    problems: list[Problem]


class _Empty(Exception):
    """The intersection has no value."""


def regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` may mean something else to XGrammar than to Python's ``re`` (which
    validators use), or ``None``."""
    m = _REGEX_UNSAFE.search(pattern)
    if m is not None:
        return f"{m.group()!r} in the pattern means something else to XGrammar than to re"
    if inner_anchor(pattern):
        return "an anchor inside the pattern: XGrammar ignores it, re does not"
    return None


def _types(t: Any) -> set[str]:
    return set(t) if isinstance(t, list) else {t}


def _is_type(value: Any, t: str) -> bool:
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if t == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if t == "string":
        return isinstance(value, str)
    if t == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


class _Normalizer:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.problems: list[Problem] = []
        self.defs: dict[str, Any] = {}
        self._names: dict[str, str] = {}  # pointer -> name in defs
        self._stack: list[str] = []
        self.nodes = 0

    def problem(self, path: str, keyword: str, why: str, fix: str) -> None:
        p = Problem(path, keyword, why, fix)
        if p not in self.problems:
            self.problems.append(p)

    # -- resolution ------------------------------------------------------------------------
    def _target(self, ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None
        node: Any = self.root
        if ref in ("#", "#/"):
            return node
        if not ref.startswith("#/"):
            return None
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node if isinstance(node, dict | bool) else None

    def _def_name(self, ref: str) -> str:
        name = self._names.get(ref)
        if name is None:
            base = re.sub(r"[^A-Za-z0-9_.-]", "_", ref.rsplit("/", 1)[-1]) or "def"
            name = base
            n = 1
            while name in self.defs or name in self._names.values():
                n += 1
                name = f"{base}_{n}"
            self._names[ref] = name
        return name

    # -- the pass --------------------------------------------------------------------------
    def node(self, schema: Any, path: str) -> dict[str, Any]:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            if self.nodes == MAX_NODES + 1:
                self.problem(
                    path, "$ref", f"more than {MAX_NODES} schema nodes once $refs are inlined",
                    "reference fewer definitions, or make a large one a plain object",
                )  # fmt: skip
            return {}
        if schema is True:
            return {}
        if schema is False:
            self.problem(path, "false", "no value is valid here", "remove the property")
            return {}
        if not isinstance(schema, dict):
            self.problem(path, "schema", f"{schema!r:.40} is not a schema", "use an object")
            return {}
        local: dict[str, Any] = {}
        for k, v in schema.items():
            if k in _UNSERVED:
                if (k == "uniqueItems" and v is False) or (k == "minProperties" and v == 0):
                    continue  # no constraint
                self.problem(path, k, "no engine serves it exactly", _UNSERVED[k])
            elif k in _LOCAL:
                local[k] = v
        if isinstance(local.get("items"), list):
            self.problem(path, "items", "a list of item schemas (draft 7 tuples) is not served",
                         "use one items schema (an anyOf of the alternatives)")  # fmt: skip
            del local["items"]
        if isinstance(local.get("properties"), dict):
            local["properties"] = {
                k: self.node(v, f"{path}.{k}" if path else k)
                for k, v in local["properties"].items()
            }
        if isinstance(local.get("items"), dict | bool):
            local["items"] = self.node(local["items"], path + "[]")
        extra = local.get("additionalProperties")
        if isinstance(extra, dict):
            local["additionalProperties"] = self.node(extra, path + "{}")
        fmt = local.get("format")
        if isinstance(fmt, str) and fmt not in EXACT_FORMATS | XGRAMMAR_FORMATS:
            del local["format"]
            if fmt in CHECKED_FORMATS:
                self.problem(path, "format", f"format {fmt!r} is not served",
                             "remove it, or give a pattern")  # fmt: skip
        parts: list[dict[str, Any]] = [local]
        if "$ref" in schema:
            parts.append(self.ref(schema["$ref"], path))
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            parts += [self.node(p, path) for p in all_of]
        try:
            out: dict[str, Any] = {}
            for p in parts:
                out = self.intersect(out, p, path)
            any_of, one_of = schema.get("anyOf"), schema.get("oneOf")
            if isinstance(any_of, list) and isinstance(one_of, list):
                self.problem(path, "oneOf", "anyOf and oneOf in one schema are not served",
                             "merge them into one anyOf")  # fmt: skip
                one_of = None
            branches = any_of if isinstance(any_of, list) else one_of
            if isinstance(branches, list):
                out = self.union(out, branches, path, exclusive=branches is one_of)
            return self.finish(out, path)
        except _Empty:
            self.problem(path, "allOf", "no value satisfies all of its keywords",
                         "remove the contradiction")  # fmt: skip
            return {}

    def ref(self, ref: Any, path: str) -> dict[str, Any]:
        target = self._target(ref)
        if target is None:
            why = f"{ref!r:.80} does not resolve inside the schema"
            self.problem(path, "$ref", why, "define it under $defs (#/$defs/NAME) or inline it")
            return {}
        if ref in self._stack:  # recursive: a $ref into $defs, normalized once
            name = self._def_name(ref)
            return {"$ref": f"#/$defs/{name}"}
        self._stack.append(ref)
        try:
            out = self.node(target, path)
        finally:
            self._stack.pop()
        if ref in self._names and self._names[ref] not in self.defs:
            self.defs[self._names[ref]] = out
        return out

    def union(
        self, base: dict[str, Any], branches: list[Any], path: str, *, exclusive: bool
    ) -> dict[str, Any]:
        kept: list[dict[str, Any]] = []
        for i, br in enumerate(branches):
            sub = self.node(br, f"{path}|{i}")
            try:
                kept.append(self.intersect(base, sub, path))
            except _Empty:
                continue  # a branch no value can take adds nothing
        if not kept:
            raise _Empty
        if exclusive and len(kept) > 1 and not _disjoint(kept):
            self.problem(path, "oneOf", "its branches may overlap (a value matching two is "
                         "invalid)", "make the branches' types or constants distinct, or use "
                         "anyOf")  # fmt: skip
        if len(kept) == 1:
            return kept[0]
        return {"anyOf": kept}

    # -- intersection ----------------------------------------------------------------------
    def intersect(self, a: dict[str, Any], b: dict[str, Any], path: str) -> dict[str, Any]:
        if not a or a == b:
            return b
        if not b:
            return a
        for x, y in ((a, b), (b, a)):
            if "anyOf" in x:
                rest = {k: v for k, v in x.items() if k != "anyOf"}
                kept: list[dict[str, Any]] = []
                for br in x["anyOf"]:
                    with contextlib.suppress(_Empty):
                        kept.append(self.intersect(self.intersect(rest, br, path), y, path))
                if not kept:
                    raise _Empty
                return kept[0] if len(kept) == 1 else {"anyOf": kept}
        if "$ref" in a or "$ref" in b:
            self.problem(path, "$ref", "a recursive $ref beside other keywords is not served",
                         "move the keywords into the definition")  # fmt: skip
            return a if "$ref" in a else b
        out = dict(a)
        for k, vb in b.items():
            if k not in out:
                out[k] = vb
                continue
            va = out[k]
            if va == vb:
                continue
            if k == "type":
                ta, tb = _types(va), _types(vb)
                both = ta & tb
                if "integer" in ta and "number" in tb:
                    both.add("integer")
                if "number" in ta and "integer" in tb:
                    both.add("integer")
                if not both:
                    raise _Empty
                order = [t for t in (va if isinstance(va, list) else [va]) if t in both]
                order += sorted(both - set(order))
                out[k] = order[0] if len(order) == 1 else order
            elif k == "properties":
                merged = dict(va)
                for name, sub in vb.items():
                    merged[name] = (
                        self.intersect(merged[name], sub, path) if name in merged else sub
                    )
                out[k] = merged
            elif k == "required":
                out[k] = list(dict.fromkeys([*va, *vb]))
            elif k in ("minimum", "exclusiveMinimum", "minLength", "minItems"):
                out[k] = max(va, vb)
            elif k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems"):
                out[k] = min(va, vb)
            elif k == "items":
                out[k] = self.intersect(va, vb, path + "[]")
            elif k in ("enum", "const"):
                ka = {_key(v) for v in (va if k == "enum" else [va])}
                vals = [v for v in (vb if k == "enum" else [vb]) if _key(v) in ka]
                if not vals:
                    raise _Empty
                out.pop(k)
                out["enum"] = vals
            elif k == "multipleOf" and all(isinstance(v, int) for v in (va, vb)):
                out[k] = va * vb // math.gcd(va, vb)
            else:
                self.problem(path, k, f"two different values ({_key(va)[:40]}, "
                             f"{_key(vb)[:40]}) to intersect", "keep one")  # fmt: skip
        if "enum" in out and "const" in out:
            out["enum"] = [v for v in out["enum"] if _key(v) == _key(out.pop("const"))]
            if not out["enum"]:
                raise _Empty
        ea, eb = a.get("additionalProperties"), b.get("additionalProperties")
        pa, pb = set(a.get("properties") or {}), set(b.get("properties") or {})
        if (ea is not None and ea is not True and not pb <= pa) or (
            eb is not None and eb is not True and not pa <= pb
        ):
            self.problem(path, "additionalProperties", "intersected with another schema's "
                         "properties", "declare every property in both")  # fmt: skip
        return out

    # -- last step: enum / const against their siblings ------------------------------------
    def finish(self, out: dict[str, Any], path: str) -> dict[str, Any]:
        if "const" in out:
            out["enum"] = [out.pop("const")]
        if "enum" in out:
            values = out["enum"]
            if not isinstance(values, list):
                return out
            rest = {k: v for k, v in out.items() if k != "enum"}
            if rest:
                kept = [v for v in values if self._valid(v, rest)]
                if not kept and values:  # a contradiction: the listed values are what was meant
                    untyped = {k: w for k, w in rest.items() if k != "type"}
                    typed = "type" in rest and all(self._valid(v, untyped) for v in values)
                    what = f"type {_key(rest['type'])}" if typed else f"its siblings {sorted(rest)}"
                    why = f"no value of its enum is valid against {what}: served as its values"
                    fix = "make the enum and the other keywords agree"
                    self.problem(path, "type" if typed else "enum", why, fix)
                    return {"enum": values}
                if not kept:
                    raise _Empty
                return {"enum": kept}
            return out
        if out.get("type") == "integer":
            for key, up in (("minimum", True), ("exclusiveMinimum", True), ("maximum", False),
                            ("exclusiveMaximum", False)):  # fmt: skip
                v = out.get(key)
                if isinstance(v, float):
                    if key.startswith("exclusive"):
                        v = math.floor(v) + 1 if up else math.ceil(v) - 1
                        del out[key]
                        key = "minimum" if up else "maximum"
                        old = out.get(key)
                        if old is not None:
                            v = max(v, old) if up else min(v, old)
                    else:
                        v = math.ceil(v) if up else math.floor(v)
                    out[key] = int(v)
        if isinstance(out.get("minItems"), int) and out["minItems"] > MAX_MIN_ITEMS:
            self.problem(path, "minItems", f"minItems {out['minItems']} is above {MAX_MIN_ITEMS}",
                         "lower it, or check the count after the call")  # fmt: skip
            out["minItems"] = MAX_MIN_ITEMS
        if "multipleOf" in out and out.get("type") != "integer":
            self.problem(path, "multipleOf", "multipleOf is served on integers only",
                         'use "type": "integer", or drop multipleOf')  # fmt: skip
        return out

    def _valid(self, value: Any, schema: dict[str, Any]) -> bool:
        if "type" in schema and not any(_is_type(value, t) for t in _types(schema["type"])):
            return False
        rest = set(schema) - {"type"}
        if not rest:
            return True
        if rest <= {"minLength", "maxLength"} and isinstance(value, str):
            n = len(value)
            return bool(schema.get("minLength", 0) <= n <= schema.get("maxLength", n))
        import jsonschema

        root = {**schema, "$defs": self.defs} if self.defs else schema
        return bool(
            jsonschema.Draft202012Validator(
                root, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
            ).is_valid(value)
        )


def _first(schema: dict[str, Any]) -> set[str] | None:
    """Kinds of JSON value the schema allows (None: any)."""
    if "enum" in schema:
        kinds = set()
        for v in schema["enum"]:
            kinds.add(_key(v) if not isinstance(v, dict | list) else "*")
        return kinds if "*" not in kinds else None
    if "anyOf" in schema:
        out: set[str] = set()
        for br in schema["anyOf"]:
            f = _first(br)
            if f is None:
                return None
            out |= f
        return out
    t = schema.get("type")
    if t is None:  # any kind of value (``properties`` alone constrains objects only)
        return None
    kinds = _types(t)
    if "integer" in kinds or "number" in kinds:
        kinds |= {"number"}
        kinds.discard("integer")
    return kinds


_KINDS = ("null", "boolean", "object", "array", "number", "string")


def _overlap(a: set[str], b: set[str]) -> bool:
    if a & b:
        return True
    for x, y in ((a, b), (b, a)):
        for k in x - set(_KINDS):
            v = json.loads(k)
            kind = next(t for t in ("null", "boolean", "number", "string", "array", "object")
                        if _is_type(v, t))  # fmt: skip
            if kind in y:
                return True
    return False


def _apart(a: dict[str, Any], b: dict[str, Any], depth: int = 0) -> bool:
    """Provably no value matches both: their kinds or constants differ, or both are objects
    that require a property whose values are apart (a discriminator)."""
    ka, kb = _first(a), _first(b)
    if ka is None or kb is None:
        return False
    if not _overlap(ka, kb):
        return True
    if depth < 4 and ka == kb == {"object"} and "anyOf" not in a and "anyOf" not in b:
        pa, pb = a.get("properties") or {}, b.get("properties") or {}
        both = set(a.get("required") or []) & set(b.get("required") or [])
        return any(n in pa and n in pb and _apart(pa[n], pb[n], depth + 1) for n in sorted(both))
    return False


def _disjoint(branches: list[dict[str, Any]]) -> bool:
    """Provably no value matches two of the branches."""
    return all(
        _apart(branches[i], branches[j])
        for i in range(len(branches))
        for j in range(i + 1, len(branches))
    )


def normalize_schema(schema: Any) -> Normalized:
    """The normalized form of a tool's argument schema, its recursive definitions and the
    problems found (see the module docstring)."""
    n = _Normalizer(schema)
    out = n.node(schema, "")
    return Normalized(out, n.defs, n.problems)
