"""The per-step entry points of the compiled core (csrc/bindings/fast_method.h): ``Core.advance``,
``mask``, ``is_terminal``, ``fill``, ``advance_batch``, ``fill_batch``, ``apply_sparse``,
``copy_sparse`` and ``MatcherBase``'s steps, bound as CPython method descriptors that read numpy
arrays through the buffer protocol and anything else through DLPack.

Checked against the numpy reference backend: the same answers by position, by keyword and from
torch tensors; a wrong argument is a TypeError that names it, the dtype wanted and what was given.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from trierouter.registry import core as _backend
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices

from .conftest import toy_vocabulary

C: Any = _backend.native_core()
VALUES = ["get", "get_user", "get_user_by_id", "gel", "S72.001A", "café", "東京", "ab"]
NEG_INF32 = 0xFF800000


@pytest.fixture(scope="module")
def sets() -> tuple[ChoiceSet, ChoiceSet]:
    index = TokenIndex.build(toy_vocabulary())
    return (
        compile_choices(VALUES, index, backend="native"),
        compile_choices(VALUES, index, backend="numpy"),
    )


def _pairs(ref: ChoiceSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (state, token) of the set, END and DEAD included, and the reference's next state."""
    states = np.repeat(np.arange(ref.DEAD + 1, dtype=np.int64), ref.width)
    tokens = np.tile(np.arange(ref.width, dtype=np.int64), ref.DEAD + 1)
    return states, tokens, ref.advance_batch(states, tokens)


def test_steps_by_position_and_by_keyword_match_the_reference(
    sets: tuple[ChoiceSet, ChoiceSet],
) -> None:
    cs, ref = sets
    core = cs._core
    states, tokens, want = _pairs(ref)
    got = [core.advance(int(s), int(t)) for s, t in zip(states, tokens, strict=True)]
    assert got == want.tolist()
    assert core.advance(token=int(tokens[5]), state=int(states[5])) == want[5]
    assert np.array_equal(core.advance_batch(states, tokens), want)
    out = np.empty_like(states)
    assert core.advance_batch(states, tokens, out=out) is None
    assert np.array_equal(out, want)
    for s in range(ref.DEAD + 1):
        assert core.is_terminal(state=s) == ref.is_terminal(s)
        assert core.mask(s).tolist() == ref.mask(s).tolist()


def test_fills_by_position_keyword_and_torch_match_the_reference(
    sets: tuple[ChoiceSet, ChoiceSet],
) -> None:
    torch = pytest.importorskip("torch")
    cs, ref = sets
    core = cs._core
    n = ref.DEAD + 1
    states = np.arange(n, dtype=np.int64)
    want = np.zeros((n, cs.bitmask_words), np.int32)
    ref.fill_bitmask_batch(states, want)
    one = np.zeros((n, cs.bitmask_words), np.int32)
    for s in range(n):
        core.fill(s, one, s)
    keyword = np.zeros_like(one)
    for s in range(n):
        core.fill(bitmask=keyword, index=s, state=s)
    rows = np.arange(n, dtype=np.int64)[::-1].copy()
    batch = np.zeros_like(one)
    core.fill_batch(states, batch, rows)
    tensor = torch.zeros((n, cs.bitmask_words), dtype=torch.int32)
    core.fill_batch(torch.from_numpy(states), tensor, None)  # both through DLPack
    assert np.array_equal(one, want) and np.array_equal(keyword, want)
    assert np.array_equal(batch, want[::-1]) and np.array_equal(tensor.numpy(), want)
    moved = np.empty(n, np.int64)
    core.advance_batch(torch.from_numpy(states), torch.zeros(n, dtype=torch.int64), moved)
    assert np.array_equal(moved, ref.advance_batch(states, np.zeros(n, np.int64)))


def test_sparse_logits_match_the_reference(sets: tuple[ChoiceSet, ChoiceSet]) -> None:
    cs, ref = sets
    core = cs._core
    n = ref.DEAD + 1
    states = np.arange(n, dtype=np.int64)
    logits = np.random.default_rng(0).standard_normal((n, cs.width)).astype(np.float32)
    allowed = np.zeros((n, cs.width), bool)
    for s in range(n):
        allowed[s, ref.mask(s)] = True
    want = np.where(allowed, logits, -np.inf).astype(np.float32)
    applied = logits.copy()
    core.apply_sparse(states, applied.view(np.uint32), None, NEG_INF32, 4)
    copied = np.full_like(logits, -np.inf)
    core.copy_sparse(
        states=states, src=logits.view(np.uint32), dst=copied.view(np.uint32), rows=None,
        neg_inf_bits=NEG_INF32, itemsize=4,
    )  # fmt: skip
    assert np.array_equal(applied, want) and np.array_equal(copied, want)


