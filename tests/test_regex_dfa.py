"""The compiled core's ``pattern`` compiler (``regex_dfa``: parse, NFA and subset construction in
one call) against the Python reference and Python's ``re``.

The reference is the Python parser (:func:`~trierouter.registry.slots.regex.pattern_node`) and
Thompson construction (:func:`~trierouter.registry.slots.nfa.nfa_fragment`): the native
automaton must be the same one, state for state and edge for edge (with the same subset
construction, that of the core, whose numbering is checked against the Python subset
construction elsewhere), and refuse the same patterns. Patterns: edge cases of the subset's
grammar, the fixed formats' patterns, random strings over the characters that matter to the
parser (most outside the subset: every refusal path) and random well-formed expressions. The
language itself is checked against ``re.fullmatch`` on strings drawn from each pattern's bytes.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from trierouter.registry.slots import nfa
from trierouter.registry.slots.formats import FORMAT_PATTERNS
from trierouter.registry.slots.fragment import Fragment
from trierouter.registry.slots.nfa import TooManyStates, lit, nfa_fragment, seq
from trierouter.registry.slots.regex import pattern_fragment, pattern_node
from trierouter.testing import slots_reference

EDGE_CASES = [
    "",
    "^",
    "$",
    "^$",
    "a",
    "^abc$",
    "abc$",
    "\\$",
    "a\\$",
    "a\\\\$",
    "a\\",
    "\\",
    "(",
    ")",
    "a)",
    "(a",
    "()",
    "(?:ab)+",
    "(?i)a",
    "(?",
    "(?:",
    "a|",
    "|a",
    "|",
    "a||b",
    "(a|b|)c",
    "a{",
    "a{2",
    "a{2}",
    "a{2,}",
    "a{,3}",
    "a{2,3}",
    "a{3,2}",
    "a{0}",
    "a{0,0}",
    "a{64}",
    "a{65}",
    "a{1,65}",
    "a{99999999999999999999}",
    "a{2}{3}",
    "a{2}?",
    "a{2}?+",
    "a*?",
    "a+?",
    "a??",
    "a**",
    "a*+",
    "a+{2}",
    "*a",
    "+",
    "?",
    "{2}",
    "a{2}b{1,3}c?d*e+",
    ".",
    "a.b",
    "^a^b",
    "a$b",
    "\\d{3}-\\d{4}",
    "\\w+",
    "\\W",
    "\\s",
    "\\D",
    "\\b",
    "\\n",
    "\\.",
    "\\-",
    "\\/",
    '\\"',
    "\\\\",
    '"',
    "[abc]",
    "[a-z0-9_-]{1,64}",
    "[^a-z]",
    "[^]a]",
    "[]a]",
    "[]",
    "[^]",
    "[",
    "[a-",
    "[a-]",
    "[-a]",
    "[a-\\d]",
    "[\\d-z]",
    "[\\d-]",
    "[z-a]",
    "[a-a]",
    "[\\.-\\/]",
    "[\\w-]+",
    '[^"]',
    '["]',
    "[\\\\]",
    "[ -~]",
    "[\\x41]",
    "[^\\d\\w]",
    "[^ -~]",
    "[\t]",
    "\t",
    "[a\\]]",
    "[a\\",
    "(a|b)*a(a|b){3}",
    "((a|b){2}|c)+",
    "(([0-9]{1,3})\\.){3}[0-9]{1,3}",
    "^[A-Z]{3}-[0-9]{2,4}$",
    "^\\+?[1-9]\\d{1,14}$",
    "^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
    "(" * 64 + "a" + ")" * 64,
    "(" * 65 + "a" + ")" * 65,
    "(" * 100_000,  # (recursion: refused at the depth bound, no stack overflow)
    "(?:" * 50 + "b|" + ")" * 50,
]


def _reference(pattern: str, max_states: int | None = None) -> Fragment | None:
    """The Python parse and NFA, determinized by the core (the native path's steps, apart)."""
    node = pattern_node(pattern)
    if node is None:
        return None
    return nfa_fragment(seq(lit('"'), node, lit('"')), max_states)


def _same(pattern: str, max_states: int | None = None) -> Fragment | None:
    """Asserts the native automaton is the reference's (or both refuse alike); returns it."""
    try:
        ref = _reference(pattern, max_states)
    except TooManyStates:
        with pytest.raises(TooManyStates):
            pattern_fragment(pattern, max_states=max_states)
        return None
    got = pattern_fragment(pattern, max_states=max_states)
    if ref is None:
        assert got is None, pattern
        return None
    assert got is not None, pattern
    assert got.n == ref.n, pattern
    for name in ("src", "byte", "dst", "accept"):
        a, b = getattr(got, name), getattr(ref, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), (pattern, name)
    return got


def _fullmatch_body(pattern: str) -> str:
    """The expression the subset's parser reads: anchors dropped as it drops them."""
    body = pattern[1:] if pattern.startswith("^") else pattern
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    return body


def _check_language(pattern: str, frag: Fragment, rng: random.Random) -> None:
    """Every string of a sample over the pattern's own bytes (and a few others) is accepted
    between quotes exactly when ``re.fullmatch`` matches it."""
    rx = re.compile(_fullmatch_body(pattern))  # (every served pattern compiles in re too)
    alphabet = sorted({c for c in pattern if " " <= c <= "~"} | set("a0Z-_."))
    for _ in range(60):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        want = rx.fullmatch(text) is not None
        assert frag.matches(b'"' + text.encode() + b'"') == want, (pattern, text)
    for _ in range(20):  # strings the pattern matches, found by a walk of the automaton
        state, out = 0, bytearray()
        for _ in range(40):
            edges = np.flatnonzero(frag.src == state)
            if not len(edges) or (frag.accept[state] and rng.random() < 0.2):
                break
            e = int(rng.choice(edges))
            out.append(int(frag.byte[e]))
            state = int(frag.dst[e])
        if frag.accept[state]:
            inner = bytes(out[1:-1]).decode()
            assert rx.fullmatch(inner) is not None, (pattern, inner)


def test_edge_cases_and_formats_equal_the_reference() -> None:
    rng = random.Random(0)
    served = 0
    for pattern in EDGE_CASES + list(FORMAT_PATTERNS.values()):
        frag = _same(pattern)
        if frag is not None:
            served += 1
            _check_language(pattern, frag, rng)
    refused = len(EDGE_CASES) + len(FORMAT_PATTERNS) - served
    assert served > 40 and refused > 40  # (both sides of the subset)


def _random_text(rng: random.Random) -> str:
    chars = 'ab0Z9-_.,:^$|()[]{}?*+\\dwWs"/ ~'
    digits = "0123456789"
    out = []
    for _ in range(rng.randint(0, 14)):
        c = rng.choice(chars)
        if c == "{":  # a quantifier-shaped run, sometimes well formed
            c += "".join(rng.choice(digits + ",}") for _ in range(rng.randint(0, 4)))
        out.append(c)
    return "".join(out)


def _random_regex(rng: random.Random, depth: int = 0) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        if depth < 2 and rng.random() < 0.25:
            alts = "|".join(_random_regex(rng, depth + 1) for _ in range(rng.randint(1, 3)))
            group = rng.choice(["(", "(?:"]) + alts + ")"
            parts.append(group + rng.choice(["", "?", "*", "+", "{2}", "{0,3}", "{1,4}", "{2,}"]))
            continue
        atom = rng.choice(
            ["a", "b", "Z", "0", "-", "_", "\\.", "\\d", "\\w", "[a-c]", '[^a-z"\\\\]', "[0-9_]"]
        )
        parts.append(atom + rng.choice(["", "", "?", "*", "+", "{3}", "{1,3}", "{2,}", "*?"]))
    body = "".join(parts)
    return rng.choice(["^" + body + "$", body, "^" + body, body + "$"]) if depth == 0 else body


def test_random_patterns_equal_the_reference() -> None:
    rng = random.Random(1)
    served = refused = 0
    for i in range(3000):
        pattern = _random_text(rng) if i % 2 else _random_regex(rng)
        frag = _same(pattern, max_states=2000)
        if frag is None:
            refused += 1
            continue
        served += 1
        re.compile(_fullmatch_body(pattern))  # a served pattern is a valid expression to re
        if i % 10 == 0:
            _check_language(pattern, frag, rng)
    assert served > 1000 and refused > 500


def test_too_many_states_alike() -> None:
    # a DFA past max_states, and an NFA past MAX_NFA_STATES (nested counted repeats), raise
    # TooManyStates on both paths; within the budget the automaton is built
    assert _same("(a|b)*a(a|b){9}", max_states=100) is None
    assert _same("(a|b)*a(a|b){9}", max_states=5000) is not None
    assert _same("((a*){64}){64}") is not None  # 8,258 NFA states: within MAX_NFA_STATES
    deep = "(((a*){64}){64}){16}"  # 132,114 NFA states
    with pytest.raises(TooManyStates, match="NFA"):
        pattern_fragment(deep)
    with pytest.raises(TooManyStates, match="NFA"):
        slots_reference.pattern_fragment(deep)
    assert nfa.MAX_NFA_STATES == 1 << 16


def test_non_ascii_takes_the_reference_path() -> None:
    # a non-ASCII character is in the subset only inside a negated class (removed from the
    # safe ASCII characters); the native call refuses non-ASCII text outright
    for pattern in ["[^é]{2}", "é", "[é]", "a{٣}"]:
        got = pattern_fragment(pattern)
        ref = _reference(pattern)
        assert (got is None) == (ref is None), pattern
        if got is not None and ref is not None:
            assert np.array_equal(got.dst, ref.dst) and np.array_equal(got.accept, ref.accept)
    from trierouter.registry.core import native_core

    with pytest.raises(ValueError, match="not ASCII"):
        native_core().regex_dfa("é".encode(), True, 0, 100, 64)
