"""Decoding plans: masks against brute force, think-then-answer validity, fast-forward, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trierouter.data.synthetic import tool_names
from trierouter.errors import CompileError
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import compile_choices
from trierouter.router.bitmask import allocate_token_bitmask, bitmask_to_ids
from trierouter.router.plan import Choice, FreeText, PlanState, Text, compile_plan
from trierouter.testing.oracle import brute_force_allowed


def _ids(plan, state):  # type: ignore[no-untyped-def]
    bm = allocate_token_bitmask(1, plan.width)
    plan.fill_next_token_bitmask(state, bm, 0)
    return set(bitmask_to_ids(bm[0], plan.width).tolist())


def test_single_choice_plan_is_the_choice_set(qwen2_index: TokenIndex) -> None:
    cs = compile_choices(tool_names(300), qwen2_index)
    plan = compile_plan(cs, qwen2_index)
    assert plan.single_choice is cs
    plan2 = compile_plan(tool_names(300), qwen2_index)
    assert plan2.single_choice is not None and plan2.single_choice.values == cs.values


def test_text_choice_text_equals_brute_force(toy_index: TokenIndex) -> None:
    vocab = toy_index.vocabulary
    values = ["get", "get_user", "S72.001A"]
    plan = compile_plan([Text('{"t": "'), Choice(values, name="t"), Text('"}')], toy_index)
    strings = {f'{{"t": "{v}"}}'.encode() for v in values}
    stack = [(plan.start(), b"")]
    finished = set()
    while stack:
        state, prefix = stack.pop()
        expected = brute_force_allowed(vocab, strings, prefix)
        assert _ids(plan, state) == expected, prefix
        assert set(plan.allowed_token_ids(state).tolist()) == expected
        for t in expected:
            nxt = plan.advance(state, t)
            assert not plan.is_dead(nxt)
            if t in vocab.end_ids:
                assert plan.is_terminated(nxt)
                finished.add(prefix)
            else:
                stack.append((nxt, prefix + vocab.tokens[t]))
    assert finished == strings


def test_think_then_answer_random_walks_are_always_valid(qwen2_index: TokenIndex) -> None:
    vocab = qwen2_index.vocabulary
    values = tool_names(2_000)
    plan = compile_plan(
        [FreeText(until="</think>", max_tokens=6), Text("\nAnswer: "), Choice(values, name="a")],
        qwen2_index,
    )
    rng = np.random.default_rng(1)
    members = set(values)
    for _ in range(150):
        state = plan.start()
        tokens: list[int] = []
        while not plan.is_terminated(state):
            ids = plan.allowed_token_ids(state)
            assert len(ids), state
            token = int(rng.choice(ids))
            state = plan.advance(state, token)
            assert not plan.is_dead(state)
            tokens.append(token)
            assert len(tokens) < 200
        _, sep, tail = vocab.decode(tokens).partition(b"</think>")  # free text: any bytes
        assert sep and tail.startswith(b"\nAnswer: ")
        answer = tail[len(b"\nAnswer: ") :].decode("utf-8")
        assert answer in members
        assert plan.choices(tokens) == {"a": answer}


def test_free_text_masks(qwen2_index: TokenIndex) -> None:
    vocab = qwen2_index.vocabulary
    plan = compile_plan([FreeText(until="\n\n", max_tokens=3), Choice(["yes", "no"])], qwen2_index)
    start = plan.start()
    allowed = _ids(plan, start)
    assert not allowed & set(vocab.end_ids)
    assert not allowed & set(vocab.special_ids)
    # a token that completes the delimiter and goes on with text the choice cannot start with
    bad = [t for t, tb in enumerate(vocab.tokens) if tb.startswith(b"\n\n") and len(tb) > 2]
    bad = [t for t in bad if vocab.tokens[t][2:] not in (b"y", b"n", b"ye", b"yes", b"no")]
    assert bad and not allowed & set(bad)
    # after max_tokens the rest of the delimiter is forced
    word = vocab.tokens.index(b"hello")
    s = start
    for _ in range(3):
        s = plan.advance(s, word)
    assert plan.forced_tokens(s) and vocab.decode(plan.forced_tokens(s)) == b"\n\n"
    assert _ids(plan, s) <= {
        t for t, tb in enumerate(vocab.tokens) if b"\n\n".startswith(tb) and tb
    }


def test_forced_tokens_fast_forward(qwen2_index: TokenIndex) -> None:
    vocab = qwen2_index.vocabulary
    plan = compile_plan(
        [Text("Answer: "), Choice(["alpha_beta_gamma", "alpha_delta"])], qwen2_index
    )
    forced = plan.forced_tokens(plan.start())
    assert vocab.decode(forced) == b"Answer: alpha_"
    s = plan.start()
    for t in forced:
        s = plan.advance(s, t)
    assert not plan.is_dead(s) and plan.forced_tokens(s) == []
    s = plan.advance(s, vocab.tokens.index(b"beta"))
    rest = plan.forced_tokens(s)
    assert vocab.decode(rest) == b"_gamma"
    for t in rest:
        s = plan.advance(s, t)
    s = plan.advance(s, vocab.end_ids[0])
    assert plan.is_terminated(s)


def test_state_is_small_and_serialisable(toy_index: TokenIndex) -> None:
    plan = compile_plan([Text("x"), Choice(["get", "ge"])], toy_index)
    s = plan.advance(plan.start(), ord("x"))
    assert PlanState(*json.loads(json.dumps(s))) == s
    assert all(isinstance(v, int) for v in s)


def test_refused_tokens_give_dead_state_steered_to_stop(toy_index: TokenIndex) -> None:
    plan = compile_plan([Choice(["get"]), Text("!")], toy_index)
    dead = plan.advance(plan.start(), ord("z"))
    assert plan.is_dead(dead)
    assert _ids(plan, dead) == set(toy_index.vocabulary.end_ids)
    assert plan.is_dead(plan.advance(dead, ord("g")))


def test_bad_plans_are_refused(toy_index: TokenIndex, qwen2_index: TokenIndex) -> None:
    with pytest.raises(CompileError, match="no segments"):
        compile_plan([], toy_index)
    with pytest.raises(CompileError, match=r"plan\[1\] = 3 is int"):
        compile_plan([Text("a"), 3], toy_index)  # type: ignore[list-item]
    with pytest.raises(CompileError, match="until must not be empty"):
        compile_plan([FreeText(until="")], toy_index)
    with pytest.raises(CompileError, match="Text must not be empty"):
        compile_plan([Text("")], toy_index)
    with pytest.raises(CompileError, match="another vocabulary"):
        compile_plan([Choice(compile_choices(["a"], qwen2_index))], toy_index)
    with pytest.raises(CompileError, match="not a str"):
        compile_plan("abc", toy_index)