def test_a_wrong_array_names_the_argument_the_dtype_and_what_was_given(
    sets: tuple[ChoiceSet, ChoiceSet],
) -> None:
    core = sets[0]._core
    words = sets[0].bitmask_words
    st = np.zeros(4, np.int64)
    bm = np.zeros((4, words), np.int32)
    cases: list[tuple[Any, str]] = [
        (lambda: core.advance_batch(st.astype(np.int32), st),
         r"states: expected a contiguous 1-D int64 array, got a 1-D int32 array"),
        (lambda: core.advance_batch(st, st.astype(np.float64)),
         r"tokens: expected a contiguous 1-D int64 array, got a 1-D float64 array"),
        (lambda: core.advance_batch(np.zeros(8, np.int64)[::2], st),
         r"states: .* got a 1-D non-contiguous int64 array"),
        (lambda: core.advance_batch(st.reshape(2, 2), st),
         r"states: .* got a 2-D int64 array"),
        (lambda: core.advance_batch([0, 0], [0, 0]), r"states: .* got list"),
        (lambda: core.advance_batch(st, st, st.astype(np.uint64)),
         r"out: expected a contiguous 1-D int64 array, got a 1-D uint64 array"),
        (lambda: core.fill_batch(st, bm, st.astype(np.int32)), r"rows: .* got a 1-D int32 array"),
        (lambda: core.fill(0, bm.astype(np.int64)), r"bitmask: expected a 1-D or 2-D array of 4"),
        (lambda: core.fill("0", bm), r"state: expected an int, got str"),
        (lambda: core.fill(0, b"\0" * 4 * words), r"bitmask: expected a writable .* read-only"),
    ]  # fmt: skip
    read_only = bm.copy()
    read_only.flags.writeable = False
    cases.append(
        (lambda: core.fill_batch(st, read_only, None), r"bitmask: .* got a read-only 2-D int32")
    )
    for call, message in cases:
        with pytest.raises(TypeError, match=message):
            call()
    assert (bm == 0).all()


def test_arguments_bind_as_the_signature_says(sets: tuple[ChoiceSet, ChoiceSet]) -> None:
    core = sets[0]._core
    bm = np.zeros((1, sets[0].bitmask_words), np.int32)
    assert str(inspect.signature(C.Core.fill)) == "(self, /, state, bitmask, index=0)"
    assert str(inspect.signature(C.Core.advance_batch)) == "(self, /, states, tokens, out=None)"
    assert str(inspect.signature(C.MatcherBase.accept_token)) == "(self, /, token_id)"
    cases: list[tuple[Any, str]] = [
        (lambda: core.fill(0), r"fill\(\) missing required argument 'bitmask' \(pos 2\)"),
        (lambda: core.fill(0, bm, 0, 1), r"fill\(\) takes at most 3 arguments \(4 given\)"),
        (lambda: core.fill(0, bm, idx=0), r"fill\(\) got an unexpected keyword argument 'idx'"),
        (lambda: core.fill(0, bm, state=0), r"fill\(\) got multiple values for argument 'state'"),
        (
            lambda: C.Core.advance(object(), 0, 0),
            r"'advance' for '(trierouter.registry._core.)?Core' objects",
        ),
    ]
    for call, message in cases:
        with pytest.raises(TypeError, match=message):
            call()


def test_matcher_steps_and_a_subclass_without_init(sets: tuple[ChoiceSet, ChoiceSet]) -> None:
    cs, ref = sets
    m = C.MatcherBase()
    m._init_core(cs._core, None, None, 0, cs.END, cs.DEAD, -1)
    s, taken = 0, []
    while s != ref.END:  # the largest id allowed at each step, to a complete value
        token = int(ref.mask(s)[-1])
        assert m.accept_token(token_id=token)
        taken.append(token)
        s = ref.advance(s, token)
        assert m.state == s or (s == ref.END and m.is_terminated())
    assert len(taken) >= 2
    assert not m.accept_token(0)  # nothing follows the end
    m.rollback(1)
    assert not m.accept_token(10**30)  # saturates to an id no set has: refused, state kept
    m.rollback(num_tokens=len(taken) - 1)
    assert m.state == 0 and m.num_accepted == 0
    m.reset()
    assert not m.is_terminated()
    assert m.allowed_token_ids().tolist() == ref.mask(0).tolist()

    class Bare(C.MatcherBase):  # type: ignore[misc]
        def __init__(self) -> None:  # never calls MatcherBase.__init__
            pass

    with pytest.raises(TypeError, match=r"super\(\).__init__\(\)"):
        Bare().accept_token(0)
