"""Names tries and turn-closing tables compiled by a server's worker process for a new inline
tool set (``router/vllm/prepare.py`` -> ``AnalysisStore.put_names``), and inline value sets
(``put_values``), loaded by the engine instead of compiled inside its step: the oracle is the
synchronous compile of the same set, and every mask of random walks (names, arguments,
following calls, under ``max_tokens`` limits) is the same on both, for the plans and for the
vLLM logits processor; nothing of the prepared side compiles a names trie, a closing table or
a value set. The live path (middleware worker -> store -> engine) is tested in test_serve.py."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trierouter.data.synthetic import tool_names
from trierouter.registry.analysis import STEP_WORK, AnalysisStore, tools_key
from trierouter.registry.call_formats import AUTO_OPENERS
from trierouter.registry.compiler import compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.inline_tools import compile_inline
from trierouter.registry.trie import compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.bitmask import bitmask_to_ids
from trierouter.router.tool_calls.native import native_plan
from trierouter.router.tool_calls.plan import ToolCallPlan
from trierouter.router.vllm.checks import inline_text, prepare_inline_tools
from trierouter.router.vllm.prepare import prepare_names, prepare_values

pytest.importorskip("xgrammar")

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                      "days": {"type": "integer", "minimum": 1}},
     "required": ["city"]},
    {"type": "object", "properties": {"day": {"type": "string", "format": "date"}},
     "required": ["day"]},
    {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "n": {"type": "boolean"}}},
    {"type": "object", "properties": {}},
]  # fmt: skip


def _tools(n: int, seed: int) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": name, "parameters": SCHEMAS[i % len(SCHEMAS)]}}
        for i, name in enumerate(tool_names(n, seed=seed))
    ]


def _store(tmp_path: Path, vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch) -> AnalysisStore:
    monkeypatch.setenv("TRIEROUTER_ANALYSIS_DIR", str(tmp_path))
    store = AnalysisStore(tmp_path)
    store.put_vocabulary(vocab)  # what the engine does at start
    return store


def test_the_engine_vocabulary_reads_back(
    tmp_path: Path, qwen2: Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path, qwen2.with_width(151_936), monkeypatch)
    back = store.vocabulary()
    assert back is not None and back.hash == qwen2.with_width(151_936).hash
    assert back.tokens == qwen2.tokens and back.end_ids == qwen2.end_ids
    raw = bytearray((tmp_path / "vocabulary.trv").read_bytes())
    raw[-1] ^= 1  # a damaged file is refused, never half-used
    (tmp_path / "vocabulary.trv").write_bytes(bytes(raw))
    assert store.vocabulary() is None


def _walk(
    plan: ToolCallPlan, rng: random.Random, limit: int, trigger: bytes | None
) -> tuple[list[int], list[np.ndarray]]:
    """A random walk of ``plan`` under ``limit`` tokens (under ``auto``, into ``trigger``'s
    call first), with every mask on the way."""
    tokens, masks, st = [], [], plan.start()
    vocab = plan.vocabulary.tokens
    written = b""
    while len(tokens) < limit and st[0] not in (plan.TERMINATED, plan.DEAD, plan.DONE):
        ids = plan.allowed_token_ids(st, remaining=limit - len(tokens))
        masks.append(ids)
        assert len(ids), "empty mask"
        pick = ids.tolist()
        if trigger is not None and st[0] < plan.NAME:
            toward = [t for t in pick if vocab[t] and trigger.startswith(written + vocab[t])]
            pick = toward or pick
        t = rng.choice(pick)
        written += vocab[t]
        tokens.append(t)
        st = plan.advance(st, t)
    return tokens, masks


@pytest.mark.parametrize(
    ("n", "fmt", "choice", "parallel"),
    [
        (300, "hermes", "required", True),  # over EXACT_TOOLS: arguments guessed
        (300, "hermes", "auto", False),
        (40, "hermes", "required", False),  # sized exactly, every tool's automaton
        (60, "json_array", "required", True),  # the turn's closing text
        (300, "mistral", "auto", True),
    ],
)
def test_prepared_names_give_the_masks_of_the_synchronous_compile(
    tmp_path: Path,
    qwen2: Vocabulary,
    qwen2_index: TokenIndex,
    monkeypatch: pytest.MonkeyPatch,
    n: int,
    fmt: str,
    choice: str,
    parallel: bool,
) -> None:
    store = _store(tmp_path, qwen2, monkeypatch)
    tools = _tools(n, seed=n)
    text = inline_text(tools)
    key = tools_key(text)
    assert not isinstance(prepare_inline_tools(text), str)  # the worker: the analysis ...
    stored = prepare_names(text, key, (fmt, AUTO_OPENERS), choice, parallel)  # ... and names
    assert stored >= 1 + parallel
    opts: dict[str, Any] = dict(tool_choice=choice, parallel=parallel, openers=AUTO_OPENERS)
    before = dict(STEP_WORK)
    prepared = native_plan(compile_inline(text, qwen2_index, format=fmt, store=store), **opts)
    assert dict(STEP_WORK) == before  # every names trie the plan made was loaded
    sync = native_plan(compile_tools(json.loads(text), qwen2_index, format=fmt), **opts)
    assert prepared.names is not sync.names
    assert sync.names.values == prepared.names.values
    triggers = [p.format.watch.encode() for p in [prepared, *prepared._alts]]
    rng = random.Random(n)
    for k in range(12):
        limit = rng.choice([10, 24, 48, 200])
        trigger = rng.choice(triggers) if choice == "auto" else None
        work = dict(STEP_WORK)
        tokens, masks = _walk(prepared, random.Random(k), limit, trigger)
        assert dict(STEP_WORK) == work, "the prepared plan compiled names inside the step"
        st = sync.start()
        for i, t in enumerate(tokens):  # the oracle, along the same tokens
            want = sync.allowed_token_ids(st, remaining=limit - i)
            assert np.array_equal(want, masks[i]), (k, i, prepared.vocabulary.decode(tokens[:i]))
            st = sync.advance(st, t)
    assert sum(STEP_WORK.values()) > sum(before.values())  # the oracle did compile


def test_a_named_choice_compiles_only_its_one_name_trie(
    tmp_path: Path, qwen2: Vocabulary, qwen2_index: TokenIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A named ``tool_choice`` decodes a one-name trie (compiled in the step, uncounted: one
    name); the tools' own names trie, which compiling the set builds, comes prepared."""
    store = _store(tmp_path, qwen2, monkeypatch)
    tools = _tools(300, seed=21)
    text, name = inline_text(tools), tools[7]["function"]["name"]
    assert not isinstance(prepare_inline_tools(text), str)
    assert prepare_names(text, tools_key(text), ("hermes", AUTO_OPENERS), name, True) == 1
    before = dict(STEP_WORK)
    plan = native_plan(compile_inline(text, qwen2_index, format="hermes", store=store),
                       tool_choice=name)  # fmt: skip
    tokens, _ = _walk(plan, random.Random(1), 40, None)
    assert dict(STEP_WORK) == before
    assert name in plan.vocabulary.decode(tokens).decode()


