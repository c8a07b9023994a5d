"""The compact layout (``layout="compact"``): rows walked on demand by the core.

Oracle: the full layout of the same values (itself checked against XGrammar, the numpy reference
and brute force by the other tests), compared at every state, for every allowed token and a
sample of refused ones, through every serving call; and XGrammar's matcher directly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trierouter import Matcher
from trierouter.data.synthetic import tool_names
from trierouter.errors import CorruptFileError
from trierouter.registry.compact import COMPACT_KEYS, compact_arrays
from trierouter.registry.core import native_core
from trierouter.registry.index import TokenIndex
from trierouter.registry.store import load_arrays, save_arrays
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary

EXTRA = ["", "a", "ab", "abc", "abd", "héllo", "東京", "東", 'say "hi"', "get_user", "get_user_id"]


def _values(k: int) -> list[str]:
    return tool_names(k, seed=3) + EXTRA + EXTRA[:3]  # duplicates collapse


def _same_everywhere(full: ChoiceSet, cx: ChoiceSet, seed: int = 0) -> None:
    """Every state (and two outside) serves alike: masks, targets, terminal flags, batches."""
    assert (cx.n_nodes, cx.END, cx.DEAD) == (full.n_nodes, full.END, full.DEAD)
    assert cx.values == full.values
    rng = np.random.default_rng(seed)
    n_states = full.n_nodes + 2
    states, tokens = [], []
    for s in range(n_states):
        row = full.mask(s)
        assert np.array_equal(cx.mask(s), row), s
        assert cx.is_terminal(s) == full.is_terminal(s)
        assert cx.value_at(s) == full.value_at(s)
        refused = rng.integers(0, full.width, 3).tolist()
        for t in row.tolist() + refused:
            assert cx.advance(s, t) == full.advance(s, t), (s, t)
            states.append(s)
            tokens.append(t)
    for s in (-1, n_states, n_states + 5):
        assert cx.advance(s, 0) == full.advance(s, 0) == full.DEAD
    st, tk = np.asarray(states, np.int64), np.asarray(tokens, np.int64)
    assert np.array_equal(cx.advance_batch(st, tk), full.advance_batch(st, tk))
    # packed masks, one row and a batch (a shuffled sample, rows named out of order)
    pick = rng.choice(n_states, size=min(n_states, 300), replace=False).astype(np.int64)
    a = np.full((len(pick), full.bitmask_words), -1, np.int32)
    b = np.zeros_like(a)
    rows = rng.permutation(len(pick)).astype(np.int64)
    full.fill_bitmask_batch(pick, a, rows)
    cx.fill_bitmask_batch(pick, b, rows)
    assert np.array_equal(a, b)
    for i in range(0, len(pick), 37):
        cx.fill_next_token_bitmask(int(pick[i]), b, 0)
        full.fill_next_token_bitmask(int(pick[i]), a, 0)
        assert np.array_equal(a[0], b[0])
    # the sparse logits writers
    logits = rng.standard_normal((len(pick), full.width)).astype(np.float32)
    la, lb = logits.copy(), logits.copy()
    full.apply_mask_inplace(pick, la)
    cx.apply_mask_inplace(pick, lb)
    assert np.array_equal(la, lb)
    da = np.full_like(logits, -np.inf)
    db = da.copy()
    full.copy_allowed(pick, logits, da, rows)
    cx.copy_allowed(pick, logits, db, rows)
    assert np.array_equal(da, db)


@pytest.mark.parametrize("allow_end", [True, False])
@pytest.mark.parametrize("terminator", [None, '"'])
def test_compact_serves_as_the_full_layout(
    qwen2_index: TokenIndex, terminator: str | None, allow_end: bool
) -> None:
    values = _values(1500)
    full = compile_choices(values, qwen2_index, terminator=terminator, allow_end=allow_end)
    cx = compile_choices(
        values, qwen2_index, terminator=terminator, allow_end=allow_end, layout="compact"
    )
    assert (full.layout, cx.layout) == ("full", "compact")
    info = cx._arrays["compact_info"].tolist()
    assert info == [full.n_nodes, COMPACT_KEYS, 0, int(allow_end)]
    # most rows are walked: only nodes with more than COMPACT_KEYS values below keep theirs
    assert len(cx.row_ptr) - 1 < (full.n_nodes + 2) // 20
    # the compile's own compact arrays are those derived from the full layout, bit for bit
    derived = compact_arrays(full._arrays, qwen2_index, terminator, full.end_ids, allow_end)
    assert sorted(derived) == sorted(cx._arrays)
    for name, a in derived.items():
        assert a.dtype == cx._arrays[name].dtype and np.array_equal(a, cx._arrays[name]), name
    _same_everywhere(full, cx, seed=len(values))


def test_compact_small_sets_walk_every_node(toy_index: TokenIndex) -> None:
    for values in (["x"], [""], ["", "a"], EXTRA):
        full = compile_choices(values, toy_index)
        cx = compile_choices(values, toy_index, layout="compact")
        assert len(cx.row_ptr) == 3  # END and DEAD alone are stored
        _same_everywhere(full, cx)


def test_compact_holds_a_fraction_of_the_full_layout(qwen2_index: TokenIndex) -> None:
    values = tool_names(20_000, seed=1)
    full = compile_choices(values, qwen2_index)
    cx = compile_choices(values, qwen2_index, layout="compact")
    # the values themselves stay; the rows mostly go (100,000 names: 28.6 -> 5.6 MB)
    kept = full._arrays["value_bytes"].nbytes + full._arrays["value_offsets"].nbytes
    assert cx.nbytes < kept + (full.nbytes - kept) / 5
    # a request walks the same states: a Matcher over each accepts the same random paths
    ma, mb = Matcher(full), Matcher(cx)
    rng = np.random.default_rng(5)
    for _ in range(50):
        ma.reset()
        mb.reset()
        while not ma.is_terminated():
            ids = ma.allowed_token_ids()
            assert np.array_equal(mb.allowed_token_ids(), ids)
            t = int(rng.choice(ids))
            assert ma.accept_token(t) and mb.accept_token(t)
            assert ma.state == mb.state
        assert mb.is_terminated() and mb.value() == ma.value() is not None


def _unspellable() -> Vocabulary:
    """No single-byte token for 'y': from "x", "yz" cannot be spelled, so the compile leaves out
    the token "x" at the root of "xyz" (it leads nowhere) while a walk would offer it."""
    tokens = [bytes([b]) for b in range(256) if b != ord("y")]
    tokens += [b"xy", b"xyz", b"zy", b"yq", b"<eos>"]
    n = len(tokens)
    return Vocabulary(tokens, end_ids=[n - 1], special_ids=[], width=n, name="no-y")


def test_compact_keeps_the_rows_a_walk_would_get_wrong() -> None:
    vocab = _unspellable()
    index = TokenIndex.build(vocab)
    values = ["xyz", "xyza", "azyq", "b", "zyqq"]
    full = compile_choices(values, index)
    cx = compile_choices(values, index, layout="compact")
    assert cx._arrays["compact_info"][2] > 0  # rows kept because their walk differs
    _same_everywhere(full, cx)
    # the check matters: without it (no trie given), the walked layout differs from the full one
    a = full._arrays
    raw = native_core().compact_layout(
        a["row_ptr"], a["tokens"], a["children"], a["far_pos"], a["far_child"],
        a["value_bytes"], a["value_offsets"], b"", COMPACT_KEYS, None, vocab.end_ids,
    )  # fmt: skip
    assert len(raw["row_ptr"]) < len(cx.row_ptr)


def test_compact_layout_errors(toy_index: TokenIndex) -> None:
    with pytest.raises(ValueError, match="numpy backend serves the full layout only"):
        compile_choices(["a"], toy_index, layout="compact", backend="numpy")
    with pytest.raises(ValueError, match="layout='tight': expected one of 'full', 'compact'"):
        compile_choices(["a"], toy_index, layout="tight")


def test_compact_save_load(tmp_path: Path, toy: Vocabulary, toy_index: TokenIndex) -> None:
    values = [*EXTRA, *(f"get_user_{i}" for i in range(200))]
    full = compile_choices(values, toy_index, terminator='"')
    cx = compile_choices(values, toy_index, terminator='"', layout="compact")
    path = tmp_path / "set.trs"
    cx.save(path)
    back = ChoiceSet.load(path, toy)
    assert back.layout == "compact" and back.terminator == '"'
    _same_everywhere(full, back)
    with pytest.raises(ValueError, match="numpy backend"):
        ChoiceSet.load(path, toy, backend="numpy")
    # damaged files are refused before serving: a key's common prefix, END walked, a row short
    arrays, meta = load_arrays(path, "trierouter.ChoiceSet", mmap=False, verify=True)
    for name, damage in (
        ("key_lcp", lambda a: a.__setitem__(5, a[5] + 3)),
        ("demand_bits", lambda a: a.__setitem__(-1, a[-1] | np.uint64(1 << 63))),
        ("row_ptr", lambda a: a.__setitem__(1, a[1] + 1)),
    ):
        bad = {k: v.copy() for k, v in arrays.items()}
        if name == "demand_bits":  # END's bit: the state after an end id is always stored
            end = int(bad["compact_info"][0])
            bad[name][end >> 6] |= np.uint64(1) << np.uint64(end & 63)
        else:
            damage(bad[name])
        meta_only = {k: v for k, v in meta.items() if k not in ("kind",)}
        save_arrays(tmp_path / f"bad-{name}.trs", "trierouter.ChoiceSet", bad, meta_only)
        with pytest.raises(CorruptFileError):
            ChoiceSet.load(tmp_path / f"bad-{name}.trs", toy)


def test_compact_tool_name_rows_match_xgrammar(qwen2: Vocabulary, qwen2_index: TokenIndex) -> None:
    from trierouter.testing.oracle import (
        compare_with_xgrammar,
        ebnf_alternation,
        xgrammar_tokenizer_info,
    )

    xgr = pytest.importorskip("xgrammar")
    values = _values(1000)
    compiler = xgr.GrammarCompiler(xgrammar_tokenizer_info(qwen2), cache_enabled=False)
    for terminator in (None, '"'):
        vals = values if terminator is None else ['"' + v.replace('"', '\\"') for v in values]
        cx = compile_choices(vals, qwen2_index, terminator=terminator, layout="compact")
        compiled = compiler.compile_grammar(ebnf_alternation(vals, terminator))
        report = compare_with_xgrammar(cx, qwen2, compiled, n_paths=60, seed=7)
        assert report.paths == 60 and report.end_steps == 60
