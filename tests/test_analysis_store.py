"""The slot analysis handed from the API process to the engine (``registry/analysis.py``): it
reads back exactly, a compile that reuses it is the compile that analyses (same slots, same
relaxations, same masks at every step of random walks), what does not read back is ignored, never
half-used, and the store stays within its bytes. The live path (middleware worker -> store ->
processor) is tested in test_serve.py."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trierouter.errors import CompileError, CorruptFileError, UnservedSchemaError
from trierouter.registry.analysis import AnalysisStore, ToolsAnalysis, tools_key
from trierouter.registry.compiler import compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.inline_tools import analyze_specs, compile_inline
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.bitmask import bitmask_to_ids
from trierouter.router.tool_calls.plan import ToolCallPlan
from trierouter.router.vllm.checks import (
    check_inline_tools,
    inline_text,
    known_inline,
    prepare_inline_tools,
    remember_inline,
)

pytest.importorskip("xgrammar")


def _fn(name: str, props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    params = {"type": "object", "properties": props, "required": list(props)}
    return {"type": "function", "function": {"name": name, "parameters": params, **extra}}


TOOLS = [
    _fn("find_restaurant", {"city": {"type": "string"},
                            "people": {"type": "integer", "enum": ["1", "2", "dontcare"]}}),
    _fn("get_weather", {"city": {"type": "string"}, "day": {"type": "string", "format": "date"}}),
    _fn("book_taxi", {"seats": {"type": "integer", "minimum": 1, "maximum": 6}}),
    _fn("send_sms", {"to": {"type": "string", "pattern": "^[0-9]{6,12}$"},
                     "body": {"type": "string", "maxLength": 40}}),
    _fn("tag", {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}),
    _fn("bad_pattern", {"x": {"type": "string", "pattern": "(?<=a)b", "maxLength": 9}}),
    _fn("empty", {}),
]  # fmt: skip


def test_analysis_reads_back_and_the_compile_reusing_it_is_the_same(qwen2: Vocabulary) -> None:
    analysis = analyze_specs(TOOLS)
    back = ToolsAnalysis.from_bytes(analysis.to_bytes())
    assert back == replace(analysis, slots=None)  # slots stay out of the file (explain only)
    assert "find_restaurant" in back.relaxed and "tag" in back.relaxed  # relaxations kept
    index = TokenIndex.get(qwen2)
    fresh = compile_tools(TOOLS, index)
    reused = compile_tools(TOOLS, index, analysis=back)
    assert reused.stats.analysis_reused and not fresh.stats.analysis_reused
    assert reused.slots == fresh.slots
    assert reused.relaxed == fresh.relaxed
    assert reused.xgrammar_schemas == fresh.xgrammar_schemas
    # the masks of both compiles agree at every step of random constrained walks
    plans = [ToolCallPlan(c, tool_choice="required") for c in (fresh, reused)]
    width = plans[0].width
    rows = [np.zeros((1, (width + 31) // 32), dtype=np.int32) for _ in plans]
    rng = random.Random(7)
    for _ in range(12):
        states: list[Any] = [p.start() for p in plans]
        for k in range(120):
            for p, st, row in zip(plans, states, rows, strict=True):
                p.fill_next_token_bitmask(st, row, 0, remaining=120 - k)
            assert np.array_equal(rows[0], rows[1])
            ids = bitmask_to_ids(rows[0][0], width).tolist()
            t = ids[rng.randrange(len(ids))]
            states = [p.advance(st, t) for p, st in zip(plans, states, strict=True)]
            assert states[0][0] == states[1][0]  # the same automaton state (matchers aside)
            if states[0][0] in (plans[0].TERMINATED, plans[0].DEAD):
                break


def test_a_strict_tool_is_refused_with_a_reused_analysis_too(qwen2: Vocabulary) -> None:
    tools = [_fn("exact", {"tags": TOOLS[4]["function"]["parameters"]["properties"]["tags"]},
                 strict=True)]  # fmt: skip
    with pytest.raises(UnservedSchemaError, match="uniqueItems"):
        compile_tools(tools, TokenIndex.get(qwen2), analysis=analyze_specs(tools))


def test_an_analysis_of_other_tools_is_refused(qwen2: Vocabulary) -> None:
    other = analyze_specs(TOOLS[:2])
    with pytest.raises(CompileError, match="other tools"):
        compile_tools(TOOLS[1:3], TokenIndex.get(qwen2), analysis=other)


def _damaged(raw: bytes) -> list[tuple[str, bytes]]:
    doc = json.loads(raw)
    out = [("truncated", raw[: len(raw) // 2]), ("not JSON", b"\x00garbage")]
    for field, value in [
        ("format", "pickle"), ("version", 99), ("names", ["a", 1]), ("engines", {"trie": "x"}),
        ("spans", [[0, -1]]), ("relaxed", {"nobody": []}), ("xgrammar", {"k": 5}),
    ]:  # fmt: skip
        bad = dict(doc)
        bad[field] = value
        out.append((field, json.dumps(bad).encode()))
    return out


def test_what_does_not_read_back_is_ignored_and_removed(tmp_path: Path) -> None:
    store = AnalysisStore(tmp_path / "a")
    analysis = analyze_specs(TOOLS)
    key = tools_key(inline_text(TOOLS))
    store.put(key, analysis)
    assert store.get(key) == replace(analysis, slots=None)
    assert store.get("0" * 64) is None  # none stored
    for what, raw in _damaged(analysis.to_bytes()):
        with pytest.raises(CorruptFileError):
            ToolsAnalysis.from_bytes(raw, what)
        (tmp_path / "a" / f"{key}.json").write_bytes(raw)
        assert store.get(key) is None, what
        assert not (tmp_path / "a" / f"{key}.json").exists(), what
    with pytest.raises(ValueError, match="64 hex digits"):
        store.get("../../etc/passwd")


def test_the_store_stays_within_its_bytes_keeping_the_newest(tmp_path: Path) -> None:
    one = analyze_specs(TOOLS).to_bytes()
    store = AnalysisStore(tmp_path, max_bytes=3 * len(one) + 10)
    keys = [f"{i:064x}" for i in range(8)]
    for k in keys:
        store.put(k, analyze_specs(TOOLS))
    left = sorted(p.stem for p in tmp_path.glob("*.json"))
    assert sum(p.stat().st_size for p in tmp_path.glob("*.json")) <= store.max_bytes
    assert keys[-1] in left and len(left) == 3
    tiny = AnalysisStore(tmp_path / "t", max_bytes=1)
    tiny.put(keys[0], analyze_specs(TOOLS))
    assert tiny.get(keys[0]) is not None  # the newest stays even past the bound


def test_prepared_tools_are_stored_and_the_check_answers_from_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qwen2: Vocabulary
) -> None:
    monkeypatch.setenv("TRIEROUTER_ANALYSIS_DIR", str(tmp_path))
    tools = [*TOOLS, _fn(f"nonce_{random.random()}".replace(".", "_"), {})]
    text = inline_text(tools)
    key = tools_key(text)
    assert not known_inline(key)
    verdict = prepare_inline_tools(text)
    assert verdict == tuple(t["function"]["name"] for t in tools)
    stored = AnalysisStore(tmp_path).get(key)
    assert stored == replace(analyze_specs(json.loads(text), text=text), slots=None)
    assert stored is not None and len(stored.spans) == len(tools)
    remember_inline(key, verdict)
    assert check_inline_tools(text) == verdict
    # prepared again (a client that sends the same tools each time): answered without a check
    # or an analysis while the analysis is stored; analysed again once it is gone
    import trierouter.router.vllm.checks as checks

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("checked again")

    with monkeypatch.context() as m:
        m.setattr(checks, "_checked", refuse)
        assert prepare_inline_tools(text) == verdict
    (tmp_path / f"{key}.json").unlink()
    assert prepare_inline_tools(text) == verdict and (tmp_path / f"{key}.json").exists()
    # a refusal travels the same way, with its message
    bad = inline_text([_fn("x", {"a": {"type": "string"}}), _fn("x", {})])
    refusal = prepare_inline_tools(bad)
    assert isinstance(refusal, str) and "twice" in refusal
    remember_inline(tools_key(bad), refusal)
    with pytest.raises(ValueError, match="twice"):
        check_inline_tools(bad)
    assert not (tmp_path / f"{tools_key(bad)}.json").exists()


def test_compile_inline_reuses_the_stored_analysis_and_warns_without_one(
    tmp_path: Path, qwen2: Vocabulary, caplog: pytest.LogCaptureFixture
) -> None:
    text = inline_text(TOOLS)
    store = AnalysisStore(tmp_path)
    index = TokenIndex.get(qwen2)
    with caplog.at_level("WARNING", logger="trierouter"):
        alone = compile_inline(text, index, format="hermes", store=store)
    assert not alone.stats.analysis_reused
    assert "analysed inside the engine's step" in caplog.text
    store.put(tools_key(text), analyze_specs(TOOLS, text=text))
    caplog.clear()
    with caplog.at_level("WARNING", logger="trierouter"):
        reused = compile_inline(text, index, format="hermes", store=store)
    assert reused.stats.analysis_reused and "inside the engine's step" not in caplog.text
    # no tool's schema was parsed to compile the set; each reads back as the whole parse's
    assert all(getattr(s, "_parsed", 0) is None for s in reused.specs)
    assert [s.parameters for s in reused.specs] == [s.parameters for s in alone.specs]
    assert [s.strict for s in reused.specs] == [s.strict for s in alone.specs]
    assert reused.stats.slots_by_engine == alone.stats.slots_by_engine
    assert reused.slots == alone.slots and reused.relaxed == alone.relaxed
    # spans of another writing of the same tools: none recorded, the whole text parsed
    assert analyze_specs(TOOLS, text=json.dumps(TOOLS, indent=1)).spans == ()
    # an analysis stored under this key for other tools: refused, analysed again
    store.put(tools_key(text), analyze_specs(TOOLS[:3]))
    again = compile_inline(text, index, format="hermes", store=store)
    assert not again.stats.analysis_reused and again.relaxed == alone.relaxed


def test_a_repeated_set_is_not_sent_to_the_worker_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The middleware's preparation: tools seen before (the same JSON as sent, their verdict
    remembered and their analysis stored) never queue in the worker behind another set; a
    set whose analysis is gone is prepared again."""
    import asyncio
    from concurrent.futures import Future

    import trierouter.router.vllm.prepare as prepare

    monkeypatch.setenv("TRIEROUTER_ANALYSIS_DIR", str(tmp_path))
    tools = [*TOOLS, _fn(f"nonce_{random.random()}".replace(".", "_"), {})]
    text = inline_text(tools)
    key = tools_key(text)
    sent: list[bytes] = []

    def worker(fn: Any, raw: bytes, syntax: Any) -> Future[Any]:  # what the worker does, here
        sent.append(raw)
        out: Future[Any] = Future()
        out.set_result((key, prepare_inline_tools(text)))
        return out

    monkeypatch.setattr(prepare, "_run", worker)
    for question in ("weather in Oslo?", "a taxi for 3", "weather in Rome?"):
        body = {"messages": [{"role": "user", "content": question}], "tools": tools}
        asyncio.run(prepare.prepare_request(json.dumps(body).encode(), body))
    assert len(sent) == 1 and known_inline(key)
    (tmp_path / f"{key}.json").unlink()
    body = {"messages": [{"role": "user", "content": "again"}], "tools": tools}
    asyncio.run(prepare.prepare_request(json.dumps(body).encode(), body))
    assert len(sent) == 2 and (tmp_path / f"{key}.json").exists()


