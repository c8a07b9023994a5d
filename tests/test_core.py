"""The compiled core against the numpy reference: same arrays, same steps, same masks.

Compile: every array of a set (CSR rows, child codes, far targets, completed nodes, values) is
equal bit for bit between ``backend="native"`` and ``backend="numpy"``, on real tokenizers and on
hypothesis-generated sets over a toy byte vocabulary (NUL bytes, values that are prefixes of
others, one very long value among short ones, non-ASCII, terminators). Serving: single and batch
steps, masks, packed bitmasks (numpy and torch buffers), the sparse logits path and the matcher
agree on random states and tokens, valid or not. The build: a missing or stale extension is
refused with instructions to rebuild.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import toy_vocabulary
from trierouter.data.synthetic import mixed_values, non_ascii_labels, tool_names
from trierouter.errors import CoreBuildError, InvalidValueError, UnreachableValueError
from trierouter.registry import core as backend_mod
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import shipped_vocabulary
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.matcher import Matcher
from trierouter.testing.oracle import brute_force_allowed

ARRAYS = (
    "row_ptr",
    "tokens",
    "children",
    "far_pos",
    "far_child",
    "ends",
    "value_bytes",
    "value_offsets",
)


def assert_same_arrays(a: ChoiceSet, b: ChoiceSet) -> None:
    assert a.backend == "native" and b.backend == "numpy"
    assert sorted(a._arrays) == sorted(ARRAYS) == sorted(b._arrays)
    for name in ARRAYS:
        x, y = a._arrays[name], b._arrays[name]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x, y), name


def both(values: list[str], index: TokenIndex, **kw: object) -> tuple[ChoiceSet, ChoiceSet]:
    a = compile_choices(values, index, backend="native", **kw)  # type: ignore[arg-type]
    b = compile_choices(values, index, backend="numpy", **kw)  # type: ignore[arg-type]
    assert_same_arrays(a, b)
    return a, b


def assert_same_serving(a: ChoiceSet, b: ChoiceSet, seed: int = 0, n: int = 400) -> None:
    """Random states (valid and not) and tokens (allowed, random, out of range)."""
    rng = np.random.default_rng(seed)
    n_states = a.n_nodes + 2
    states = np.concatenate(
        [rng.integers(0, n_states, n), [-1, n_states, n_states + 5, a.END, a.DEAD, 0]]
    ).astype(np.int64)
    toks = []
    for s in states.tolist():
        allowed = b.mask(s).tolist() if 0 <= s < n_states else []
        pick = rng.random()
        if allowed and pick < 0.6:
            toks.append(int(rng.choice(allowed)))
        elif pick < 0.9:
            toks.append(int(rng.integers(0, a.width)))
        else:
            toks.append(int(rng.choice([-1, a.width, a.width + 7, 2**40])))
    tokens = np.asarray(toks, dtype=np.int64)
    for s, t in zip(states.tolist(), tokens.tolist(), strict=True):
        assert a.advance(s, t) == b.advance(s, t), (s, t)
        assert a.is_terminal(s) == b.is_terminal(s), s
        if 0 <= s < n_states:
            assert np.array_equal(a.mask(s), b.mask(s)), s
            assert a.value_at(s) == b.value_at(s)
    assert np.array_equal(a.advance_batch(states, tokens), b.advance_batch(states, tokens))
    ok = states[(states >= 0) & (states < n_states)]
    bm_a = np.full((len(ok) + 3, a.bitmask_words), -1, dtype=np.int32)
    bm_b = bm_a.copy()
    rows = rng.permutation(len(ok) + 3)[: len(ok)]
    a.fill_bitmask_batch(ok, bm_a, rows)
    b.fill_bitmask_batch(ok, bm_b, rows)
    assert np.array_equal(bm_a, bm_b)
    a.fill_bitmask_batch(ok, bm_a[: len(ok)])
    b.fill_bitmask_batch(ok, bm_b[: len(ok)])
    assert np.array_equal(bm_a, bm_b)
    one_a = np.full((2, a.bitmask_words), 7, dtype=np.int32)
    one_b = one_a.copy()
    for s in ok[:50].tolist():
        a.fill_next_token_bitmask(s, one_a, 1)
        b.fill_next_token_bitmask(s, one_b, 1)
        assert np.array_equal(one_a, one_b)
    logits = rng.standard_normal((len(ok), a.width + 3)).astype(np.float32)
    la, lb = logits.copy(), logits.copy()
    a.apply_mask_inplace(ok, la)
    b.apply_mask_inplace(ok, lb)
    assert np.array_equal(la, lb)
    # the same rows through the dense bitmask: -inf exactly where the mask has no bit
    bits = np.unpackbits(bm_b[: len(ok)].view(np.uint8), axis=1, bitorder="little")
    allowed = bits[:, : a.width].astype(bool)
    assert np.array_equal(np.isfinite(la[:, : a.width]), allowed)
    assert np.isneginf(la[:, a.width :]).all()
    # the sparse copy into a buffer kept at -inf gives the same rows; undoing it restores -inf
    rows = rng.permutation(len(ok) + 2)[: len(ok)]
    da = np.full((len(ok) + 2, a.width + 3), -np.inf, dtype=np.float32)
    db = da.copy()
    src = np.zeros_like(da)
    src[rows] = logits
    a.copy_allowed(ok, src, da, rows)
    b.copy_allowed(ok, src, db, rows)
    assert np.array_equal(da, db) and np.array_equal(da[rows], la)
    a.copy_allowed(ok, None, da, rows)
    assert np.isneginf(da).all()


# -- real tokenizers ------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["qwen2", "mistral-v3"])
def real_index(request: pytest.FixtureRequest) -> TokenIndex:
    vocab = shipped_vocabulary(request.param)
    return TokenIndex.build(vocab, backend="native")


@pytest.mark.parametrize("terminator", [None, '"'])
def test_same_arrays_on_real_tokenizers(real_index: TokenIndex, terminator: str | None) -> None:
    values = tool_names(1500, seed=3) + non_ascii_labels(300, seed=3) + mixed_values(300, seed=3)
    a, b = both(values, real_index, terminator=terminator)
    assert_same_serving(a, b, seed=1)
    a2, _ = both(values[:200], real_index, terminator=terminator, allow_end=False)
    end = a2.ends[0].item()
    assert a2.is_terminal(end) and not set(a2.mask(end).tolist()) & set(a2.end_ids)


def test_same_arrays_on_qwen2_at_10000(qwen2_index: TokenIndex) -> None:
    a, b = both(tool_names(10_000, seed=7), qwen2_index)
    assert a.n_pairs > 400_000 and len(a._far_pos) > 0  # far children exercised
    assert_same_serving(a, b, seed=2)


def test_matcher_walks_agree(qwen2_index: TokenIndex) -> None:
    a, b = both(tool_names(300, seed=1), qwen2_index)
    rng = np.random.default_rng(5)
    for _ in range(60):
        ma, mb = Matcher(a, max_rollback_tokens=3), Matcher(b, max_rollback_tokens=3)
        for _ in range(12):
            allowed = mb.allowed_token_ids().tolist()
            assert ma.allowed_token_ids().tolist() == allowed
            t = int(rng.choice(allowed)) if rng.random() < 0.9 else int(rng.integers(0, a.width))
            assert ma.accept_token(t) == mb.accept_token(t)
            assert (ma.state, ma.num_accepted, ma.is_terminated(), ma.value()) == (
                mb.state,
                mb.num_accepted,
                mb.is_terminated(),
                mb.value(),
            )
            if ma.is_terminated():
                break
        k = min(ma.num_accepted, 2)
        ma.rollback(k)
        mb.rollback(k)
        assert ma.state == mb.state


def test_torch_buffers_are_filled_in_place(qwen2_index: TokenIndex) -> None:
    torch = pytest.importorskip("torch")
    a, b = both(tool_names(200, seed=2), qwen2_index)
    states = np.array([0, 1, 5, a.END, a.DEAD], dtype=np.int64)
    ref = np.zeros((len(states), a.bitmask_words), dtype=np.int32)
    b.fill_bitmask_batch(states, ref)
    t = torch.full((len(states), a.bitmask_words), -1, dtype=torch.int32)
    ptr = t.data_ptr()
    a.fill_bitmask_batch(states, t)
    assert t.data_ptr() == ptr and np.array_equal(t.numpy(), ref)
    a.fill_next_token_bitmask(5, t, 0)
    assert np.array_equal(t[0].numpy(), ref[2])
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        logits = torch.randn(len(states), a.width, dtype=dtype)
        want = logits.clone()
        a.apply_mask_inplace(states, logits)
        bits = torch.from_numpy(np.unpackbits(ref.view(np.uint8), axis=1, bitorder="little"))
        keep = bits[:, : a.width].bool()
        want[~keep] = float("-inf")
        assert torch.equal(logits, want), dtype
        dst = torch.full_like(want, float("-inf"))
        a.copy_allowed(states, want, dst)
        assert torch.equal(dst, want), dtype


def test_saved_set_serves_natively(qwen2_index: TokenIndex, tmp_path: object) -> None:
    from pathlib import Path

    a, _ = both(tool_names(500, seed=4), qwen2_index)
    path = Path(str(tmp_path)) / "set.trs"
    a.save(path)
    loaded = ChoiceSet.load(path, qwen2_index, backend="native")
    ref = ChoiceSet.load(path, qwen2_index, backend="numpy")
    assert loaded.backend == "native"
    assert_same_serving(loaded, ref, seed=3)


# -- hypothesis: toy vocabulary, hostile values ----------------------------------------------------

TOY = toy_vocabulary()
TOY_INDEX = TokenIndex.build(TOY, backend="native")
CHARS = ["a", "b", "\x00", '"', "é", "東", "京", "\n", "get", "_user", "ab", "\U0001f600"]
value_st = st.one_of(
    st.lists(st.sampled_from(CHARS), max_size=8).map("".join),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=5),
)


@st.composite
def value_sets(draw: st.DrawFn) -> list[str]:
    values = draw(st.lists(value_st, min_size=1, max_size=12))
    if draw(st.booleans()):  # prefixes of each other
        v = draw(st.sampled_from(values))
        values += [v[: len(v) // 2], v + "a", v + "\x00"]
    if draw(st.integers(0, 4)) == 0:  # one very long value among short ones
        values.append(draw(st.sampled_from(CHARS)) * draw(st.integers(500, 5000)))
    return values


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=value_sets(),
    terminator=st.sampled_from([None, '"', '",', "\x00"]),
    allow_end=st.booleans(),
)
def test_same_arrays_on_generated_sets(
    values: list[str], terminator: str | None, allow_end: bool
) -> None:
    a, b = both(values, TOY_INDEX, terminator=terminator, allow_end=allow_end)
    assert_same_serving(a, b, seed=len(values), n=60)


def test_unspellable_values_refused_alike() -> None:
    # no single-byte token for 'q' (0x71) and no multi-byte one containing it
    tokens = [bytes([b]) for b in range(256) if b != ord("q")] + [b"ab", b"<eos>"]
    vocab = Vocabulary(tokens, end_ids=[len(tokens) - 1], width=len(tokens))
    index = TokenIndex.build(vocab, backend="native")
    errors = []
    for which in ("native", "numpy"):
        with pytest.raises(UnreachableValueError) as info:
            compile_choices(["abq", "ab", "qq", "z"], index, backend=which)
        errors.append((str(info.value), info.value.values, info.value.reasons))
    assert errors[0] == errors[1]
    assert errors[0][1] == ["abq", "qq"]
    # pruning: a spellable set over a vocabulary missing some bytes compiles the same
    both(["ab", "abab", "zz"], index)


def test_states_with_hundreds_of_outputs_compile_alike() -> None:
    # runs of 'a' up to 300 bytes long are all tokens: the state of 300 a's has 300 outputs (the
    # core then keeps 8-byte output spans instead of 4-byte ones) and outputs longer than 255
    tokens = [bytes([b]) for b in range(256)] + [b"a" * n for n in range(2, 301)] + [b"<eos>"]
    vocab = Vocabulary(tokens, end_ids=[len(tokens) - 1], width=len(tokens))
    index = TokenIndex.build(vocab, backend="native")
    a, b = both(["a" * 310, "a" * 300 + "b", "aaab", "ba" * 40, "b"], index)
    assert_same_serving(a, b, n=60)


def test_invalid_values_refused_alike() -> None:
    for bad in (["ok", 3], ["ok", "\udcff"], "single"):
        msgs = []
        for which in ("native", "numpy"):
            with pytest.raises(InvalidValueError) as info:
                compile_choices(bad, TOY_INDEX, backend=which)  # type: ignore[arg-type]
            msgs.append(str(info.value))
        assert msgs[0] == msgs[1]


def test_generators_and_tuples_compile(toy_index: TokenIndex) -> None:
    a = compile_choices((v for v in ["get", "get_user"]), toy_index, backend="native")
    b = compile_choices(("get", "get_user"), toy_index, backend="numpy")
    assert_same_arrays(a, b)


# -- backend selection and the build ---------------------------------------------------------------


def test_backend_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIEROUTER_BACKEND", "numpy")
    assert compile_choices(["get"], TOY_INDEX).backend == "numpy"
    monkeypatch.setenv("TRIEROUTER_BACKEND", "native")
    assert compile_choices(["get"], TOY_INDEX).backend == "native"
    monkeypatch.setenv("TRIEROUTER_BACKEND", "fortran")
    with pytest.raises(ValueError, match="TRIEROUTER_BACKEND='fortran'"):
        compile_choices(["get"], TOY_INDEX)
    with pytest.raises(ValueError, match="backend='c'"):
        compile_choices(["get"], TOY_INDEX, backend="c")


def test_stale_or_missing_core_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    core = backend_mod.native_core()
    backend_mod.native_core.cache_clear()
    monkeypatch.setattr(core, "SOURCE_HASH", "0" * 64)
    try:
        with pytest.raises(CoreBuildError, match=r"stale build.*pip install -e"):
            backend_mod.native_core()
    finally:
        monkeypatch.undo()
        backend_mod.native_core.cache_clear()
    import sys

    import trierouter.registry

    backend_mod.native_core.cache_clear()
    monkeypatch.setitem(sys.modules, "trierouter.registry._core", None)
    monkeypatch.delattr(trierouter.registry, "_core")
    try:
        with pytest.raises(CoreBuildError, match=r"cannot be imported.*pip install -e"):
            backend_mod.native_core()
    finally:
        monkeypatch.undo()
        backend_mod.native_core.cache_clear()
    assert backend_mod.native_core() is core


def _token_near(vocab: Vocabulary, start: int, step: int) -> tuple[int, str]:
    """The first id from ``start`` (walking by ``step``) whose token is plain UTF-8 text."""
    t = start
    while True:
        tb = vocab.tokens[t]
        if tb and t not in vocab.special_ids and t not in vocab.end_ids:
            try:
                text = tb.decode("utf-8")
            except UnicodeDecodeError:
                text = ""
            if text.isprintable() and text.strip():
                return t, text
        t += step


def test_bitmask_rows_at_fill_stretch_edges(qwen2: Vocabulary, qwen2_index: TokenIndex) -> None:
    """The native fill writes a row 512 words (16,384 ids) at a time: ids on both sides of every
    stretch edge land in their bits, in rows wider than the set and with a stride, every other
    bit of the row cleared (oracles: brute force over the vocabulary; ``END`` and ``DEAD`` allow
    the end ids, which sit in the last stretch; the numpy backend, buffer for buffer)."""
    edge = 512 * 32
    picked = [
        _token_near(qwen2, k * edge + d, step)
        for k in range(1, qwen2.width // edge + 1)
        for d, step in ((-1, -1), (0, 1))
    ]
    ids = {t for t, _ in picked}
    assert any(t % edge == 0 for t in ids) and any(t % edge == edge - 1 for t in ids)
    values = sorted({text for _, text in picked})
    a, b = both(values, qwen2_index)
    allowed = brute_force_allowed(qwen2, {v.encode() for v in values}, b"")
    assert ids <= allowed
    states = np.array([a.root, a.DEAD, a.root, a.END, a.root], dtype=np.int64)
    buffers = []
    for cs in (a, b):
        base = np.full((len(states) + 1, cs.bitmask_words + 7), -1, dtype=np.int32)
        view = base[:, 3:]  # rows with a stride, wider than the set
        cs.fill_bitmask_batch(states, view[: len(states)])
        cs.fill_next_token_bitmask(int(a.root), view, len(states))
        buffers.append(base)
    assert np.array_equal(buffers[0], buffers[1])
    bits = np.unpackbits(buffers[0][:, 3:].view(np.uint8), axis=1, bitorder="little")
    rows = [set(np.flatnonzero(r).tolist()) for r in bits]
    assert rows == [allowed, set(qwen2.end_ids), allowed, set(qwen2.end_ids), allowed, allowed]
    assert (buffers[0][:, :3] == -1).all()


def test_bitmask_too_narrow_is_refused(toy_index: TokenIndex) -> None:
    cs = compile_choices(["get"], toy_index, backend="native")
    with pytest.raises(ValueError, match="int32 words"):
        cs.fill_next_token_bitmask(0, np.zeros((1, cs.bitmask_words - 1), np.int32))
    with pytest.raises(IndexError):
        cs.fill_next_token_bitmask(0, np.zeros((1, cs.bitmask_words), np.int32), 3)
    with pytest.raises(TypeError):
        cs.fill_next_token_bitmask(0, np.zeros((1, cs.bitmask_words), np.int64))


# -- tool-argument automata: eager native masks against the lazy numpy simulation -----------------

SLOT_SCHEMAS = [
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "uuid"},
    {"type": "integer", "minimum": -40, "maximum": 17004},
    {"type": "number"},
    {"type": "string", "enum": ["open", "closed", "all", "open_or_closed"]},
    {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"},
    {"type": "string"},
    {"type": "string", "minLength": 2, "maxLength": 5},
    {
        "type": "object",
        "properties": {"q": {"type": "string"}, "n": {"type": "integer"}, "b": {"type": "boolean"}},
        "required": ["q"],
    },
]


@pytest.mark.parametrize("schema", SLOT_SCHEMAS, ids=lambda s: str(s)[:40])
def test_automaton_masks_native_equal_numpy(qwen2: Vocabulary, schema: dict[str, object]) -> None:
    """Every state's mask from the core equals the numpy simulation's
    (trierouter.testing.masks_reference); the masks are not all alike (a state's mask compared
    with another's would fail)."""
    from trierouter.registry.slots.dispatch import SlotCompiler
    from trierouter.registry.slots.masks import ToolAutomaton, VocabTables
    from trierouter.testing.masks_reference import ReferenceMasks, ReferenceTables

    frag, _, _ = SlotCompiler()._piece(schema, schema, "", [], 0)
    native = ToolAutomaton(frag, VocabTables.get(qwen2))
    assert native.ready == native.n_states - len(native.exits)
    ref = ReferenceMasks(frag, ReferenceTables(qwen2))
    a = np.zeros(native.t.words, dtype=np.int32)
    b = a.copy()
    seen = set()
    for s in range(native.n_states):
        if s in native.exits:
            continue
        native.fill(s, a)
        ref.fill(s, b)
        assert np.array_equal(a, b), (schema, s)
        seen.add(a.tobytes())
    assert len(seen) > 1


def test_string_counts_native_equal_numpy(qwen2: Vocabulary) -> None:
    from trierouter.registry.slots.masks import VocabTables
    from trierouter.testing.masks_reference import ReferenceTables

    native = VocabTables(qwen2)
    ref = ReferenceTables(qwen2)
    a, b = native._string_counts(), ref.string_counts()
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert np.array_equal(native.string_rows(), ref.string_rows())
    assert np.array_equal(native.counted_row(0, 3), ref.base_row(16 * 4))  # 3 characters left
    assert not np.array_equal(native.counted_row(0, 3), ref.base_row(16 * 3))


def test_counted_rows_built_incrementally_are_exact(qwen2: Vocabulary) -> None:
    from trierouter.registry.slots.fragment import N_STRING_CLASSES
    from trierouter.registry.slots.masks import VocabTables, pack_ids

    t = VocabTables(qwen2)
    counts, mid = t._string_counts()
    rng = np.random.default_rng(0)
    for k, left in [
        (int(rng.integers(N_STRING_CLASSES)), int(rng.integers(0, 70))) for _ in range(40)
    ]:
        ok = (counts[k] >= 0) & (counts[k] + mid[k] <= left)
        assert np.array_equal(t.counted_row(k, left), pack_ids(t.all_ids[ok], t.width)), (k, left)