def test_without_prepared_names_the_engine_compiles_and_counts_it(
    tmp_path: Path, qwen2: Vocabulary, qwen2_index: TokenIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path, qwen2, monkeypatch)
    text = inline_text(_tools(300, seed=7))
    assert not isinstance(prepare_inline_tools(text), str)  # the analysis only
    names = STEP_WORK["names_trie"]
    tools = compile_inline(text, qwen2_index, format="hermes", store=store)
    assert STEP_WORK["names_trie"] == names + 1 and tools.stats.analysis_reused
    tables = STEP_WORK["closer_table"]
    plan = native_plan(tools, tool_choice="required")
    plan.allowed_token_ids(plan.start(), remaining=16)
    assert STEP_WORK["closer_table"] == tables + 1
    # a table that does not fit its trie is refused, and the names compiled again
    assert prepare_names(text, tools_key(text), ("hermes", ()), "required", False) == 1
    (cost,) = tmp_path.glob("*.cost")
    trie = next(tmp_path.glob("*.trt"))
    other = inline_text(_tools(301, seed=8))
    prepare_inline_tools(other)
    prepare_names(other, tools_key(other), ("hermes", ()), "required", False)
    newer = next(p for p in tmp_path.glob("*.cost") if p != cost)
    cost.write_bytes(newer.read_bytes())
    lead = plan.format.lead()
    loaded = store.get_trie(tools_key(text), qwen2, "hermes", lead)
    assert loaded is not None and trie.exists()
    assert store.get_table(tools_key(text), qwen2, "hermes", lead, "g", loaded) is None