def test_a_checked_set_walks_each_schema_once_and_analyses_it_as_a_fresh_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The middleware's check registers the tools (the registry's walk finds what is relaxed)
    and then analyses their slots for the engine: inside ``analyses_kept`` the second reuses
    the first's walk. Oracle: the analysis of the same tools by a fresh walk, slots included.
    Real schemas too: 300 OpenAPI operations when the registry is fetched."""
    from trierouter.registry.slots import dispatch
    from trierouter.router.vllm.checks import _checked

    stamp = {"type": "object", "properties": {"d": {"type": "string", "format": "date-time"}}}
    tools = [*TOOLS, _fn("untyped", {"a": {}}), _fn("nested", {"o": stamp}), _fn("again", {})]
    try:
        from trierouter.data.openapi_directory import openapi_tools

        tools += openapi_tools(300)
    except FileNotFoundError:
        pass
    text = inline_text(tools)
    fresh = analyze_specs(json.loads(text), text=text)
    walks: list[int] = []
    real = dispatch.SlotCompiler._tool

    def counted(self: Any, *a: Any, **k: Any) -> Any:
        walks.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(dispatch.SlotCompiler, "_tool", counted)
    names, analysis = _checked(text, analyze=True)
    assert names == tuple(t["function"]["name"] for t in tools)
    assert analysis == fresh  # slots, relaxations, XGrammar sub-schemas, spans
    assert len(walks) == len(tools)  # one walk per tool, not two
    walks.clear()
    assert analyze_specs(json.loads(text), text=text) == fresh and len(walks) == len(tools)
