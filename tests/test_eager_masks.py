"""An eager registry's masks walked on a second thread (:mod:`trierouter.registry.slots.eager`).

``dfa_masks_many`` runs many ``dfa_masks`` calls in one release of the GIL: checked against
brute force (every token stepped from every state) and against ``dfa_masks`` call by call, in
both output forms, with a bad call refused before any walk. The pipeline, in batches of a few
automata so that results come back while later automata are built, gives every tool the masks
of a lazily built automaton; an error on either thread leaves no worker behind.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from trierouter.registry.compiler import compile_tools
from trierouter.registry.core import native_core
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import shipped_vocabulary
from trierouter.registry.slots import eager
from trierouter.testing.mcp_server import server_tools

from .test_automata_pieces import _brute_rows


def _random_calls(core: Any, seed: int) -> tuple[list[tuple[Any, ...]], list[bytes]]:
    rng = np.random.default_rng(seed)
    alphabet = list(b'abcdefghijklmnop-"')
    tokens = list(
        dict.fromkeys(
            bytes(rng.choice(alphabet, size=int(rng.integers(1, 7))).tolist()) for _ in range(300)
        )
    )
    trie = core.TokenTrie(tokens, np.ones(len(tokens), dtype=np.uint8))
    quote = [t for t in tokens if b'"' in t]
    qtrie = core.TokenTrie(
        tokens, np.array([b'"' in t for t in tokens], dtype=np.uint8)
    )  # the quote tokens only (ids of the whole list)
    assert quote
    bc = np.full(256, 3, dtype=np.int32)
    bc[np.frombuffer(b"abcdefghijklmnop", dtype=np.uint8)] = 0
    bc[ord("-")], bc[ord('"')] = 1, 2
    calls: list[tuple[Any, ...]] = []
    for _ in range(30):
        ns = int(rng.integers(2, 40))
        tab = rng.integers(-1, ns, size=(ns, 4)).astype(np.int32)
        tab[rng.random((ns, 4)) < 0.25] = -1
        states = rng.integers(-1, ns, size=int(rng.integers(1, 2 * ns))).astype(np.int64)
        if rng.random() < 0.5:
            calls.append((tab, bc, states, trie))
        else:
            alt = (rng.random(len(states)) < 0.4).astype(np.uint8)
            calls.append((tab.astype(np.int16), bc, states, trie, 0, qtrie, alt))
    return calls, tokens


def test_dfa_masks_many_equals_brute_force_and_single_calls() -> None:
    """Every call's rows: the tokens whose bytes all have edges from the state (a flagged
    state: among the quote tokens only), as ``dfa_masks`` gives them one call at a time; the
    packed-rows form too; an empty list gives an empty list."""
    core = native_core()
    calls, tokens = _random_calls(core, 7)
    many = core.dfa_masks_many(calls)
    assert len(many) == len(calls)
    for call, (ptr, ids) in zip(calls, many, strict=True):
        one_ptr, one_ids = core.dfa_masks(*call)
        assert np.array_equal(ptr, one_ptr) and np.array_equal(ids, one_ids)
        tab, bc, states = call[0], call[1], call[2]
        want = _brute_rows(tab.astype(np.int32), bc, states, tokens)
        if len(call) > 4:  # flagged states walk the quote tokens only
            want = [
                [t for t in row if b'"' in tokens[t]] if flag else row
                for row, flag in zip(want, call[6].tolist(), strict=True)
            ]
        assert [ids[ptr[i] : ptr[i + 1]].tolist() for i in range(len(states))] == want
    words = (len(tokens) + 31) // 32
    plain = [c for c in calls if len(c) == 4][:5]
    packed = core.dfa_masks_many([(*c, words) for c in plain])
    for c, rows in zip(plain, packed, strict=True):
        assert np.array_equal(rows, core.dfa_masks(*c, words))
    assert core.dfa_masks_many([]) == []


def test_dfa_masks_many_refuses_a_bad_call_before_walking() -> None:
    """A call that dfa_masks refuses is refused by the list, with dfa_masks' error."""
    core = native_core()
    calls, _ = _random_calls(core, 8)
    tab, bc, states, trie = calls[0][:4]
    with pytest.raises(ValueError, match="states: out of range"):
        core.dfa_masks_many([calls[0], (tab, bc, np.array([len(tab)], dtype=np.int64), trie)])
    with pytest.raises(TypeError, match="call 1 is not a tuple"):
        core.dfa_masks_many([calls[0], [tab, bc, states, trie]])
    with pytest.raises(TypeError):
        core.dfa_masks_many(5)


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 3 automata: results come back while later automata are built."""
    monkeypatch.setattr(eager, "BATCH_CALLS", 3)
    monkeypatch.setattr(eager, "BATCH_STATES", 1 << 30)


@pytest.mark.usefixtures("small_batches")
def test_pipelined_eager_registry_equals_lazy_automata() -> None:
    """Tool by tool, the eager registry (masks walked on the worker, kept in batches of 3) and
    the lazy one (each automaton materialized on first use, on the caller's thread) give the
    same mask at every state; no worker thread is left running."""
    tools = [
        {"name": t["name"], "parameters": t.get("inputSchema") or {}} for t in server_tools(60)
    ]
    index = TokenIndex.get(shipped_vocabulary("qwen2"))
    before = {t.name for t in threading.enumerate()}
    built = compile_tools(tools, index, strict=False, eager_automata=True)
    assert not {t.name for t in threading.enumerate()} - before
    lazy = compile_tools(tools, index, strict=False)
    width = index.vocabulary.width
    row_a = np.zeros((width + 31) // 32, dtype=np.int32)
    row_b = row_a.copy()
    autos = {id(built.automaton(i)) for i in range(len(tools))}
    assert len(autos) > 3 * 3  # several batches
    for i in range(len(tools)):
        a, b = lazy.automaton(i), built.automaton(i)
        assert b.ready == b.n_states - len(b.exits)
        for s in range(a.n_states):
            if s not in a.exits:
                a.fill(s, row_a)
                b.fill(s, row_b)
                assert np.array_equal(row_a, row_b), (i, s)


@pytest.mark.usefixtures("small_batches")
def test_pipeline_errors_leave_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error raised by a batch (the worker's thread) surfaces from the compile; an error on
    the caller's thread stops the pipeline; neither leaves a thread running."""
    tools = [
        {"name": t["name"], "parameters": t.get("inputSchema") or {}} for t in server_tools(20)
    ]
    index = TokenIndex.get(shipped_vocabulary("qwen2"))
    before = {t.name for t in threading.enumerate()}
    core = native_core()

    class Core:  # the real core, its batch call failing
        def __getattr__(self, name: str) -> Any:
            return getattr(core, name)

        def dfa_masks_many(self, calls: list[Any]) -> list[Any]:
            raise MemoryError("the worker's batch")

    monkeypatch.setattr(eager._backend, "native_core", lambda: Core())
    with pytest.raises(MemoryError, match="the worker's batch"):
        compile_tools(tools, index, strict=False, eager_automata=True)
    monkeypatch.undo()
    monkeypatch.setattr(eager, "BATCH_CALLS", 3)
    calls = [0]
    real_add = eager.MaskPipeline.add

    def add(self: eager.MaskPipeline, auto: Any) -> None:
        calls[0] += 1
        if calls[0] == 8:
            raise KeyboardInterrupt  # the caller's thread stops mid-way
        real_add(self, auto)

    monkeypatch.setattr(eager.MaskPipeline, "add", add)
    with pytest.raises(KeyboardInterrupt):
        compile_tools(tools, index, strict=False, eager_automata=True)
    assert not {t.name for t in threading.enumerate()} - before
