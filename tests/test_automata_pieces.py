"""Shared piece masks (tool automata, compiled core) against the numpy reference.

A tool's automaton serves the wide states of a quoted piece (a pattern like ``[a-z0-9-]{1,40}``,
a format) from the piece's standalone masks, shared by every tool, OR'd with a walk of the
tokens that hold a quote (:mod:`trierouter.registry.slots.pieces`). The oracle is the numpy
reference (:mod:`trierouter.testing.masks_reference`): every token simulated from every state,
lazily, with no sharing. Schemas are hypothesis-generated objects mixing wide patterns, formats,
free and bounded strings, enums, integers, arrays and unions, on the Qwen2 and GPT-2
vocabularies. The
compiled core's byte classes, subset construction and wiring are checked against the numpy /
Python ones (:mod:`trierouter.testing.slots_reference`: the same table; the same language; the
same fragment).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trierouter.registry.core import native_core
from trierouter.registry.shipped import shipped_vocabulary
from trierouter.registry.slots import dispatch, schema_fragments, slot_records
from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.format_tables import TABLES
from trierouter.registry.slots.formats import FORMAT_PATTERNS, _includes, quoted_pattern_fragment
from trierouter.registry.slots.fragment import Builder, Fragment
from trierouter.registry.slots.masks import ToolAutomaton, VocabTables
from trierouter.registry.slots.nfa import cls, lit, nfa_fragment, rep, seq
from trierouter.registry.slots.packing import MaskTable, compress, pack_ids
from trierouter.registry.slots.regex import pattern_node
from trierouter.registry.vocabulary import Vocabulary
from trierouter.testing import slots_reference as reference
from trierouter.testing.masks_reference import ReferenceMasks, ReferenceTables

FIXTURE = HealthCheck.function_scoped_fixture
LEAVES: list[dict[str, Any]] = [
    {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"},
    {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,20}$"},
    {"type": "string", "pattern": "^[a-f0-9]{4,12}$"},
    {"type": "string", "format": "uuid"},
    {"type": "string", "format": "date-time"},
    {"type": "string"},
    {"type": "string", "maxLength": 6},
    {"type": "string", "enum": ["asc", "desc"]},
    {"type": "integer", "minimum": 0, "maximum": 300},
    {"type": "number"},
    {"type": "boolean"},
]


def _wrap(leaf: dict[str, Any], how: int) -> dict[str, Any]:
    if how == 1:
        return {"type": "array", "items": leaf, "maxItems": 2}
    if how == 2 and leaf.get("type") == "string" and "enum" not in leaf:
        return {"anyOf": [leaf, {"type": "null"}]}
    return leaf


schemas = st.lists(
    st.tuples(st.sampled_from(range(len(LEAVES))), st.integers(0, 2)), min_size=1, max_size=3
).map(
    lambda ps: {
        "type": "object",
        "properties": {f"p{i}": _wrap(LEAVES[k], how) for i, (k, how) in enumerate(ps)},
        "required": ["p0"],
    }
)


def _pair(schema: dict[str, Any], vocab: Vocabulary) -> tuple[ToolAutomaton, ReferenceMasks]:
    frag, _ = SlotCompiler().tool(schema, b"}", b" ")
    native = ToolAutomaton(frag, VocabTables.get(vocab))
    assert native.ready == native.n_states - len(native.exits)
    return native, ReferenceMasks(frag, ReferenceTables(vocab))


def _table(auto: ToolAutomaton) -> MaskTable:
    assert auto.mask_table is not None
    return auto.mask_table


def _assert_same(native: ToolAutomaton, ref: ReferenceMasks, states: Any) -> None:
    a = np.zeros(native.t.words, dtype=np.int32)
    b = a.copy()
    for s in states:
        native.fill(int(s), a)
        ref.fill(int(s), b)
        assert np.array_equal(a, b), int(s)


@pytest.fixture(scope="module")
def gpt2() -> Vocabulary:
    return shipped_vocabulary("gpt2")


def test_wide_piece_states_are_shared_and_exact(qwen2: Vocabulary) -> None:
    schema = {
        "type": "object",
        "properties": {
            "slug": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"}},
        },
        "required": ["slug"],
    }
    native, ref = _pair(schema, qwen2)
    shared = np.flatnonzero(_table(native).block >= 0)
    wide = [s for s in shared if native.origin[s] >= 0]
    assert len(wide) > 40  # both copies of the pattern are served from the piece's rows
    _assert_same(native, ref, range(native.n_states))


def _random_states_agree(vocab: Vocabulary, schema: Any, seed: int) -> None:
    native, ref = _pair(schema, vocab)
    rng = np.random.default_rng(seed)
    _assert_same(native, ref, rng.choice(native.n_states, min(native.n_states, 40), replace=False))


@settings(max_examples=6, deadline=None, suppress_health_check=[FIXTURE])
@given(schema=schemas, seed=st.integers(0, 2**31))
def test_tool_masks_equal_numpy_reference(qwen2: Vocabulary, schema: Any, seed: int) -> None:
    _random_states_agree(qwen2, schema, seed)


@settings(max_examples=3, deadline=None, suppress_health_check=[FIXTURE])
@given(schema=schemas, seed=st.integers(0, 2**31))
def test_tool_masks_equal_numpy_reference_gpt2(gpt2: Vocabulary, schema: Any, seed: int) -> None:
    _random_states_agree(gpt2, schema, seed)


@settings(max_examples=20, deadline=None)
@given(schema=schemas)
def test_native_byte_classes_equal_numpy(schema: Any) -> None:
    frag, _ = SlotCompiler().tool(schema, b"}", b" ")
    (ta, ca), (tb, cb) = compress(frag), reference.compress(frag)
    assert np.array_equal(ta[:, ca], tb[:, cb])  # the same dense [state, byte] table
    assert np.array_equal(ta[:, ca], frag.table)
    assert ta.shape == tb.shape  # the same partition of the bytes
    o = np.random.default_rng(len(frag.src)).permutation(len(frag.src))  # edges in any order
    shuffled = Fragment(frag.src[o], frag.byte[o], frag.dst[o], frag.n, frag.accept)
    tc, cc = compress(shuffled)
    assert np.array_equal(tc, ta) and np.array_equal(cc, ca)


def test_toward_end_equals_stepping_each_token(qwen2: Vocabulary) -> None:
    schema = {
        "type": "object",
        "properties": {
            "slug": {"type": "string", "pattern": "^[a-z0-9-]{1,12}$"},
            "n": {"type": "integer"},
            "s": {"type": "string", "maxLength": 4},
        },
        "required": ["slug"],
    }
    native, _ = _pair(schema, qwen2)
    dist = native._distances()
    for s in range(0, native.n_states, 3):
        if s in native.exits:
            continue
        ids = native.allowed(s)
        ends = np.asarray([native.advance(s, int(t)) for t in ids], dtype=np.int64)
        ok = ends >= 0
        ok[ok] = dist[ends[ok]] < dist[s]
        got = native.toward_end(s)
        want = ids[ok]
        if got is None:
            assert not len(want), s
        else:
            assert np.array_equal(got, want), s


PATTERNS = [*FORMAT_PATTERNS.values(), "[a-z0-9-]{1,64}", "(ab|a)*c?[^x]{0,3}", "x{2,}y|z"]
TOY_REGEX = st.from_regex(r"[ab(]{0,2}(\|[ab]{1,2}|\*|\?|\{1,3\}|\)){0,4}", fullmatch=True)


@settings(max_examples=25, deadline=None)
@given(pattern=st.sampled_from(PATTERNS) | TOY_REGEX)
def test_native_subset_construction_equals_python(pattern: str) -> None:
    node = pattern_node(pattern)
    if node is None:
        return
    native, python = nfa_fragment(node), reference.subset_fragment(node)
    assert native.n == python.n  # both are the subset automaton, numbered differently
    assert _includes(native, python) and _includes(python, native)  # the same language


def test_nfa_determinize_edge_list_is_its_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core's subset construction gives its edge list (edges=True, what nfa_fragment
    takes) as its dense table's edges in Fragment.dense's order, bytes past 127 included."""
    seen: list[tuple[Any, ...]] = []
    real = native_core().nfa_determinize
    monkeypatch.setattr(native_core(), "nfa_determinize", lambda *a: seen.append(a) or real(*a))
    high = seq(lit(b"\xc3"), cls(range(0x80, 0xC0)), rep(cls(b"\xff\x00a"), 0, 3))
    for node in [high, *(pattern_node(p) for p in PATTERNS)]:
        assert node is not None
        got = nfa_fragment(node)
        table, accept = real(*seen[-1][:-1], False)
        _same_fragment(got, Fragment.dense(table, accept))


