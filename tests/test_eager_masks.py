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
from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.fragment import Builder
from trierouter.registry.slots.masks import ToolAutomaton, VocabTables
from trierouter.registry.slots.packing import compress, narrow_table
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
    autos = {id(built.automaton(i)) for i in range(len(tools))}
    assert len(autos) > 3 * 3  # several batches
    for i in range(len(tools)):
        b = built.automaton(i)
        assert b.ready == b.n_states - len(b.exits)
        _same_automaton(lazy.automaton(i), b, i)


def _same_automaton(a: ToolAutomaton, b: ToolAutomaton, what: Any = None) -> None:
    """``a`` and ``b`` have the same table (type included), byte classes and mask at every
    state that is not an exit."""
    assert a.table.dtype == b.table.dtype and np.array_equal(a.table, b.table), what
    assert np.array_equal(a.byte_class, b.byte_class) and a.n_states == b.n_states, what
    row_a, row_b = np.zeros(a.t.words, dtype=np.int32), np.zeros(a.t.words, dtype=np.int32)
    for s in range(a.n_states):
        if s not in a.exits:
            a.fill(s, row_a)
            b.fill(s, row_b)
            assert np.array_equal(row_a, row_b), (what, s)


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


def _deferred(tools: list[dict[str, Any]]) -> list[Any]:
    """Each tool's whole automaton as ``_tool(..., defer=True)`` leaves it: not wired yet."""
    comp = SlotCompiler()
    frags = [comp._tool(t["parameters"], b"}", b'{"x": ', defer=True)[0] for t in tools]
    assert all(f.wire is not None and not len(f.src) for f in frags)
    return frags


def test_dfa_masks_with_a_wire_equals_wire_then_compress_then_masks() -> None:
    """Given a wire (dfa_wire's arguments) in place of the table and byte classes, dfa_masks
    and dfa_masks_many return the table (in the narrowest type) and classes that dfa_wire then
    dfa_compress give, and the masks of that table, in both output forms and with quote-trie
    states; wired and plain calls mix in one list."""
    core = native_core()
    tables = VocabTables.get(shipped_vocabulary("qwen2"))
    tools = [
        {"name": t["name"], "parameters": t.get("inputSchema") or {}} for t in server_tools(40)
    ]
    calls, plain, want_tabs = [], [], []
    for frag in _deferred(tools):
        src, byte, dst = core.dfa_wire(*frag.wire)
        tab, bc = core.dfa_compress(src, byte, dst, frag.n)
        want_tabs.append((narrow_table(tab), bc))
        states = np.arange(frag.n, dtype=np.int64)
        states[np.fromiter(frag.exits, np.int64, len(frag.exits))] = -1
        quoted = (frag.klass >= 0).view(np.uint8)
        calls.append((frag.wire, states, tables.trie, 0, tables.quote_trie, quoted))
        plain.append((narrow_table(tab), bc, states, tables.trie, 0, tables.quote_trie, quoted))
    assert {t.dtype for t, _ in want_tabs} == {np.dtype(np.int8), np.dtype(np.int16)}
    mixed = [c for pair in zip(calls, plain, strict=True) for c in pair]
    got = core.dfa_masks_many(mixed)
    for k, (want_tab, want_bc) in enumerate(want_tabs):
        tab, bc, (ptr, ids) = got[2 * k]
        assert tab.dtype == want_tab.dtype and np.array_equal(tab, want_tab), k
        assert np.array_equal(bc, want_bc), k
        one = core.dfa_masks(*calls[k])
        want_ptr, want_ids = got[2 * k + 1]
        for p, i in ((ptr, ids), one[2]):
            assert np.array_equal(p, want_ptr) and np.array_equal(i, want_ids), k
    words = tables.words
    for call, p in list(zip(calls, plain, strict=True))[:4]:  # packed rows
        tab, bc, rows = core.dfa_masks(call[0], np.maximum(call[1], 0), call[2], words)
        assert np.array_equal(rows, core.dfa_masks(p[0], p[1], np.maximum(p[2], 0), p[3], words))


@pytest.mark.parametrize("n", [128, 129, 32768, 32769])
def test_wired_table_takes_the_narrowest_type(n: int) -> None:
    """A chain of ``n`` states: int8 up to 128 states, int16 up to 32,768, int32 above (what
    narrow_table gives), the same table either way."""
    core = native_core()
    s = np.arange(n - 1, dtype=np.int32)
    wire = ([s], [np.full(n - 1, 97, dtype=np.int32)], [s + 1], [0], n, [], [], [])
    trie = core.TokenTrie([b"a", b"aa", b"b"], np.ones(3, dtype=np.uint8))
    tab, _, (ptr, ids) = core.dfa_masks(wire, np.array([0, n - 2, n - 1]), trie)
    want = narrow_table(core.dfa_compress(*core.dfa_wire(*wire)[:3], n)[0])
    assert tab.dtype == want.dtype and np.array_equal(tab, want)
    assert [ids[ptr[i] : ptr[i + 1]].tolist() for i in range(3)] == [[0, 1], [0], []]