def test_prepared_value_sets_are_the_compiled_sets(
    tmp_path: Path, qwen2: Vocabulary, qwen2_index: TokenIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path, qwen2, monkeypatch)
    values = [*tool_names(2000, seed=3), "get", "get_x", "é"]
    assert prepare_values(values)  # the worker's part
    assert not prepare_values([]) and not prepare_values(["a", 3])  # what vLLM refuses
    key = hashlib.sha256(json.dumps(values, ensure_ascii=False).encode()).hexdigest()
    loaded = store.get_values(key, qwen2)
    want = compile_choices(values, qwen2_index)
    assert loaded is not None and loaded.values == want.values
    rng = random.Random(0)
    for _ in range(50):  # every mask of random walks equal
        a, b = loaded.root, want.root
        while a not in (loaded.END, loaded.DEAD):
            ids = bitmask_to_ids(want.mask(b), want.width)
            assert np.array_equal(bitmask_to_ids(loaded.mask(a), loaded.width), ids)
            t = int(rng.choice(ids.tolist()))
            a, b = loaded.advance(a, t), want.advance(b, t)


def _processor(
    factory: pytest.TempPathFactory, store: Path | None, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """The engine's logits processor (test_serve_units), with or without the analysis store."""
    from tests.test_serve_units import _engine_processor

    if store is None:
        monkeypatch.delenv("TRIEROUTER_ANALYSIS_DIR", raising=False)
    else:
        monkeypatch.setenv("TRIEROUTER_ANALYSIS_DIR", str(store))
    proc = _engine_processor(factory, WIDTH)
    proc._warm.join(timeout=300)
    return proc


WIDTH = 151_872


def test_the_engine_loads_what_the_worker_prepared(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new inline tool set and a new value set, each as one request of a batch: the engine
    whose worker prepared them compiles nothing inside its steps (update_state and apply), and
    every step's mask equals the one of an engine without a store (the synchronous path)."""
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    folder = tmp_path_factory.mktemp("prepared-store")
    sync = _processor(tmp_path_factory, None, monkeypatch)
    prepared = _processor(tmp_path_factory, folder, monkeypatch)  # publishes its vocabulary
    assert (folder / "vocabulary.trv").is_file()
    text = inline_text(_tools(300, seed=11))
    values = tool_names(700, seed=12)
    assert not isinstance(prepare_inline_tools(text), str)  # the worker's part, here
    assert prepare_names(text, tools_key(text), ("hermes", AUTO_OPENERS), "required", True)
    assert prepare_values(values)
    args = [{"trierouter_tools_inline": text, "trierouter_tool_choice": "required",
             "trierouter_tool_format": "hermes", "trierouter_parallel_tool_calls": 1},
            {"trierouter_choices": values}]  # fmt: skip
    rng = random.Random(5)
    for limit in (12, 40):
        outs: dict[int, list[list[int]]] = {id(p): [[], []] for p in (sync, prepared)}
        params = [SamplingParams(max_tokens=limit, extra_args=a) for a in args]
        work = sum(STEP_WORK.values())
        for p in (prepared, sync):
            added = [(i, params[i], [1], outs[id(p)][i]) for i in range(2)]
            p.update_state(BatchUpdate(batch_size=2, removed=[], added=added, moved=[]))
            if p is prepared:
                assert sum(STEP_WORK.values()) == work, dict(STEP_WORK)
        for _ in range(limit):
            masks = []
            for p in (prepared, sync):
                before = sum(STEP_WORK.values())
                logits = p.apply(torch.zeros((2, WIDTH)))
                if p is prepared:
                    assert sum(STEP_WORK.values()) == before, dict(STEP_WORK)
                masks.append(torch.isfinite(logits))
            assert torch.equal(masks[0], masks[1])
            for row in range(2):
                t = rng.choice(masks[0][row].nonzero().flatten().tolist())
                for p in (prepared, sync):
                    outs[id(p)][row].append(t)
        for p in (prepared, sync):
            p.update_state(BatchUpdate(batch_size=0, removed=[0, 1], added=[], moved=[]))


def test_prepared_sets_count_toward_the_stores_bytes(
    tmp_path: Path, qwen2: Vocabulary, qwen2_index: TokenIndex
) -> None:
    """Names and value sets are bounded with the analyses: the oldest files go first, the
    newest stays, the engine's vocabulary is never trimmed."""
    store = AnalysisStore(tmp_path, max_bytes=1)
    store.put_vocabulary(qwen2)
    keys = []
    for seed in range(3):
        values = tool_names(300, seed=seed)
        keys.append(hashlib.sha256(json.dumps(values).encode()).hexdigest())
        store.put_values(keys[-1], compile_choices(values, qwen2_index))
    assert [store.has_values(k) for k in keys] == [False, False, True]
    assert store.vocabulary() is not None
    roomy = AnalysisStore(tmp_path, max_bytes=256 << 20)
    values = tool_names(300, seed=0)
    roomy.put_values(keys[0], compile_choices(values, qwen2_index))
    assert [roomy.has_values(k) for k in keys] == [True, False, True]


def test_tool_choice_none_never_compiles_the_set_in_the_step(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tool_choice: "none"`` constrains the text to never write the call opener, whatever the
    tools: a new inline set sent with it is neither analysed nor compiled in the engine's step
    (the worker never sees it). Oracle: the ``"none"`` plan over the request's own tools, mask
    for mask along walks that head for ``<tool_call>`` whenever they can."""
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    import trierouter.router.vllm.tool_sets as tool_sets

    proc = _processor(tmp_path_factory, None, monkeypatch)
    tools = _tools(300, seed=21)
    oracle = ToolCallPlan(compile_tools(tools, proc._ensure_index()), tool_choice="none")

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the set was compiled in the step")

    monkeypatch.setattr(tool_sets, "compile_inline", refuse)
    trigger, vocab = b"<tool_call>", oracle.vocabulary.tokens
    args = {
        "trierouter_tools_inline": inline_text(tools),
        "trierouter_tool_choice": "none",
        "trierouter_tool_format": "hermes",
    }
    rng = random.Random(3)
    for _ in range(3):
        out: list[int] = []
        params = SamplingParams(max_tokens=40, extra_args=args)
        proc.update_state(BatchUpdate(batch_size=1, removed=[], added=[(0, params, [1], out)],
                                      moved=[]))  # fmt: skip
        st, written = oracle.start(), b""
        for _ in range(40):
            got = torch.isfinite(proc.apply(torch.zeros((1, WIDTH))))[0].nonzero().flatten()
            want = oracle.allowed_token_ids(st).tolist()
            assert got.tolist() == sorted(want)
            held = max(k for k in range(len(trigger)) if written.endswith(trigger[:k]))
            toward = [t for t in want if vocab[t] and trigger.startswith(trigger[:held] + vocab[t])]
            t = rng.choice(toward or want)
            written += vocab[t]
            out.append(t)
            st = oracle.advance(st, t)
        assert trigger not in written
        proc.update_state(BatchUpdate(batch_size=0, removed=[0], added=[], moved=[]))


def test_registries_are_warmed_when_the_engine_starts(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A named registry's first ``required`` and ``auto`` requests (one call and several) in
    the model's call format compile nothing inside the step: the engine's warm-up thread built
    their names tries and closing tables. Oracle: the same plan over the registry compiled
    apart, mask for mask (under ``max_tokens``) along walks into a call."""
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from trierouter.router.vllm.tool_sets import WARMED

    tools = _tools(300, seed=31)
    (tmp_path / "api.json").write_text(json.dumps(tools))
    monkeypatch.setenv("TRIEROUTER_TOOLS", str(tmp_path / "api.json"))
    monkeypatch.setenv("TRIEROUTER_TOOL_FORMAT", "hermes")  # the tiny model's template has none
    proc = _processor(tmp_path_factory, None, monkeypatch)  # joins the warm-up thread
    index = proc._ensure_index()
    apart = compile_tools(tools, index, format="hermes")
    rng, limit, inside = random.Random(8), 24, 0
    for choice, parallel in WARMED:
        args = {"trierouter_tools": "api", "trierouter_tool_choice": choice,
                "trierouter_tool_format": "hermes",
                "trierouter_parallel_tool_calls": parallel}  # fmt: skip
        out: list[int] = []
        params = SamplingParams(max_tokens=limit, extra_args=args)
        before = STEP_WORK.total()
        proc.update_state(BatchUpdate(batch_size=1, removed=[], added=[(0, params, [1], out)],
                                      moved=[]))  # fmt: skip
        inside += STEP_WORK.total() - before
        oracle = native_plan(apart, tool_choice=choice, parallel=parallel)
        st, written = oracle.start(), b""
        vocab = oracle.vocabulary.tokens
        while len(out) < limit and st[0] not in (oracle.TERMINATED, oracle.DEAD, oracle.DONE):
            before = STEP_WORK.total()
            got = torch.isfinite(proc.apply(torch.zeros((1, WIDTH))))[0].nonzero().flatten()
            inside += STEP_WORK.total() - before
            want = oracle.allowed_token_ids(st, remaining=limit - len(out)).tolist()
            assert got.tolist() == sorted(want), (choice, parallel, len(out))
            toward = [t for t in want if st[0] < oracle.NAME and vocab[t]
                      and b"<tool_call>".startswith(written + vocab[t])]  # fmt: skip
            t = rng.choice(toward or want)
            written += vocab[t]
            out.append(t)
            st = oracle.advance(st, t)
        proc.update_state(BatchUpdate(batch_size=0, removed=[0], added=[], moved=[]))
    assert inside == 0, dict(STEP_WORK)  # nothing compiled in the steps
    # nor later: every names trie and closing table of these plans (following calls too)
    from trierouter.router.tool_calls.closing import plan_tables

    warmed = proc._tool_sets.registry_in("api", "hermes")
    before = STEP_WORK.total()
    for choice, parallel in WARMED:
        assert plan_tables(native_plan(warmed, tool_choice=choice, parallel=parallel, budget=7))
    assert STEP_WORK.total() == before, dict(STEP_WORK)


def test_a_closing_table_is_kept_with_its_tools_across_plans(qwen2_index: TokenIndex) -> None:
    """Plans over the same tools that differ only in their budgets (a server's requests with
    other ``max_tokens``) share the turn-closing table the first one computed. Oracle: the
    masks of the same plan over the tools compiled afresh."""
    tools = _tools(300, seed=41)
    kept = compile_tools(tools, qwen2_index, format="hermes")
    first = native_plan(kept, tool_choice="required", parallel=True)
    first.allowed_token_ids(first.start(), remaining=12)  # computes the table
    rng = random.Random(2)
    for budget in (4, 9):
        plan = native_plan(kept, tool_choice="required", parallel=True, budget=budget)
        fresh = native_plan(compile_tools(tools, qwen2_index, format="hermes"),
                            tool_choice="required", parallel=True, budget=budget)  # fmt: skip
        st, inside = plan.start(), 0
        for left in range(20, 0, -1):
            before = STEP_WORK.total()
            ids = plan.allowed_token_ids(st, remaining=left)
            inside += STEP_WORK.total() - before
            assert ids.tolist() == fresh.allowed_token_ids(st, remaining=left).tolist()
            if st[0] in (plan.TERMINATED, plan.DONE) or not len(ids):
                break
            st = plan.advance(st, rng.choice(ids.tolist()))
        assert inside == 0, dict(STEP_WORK)
