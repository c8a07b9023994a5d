"""Fixed-format languages for argument slots: dates, times, UUIDs, IPv4, integer ranges, numbers,
length-bounded strings (the same languages as XGrammar's JSON-schema rules).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from trierouter.registry.slots.fragment import Fragment, string_fragment
from trierouter.registry.slots.nfa import (
    DIGIT,
    HEX,
    _Node,
    alt,
    cls,
    lit,
    nfa_fragment,
    opt,
    rep,
    seq,
)
from trierouter.registry.slots.regex import pattern_node

__all__ = ["format_node", "integer_range_node"]


# -- formats (the same languages as XGrammar's JSON-schema rules) ---------------------------


def _two(first: str, second: str) -> _Node:
    return seq(cls(first), cls(second))


def _date() -> _Node:
    month = alt(seq(lit("0"), cls("123456789")), seq(lit("1"), cls("012")))
    day = alt(seq(lit("0"), cls("123456789")), seq(cls("12"), DIGIT), seq(lit("3"), cls("01")))
    return seq(rep(DIGIT, 4, 4), lit("-"), month, lit("-"), day)


def _time() -> _Node:
    hour = alt(seq(cls("01"), DIGIT), seq(lit("2"), cls("0123")))
    minute = seq(cls("012345"), DIGIT)
    second = alt(seq(cls("012345"), DIGIT), lit("60"))
    frac = opt(seq(lit("."), rep(DIGIT, 1, None)))
    offset = alt(lit("Z"), seq(cls("+-"), hour, lit(":"), minute))
    return seq(hour, lit(":"), minute, lit(":"), second, frac, offset)


def _uuid() -> _Node:
    return seq(
        rep(HEX, 8, 8), lit("-"), rep(HEX, 4, 4), lit("-"), rep(HEX, 4, 4), lit("-"),
        rep(HEX, 4, 4), lit("-"), rep(HEX, 12, 12),
    )  # fmt: skip


def _ipv4() -> _Node:
    octet = alt(
        seq(lit("25"), cls("012345")),
        seq(lit("2"), cls("01234"), DIGIT),
        seq(opt(cls("01")), opt(DIGIT), DIGIT),
    )
    return seq(rep(seq(octet, lit(".")), 3, 3), octet)


FORMATS: dict[str, Callable[[], _Node]] = {
    "date": _date,
    "time": _time,
    "date-time": lambda: seq(_date(), lit("T"), _time()),
    "uuid": _uuid,
    "ipv4": _ipv4,
}


def format_node(fmt: str) -> _Node | None:
    """The unquoted language of string format ``fmt``, or None if not a fixed format."""
    make = FORMATS.get(fmt)
    return None if make is None else make()


def _digits_range(lo: str, hi: str) -> _Node:
    """Digit strings of equal length between ``lo`` and ``hi`` (inclusive)."""
    if not lo:
        return seq()
    if set(lo) == {"0"} and set(hi) == {"9"}:
        return rep(DIGIT, len(lo), len(lo))
    if lo[0] == hi[0]:
        return seq(lit(lo[0]), _digits_range(lo[1:], hi[1:]))
    rest = len(lo) - 1
    parts = [seq(lit(lo[0]), _digits_range(lo[1:], "9" * rest))]
    mid = "".join(chr(c) for c in range(ord(lo[0]) + 1, ord(hi[0])))
    if mid:
        parts.append(seq(cls(mid), rep(DIGIT, rest, rest)))
    parts.append(seq(lit(hi[0]), _digits_range("0" * rest, hi[1:])))
    return alt(*parts)


def _nonneg_range(lo: int, hi: int | None) -> _Node | None:
    """Canonical decimals of ``lo..hi`` (``hi=None``: unbounded), ``0 <= lo``."""
    if hi is not None and hi < lo:
        return None
    parts: list[_Node] = []
    if lo == 0:
        parts.append(lit("0"))
        lo = 1
        if hi == 0:
            return parts[0]
    n_lo = len(str(lo))
    n_hi = len(str(hi)) if hi is not None else n_lo
    for n in range(n_lo, n_hi + 1):
        a = max(lo, 10 ** (n - 1))
        b = 10**n - 1 if hi is None else min(hi, 10**n - 1)
        if a <= b:
            parts.append(_digits_range(str(a), str(b)))
    if hi is None:
        parts.append(seq(cls("123456789"), rep(DIGIT, n_lo, None)))
    return alt(*parts) if parts else None


def integer_range_node(lo: int | None, hi: int | None) -> _Node | None:
    """Canonical decimal integers in ``[lo, hi]`` (either bound may be None); None if empty."""
    parts: list[_Node] = []
    if hi is None or hi >= 0:
        pos = _nonneg_range(max(lo, 0) if lo is not None else 0, hi)
        if pos is not None:
            parts.append(pos)
    if lo is None or lo < 0:
        # negatives: "-" then 1..(-lo), never "-0"
        top = None if lo is None else -lo
        bottom = 1 if hi is None or hi >= 0 else -hi
        neg = _nonneg_range(bottom, top)
        if neg is not None:
            parts.append(seq(lit("-"), neg))
    return alt(*parts) if parts else None


def _number_node() -> _Node:
    whole = alt(lit("0"), seq(cls("123456789"), rep(DIGIT, 0, None)))
    frac = opt(seq(lit("."), rep(DIGIT, 1, None)))
    exp = opt(seq(cls("eE"), opt(cls("+-")), rep(DIGIT, 1, None)))
    return seq(opt(lit("-")), whole, frac, exp)


_DUMMY = Fragment.empty([True])
"""What a dry run returns instead of an automaton."""


@functools.lru_cache(maxsize=1024)
def _length_limited(pattern: str, lo: int, hi: int | None) -> Fragment:
    """The quoted ``pattern`` (ASCII: one byte per character) with ``lo..hi`` characters."""
    node = pattern_node(pattern)
    assert node is not None
    base = nfa_fragment(seq(lit('"'), node, lit('"')))
    table = base.table
    cap = (hi if hi is not None else lo) + 2
    ids = {(0, 0): 0}
    todo = [(0, 0)]
    edges: list[tuple[int, int, int]] = []
    accept: list[bool] = []
    while todo:
        s, c = todo.pop()
        me = ids[(s, c)]
        while len(accept) <= me:
            accept.append(False)
        inner = c - 2  # bytes so far minus the two quotes
        accept[me] = bool(base.accept[s]) and inner >= lo and (hi is None or inner <= hi)
        for b in np.flatnonzero(table[s] >= 0).tolist():
            c2 = c + 1 if hi is not None else min(c + 1, cap)
            if hi is not None and c2 > cap:
                continue
            key = (int(table[s, b]), c2)
            if key not in ids:
                ids[key] = len(ids)
                todo.append(key)
            edges.append((me, b, ids[key]))
    n = len(ids)
    accept += [False] * (n - len(accept))
    # keep only edges into states from which a string can still end (the counter can run out)
    back: dict[int, list[int]] = {}
    for a, _, b in edges:
        back.setdefault(b, []).append(a)
    live = {i for i in range(n) if accept[i]}
    todo2 = list(live)
    while todo2:
        for a in back.get(todo2.pop(), []):
            if a not in live:
                live.add(a)
                todo2.append(a)
    edges = [e for e in edges if e[2] in live]
    arr = np.asarray(edges, dtype=np.int32).reshape(-1, 3)
    return Fragment(arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), n, np.asarray(accept))


@functools.lru_cache(maxsize=256)
def _counted_string(min_length: int, max_length: int | None) -> Fragment:
    return string_fragment(min_length, max_length)


@functools.lru_cache(maxsize=1)
def _number_fragment() -> Fragment:
    return nfa_fragment(_number_node())


@functools.lru_cache(maxsize=4096)
def _integer_fragment(lo: int | None, hi: int | None) -> Fragment | None:
    node = integer_range_node(lo, hi)
    return None if node is None else nfa_fragment(node)


@functools.lru_cache(maxsize=4096)
def _format_fragment(fmt: str) -> Fragment | None:
    node = format_node(fmt)
    return None if node is None else nfa_fragment(seq(lit('"'), node, lit('"')))