def test_a_wire_that_cannot_be_wired_raises_dfa_wires_error() -> None:
    """Two edges leaving a state on one byte to different states, or an edge out of range:
    the list raises dfa_wire's ValueError (found with the GIL released)."""
    core = native_core()
    trie = core.TokenTrie([b"a"], np.ones(1, dtype=np.uint8))
    one = np.array([0], dtype=np.int32)
    ok = ([one], [one + 97], [one + 1], [0], 2, [], [], [])
    ambiguous = ([one], [one + 97], [one + 1], [0], 3, [], [], [0, 97, 2])
    out = ([one], [one + 97], [one + 5], [0], 2, [], [], [])
    states = np.array([0], dtype=np.int64)
    with pytest.raises(ValueError, match="ambiguous continuation on byte 97 at state 0"):
        core.dfa_wire(*ambiguous)
    with pytest.raises(ValueError, match="ambiguous continuation on byte 97 at state 0"):
        core.dfa_masks_many([(ok, states, trie), (ambiguous, states, trie)])
    with pytest.raises(ValueError, match="dfa_wire: a fragment edge out of range"):
        core.dfa_masks(out, states, trie)
    with pytest.raises(ValueError, match="states: out of range"):
        core.dfa_masks(ok, np.array([2], dtype=np.int64), trie)
    assert core.dfa_masks(ok, states, trie)[2][1].tolist() == [0]


def test_a_fragment_not_wired_yet_is_refused_but_by_an_automaton() -> None:
    """A deferred fragment has no edges: a builder, compress and its table refuse it with the
    reason; a native ToolAutomaton built from it equals the one built from the wired fragment
    (table, classes, every mask)."""
    tools = [{"name": t["name"], "parameters": t.get("inputSchema") or {}} for t in server_tools(3)]
    frag = _deferred(tools)[2]
    for refuse in (lambda: Builder().add(frag), lambda: compress(frag), lambda: frag.table):
        with pytest.raises(ValueError, match="not wired yet"):
            refuse()
    tables = VocabTables.get(shipped_vocabulary("qwen2"))
    wired = SlotCompiler()._tool(tools[2]["parameters"], b"}", b'{"x": ')[0]
    _same_automaton(ToolAutomaton(wired, tables), ToolAutomaton(frag, tables))


@pytest.mark.usefixtures("small_batches")
def test_materialize_builds_through_the_pipeline_and_drops_what_an_error_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CompiledTools.materialize() builds the automata not built yet through the masks'
    pipeline (wired late): each equals a lazily built one (table, classes, every mask), those
    built before are kept as they are; if a batch fails, the automata left without masks are
    dropped and built again, correctly, on first use."""
    tools = [
        {"name": t["name"], "parameters": t.get("inputSchema") or {}} for t in server_tools(30)
    ]
    index = TokenIndex.get(shipped_vocabulary("qwen2"))
    lazy = compile_tools(tools, index, strict=False)
    reg = compile_tools(tools, index, strict=False)
    first = reg.automaton(0)  # built before: kept
    late: list[Any] = []
    real_add = eager.MaskPipeline.add

    def add(self: eager.MaskPipeline, auto: Any) -> None:
        late.append(auto._wire is not None)
        real_add(self, auto)

    monkeypatch.setattr(eager.MaskPipeline, "add", add)
    reg.materialize()
    assert len(late) > 3 * 3 and all(late)
    assert reg.automaton(0) is first
    for i in range(len(tools)):
        _same_automaton(lazy.automaton(i), reg.automaton(i), i)
    core = native_core()
    batches = [0]

    class Core:  # the real core, its second batch failing
        def __getattr__(self, name: str) -> Any:
            return getattr(core, name)

        def dfa_masks_many(self, calls: list[Any]) -> list[Any]:
            batches[0] += 1
            if batches[0] == 2:
                raise MemoryError("the second batch")
            return core.dfa_masks_many(calls)

    monkeypatch.setattr(eager._backend, "native_core", lambda: Core())
    broken = compile_tools(tools, index, strict=False)
    with pytest.raises(MemoryError, match="the second batch"):
        broken.materialize()
    monkeypatch.undo()
    assert all(a.mask_table is not None for a in broken._automata.values())
    for i in range(len(tools)):
        _same_automaton(lazy.automaton(i), broken.automaton(i), i)