# -- fragment wiring: the compiled core's Builder against the numpy reference ----------------


def _same_fragment(a: Fragment, b: Fragment) -> None:
    assert a.n == b.n
    for f in ("src", "byte", "dst", "accept", "klass", "origin"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.exits == b.exits


def _both_ways(schema: Any) -> tuple[Fragment, Fragment]:
    """The tool automaton of ``schema`` wired by the reference Builder, then by the core."""
    with reference.reference_slots(only=["Builder"]) as swapped:
        ref = SlotCompiler(strict=False).tool(schema, b"}", b'{"f": ')[0]
    assert swapped["Builder"] >= 2  # dispatch (objects, arrays, a tool's frame), unions
    reference.clear_caches()
    return ref, SlotCompiler(strict=False).tool(schema, b"}", b'{"f": ')[0]


NESTED = st.recursive(
    st.sampled_from(LEAVES),
    lambda inner: st.one_of(
        st.builds(
            lambda it, hi: {"type": "array", "items": it, "maxItems": hi},
            inner,
            st.sampled_from([None, 1, 3]),
        ),
        st.lists(inner, min_size=0, max_size=5).flatmap(
            lambda ps: st.lists(st.booleans(), min_size=len(ps), max_size=len(ps)).map(
                lambda req: {
                    "type": "object",
                    "properties": {f"k{i % 3}{'x' * i}": p for i, p in enumerate(ps)},
                    "required": [f"k{i % 3}{'x' * i}" for i, r in enumerate(req) if r],
                }
            )
        ),
        st.just({"type": "object", "additionalProperties": True, "properties": {}}),
    ),
    max_leaves=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[FIXTURE])
@given(schema=NESTED)
def test_native_wiring_equals_reference_builder(schema: Any) -> None:
    """Nested objects, arrays (looped, unrolled), unions, XGrammar exits: state for state."""
    ref, nat = _both_ways({"type": "object", "properties": {"a": schema, "b": {"type": "integer"}}})
    _same_fragment(ref, nat)


def test_native_wiring_equals_reference_on_registry_tools() -> None:
    from trierouter.testing.mcp_server import server_tools

    for tool in server_tools(150):
        ref, nat = _both_ways(tool.get("inputSchema") or {"type": "object"})
        _same_fragment(ref, nat)


def _random_fragment(rng: np.random.Generator) -> Fragment:
    n = int(rng.integers(1, 6))
    k = int(rng.integers(0, 9))
    src = rng.integers(0, n, k).astype(np.int32)
    byte = rng.choice(np.frombuffer(b'ab",}', np.uint8), k).astype(np.int32)
    dst = rng.integers(0, n, k).astype(np.int32)
    if rng.random() < 0.5:  # most fragments come sorted out of an earlier wiring
        o = np.lexsort((byte, src))
        src, byte, dst = src[o], byte[o], dst[o]
    frag = Fragment(src, byte, dst, n, rng.random(n) < 0.4)
    if rng.random() < 0.3:
        frag.exits[int(rng.integers(0, n))] = ("x", int(rng.integers(0, 3)))
    return frag


def test_native_builder_equals_reference_on_random_operations() -> None:
    """Random fragments (unsorted, repeated and conflicting edges), entries, links (also into
    linked states and from a state to itself) and single edges: the same fragment or the
    same ``ambiguous continuation`` error."""
    rng = np.random.default_rng(13)
    errors = 0
    for _ in range(400):
        ops: list[tuple[Any, ...]] = []
        frags = [_random_fragment(rng) for _ in range(int(rng.integers(1, 5)))]
        starts: list[int] = []
        off = 0
        for f in frags:
            entries = sorted(set(rng.integers(0, f.n, int(rng.integers(0, 3))).tolist()))
            ops.append(("add", f, entries))
            starts += [off] + [off + e for e in entries]
            off += f.n
        for _ in range(int(rng.integers(0, 6))):
            if rng.random() < 0.8:
                states = rng.integers(0, off, int(rng.integers(1, 4))).tolist()
                ops.append(("link", states, int(rng.choice(starts))))
            else:
                ops.append(("edge", int(rng.integers(0, off)), int(rng.choice([97, 98])),
                            int(rng.integers(0, off))))  # fmt: skip
        results: list[Fragment | str] = []
        for make in (reference.Builder, Builder):
            b: Any = make()
            for op in ops:
                getattr(b, op[0])(*op[1:])
            try:
                results.append(b.finish())
            except ValueError as e:
                results.append(str(e))
        ref, nat = results
        if isinstance(ref, str) or isinstance(nat, str):
            assert ref == nat
            errors += 1
        else:
            _same_fragment(ref, nat)
    assert 20 < errors < 380  # both outcomes are exercised


def _wrapped(schema: dict[str, Any], tail: bytes, head: bytes) -> Fragment:
    """A tool's fragment as it was built before the root object took ``head`` and ``tail``
    into its own builder: the object alone, then wrapped by a second builder."""
    from trierouter.registry.slots.normalize import normalize_schema

    sc = SlotCompiler(strict=False)
    norm = normalize_schema(schema)
    root = dict(norm.schema)
    if norm.defs:
        root["$defs"] = norm.defs
    frag = sc._piece(root, root, "", [], depth=0)[0]
    b = Builder()
    lead = schema_fragments._literal(head)
    b.add(lead)
    at = b.add(frag)
    b.link(b.accepting(0, lead), at)
    end = b.add(schema_fragments._literal(tail))
    b.link(b.accepting(at, frag), end)
    return b.finish()


@settings(max_examples=40, deadline=None)
@given(schema=NESTED)
def test_root_object_framed_equals_wrapped(schema: Any) -> None:
    """The root object wires the call's head and tail itself: the same states, numbering,
    edges, acceptance and exits as wrapping its fragment afterwards."""
    tool = {"type": "object", "properties": {"a": schema, "b": {"type": "integer"}}}
    framed, _ = SlotCompiler(strict=False).tool(tool, b"}", b'{"f": ')
    _same_fragment(_wrapped(tool, b"}", b'{"f": '), framed)
    assert list(framed.exits) == list(_wrapped(tool, b"}", b'{"f": ').exits)


def test_reference_slots_rebind_every_construction_and_restore_them() -> None:
    """Within reference_slots the slot compiler's modules name the Python constructions (each
    one in at least one module), and the core's again after; ``only`` narrows it and refuses
    an unknown name."""
    from trierouter.registry.slots import formats, nfa, ranges, regex

    core_side = (dispatch.Builder, regex.pattern_fragment, ranges.integer_range_fragment)
    with reference.reference_slots() as swapped:
        assert all(swapped.values()) and set(swapped) == {
            "Builder", "key_automaton", "integer_range_fragment", "pattern_fragment",
            "nfa_fragment",
        }  # fmt: skip
        assert dispatch.Builder is reference.Builder is schema_fragments.Builder
        assert dispatch.key_automaton is reference.key_automaton
        assert formats.integer_range_fragment is reference.integer_range_fragment
        assert schema_fragments.pattern_fragment is reference.pattern_fragment
        assert nfa.nfa_fragment is reference._nfa_fragment  # subset_fragment, its signature
        frag, _ = SlotCompiler().tool({"type": "object", "properties": {"n": {"type": "integer",
                                       "minimum": 3, "maximum": 907}}}, b"}", b"")  # fmt: skip
    assert (dispatch.Builder, regex.pattern_fragment, ranges.integer_range_fragment) == core_side
    assert frag.matches(b'{"n": 907}}') and not frag.matches(b'{"n": 908}}')
    with reference.reference_slots(only=["Builder"]) as swapped:
        assert swapped["Builder"] >= 2 and formats.integer_range_fragment is core_side[2]
    with pytest.raises(ValueError, match="not a construction"), reference.reference_slots(["x"]):
        pass


def test_native_key_automaton_equals_reference() -> None:
    """The key automaton built in one core call equals the Python one
    (trierouter.testing.slots_reference) state for state, exits in the same order, on random
    key lists (shared prefixes, the empty key, escaped and multi-byte keys, any required
    subset)."""
    import json
    import random

    from trierouter.registry.core import native_core
    from trierouter.registry.slots.objects import key_automaton

    rng = random.Random(7)
    parts = ["a", "b", "ab", "x", "é", '"', "_", "aa", "\\"]
    for _ in range(600):
        keys = list(
            dict.fromkeys(
                "".join(rng.choice(parts) for _ in range(rng.randint(0, 4)))
                for _ in range(rng.randint(0, 9))
            )
        )
        req = [rng.random() < 0.3 for _ in keys]
        texts = [json.dumps(k, ensure_ascii=False).encode() + b": " for k in keys]
        ref, entries = reference._key_automaton(texts, tuple(req))
        src, byte, dst, count, at, key = native_core().key_automaton(texts, bytes(req))
        lib, lib_entries = key_automaton(keys, [k for k, r in zip(keys, req, strict=True) if r])
        assert lib_entries == entries and lib.src.tolist() == src.tolist()
        assert count == ref.n and entries == (0, *range(3, 3 + len(keys)))
        assert src.tolist() == ref.src.tolist() and byte.tolist() == ref.byte.tolist()
        assert dst.tolist() == ref.dst.tolist()
        labels = [("end",) if j < 0 else ("v", j) for j in key.tolist()]
        exits = list(zip(at.tolist(), labels, strict=True))
        assert exits == list(ref.exits.items())


def test_leaf_cache_key_is_exact() -> None:
    """Two leaf schemas share a cached fragment exactly when their canonical JSON is equal
    (``1`` / ``true`` / ``1.0`` and ``0.0`` / ``-0.0`` stay apart)."""
    leaves: list[dict[str, Any]] = [
        {"const": 1}, {"const": True}, {"const": 1.0}, {"const": 0.0}, {"const": -0.0},
        {"const": None}, {"const": "1"}, {"enum": [1, 2]}, {"enum": [True, 2]},
        {"type": "string", "maxLength": 3}, {"maxLength": 3, "type": "string"},
        {"type": "integer", "minimum": 0}, {"type": "integer", "minimum": False},
    ]  # fmt: skip
    for a in leaves:
        for b in leaves:
            same = slot_records.canonical(a) == slot_records.canonical(b)
            assert (slot_records._leaf_key(a) == slot_records._leaf_key(b)) == same, (a, b)


def test_eager_automata_equal_lazy_ones_on_registry_tools() -> None:
    """``eager_automata=True`` (analysis and build in one pass per distinct schema) gives the
    lazy compile's slots, problems, XGrammar slots and, tool by tool, the same automaton and
    masks; Python's collector is left as it was found."""
    import gc

    from trierouter.registry.compiler import compile_tools
    from trierouter.registry.index import TokenIndex
    from trierouter.testing.mcp_server import server_tools

    tools = [
        {"name": t["name"], "parameters": t.get("inputSchema") or {}} for t in server_tools(150)
    ]
    index = TokenIndex.get(shipped_vocabulary("qwen2"))
    lazy = compile_tools(tools, index, strict=False)
    assert gc.isenabled()
    gc.disable()
    try:
        eager = compile_tools(tools, index, strict=False, eager_automata=True)
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert eager.slots == lazy.slots and eager.relaxed == lazy.relaxed
    assert list(eager.xgrammar_schemas.items()) == list(lazy.xgrammar_schemas.items())
    assert eager.stats.slots_by_engine == lazy.stats.slots_by_engine
    assert len(eager._automata) == len({eager._schema_keys[i] for i in range(len(tools))})
    row_a = np.zeros((index.vocabulary.width + 31) // 32, dtype=np.int32)
    row_b = row_a.copy()
    for i in range(len(tools)):
        a, b = lazy.automaton(i), eager.automaton(i)
        assert np.array_equal(a.table, b.table) and np.array_equal(a.byte_class, b.byte_class)
        assert np.array_equal(a.accept, b.accept) and a.exits == b.exits
        assert b.ready == b.n_states - len(b.exits)
        for s in range(0, a.n_states, 7):
            if s not in a.exits:
                a.fill(s, row_a)
                b.fill(s, row_b)
                assert np.array_equal(row_a, row_b)


def test_format_tables_equal_the_construction_from_their_patterns() -> None:
    # the constant tables (scripts/gen_format_tables.py) are the subset construction of each
    # format's pattern, state for state; an edited pattern no longer finds its stale table
    built = 0
    for fmt, pattern in FORMAT_PATTERNS.items():
        table = quoted_pattern_fragment(pattern)
        made = quoted_pattern_fragment(pattern, constant=False)
        assert table.n == made.n and np.array_equal(table.table, made.table), fmt
        assert np.array_equal(table.accept, made.accept), fmt
        python = reference.pattern_fragment(pattern)
        assert python is not None
        assert _includes(table, python) and _includes(python, table), fmt
        built += made.n <= 256
    assert built == len(TABLES) == 5  # date, time, date-time, ipv4, uuid (email: 323 states)
    stale = FORMAT_PATTERNS["ipv4"] + "-?"
    assert quoted_pattern_fragment(stale).matches(b'"1.2.3.4-"')  # built from its text


def test_csr_extend_and_pack_equal_numpy() -> None:
    core = native_core()
    rng = np.random.default_rng(7)
    lens = rng.integers(0, 9, size=12)
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    ids = rng.integers(0, 200, size=int(ptr[-1])).astype(np.int32)
    pool = rng.integers(0, 200, size=30).astype(np.int32)
    states = np.array([3, 0, 11, 3], dtype=np.int64)
    lo = np.array([0, 5, 5, 20], dtype=np.int64)
    hi = np.array([4, 5, 17, 30], dtype=np.int64)
    got_ptr, got = core.csr_extend(ptr, ids, states, lo, hi, pool)
    for s in range(12):
        want = list(ids[ptr[s] : ptr[s + 1]])
        for j in np.flatnonzero(states == s):
            want += list(pool[lo[j] : hi[j]])
        assert list(got[got_ptr[s] : got_ptr[s + 1]]) == want, s
    which = np.array([11, 3, 0], dtype=np.int64)
    rows = core.csr_pack(got_ptr, got, which, 7)
    for r, s in zip(rows, which, strict=True):
        assert np.array_equal(r, pack_ids(got[got_ptr[s] : got_ptr[s + 1]], 7 * 32))
    with pytest.raises(ValueError):
        core.csr_pack(got_ptr, got, which, 6)  # an id past the row
    with pytest.raises(ValueError):
        core.csr_extend(ptr, ids, states, lo, hi + 1, pool)  # a span past the pool


def test_csr_split_equals_per_state_lists() -> None:
    """csr_split (a piece's standalone masks kept): each list of ``wide`` ids or more packed
    into the next row, ``where`` naming it at its state; every other list at its state less
    the dropped ids; states without a list empty. Random lists at random ascending states,
    with no wide list, some and all; bad arguments refused."""
    core = native_core()
    rng = np.random.default_rng(9)
    drop = rng.random(300) < 0.3
    for case in range(40):
        n = int(rng.integers(1, 30))
        at = np.sort(rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False)).astype(
            np.int64
        )
        lens = rng.integers(0, 12, size=len(at))
        ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        ids = rng.integers(0, 300, size=int(ptr[-1])).astype(np.int32)
        wide = (0, 6, 99)[case % 3]
        where, rows, lptr, lids = core.csr_split(ptr, ids, at, n, wide, drop, 10)
        lists = {int(s): ids[ptr[j] : ptr[j + 1]] for j, s in enumerate(at)}
        big = [s for s in sorted(lists) if len(lists[s]) >= wide]
        assert where.tolist() == [big.index(s) if s in big else -1 for s in range(n)]
        assert rows.shape == (len(big), 10)
        for r, s in zip(rows, big, strict=True):
            assert np.array_equal(r, pack_ids(lists[s], 10 * 32))
        assert len(lptr) == n + 1 and lptr[0] == 0
        for s in range(n):
            keep = [] if s in big or s not in lists else [t for t in lists[s] if not drop[t]]
            assert lids[lptr[s] : lptr[s + 1]].tolist() == keep, (case, s)
    ok = (np.array([0, 2, 3], dtype=np.int64), np.array([1, 2, 3], dtype=np.int32))
    for bad in [
        (*ok, np.array([4], dtype=np.int64), 5, 2, drop, 10),  # a state past n
        (*ok, np.array([1, 1], dtype=np.int64), 5, 2, drop, 10),  # not ascending
        (*ok, np.array([0], dtype=np.int64), 5, 2, drop, 10),  # one state for two lists
        (*ok, np.array([0, 1], dtype=np.int64), 5, 2, drop[:3], 10),  # an id past drop
        (*ok, np.array([0, 1], dtype=np.int64), 5, 2, drop, 0),  # an id past the row
    ]:
        with pytest.raises(ValueError):
            core.csr_split(*bad)


def _brute_rows(table: Any, bc: Any, states: Any, tokens: list[bytes]) -> list[list[int]]:
    """Per state, the tokens whose bytes all have edges from it (every token stepped)."""
    out = []
    for q0 in states.tolist():
        row = []
        for t, tok in enumerate(tokens):
            q = q0
            for b in tok:
                q = -1 if q < 0 else int(table[q, bc[b]])
            if q0 >= 0 and q >= 0:
                row.append(t)
        out.append(row)
    return out


def test_dfa_masks_shared_rows_equal_brute_force() -> None:
    """dfa_masks derives a state's row from a state that agrees with it on every byte string
    up to some length (Moore levels over the table) and walks only the longer tokens, or
    copies the row when they agree past the longest token. Checked against every token
    stepped: a [a-p] counter whose states lie below, at and above the longest token's length
    (rows equal above it, different below), and random tables over a wide class (where the
    sharing applies), with states repeated, -1 and in any order."""
    core = native_core()
    letters = b"abcdefghijklmnop"  # 16 bytes: wide enough for the sharing to apply
    rng = np.random.default_rng(3)
    tokens = [bytes([b]) for b in letters] + [b"-", b"--", b'"', b'a"', b"a-b"]
    for n in range(2, 7):
        for _ in range(6):
            tokens.append(bytes(rng.choice(list(letters + b"-"), size=n).tolist()))
    tokens += [tokens[-1][:k] for k in range(2, 6)]  # tokens that are prefixes of others
    tokens += [b"p" * k for k in range(2, 10)]  # the longest token: 9 bytes
    tokens = list(dict.fromkeys(tokens))
    trie = core.TokenTrie(tokens, np.ones(len(tokens), dtype=np.uint8))
    bc = np.full(256, 2, dtype=np.int32)
    bc[np.frombuffer(letters, dtype=np.uint8)] = 0
    bc[ord("-")] = 1
    # the counter: state i reads up to 14 - i letters, '-' only from even states
    n = 15
    table = np.full((n, 3), -1, dtype=np.int32)
    table[:-1, 0] = np.arange(1, n)
    table[0:-1:2, 1] = np.arange(1, n, 2)
    states = np.arange(n, dtype=np.int64)
    cases = [(table, states)]
    for _ in range(40):
        ns = int(rng.integers(2, 30))
        tab = rng.integers(-1, ns, size=(ns, 3)).astype(np.int32)
        tab[rng.random((ns, 3)) < 0.2] = -1
        st_ = rng.integers(-1, ns, size=int(rng.integers(2, 2 * ns))).astype(np.int64)
        cases.append((tab, st_))
    for tab, st_ in cases:
        ptr, ids = core.dfa_masks(tab, bc, st_, trie)
        got = [ids[ptr[i] : ptr[i + 1]].tolist() for i in range(len(st_))]
        assert got == _brute_rows(tab, bc, st_, tokens)
    ptr, ids = core.dfa_masks(table, bc, states, trie)
    rows = [ids[ptr[i] : ptr[i + 1]].tolist() for i in range(n)]
    assert rows[0] == rows[2] == rows[4] != rows[6]  # 14, 12, 10 letters left vs 8: 'p' * 9
    assert rows[1] == rows[3] == rows[5] != rows[7]  # 13, 11, 9 vs 7
    assert rows[4] != rows[5]  # '-' only from even states


def test_dfa_masks_shared_rows_equal_every_row_walked(qwen2: Vocabulary) -> None:
    """On Qwen2 (tokens of up to 96 dashes): the shared rows of wide patterns, a format and an
    object mixing them (their class tries included) equal the rows walked one by one
    (``share=False``), as lists and packed."""
    core = native_core()
    tables = VocabTables.get(qwen2)
    schemas: list[dict[str, Any]] = [
        {"type": "string", "pattern": "^[a-z0-9-]{1,64}$"},
        {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,20}$"},
        {"type": "string", "format": "uuid"},
    ]
    schemas.append({"type": "object", "properties": {str(i): s for i, s in enumerate(schemas)}})
    for schema in schemas:
        frag, _, _ = SlotCompiler()._piece(schema, schema, "", [], 0)
        table, bc = compress(frag)
        states = np.arange(len(table), dtype=np.int64)[::-1].copy()
        quoted = (np.arange(len(table)) % 3 == 0).astype(np.uint8)
        for extra in [(0, None, None), (0, tables.quote_trie, quoted), (tables.words, None, None)]:
            want = core.dfa_masks(table, bc, states, tables.trie, *extra, False)
            got = core.dfa_masks(table, bc, states, tables.trie, *extra)
            for a, b in zip(got, want, strict=True):  # (ptr, ids), or the packed rows
                assert np.array_equal(a, b), schema


def test_dfa_masks_class_trie_rows_equal_brute_force() -> None:
    """Over few classes (at most 16) with four wide states, dfa_masks walks the token trie seen
    through the classes (tokens with the same class at every position merged; bytes of a class
    with no edge anywhere dropped), alone or under the shared rows' length filter. Checked
    against every token stepped and against ``share=False`` on random tables whose classes
    group several bytes, some classes dead, with states repeated, -1 and in any order, the
    packed rows (``words``) and the quote-trie states (which walk their own trie) included."""
    core = native_core()
    rng = np.random.default_rng(11)
    alphabet = list(b'abcdefghijklmnopqrstuvwxyz-_"')
    wide = list(b"abcdefghijklmnopq")
    for case in range(30):
        nc = int(rng.integers(2, 7))
        bc = np.full(256, nc - 1, dtype=np.int32)
        bc[alphabet] = rng.integers(0, nc, size=len(alphabet))
        bc[wide] = 0  # one class of 17 bytes: wide states
        tokens = [bytes([b]) for b in alphabet]
        for n in range(2, 12):
            tokens += [bytes(rng.choice(alphabet, size=n).tolist()) for _ in range(8)]
            tokens += [bytes(rng.choice(wide, size=n).tolist()) for _ in range(4)]
        tokens += [tokens[-1][:k] for k in range(2, 9)] + [b"a" * k for k in range(2, 15)]
        tokens = list(dict.fromkeys(tokens))
        has = np.array([b'"' in t for t in tokens], dtype=np.uint8)
        trie = core.TokenTrie(tokens, np.ones(len(tokens), dtype=np.uint8))
        qtrie = core.TokenTrie(tokens, has)
        ns = int(rng.integers(4, 40))
        tab = rng.integers(-1, ns, size=(ns, nc)).astype(np.int32)
        tab[rng.random((ns, nc)) < 0.25] = -1
        tab[:, nc - 1] = -1  # a dead class: its bytes are in no row
        if case % 3 == 0:  # a counter over class 0 (rows alike below its length)
            tab[:-1, 0] = np.arange(1, ns)
            tab[-1, 0] = -1
        states = rng.integers(-1, ns, size=int(rng.integers(4, 2 * ns))).astype(np.int64)
        states[:4] = [0, 1, 2, 3]  # four wide states at least (class 0 live from each)
        tab[:4, 0] = np.maximum(tab[:4, 0], 0)
        ptr, ids = core.dfa_masks(tab, bc, states, trie)
        got = [ids[ptr[i] : ptr[i + 1]].tolist() for i in range(len(states))]
        assert got == _brute_rows(tab, bc, states, tokens), case
        want = core.dfa_masks(tab, bc, states, trie, 0, None, None, False)
        assert np.array_equal(ptr, want[0]) and np.array_equal(ids, want[1])
        packed = core.dfa_masks(tab, bc, states, trie, 8)
        for i in range(len(states)):
            assert np.array_equal(packed[i], pack_ids(np.array(got[i], dtype=np.int32), 8 * 32))
        flags = (rng.random(len(states)) < 0.3).astype(np.uint8)
        mixed = core.dfa_masks(tab, bc, states, trie, 0, qtrie, flags)
        quoted = core.dfa_masks(tab, bc, states, qtrie)
        for i in range(len(states)):
            p, q = quoted if flags[i] else (ptr, ids)
            assert mixed[1][mixed[0][i] : mixed[0][i + 1]].tolist() == q[p[i] : p[i + 1]].tolist()


def test_dfa_masks_class_trie_past_the_pruning_bound_equals_brute_force() -> None:
    """Past 1,024 states the class trie is built for every class string (the walked states
    are not tracked): a counter of 1,100 states over a wide class, walked from a few states,
    equals brute force and ``share=False``; so does the same counter below the bound."""
    core = native_core()
    alphabet = list(b"abcdefghijklmnopqrstuvwxyz-")
    tokens = [bytes([b]) for b in alphabet] + [b"ab" * k for k in range(1, 9)] + [b"-a", b"z-z"]
    trie = core.TokenTrie(tokens, np.ones(len(tokens), dtype=np.uint8))
    bc = np.full(256, 2, dtype=np.int32)
    bc[alphabet[:-1]] = 0
    bc[ord("-")] = 1
    for ns in (1_100, 900):
        tab = np.full((ns, 3), -1, dtype=np.int32)
        tab[:-1, 0] = np.arange(1, ns)  # state i reads up to ns - 1 - i letters
        tab[ns - 20 :, 1] = 0  # '-' from the last 20 states back to the start
        states = np.array([0, 1, ns - 30, ns - 19, ns - 5, ns - 1, -1], dtype=np.int64)
        ptr, ids = core.dfa_masks(tab, bc, states, trie)
        got = [ids[ptr[i] : ptr[i + 1]].tolist() for i in range(len(states))]
        assert got == _brute_rows(tab, bc, states, tokens), ns
        want = core.dfa_masks(tab, bc, states, trie, 0, None, None, False)
        assert np.array_equal(ptr, want[0]) and np.array_equal(ids, want[1]), ns


def test_dfa_masks_long_rows_over_many_ids_equal_brute_force() -> None:
    """A row of more than 64 tokens is sorted through a two-level bitmap (a summary bit per
    word of token bits): rows whose ids spread over several summary words (a 20,000-token
    vocabulary, ids shuffled), one after another (the bitmap cleared between rows), equal
    brute force, in states' order and reversed, with and without the shared rows."""
    core = native_core()
    rng = np.random.default_rng(5)
    letters = list(b"abcdefghijklmnopqrstuvwxyz")
    tokens = [bytes([b]) for b in letters]
    tokens += [
        bytes(rng.choice(letters, size=int(rng.integers(2, 6))).tolist()) for _ in range(30_000)
    ]
    tokens = list(dict.fromkeys(tokens))[:20_000]
    tokens = [tokens[i] for i in rng.permutation(len(tokens))]
    trie = core.TokenTrie(tokens, np.ones(len(tokens), dtype=np.uint8))
    bc = np.full(256, 2, dtype=np.int32)
    bc[letters[:18]] = 0  # a wide class: the shared rows and the class trie apply
    bc[letters[18:]] = 1
    # a counter: state i reads up to 7 - i bytes of class 0, class 1 only from even states
    table = np.full((8, 3), -1, dtype=np.int32)
    table[:-1, 0] = np.arange(1, 8)
    table[0:-1:2, 1] = np.arange(1, 8, 2)
    for states in (np.arange(8, dtype=np.int64), np.arange(8, dtype=np.int64)[::-1].copy()):
        want = _brute_rows(table, bc, states, tokens)
        assert max(len(r) for r in want) > 64 and max(max(r) for r in want if r) >= 3 * 4096
        for share in (True, False):
            ptr, ids = core.dfa_masks(table, bc, states, trie, 0, None, None, share)
            assert [ids[ptr[i] : ptr[i + 1]].tolist() for i in range(len(states))] == want


def test_piece_ids_tell_every_content_apart() -> None:
    """Quoted pieces are interned by a digest of their content (size, edges, acceptance, in
    two bytes a state up to 2**15 states, else four): fragments differing in one source,
    byte, target, accepting state or size get their own ids; an equal one built anew (int64
    arrays) gets the same; past 2**15 states a source 65,536 apart is told apart too."""
    from trierouter.registry.slots.pieces import tag

    letters = list(range(ord("a"), ord("r")))  # 17 bytes: a wide state
    q = ord('"')

    def frag(n: int = 5, edges: tuple[tuple[int, int, int], ...] = (), acc: int = 3) -> Fragment:
        e = np.array([(0, q, 1), *((1, b, 2) for b in letters), (2, q, 3), (4, q, 3)]).T
        for i, (a, b, c) in enumerate(edges):
            e[:, i + 1] = (a, b, c)  # replace the letter edges one by one
        accept = np.zeros(n, dtype=bool)
        accept[[3, acc]] = True
        return Fragment(e[0], e[1], e[2], n, accept)

    def pid(f: Fragment) -> int:
        tagged = tag(f)
        assert tagged is not f and tagged.origin[0] >= 0
        return int(tagged.origin[0]) >> 32

    base = pid(frag())
    same = frag()
    cols = (same.src.astype(np.int32), same.byte.astype(np.int32), same.dst.astype(np.int32))
    assert pid(Fragment(*cols, 5, same.accept)) == base
    variants = [
        frag(edges=((4, letters[0], 2),)),  # a source
        frag(edges=((1, ord("z"), 2),)),  # a byte
        frag(edges=((1, letters[0], 4),)),  # a target
        frag(acc=4),  # an accepting state
        frag(n=6),  # the size
    ]
    ids = [pid(v) for v in variants]
    assert base not in ids and len(set(ids)) == len(ids)
    near, far = ((a, letters[0], 2) for a in (4, 4 + 65_536))
    assert pid(frag(70_000, (near,))) != pid(frag(70_000, (far,))) == pid(frag(70_000, (far,)))


def test_narrow_tables_read_as_their_int32_originals(qwen2: Vocabulary) -> None:
    """A tool automaton stores its table in the narrowest signed type its states fit (int8
    up to 128 states, int16 up to 32,768); the compiled core reads int8, int16 and int32 alike
    (masks and list masks equal the int32 table's) and refuses other types."""
    core = native_core()
    tables = VocabTables.get(qwen2)
    seen = set()
    for schema in [
        {"type": "string", "format": "date"},  # a few dozen states: int8
        {"type": "string", "pattern": "^(a|b)*a(a|b){8}$"},  # 512 DFA states: int16
    ]:
        frag, _, _ = SlotCompiler()._piece(schema, schema, "", [], 0)
        auto = ToolAutomaton(frag, tables)
        wide, bc = compress(frag)
        want_type = np.int8 if len(wide) <= 128 else np.int16
        assert auto.table.dtype == want_type and np.array_equal(auto.table, wide), schema
        seen.add(auto.table.dtype)
        states = np.arange(len(wide), dtype=np.int64)
        for extra in [(0,), (tables.words,)]:
            got = core.dfa_masks(auto.table, bc, states, tables.trie, *extra)
            want = core.dfa_masks(wide, bc, states, tables.trie, *extra)
            for a, b in zip(got, want, strict=True):
                assert np.array_equal(a, b), schema
        cand = np.arange(5000, dtype=np.int32)
        args = (cand, tables.buffer, tables.offsets)
        got = core.dfa_list_masks(auto.table, bc, states, *args)
        want = core.dfa_list_masks(wide, bc, states, *args)
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a, b), schema
        for bad in (wide.astype(np.int64), wide.astype(np.uint8)):
            with pytest.raises(TypeError, match="int32, int16 or int8"):
                core.dfa_masks(bad, bc, states, tables.trie)
    assert seen == {np.dtype(np.int8), np.dtype(np.int16)}


