"""ChoiceSet against a brute-force reference on toy vocabularies, edge cases and bad input."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trierouter.data.synthetic import tool_names
from trierouter.errors import (
    EmptySetError,
    InvalidValueError,
    TrieRouterError,
    UnreachableValueError,
)
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.testing.oracle import brute_force_allowed


def _explore(cs: ChoiceSet, vocab: Vocabulary, strings: set[bytes]) -> set[bytes]:
    """DFS over every accepted path; check masks against brute force; return completed strings."""
    done: set[bytes] = set()
    stack = [(cs.root, b"")]
    seen = set()
    while stack:
        state, prefix = stack.pop()
        if (state, prefix) in seen:
            continue
        seen.add((state, prefix))
        got = set(cs.mask(state).tolist())
        assert got == brute_force_allowed(vocab, strings, prefix), prefix
        for t in got:
            nxt = cs.advance(state, t)
            if t in vocab.end_ids:
                assert nxt == cs.END
                done.add(prefix)
            else:
                assert nxt != cs.DEAD
                stack.append((nxt, prefix + vocab.tokens[t]))
    return done


VALUES = [
    "get",
    "get_user",
    "get_user_by_id",
    "ge",
    "",
    "S72.001A",
    "S72.001",
    "café",
    "東京",
    "東京都",
    "a\x00b",
    "\x00",
    "tab\there",
    "get",  # duplicate
]


@pytest.mark.parametrize("terminator", [None, '"', '", '])
def test_every_path_spells_a_value_and_every_value_is_reachable(
    toy: Vocabulary, toy_index: TokenIndex, terminator: str | None
) -> None:
    cs = compile_choices(VALUES, toy_index, terminator=terminator)
    term = (terminator or "").encode()
    strings = {v.encode() + term for v in VALUES}
    assert _explore(cs, toy, strings) == strings
    assert len(cs) == len(set(VALUES))
    assert sorted(cs.values) == sorted(set(VALUES))


def test_terminator_tokens_cross_from_value_into_terminator(
    toy: Vocabulary, toy_index: TokenIndex
) -> None:
    cs = compile_choices(["ab", "a"], toy_index, terminator='",')
    state = cs.advance(cs.root, toy.tokens.index(b"ab"))
    crossing = toy.tokens.index(b'",')  # one token closes the value and the template
    assert crossing in cs.mask(state).tolist()
    end = cs.advance(state, crossing)
    assert cs.is_terminal(end) and cs.value_at(end) == "ab"


def test_partial_utf8_tokens_and_padding_ids(toy: Vocabulary, toy_index: TokenIndex) -> None:
    cs = compile_choices(["é", "東京"], toy_index)
    half = toy.tokens.index("é".encode()[:1])
    assert half in cs.mask(cs.root).tolist()  # a token holding half a character
    s = cs.advance(cs.root, half)
    assert cs.value_at(cs.advance(s, 0xA9)) == "é"
    padding = range(len(toy), toy.width)
    for state in range(cs.n_nodes + 2):
        assert not set(cs.mask(state).tolist()) & set(padding)
        assert cs.advance(state, toy.width - 1) == cs.DEAD


def test_duplicate_token_bytes_both_allowed(toy: Vocabulary, toy_index: TokenIndex) -> None:
    cs = compile_choices(["get"], toy_index)
    ids = [i for i, t in enumerate(toy.tokens) if t == b"get"]
    assert len(ids) == 2
    assert set(ids) <= set(cs.mask(cs.root).tolist())
    assert {cs.advance(cs.root, i) for i in ids} == {cs.advance(cs.root, ids[0])}


def test_special_tokens_never_inside_values(toy: Vocabulary, toy_index: TokenIndex) -> None:
    cs = compile_choices(["<pad>x", "<eos>"], toy_index)
    pad = toy.tokens.index(b"<pad>")
    eos = toy.end_ids[0]
    assert pad not in cs.mask(cs.root).tolist()
    assert eos not in cs.mask(cs.root).tolist()  # "<eos>" the text is spelled bytewise


def test_invalid_token_gives_dead_state_never_raises(toy_index: TokenIndex) -> None:
    cs = compile_choices(["get"], toy_index)
    for bad in (-1, 10**9, cs.width, 2**62):
        assert cs.advance(cs.root, bad) == cs.DEAD
    assert cs.advance(-5, 0) == cs.DEAD
    assert cs.advance(cs.DEAD + 7, 0) == cs.DEAD
    assert cs.advance(cs.DEAD, ord("g")) == cs.DEAD
    # a dead or finished request is steered to stop: only end ids
    assert cs.mask(cs.DEAD).tolist() == list(cs.end_ids)
    assert cs.mask(cs.END).tolist() == list(cs.end_ids)


def test_bad_input_errors_name_the_problem(toy: Vocabulary, toy_index: TokenIndex) -> None:
    with pytest.raises(EmptySetError, match="empty"):
        compile_choices([], toy_index)
    with pytest.raises(InvalidValueError, match=r"values\[1\] = 3 is int"):
        compile_choices(["a", 3, "b"], toy_index)  # type: ignore[list-item]
    with pytest.raises(InvalidValueError, match="single str"):
        compile_choices("abc", toy_index)
    with pytest.raises(InvalidValueError, match="UTF-8"):
        compile_choices(["ok", "\ud800"], toy_index)
    # an error is also a ValueError / TypeError, and a TrieRouterError
    with pytest.raises(TypeError):
        compile_choices([None], toy_index)  # type: ignore[list-item]
    with pytest.raises(TrieRouterError):
        compile_choices([], toy_index)


def test_unreachable_values_are_reported_by_name() -> None:
    vocab = Vocabulary([b"a", b"b", b"ab", b"</s>"], end_ids=[3])
    index = TokenIndex.build(vocab)
    with pytest.raises(UnreachableValueError) as info:
        compile_choices(["ab", "ac", "cc", "ba"], index)
    assert info.value.values == ["ac", "cc"]
    assert "0x63" in info.value.reasons[0]
    assert "2 of 4 values" in str(info.value)


def test_dead_end_tokens_are_pruned_when_bytes_are_missing() -> None:
    # "ab" spelled by token "ab" only; "a" would lead to a node with no way out
    vocab = Vocabulary([b"a", b"ab", b"c", b"</s>"], end_ids=[3])
    cs = compile_choices(["ab", "ac"], TokenIndex.build(vocab))
    assert set(cs.mask(cs.root).tolist()) == {0, 1}
    s = cs.advance(cs.root, 0)
    assert cs.mask(s).tolist() == [2]  # after "a" only "c" completes a value


def test_long_value_among_many_short(qwen2_index: TokenIndex) -> None:
    rng = random.Random(7)
    short = [f"tool_{i}_{rng.randint(0, 9)}" for i in range(100_000)]
    long_value = "".join(rng.choice("abcdefghij_ é東") for _ in range(9_000))
    assert len(long_value.encode()) > 10_000
    cs = compile_choices([*short, long_value], qwen2_index)
    assert len(cs) == len(set(short)) + 1
    vocab = qwen2_index.vocabulary
    # greedy longest-token walk along the long value reaches its end
    state, pos, target = cs.root, 0, long_value.encode()
    while pos < len(target):
        allowed = [t for t in cs.mask(state).tolist() if t not in vocab.end_ids]
        fits = [t for t in allowed if target.startswith(vocab.tokens[t], pos)]
        assert fits, pos
        best = max(fits, key=lambda t: len(vocab.tokens[t]))
        tb = vocab.tokens[best]
        pos += len(tb)
        state = cs.advance(state, best)
    assert cs.value_at(state) == long_value
    assert set(cs.end_ids) <= set(cs.mask(state).tolist())


alphabet = st.sampled_from([b"a", b"b", b"\x00", b"\xc3", b"\xa9", b'"'])
token_st = st.lists(alphabet, min_size=1, max_size=3).map(b"".join)
value_st = st.lists(st.sampled_from(["a", "b", "\x00", "é", '"', "ab"]), max_size=5).map("".join)


@settings(max_examples=150, deadline=None)
@given(
    tokens=st.lists(token_st, min_size=1, max_size=20),
    values=st.lists(value_st, min_size=1, max_size=8),
    full_bytes=st.booleans(),
    terminator=st.sampled_from([None, '"', "a"]),
)
def test_property_brute_force(
    tokens: list[bytes], values: list[str], full_bytes: bool, terminator: str | None
) -> None:
    base = [b"a", b"b", b"\x00", b"\xc3", b"\xa9", b'"'] if full_bytes else []
    vocab = Vocabulary([*base, *tokens, b"<eos>"], end_ids=[len(base) + len(tokens)])
    index = TokenIndex.build(vocab)
    term = (terminator or "").encode()
    strings = {v.encode() + term for v in values}
    try:
        cs = compile_choices(values, index, terminator=terminator)
    except UnreachableValueError as exc:
        assert not full_bytes
        assert exc.values
        return
    if full_bytes:
        # every byte is a token: the masks are exactly the definition, every value reachable
        assert _explore(cs, vocab, strings) == strings
    else:
        # possibly pruned dead ends: masks are subsets, every path completes, all values reached
        done: set[bytes] = set()
        stack = [(cs.root, b"")]
        while stack:
            state, prefix = stack.pop()
            got = set(cs.mask(state).tolist())
            assert got, prefix
            assert got <= brute_force_allowed(vocab, strings, prefix)
            for t in got:
                if t in vocab.end_ids:
                    done.add(prefix)
                else:
                    stack.append((cs.advance(state, t), prefix + vocab.tokens[t]))
        assert done == strings


@pytest.mark.parametrize("real", [False, True])
def test_batch_forms_equal_single_forms(
    toy_index: TokenIndex, qwen2_index: TokenIndex, real: bool
) -> None:
    if real:  # a large set: far children (stored out of line) occur near the root
        cs = compile_choices(tool_names(20_000), qwen2_index)
        assert len(cs._far_pos) > 0
    else:
        cs = compile_choices(VALUES, toy_index)
    width = cs.width
    rng = np.random.default_rng(0)
    states = rng.integers(0, cs.DEAD + 1, 3000)
    states[:200] = cs.root
    tokens = np.where(rng.random(3000) < 0.2, rng.integers(0, width, 3000), 0)
    for i, s in enumerate(states.tolist()):
        m = cs.mask(s)
        if len(m) and rng.random() < 0.8:
            tokens[i] = m[rng.integers(len(m))]
    got = cs.advance_batch(states, tokens)
    assert got.tolist() == [cs.advance(int(s), int(t)) for s, t in zip(states, tokens, strict=True)]
    single = np.zeros((len(states), cs.bitmask_words), dtype=np.int32)
    for i, s in enumerate(states.tolist()):
        cs.fill_next_token_bitmask(s, single, i)
    batch = np.full_like(single, -1)
    cs.fill_bitmask_batch(states, batch)
    assert np.array_equal(single, batch)
    rows = rng.permutation(len(states))
    scattered = np.full_like(single, -1)
    cs.fill_bitmask_batch(states, scattered, rows)
    assert np.array_equal(scattered[rows], single)


@pytest.mark.parametrize("backend", ["native", "numpy"])
def test_advance_batch_input_forms(toy_index: TokenIndex, backend: str) -> None:
    """Every input form gives the element-wise advance: int64 arrays (the compiled core's
    one-call path), other dtypes, lists, strided views, a broadcast token, 2-D arrays; lengths
    that differ are refused."""
    cs = compile_choices(VALUES, toy_index, backend=backend)
    rng = np.random.default_rng(1)
    states = rng.integers(-1, cs.DEAD + 2, 64).astype(np.int64)
    tokens = rng.integers(-1, cs.width + 1, 64).astype(np.int64)
    for i, s in enumerate(states.tolist()):
        m = cs.mask(s) if 0 <= s <= cs.DEAD else []
        if len(m) and i % 3:
            tokens[i] = m[i % len(m)]
    want = [cs.advance(s, t) for s, t in zip(states.tolist(), tokens.tolist(), strict=True)]
    forms = [
        (states, tokens),
        (states.astype(np.int32), tokens.astype(np.int32)),
        (states.tolist(), tokens.tolist()),
        (np.repeat(states, 2)[::2], np.repeat(tokens, 2)[::2]),  # not contiguous
        (np.asarray(states, dtype=np.int64).copy(order="C"), tokens.astype(np.uint32) % cs.width),
    ]
    for i, (s_in, t_in) in enumerate(forms):
        got = cs.advance_batch(s_in, t_in)
        assert got.dtype == np.int64 and got.shape == (64,), i
        t_list = np.asarray(t_in).astype(np.int64).tolist()
        assert got.tolist() == [
            cs.advance(s, t) for s, t in zip(states.tolist(), t_list, strict=True)
        ], i
    assert cs.advance_batch(states, tokens).tolist() == want
    one = int(tokens[1])
    assert cs.advance_batch(states, one).tolist() == [cs.advance(s, one) for s in states.tolist()]
    grid = cs.advance_batch(states.reshape(8, 8), tokens.reshape(8, 8))
    assert grid.shape == (8, 8) and grid.reshape(-1).tolist() == want
    with pytest.raises(ValueError):
        cs.advance_batch(states, tokens[:10])
