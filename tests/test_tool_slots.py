"""Slot engines against XGrammar: for enum / const / boolean / null slots (trie), fixed formats
(position automata) and objects of many properties (the key automaton), the mask equals
XGrammar's for the same JSON schema at every step of random token paths, the end step included
(a format as XGrammar's grammar for the format's pattern: XGrammar 0.2.8's own format rules are
looser than the formats); plus the languages against the oracle validators use:
``jsonschema``'s format checker and Python's ``re``."""

from __future__ import annotations

import ipaddress
import itertools
import json
import random
import re
import uuid
from typing import Any

import numpy as np
import pytest

from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.formats import (
    FORMAT_PATTERNS,
    _includes,
    format_node,
    integer_range_fragment,
    integer_range_node,
)
from trierouter.registry.slots.masks import ToolAutomaton, VocabTables, pack_ids
from trierouter.registry.slots.nfa import nfa_fragment
from trierouter.registry.slots.regex import pattern_node
from trierouter.registry.vocabulary import Vocabulary
from trierouter.testing import slots_reference

xgr = pytest.importorskip("xgrammar")

# dates and times are left out: their languages are XGrammar's minus what does not exist (year
# 0000, February 30, leap seconds), checked against jsonschema's format checker below
SLOTS: list[dict[str, Any]] = [
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


def _as_xgrammar(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema XGrammar gets: a format as the regular expression of its language."""
    fmt = schema.get("format")
    if fmt in FORMAT_PATTERNS:
        return {"type": "string", "pattern": "^" + FORMAT_PATTERNS[fmt] + "$"}
    return schema


def _compare(
    vocab: Vocabulary,
    schema: dict[str, Any],
    paths: int,
    seed: int,
    automaton: ToolAutomaton | None = None,
    budget: int = 1 << 30,
) -> int:
    """Steps compared. With a ``budget``, a token that ends the text (or closes it: no edge
    left) is drawn again, up to 3 times, so that paths go deep into long objects; past ``budget``
    steps a path ends as soon as it can, else takes a token that brings the end closer."""
    info = xgr.TokenizerInfo(
        [b"" if i in vocab.special_ids else t for i, t in enumerate(vocab.tokens)],
        xgr.VocabType.RAW,
        vocab_size=vocab.width,
        stop_token_ids=list(vocab.end_ids),
    )
    compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        json.dumps(_as_xgrammar(schema)), any_whitespace=False
    )
    a = automaton or _slot_automaton(schema, vocab)
    end_row = pack_ids(list(vocab.end_ids), vocab.width)
    rng = random.Random(seed)
    words = (vocab.width + 31) // 32
    steps = 0
    for _ in range(paths):
        m = xgr.GrammarMatcher(compiled)
        bm = xgr.allocate_token_bitmask(1, vocab.width)
        state = 0
        for taken in itertools.count():
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
            if taken >= budget:
                closer = a.toward_end(state)
                if a.accept[state]:
                    ids = np.asarray(vocab.end_ids, dtype=np.int64)
                elif closer is not None:
                    ids = closer.astype(np.int64)
            t = int(rng.choice(ids.tolist()))
            for _ in range(3 if taken < budget < 1 << 30 else 0):
                if t in vocab.end_ids or not (a.table[a.advance(state, t)] >= 0).any():
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


def _many_properties(n: int, every: int) -> dict[str, Any]:
    """An object of ``n`` properties, every ``every``-th one required (0: none): keys that share
    long prefixes, one a prefix of another, a quote and a non-ASCII letter in keys; values of
    each kind XGrammar serves as we do, a nested object among them (not free or bounded strings:
    XGrammar 0.2.8 lets them hold encoded surrogates, and raw control bytes but no escapes)."""
    stems = ["id", "name", "tenant_id", "created", 'q"uo', "é"]
    ends = ["", "__n", "__ic", "__nic", "__gte", "__lte", "_x", "__ie", "__nie", "__iew", "__gt"]
    ends += ["__lt", "__isw", "__nisw"]
    keys = [s + e for e in ends for s in stems][:n]
    values: list[dict[str, Any]] = [
        {"type": "integer"},
        {"type": "boolean"},
        {"enum": ["asc", "desc", None]},
        {"type": "string", "pattern": "^[a-z0-9-]{1,8}$"},
        {"type": "object", "properties": {"limit": {"type": "integer"}, "c": {"type": "null"}},
         "required": ["limit"]},
        {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
        {"type": "integer", "minimum": 0, "maximum": 99},
    ]  # fmt: skip
    return {
        "type": "object",
        "properties": {k: values[i % len(values)] for i, k in enumerate(keys)},
        "required": [k for i, k in enumerate(keys) if every and i % every == every - 1],
    }


@pytest.mark.parametrize(("n", "every"), [(40, 3), (42, 0), (70, 7)])
def test_many_properties_masks_equal_xgrammar(qwen2: Vocabulary, n: int, every: int) -> None:
    """An object of more properties than one trie per window affords (O(n²) key states when
    optional) is one automaton: XGrammar's mask at every step of random token paths."""
    schema = _many_properties(n, every)
    assert len(schema["properties"]) == n
    frag, slots = SlotCompiler().tool(schema, b"")
    assert {s.engine for s in slots} <= {"trie", "format", "automaton"}, slots
    a = ToolAutomaton(frag, VocabTables.get(qwen2))
    # the key states grow with the key bytes: fewer than a trie per window would hold
    key_bytes = sum(
        len(json.dumps(k, ensure_ascii=False).encode()) + 2 for k in schema["properties"]
    )
    assert a.n_states < 3 * key_bytes + 40 * n
    assert _compare(qwen2, schema, paths=12, seed=n, automaton=a, budget=150) > 12 * 40


def _accepts(node: Any, text: str) -> bool:
    return nfa_fragment(node).matches(text.encode())


def test_integer_ranges_brute_force() -> None:
    rng = random.Random(3)
    for _ in range(60):
        lo = rng.choice([None, rng.randint(-300, 300)])
        hi = rng.choice([None, rng.randint(-300, 300)])
        node = integer_range_node(lo, hi)
        direct = integer_range_fragment(lo, hi)  # what the slots use: built without subsets
        assert (node is None) == (direct is None)
        for x in range(-400, 401):
            inside = (lo is None or x >= lo) and (hi is None or x <= hi)
            if node is None:
                assert not inside or (lo is not None and hi is not None and lo > hi)
                continue
            assert _accepts(node, str(x)) == inside, (lo, hi, x)
            assert direct is not None and direct.matches(str(x).encode()) == inside, (lo, hi, x)
        if node is not None:
            for junk in ["-0", "007", "+1", "", "1.0", "--1", "00", "-"]:
                assert not _accepts(node, junk)
                assert direct is not None and not direct.matches(junk.encode())


def test_direct_integer_ranges_equal_their_subset_construction() -> None:
    # wide and lopsided bounds (values of 1 to 13 digits), against the regular expression's
    # automaton: the same language (a walk over pairs of states both ways), never more states
    rng = random.Random(11)
    cases = [(17, 17004), (99, 1000), (1, 10**12), (-(10**9), 10**9 + 7), (None, -3), (7, None)]
    cases += [(10**30, 10**31 + 5), (-(10**25), None), (0, 0), (None, None), (-5, 5)]
    for _ in range(300):
        e = rng.choice([1, 2, 4, 7, 12])
        lo = rng.choice([None, rng.randint(-(10**e), 10**e)])
        hi = rng.choice([None, rng.randint(-(10**e), 10**e)])
        cases.append((lo, hi))
    for lo, hi in cases:
        node, direct = integer_range_node(lo, hi), integer_range_fragment(lo, hi)
        assert (node is None) == (direct is None), (lo, hi)
        if node is None or direct is None:
            continue
        made = nfa_fragment(node)
        assert _includes(made, direct) and _includes(direct, made), (lo, hi)
        assert direct.n <= made.n, (lo, hi)
        # the compiled core's construction and the Python one: the same states, same order
        a = integer_range_fragment(lo, hi)
        b = slots_reference.integer_range_fragment(lo, hi)
        assert a is not None and b is not None and a.n == b.n, (lo, hi)
        for x, y in ((a.src, b.src), (a.byte, b.byte), (a.dst, b.dst), (a.accept, b.accept)):
            assert np.array_equal(x, y), (lo, hi)


def _format_samples(fmt: str, rng: random.Random) -> set[str]:
    """Near misses around each format's edges, and random strings over its alphabet."""
    out: set[str] = set()
    if fmt == "date":
        for y in ["0000", "0001", "0004", "0100", "0400", "1900", "2000", "2023", "2024", "9999"]:
            out |= {f"{y}-{m:02d}-{d:02d}" for m in range(14) for d in range(33)}
        out |= {f"{y:04d}-02-29" for y in range(0, 10000, 7)}
    elif fmt == "ipv4":
        octets = ["0", "00", "01", "1", "9", "10", "99", "100", "199", "249", "250", "255", "256"]
        out |= {f"{a}.1.{a}.0" for a in octets} | {f"1.2.3.{a}" for a in octets}
    elif fmt in ("time", "date-time"):
        pre = "2024-02-29T" if fmt == "date-time" else ""
        for h in ["00", "23", "24", "9"]:
            for sec in ["00", "59", "60"]:
                for off in ["Z", "z", "+00:00", "-23:59", "+24:00", "", "+0000"]:
                    out |= {f"{pre}{h}:30:{sec}{frac}{off}" for frac in ["", ".5", "."]}
    elif fmt == "uuid":
        out |= {str(uuid.uuid4()) for _ in range(50)} | {uuid.uuid4().hex for _ in range(5)}
    alphabet = {"date": "0123456789-", "ipv4": "0123456789."}.get(fmt, "0123456789abcdef-:.TtZz+")
    for _ in range(4000):
        out.add("".join(rng.choice(alphabet) for _ in range(rng.randint(7, 26))))
    return out


@pytest.mark.parametrize("fmt", sorted(FORMAT_PATTERNS))
def test_formats_are_the_format_checkers_languages(fmt: str) -> None:
    """Each format's automaton accepts exactly what ``jsonschema``'s format checker accepts
    (days per month, leap years, year 0001-9999, no leap seconds, octets without leading
    zeros); the checker is complete (``rfc3339-validator`` installed for times)."""
    import jsonschema

    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    assert fmt in checker.checkers, f"the format checker cannot check {fmt}: install its extra"
    frag = nfa_fragment(format_node(fmt))
    wrong = [
        s
        for s in _format_samples(fmt, random.Random(fmt))
        if frag.matches(s.encode()) != checker.conforms(s, fmt)
    ]
    assert not wrong, wrong[:5]
    if fmt == "date":
        for bad in ["2023-02-31", "0000-08-22", "2023-02-29", "1900-02-29", "2024-04-31"]:
            assert not frag.matches(bad.encode()), bad
        for good in ["2024-02-29", "2000-02-29", "0004-02-29", "9999-12-31"]:
            assert frag.matches(good.encode()), good
    if fmt == "ipv4":
        assert not frag.matches(b"01.2.3.4") and frag.matches(b"0.10.200.255")


def test_formats_agree_with_python_parsers() -> None:
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


def test_dates_and_times_are_exactly_the_format_checkers() -> None:
    """Every date of years 0000-0029, 1890-2109 and 9980-9999 (months 00-13, days 00-32) and
    20,000 random date-times: accepted exactly when jsonschema's format checker accepts them."""
    import jsonschema

    from trierouter.registry.slots.formats import format_node

    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    date = nfa_fragment(format_node("date"))
    years = [*range(30), *range(1890, 2110), *range(9980, 10000)]
    for y in years:
        for m in range(14):
            for d in range(33):
                v = f"{y:04d}-{m:02d}-{d:02d}"
                assert date.matches(v.encode()) == checker.conforms(v, "date"), v
    dt = nfa_fragment(format_node("date-time"))
    tm = nfa_fragment(format_node("time"))
    rng = random.Random(5)
    for _ in range(20000):
        t = (
            f"{rng.randint(0, 25):02d}:{rng.randint(0, 61):02d}:{rng.randint(0, 61):02d}"
            f"{rng.choice(['Z', '+05:30', '-00:43', '.5Z', '+24:00', '.123-23:59'])}"
        )
        v = f"{rng.randint(0, 9999):04d}-{rng.randint(0, 13):02d}-{rng.randint(0, 32):02d}T{t}"
        assert dt.matches(v.encode()) == checker.conforms(v, "date-time"), v
        assert tm.matches(t.encode()) == checker.conforms(t, "time"), t


def test_patterns_match_python_re() -> None:
    rng = random.Random(4)
    cases = ["^[A-Z]{3}-[0-9]{2,4}$", "^(ab|cd)+x?$", "^[a-f0-9]{8}$", "^\\d{3}(\\.\\d+)?$",
             "^[^a-z]{2}$", "^v[0-9]+\\.[0-9]+$", "^a+?$", "^(ab)*?c??$", "^x{1,3}?y$"]  # fmt: skip
    alphabet = "abcdxyzAZ019.-_ v"
    for pat in cases:
        node = pattern_node(pat)
        assert node is not None, pat
        frag = nfa_fragment(node)
        rx = re.compile(pat)
        for _ in range(3000):
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7)))
            assert frag.matches(s.encode()) == bool(rx.fullmatch(s)), (pat, s)
    for pat in ["^.*$", '^["]$', "^(?=a)b$", "^\\p{L}$", "^a++$", "^*a$", "^a{2}+$"]:
        assert pattern_node(pat) is None, pat
    # lazy quantifiers: the same language under a full match, not a literal "?"
    lazy = nfa_fragment(pattern_node("^a+?$"))  # type: ignore[arg-type]
    assert lazy.matches(b"aa") and not lazy.matches(b"aa?")
