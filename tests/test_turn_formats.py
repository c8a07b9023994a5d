"""Formats that wrap the whole turn: Mistral's ``[TOOL_CALLS][{...}, {...}]`` and ``json_array``
(vLLM's ``tool_choice="required"`` array of calls), on real tokenizers (Qwen2, Mistral v3
SentencePiece, Mistral Tekken). Random token walks under every ``tool_choice``, one call or
parallel calls, with and without a token limit, always end as one complete, closed turn: read by
an independent reader (the marker, then ``json.loads`` of the rest as ONE array, each call's
arguments checked by ``jsonschema`` with its format checker), with as many calls as the plan
allows. The model's own encoding of a Mistral turn (mistral-common) is accepted token by token."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

from trierouter.registry.compiler import CompiledTools, compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import shipped_vocabulary
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.bitmask import bitmask_to_ids
from trierouter.router.toolcalls import ToolCallPlan

jsonschema = pytest.importorskip("jsonschema")

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "properties": {"day": {"type": "string", "format": "date"},
        "seats": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["day", "seats"]}}},
    {"type": "function", "function": {"name": "weather.get", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
        "tags": {"type": "array", "items": {"enum": ["a]", "b}"]}, "maxItems": 2}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "ping", "parameters": {}}},
]  # fmt: skip
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] or {} for t in TOOLS}
FORMATS = {"mistral": ("[TOOL_CALLS]", "arguments"), "json_array": ("", "parameters")}


@pytest.fixture(scope="module", params=["qwen2", "mistral-v3", "tekken"])
def turn_tools(request: pytest.FixtureRequest) -> tuple[Vocabulary, dict[str, CompiledTools]]:
    vocab = shipped_vocabulary(request.param)
    index = TokenIndex.get(vocab)
    return vocab, {fmt: compile_tools(TOOLS, index, format=fmt) for fmt in FORMATS}


def read_turn(fmt: str, text: str, *, auto: bool) -> tuple[str, list[tuple[str, Any]]]:
    """(content, calls): the marker, then the whole rest as one JSON array of
    ``{"name", <arguments key>}`` objects, arguments valid (format checker on)."""
    marker, key = FORMATS[fmt]
    content = ""
    if auto:
        cut = text.find(marker or '[{"name": "')
        if cut < 0:
            return text, []
        content, text = text[:cut], text[cut:]
    assert text.startswith(marker), text
    calls = json.loads(text[len(marker) :])  # trailing text after the array fails here
    assert isinstance(calls, list) and calls, text
    out = []
    for c in calls:
        assert set(c) == {"name", key}, c
        schema = SCHEMAS[c["name"]]
        cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
        cls(schema, format_checker=cls.FORMAT_CHECKER).validate(c[key])
        out.append((c["name"], c[key]))
    return content, out


_TOWARD: dict[tuple[str, str], list[list[int]]] = {}


def _toward(vocab: Vocabulary, trigger: str) -> list[list[int]]:
    """Per progress ``k`` into the trigger, the tokens that spell on from there."""
    key = (vocab.name, trigger)
    if key not in _TOWARD:
        data = trigger.encode()
        firsts = [(i, t) for i, t in enumerate(vocab.tokens) if t and t[0] in data]
        _TOWARD[key] = [[i for i, t in firsts if data[k:].startswith(t)] for k in range(len(data))]
    return _TOWARD[key]


def _walk(
    plan: ToolCallPlan, vocab: Vocabulary, rng: random.Random, limit: int | None = None
) -> str:
    """A random token walk to the end (the end id taken 30% of the times it is allowed; under
    ``auto`` the trigger's tokens preferred, so that calls happen)."""
    toward = _toward(vocab, plan.format.trigger)
    st: Any = plan.start()
    toks: list[int] = []
    row = np.zeros((1, (plan.width + 31) // 32), dtype=np.int32)
    for n in range(limit or 400):
        plan.fill_next_token_bitmask(st, row, 0, remaining=None if limit is None else limit - n)
        ids = bitmask_to_ids(row[0], plan.width)
        t = int(ids[rng.randrange(len(ids))])
        ends = [e for e in vocab.end_ids if (int(row[0, e >> 5]) >> (e & 31)) & 1]
        if 0 <= st[0] < plan.NAME and rng.random() < 0.7:  # free text: toward the trigger
            near = [i for i in toward[st[1]] if (int(row[0, i >> 5]) >> (i & 31)) & 1]
            t = rng.choice(near or [t])
        elif ends and rng.random() < 0.3:
            t = ends[0]
        toks.append(t)
        st = plan.advance(st, t)
        assert st[0] != plan.DEAD
        if st[0] == plan.TERMINATED:
            return vocab.decode(toks[:-1]).decode("utf-8")
    raise AssertionError(f"no end after {len(toks)} tokens: {vocab.decode(toks)[-80:]!r}")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_random_walks_end_as_one_closed_turn(
    turn_tools: tuple[Vocabulary, dict[str, CompiledTools]], fmt: str
) -> None:
    vocab, compiled = turn_tools
    tools = compiled[fmt]
    rng = random.Random(f"{vocab.name}{fmt}")
    cases = [
        ("required", False, None),
        ("required", True, None),
        ("weather.get", True, None),
        ("auto", True, None),
        ("required", True, 48),
    ]
    most = 0
    for choice, parallel, limit in cases:
        plan = ToolCallPlan(tools, tool_choice=choice, parallel_tool_calls=parallel, max_calls=3)
        counts = []
        for _ in range(4):
            text = _walk(plan, vocab, rng, limit)
            content, calls = read_turn(fmt, text, auto=choice == "auto")
            assert [(c.name, c.args) for c in plan.parse_calls(text).calls] == calls
            if choice != "auto":
                assert content == "" and calls, text
            if choice == "weather.get":
                assert {n for n, _ in calls} == {"weather.get"}
            counts.append(len(calls))
        assert max(counts) <= plan.max_calls, (choice, counts)
        if not parallel:
            assert counts == [1, 1, 1, 1]
        else:
            most = max(most, *counts)
    assert most >= 2  # parallel calls do happen


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_after_the_last_call_only_the_close_then_the_end(
    turn_tools: tuple[Vocabulary, dict[str, CompiledTools]], fmt: str
) -> None:
    """Once a call is complete and no other may follow: the closing ``]`` (alone or joined to
    the call's ``}``), never the end id before it; after it, only the end id."""
    vocab, compiled = turn_tools
    plan = ToolCallPlan(compiled[fmt], tool_choice="ping")
    marker = FORMATS[fmt][0]
    key = FORMATS[fmt][1]
    text = marker + f'[{{"name": "ping", "{key}": {{}}'
    st: Any = plan.start()
    for b in text.encode():  # one byte at a time
        tok = next(i for i in plan.allowed_token_ids(st).tolist() if vocab.tokens[i] == bytes([b]))
        st = plan.advance(st, tok)
    ids = plan.allowed_token_ids(st).tolist()
    assert not set(ids) & set(vocab.end_ids)
    assert {vocab.tokens[i] for i in ids} == {t for t in set(vocab.tokens) if t in (b"}", b"}]")}
    st = plan.advance(st, next(i for i in ids if vocab.tokens[i] == b"}"))
    ids = plan.allowed_token_ids(st).tolist()
    assert [vocab.tokens[i] for i in ids] == [b"]"] * len(ids) and ids
    st = plan.advance(st, ids[0])
    assert plan.allowed_token_ids(st).tolist() == list(vocab.end_ids)
