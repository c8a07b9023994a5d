"""Matcher verbs, persistence of compiled sets, and bitmask application (numpy and torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from trierouter.errors import CorruptFileError, VocabularyMismatchError
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router import bitmask as bitmask_mod
from trierouter.router.bitmask import (
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_to_ids,
    ids_to_bitmask,
)
from trierouter.router.matcher import Matcher

from .conftest import toy_vocabulary

VALUES = ["get", "get_user", "get_user_by_id", "S72.001A", "東京"]


@pytest.fixture()
def choices(toy_index: TokenIndex) -> ChoiceSet:
    return compile_choices(VALUES, toy_index)


def _tok(vocab: Vocabulary, text: str) -> int:
    return vocab.tokens.index(text.encode())


def test_accept_value_rollback_reset(toy: Vocabulary, choices: ChoiceSet) -> None:
    m = Matcher(choices)
    assert not m.is_complete() and m.value() is None
    assert m.accept_token(_tok(toy, "get"))
    assert m.is_complete() and m.value() == "get"
    assert m.accept_token(_tok(toy, "_user"))
    assert m.value() == "get_user"
    assert not m.accept_token(_tok(toy, "get"))  # refused: state unchanged
    assert m.value() == "get_user"
    m.rollback(1)
    assert m.value() == "get"
    assert m.accept_tokens([_tok(toy, "_user"), _tok(toy, "_by"), _tok(toy, "_id")])
    assert not m.accept_tokens([_tok(toy, "_id")])
    assert m.value() == "get_user_by_id" and m.num_accepted == 4
    assert m.accept_token(toy.end_ids[0])
    assert m.is_terminated() and m.value() == "get_user_by_id"
    with pytest.raises(ValueError, match="num_tokens=9"):
        m.rollback(9)
    m.reset()
    assert m.state == choices.root and m.num_accepted == 0


def test_max_rollback_bounds_history(toy: Vocabulary, choices: ChoiceSet) -> None:
    m = Matcher(choices, max_rollback_tokens=1)
    m.accept_tokens([_tok(toy, "get"), _tok(toy, "_user")])
    assert m.num_accepted == 1
    m.rollback(1)
    assert m.value() == "get"


def test_bitmask_matches_allowed_ids(toy: Vocabulary, choices: ChoiceSet) -> None:
    m = Matcher(choices)
    bm = allocate_token_bitmask(2, toy.width)
    m.fill_next_token_bitmask(bm, 1)
    assert bitmask_to_ids(bm[1], toy.width).tolist() == m.allowed_token_ids().tolist()
    assert not bm[0].any()
    assert np.array_equal(ids_to_bitmask(m.allowed_token_ids(), toy.width), bm[1])


def test_apply_bitmask_numpy_and_torch(toy: Vocabulary, choices: ChoiceSet) -> None:
    rng = np.random.default_rng(0)
    states = [choices.root, choices.advance(choices.root, _tok(toy, "get")), choices.DEAD]
    bm = allocate_token_bitmask(len(states), toy.width)
    choices.fill_bitmask_batch(states, bm)
    logits = rng.standard_normal((len(states), toy.width)).astype(np.float32)
    expected = logits.copy()
    for i, s in enumerate(states):
        keep = np.zeros(toy.width, dtype=bool)
        keep[choices.mask(s)] = True
        expected[i, ~keep] = -np.inf
    got = logits.copy()
    apply_token_bitmask_inplace(got, bm)
    assert np.array_equal(got, expected)
    t = torch.from_numpy(logits.copy())
    apply_token_bitmask_inplace(t, torch.from_numpy(bm))
    assert np.array_equal(t.numpy(), expected)
    # XGrammar's semantics: bitmask row i masks logits row i for i in indices; columns past the
    # mask words are left alone. Both implementations (ours and xgrammar's kernel) agree.
    import xgrammar

    wide = rng.standard_normal((3, bm.shape[1] * 32 + 5)).astype(np.float32)
    for impl in ("numpy", "torch", "xgrammar"):
        got_w = wide.copy()
        if impl == "numpy":
            apply_token_bitmask_inplace(got_w, bm, indices=[2, 0])
        elif impl == "torch":
            tw = torch.from_numpy(got_w)
            bitmask_mod._apply_torch_fallback(tw, torch.from_numpy(bm), [2, 0])
        else:
            tw = torch.from_numpy(got_w)
            with pytest.warns(UserWarning, match="left unmasked"):
                xgrammar.apply_token_bitmask_inplace(tw, torch.from_numpy(bm), indices=[2, 0])
        assert np.array_equal(got_w[1], wide[1]), impl
        for i in (0, 2):
            keep = set(np.flatnonzero(~np.isinf(got_w[i, : bm.shape[1] * 32])).tolist())
            assert keep == set(choices.mask(states[i]).tolist()), impl
            assert np.array_equal(got_w[i, bm.shape[1] * 32 :], wide[i, bm.shape[1] * 32 :])


def test_save_load_mmap_roundtrip(tmp_path: Path, toy: Vocabulary, choices: ChoiceSet) -> None:
    path = tmp_path / "set.trt"
    choices.save(path)
    loaded = ChoiceSet.load(path, toy, mmap=True)
    assert loaded.values == choices.values
    assert isinstance(loaded.tokens.base, np.memmap) or isinstance(loaded.tokens, np.memmap)
    copied = ChoiceSet.load(path, toy)  # the default: read into memory, no mapping kept
    assert not any(isinstance(a, np.memmap) for a in (copied.tokens, copied.tokens.base))
    for s in range(choices.n_nodes + 2):
        assert loaded.mask(s).tolist() == choices.mask(s).tolist()
        for t in choices.mask(s).tolist():
            assert loaded.advance(s, t) == choices.advance(s, t)
    assert ChoiceSet.load(path, toy, mmap=False).values == choices.values


def test_load_refuses_other_vocabulary_and_corruption(tmp_path: Path, choices: ChoiceSet) -> None:
    path = tmp_path / "set.trt"
    choices.save(path)
    with pytest.raises(VocabularyMismatchError, match="recompile"):
        ChoiceSet.load(path, toy_vocabulary([b"other"]))
    # the logits width is a fact of where the set is applied: a wider model serves it as is,
    # its padding ids never allowed
    wide = ChoiceSet.load(path, toy_vocabulary(width_pad=10))
    assert wide.width == toy_vocabulary(width_pad=10).width > choices.width
    for s in range(choices.n_nodes + 2):
        assert wide.mask(s).tolist() == choices.mask(s).tolist()
        row = np.zeros((1, wide.bitmask_words), dtype=np.int32)
        wide.fill_next_token_bitmask(s, row)
        assert set(bitmask_to_ids(row[0], wide.width).tolist()) == set(choices.mask(s).tolist())
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError):
        ChoiceSet.load(path, toy_vocabulary())
    other = tmp_path / "index.trt"
    TokenIndex.build(toy_vocabulary()).save(other)
    with pytest.raises(CorruptFileError, match=r"expected 'trierouter\.ChoiceSet'"):
        ChoiceSet.load(other, toy_vocabulary())


def test_matcher_edge_cases(choices: ChoiceSet) -> None:
    """``value()`` after termination without history; ``accept_tokens`` all-or-nothing with a
    truncated history; nothing is accepted after termination; bad states are refused."""
    vocab = toy_vocabulary()
    end = vocab.end_ids[0]
    value = choices.values[0]
    path = [vocab.tokens.index(bytes([b])) for b in value.encode()]
    m = Matcher(choices, max_rollback_tokens=0)
    assert m.accept_tokens([*path, end])
    assert m.is_terminated() and m.value() == value
    assert not m.accept_token(end)  # already terminated: like XGrammar, refused
    assert not m.accept_tokens([end])
    m = Matcher(choices, max_rollback_tokens=1)
    before = m.state
    assert not m.accept_tokens([*path, path[0], path[0]])  # refused late: nothing applied
    assert m.state == before and m.num_accepted == 0
    with pytest.raises(ValueError, match="not a state"):
        choices.mask(-2)
    with pytest.raises(ValueError, match="not a state"):
        choices.mask(choices.DEAD + 1)


def test_node_ids_that_would_overflow_int32_are_refused(
    monkeypatch: pytest.MonkeyPatch, toy_index: TokenIndex
) -> None:
    """Node ids are stored as int32: a trie past that is refused before anything wraps (the
    numpy reference; the core refuses on the byte total before it builds anything)."""
    import types

    from trierouter.registry.backends import numpy_reference

    def huge(*args: object) -> types.SimpleNamespace:
        return types.SimpleNamespace(size=2**31 - 2, ends=np.zeros(1, dtype=np.int64))

    monkeypatch.setattr(numpy_reference, "build_trie", huge)
    with pytest.raises(OverflowError, match="int32"):
        compile_choices(["a"], toy_index, backend="numpy")
