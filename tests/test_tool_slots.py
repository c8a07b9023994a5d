"""Slot engines against XGrammar: for enum / const / boolean / null slots (trie) and fixed formats
(position automata), the mask equals XGrammar's for the same JSON schema at every step of random
token paths, the end step included; plus language checks against Python's own parsers."""

from __future__ import annotations

import ipaddress
import json
import random
import re
import uuid
from typing import Any

import numpy as np
import pytest

from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.formats import integer_range_node
from trierouter.registry.slots.masks import ToolAutomaton, VocabTables, pack_ids
from trierouter.registry.slots.nfa import nfa_fragment
from trierouter.registry.slots.regex import pattern_node
from trierouter.registry.vocabulary import Vocabulary

xgr = pytest.importorskip("xgrammar")

SLOTS: list[dict[str, Any]] = [
    {"type": "string", "format": "date"},
    {"type": "string", "format": "time"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "uuid"},
    {"type": "string", "format": "ipv4"},
    {"type": "integer", "minimum": 0, "maximum": 120},
    {"type": "integer", "minimum": -40, "maximum": 7},
    {"type": "integer", "minimum": 1},
    {"type": "integer", "maximum": -3},
    {"type": "integer", "minimum": 17, "maximum": 17004},
    {"type": "string", "enum": ["open", "closed", "all", "open_or_closed"]},
    {"enum": ["asc", "desc", 1, 2.5, None, True]},
    {"const": "v2"},
    {"type": "boolean"},
    {"type": "null"},
    {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"},
]


def _slot_automaton(schema: dict[str, Any], vocab: Vocabulary) -> ToolAutomaton:
    frag, engine, _ = SlotCompiler()._piece(schema, schema, "", [], 0)
    assert engine in ("trie", "format"), (schema, engine)
    return ToolAutomaton(frag, VocabTables.get(vocab))


def _compare(vocab: Vocabulary, schema: dict[str, Any], paths: int, seed: int) -> int:
    info = xgr.TokenizerInfo(
        [b"" if i in vocab.special_ids else t for i, t in enumerate(vocab.tokens)],
        xgr.VocabType.RAW,
        vocab_size=vocab.width,
        stop_token_ids=list(vocab.end_ids),
    )
    compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        json.dumps(schema), any_whitespace=False
    )
    a = _slot_automaton(schema, vocab)
    end_row = pack_ids(list(vocab.end_ids), vocab.width)
    rng = random.Random(seed)
    words = (vocab.width + 31) // 32
    steps = 0
    for _ in range(paths):
        m = xgr.GrammarMatcher(compiled)
        bm = xgr.allocate_token_bitmask(1, vocab.width)
        state = 0
        while True:
            m.fill_next_token_bitmask(bm, 0)
            theirs = bm[0].numpy()
            ours = np.zeros(words, dtype=np.int32)
            a.fill(state, ours)
            if a.accept[state]:
                ours |= end_row
            assert np.array_equal(ours, theirs), (schema, state, steps)
            steps += 1
            ids = np.flatnonzero(np.unpackbits(ours.view(np.uint8), bitorder="little"))
            if len(ids) == 0:
                break
            t = int(rng.choice(ids.tolist()))
            if t in vocab.end_ids:
                assert a.accept[state]
                break
            assert m.accept_token(t)
            state = a.advance(state, t)
            assert state >= 0
    return steps


@pytest.mark.parametrize("schema", SLOTS, ids=lambda s: json.dumps(s)[:40])
def test_slot_masks_equal_xgrammar_qwen2(qwen2: Vocabulary, schema: dict[str, Any]) -> None:
    assert _compare(qwen2, schema, paths=20, seed=1) > 20


@pytest.mark.parametrize("schema", SLOTS[:10], ids=lambda s: json.dumps(s)[:40])
def test_slot_masks_equal_xgrammar_gpt2(schema: dict[str, Any]) -> None:
    from trierouter.registry.shipped import shipped_vocabulary

    # GPT-2 merges digits ("2024", "12"): tokens cross format positions
    assert _compare(shipped_vocabulary("gpt2"), schema, paths=15, seed=2) > 15


def _accepts(node: Any, text: str) -> bool:
    return nfa_fragment(node).matches(text.encode())


def test_integer_ranges_brute_force() -> None:
    rng = random.Random(3)
    for _ in range(60):
        lo = rng.choice([None, rng.randint(-300, 300)])
        hi = rng.choice([None, rng.randint(-300, 300)])
        node = integer_range_node(lo, hi)
        for x in range(-400, 401):
            inside = (lo is None or x >= lo) and (hi is None or x <= hi)
            if node is None:
                assert not inside or (lo is not None and hi is not None and lo > hi)
                continue
            assert _accepts(node, str(x)) == inside, (lo, hi, x)
        if node is not None:
            for junk in ["-0", "007", "+1", "", "1.0", "--1"]:
                assert not _accepts(node, junk)


def test_formats_agree_with_python_parsers() -> None:
    from trierouter.registry.slots.formats import format_node

    uuid_node = format_node("uuid")
    ipv4 = format_node("ipv4")
    for _ in range(200):
        assert _accepts(uuid_node, str(uuid.uuid4()))
    for text in ["0.0.0.0", "255.255.255.255", "10.0.12.199"]:
        assert _accepts(ipv4, text)
        ipaddress.IPv4Address(text)
    for text in ["256.0.0.1", "1.2.3", "01.2.3.4a", "1.2.3.4.5"]:
        assert not _accepts(ipv4, text)
    date = format_node("date")
    assert _accepts(date, "2024-12-31") and not _accepts(date, "2024-13-01")


def test_patterns_match_python_re() -> None:
    rng = random.Random(4)
    cases = ["^[A-Z]{3}-[0-9]{2,4}$", "^(ab|cd)+x?$", "^[a-f0-9]{8}$", "^\\d{3}(\\.\\d+)?$",
             "^[^a-z]{2}$", "^v[0-9]+\\.[0-9]+$"]  # fmt: skip
    alphabet = "abcdxyzAZ019.-_ v"
    for pat in cases:
        node = pattern_node(pat)
        assert node is not None, pat
        frag = nfa_fragment(node)
        rx = re.compile(pat)
        for _ in range(3000):
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7)))
            assert frag.matches(s.encode()) == bool(rx.fullmatch(s)), (pat, s)
    for pat in ["^.*$", '^["]$', "^(?=a)b$", "^\\p{L}$"]:
        assert pattern_node(pat) is None, pat