def test_spelled_count_and_narrow_pieces(qwen2: Vocabulary) -> None:
    """``spelled_count`` counts the tokens spelled with a byte set alone (up to a limit)
    against brute force; a piece whose bytes spell fewer than WIDE tokens (a uuid's: 458 on
    Qwen2) gets no shared rows, its states are walked in the automaton and its masks equal
    the numpy reference's; a wide pattern's piece is still served from shared rows."""
    core = native_core()
    tables = VocabTables.get(qwen2)
    spelled = [t for i, t in enumerate(qwen2.tokens) if t and qwen2.matchable[i]]
    rng = np.random.default_rng(5)
    sets = [b'0123456789abcdefABCDEF-"', b"abc", b"", bytes(range(256))]
    sets += [
        bytes(rng.choice(256, size=int(rng.integers(1, 60)), replace=False).tolist())
        for _ in range(6)
    ]
    for allowed in sets:
        ok = np.zeros(256, dtype=bool)
        ok[list(allowed)] = True
        want = sum(1 for t in spelled if all(ok[b] for b in t))
        bits = np.packbits(ok, bitorder="little").tobytes()
        for limit in (0, 7, 512, 10**9):
            assert core.spelled_count(tables.trie, bits, limit) == min(want, limit), (
                allowed,
                limit,
            )
    with pytest.raises(ValueError, match="32 bytes"):
        core.spelled_count(tables.trie, b"\xff", 10)
    uuid = {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}}
    native, ref = _pair(uuid, qwen2)
    pid = int(native.origin[native.origin >= 0][0]) >> 32
    assert pid not in tables._pieces  # walked in the automaton: no shared lists built
    assert tables._wide[pid] is False  # the verdict kept for the next automaton
    _assert_same(native, ref, range(native.n_states))
    slug = {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"}},
    }
    native, _ = _pair(slug, qwen2)
    assert (_table(native).block[native.origin >= 0] >= 0).sum() > 20
    assert tables._wide[int(native.origin[native.origin >= 0][0]) >> 32] is True


def test_mask_table_fill_is_base_row_or_list() -> None:
    """A MaskTable's mask of a state is its base row (any block, or none) OR'd with its list,
    checked against Python sets on random tables; packing the long lists (with their base row)
    changes no mask, and a one-block table reads csr_split's ``where`` as its rows."""
    rng = np.random.default_rng(5)
    width = 200
    words = (width + 31) // 32
    for _ in range(30):
        n = int(rng.integers(1, 12))
        sets = [rng.choice(width, size=int(rng.integers(0, 40)), replace=False) for _ in range(5)]
        blocks = [np.stack([pack_ids(x, width) for x in sets[:2]]), pack_ids(sets[2], width)[None]]
        block = rng.integers(-1, 2, size=n).astype(np.int32)
        row = np.where(block == 0, rng.integers(0, 2, size=n), 0).astype(np.int32)
        lists = [rng.choice(width, size=int(rng.integers(0, 60)), replace=False) for _ in range(n)]
        ptr = np.concatenate([[0], np.cumsum([len(x) for x in lists])]).astype(np.int64)
        ids = np.concatenate([*lists, np.zeros(0)]).astype(np.int32)
        want = []
        for s in range(n):
            base = set() if block[s] < 0 else set(sets[[0, 1][row[s]] if block[s] == 0 else 2])
            want.append(pack_ids(sorted(base | set(lists[s].tolist())), width))
        table = MaskTable(blocks, block, row, ptr, ids)
        for limit in [None, 30, 0]:
            if limit is not None:
                table.pack_long(limit, width)
            out = np.full(words, -1, dtype=np.int32)
            for s in range(n):
                table.fill(s, out)
                assert np.array_equal(out, want[s]), (s, limit)
        assert len(table.packed) == int((np.diff(ptr) > 0).sum())
        held = sum(b.nbytes for b in blocks) + ids.nbytes + len(table.packed) * 4 * words
        assert table.nbytes == held
    where = np.array([1, -1, 0], dtype=np.int32)
    one = MaskTable.one_block(where, blocks[0], np.zeros(4, dtype=np.int64), np.zeros(0, np.int32))
    assert one.block.tolist() == [0, -1, 0] and one.row is where
