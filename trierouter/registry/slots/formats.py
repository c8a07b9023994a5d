"""Fixed-format languages for argument slots: dates, times, UUIDs, IPv4, integer ranges, numbers,
length-bounded strings.

The string formats are regular expressions (:data:`FORMAT_PATTERNS`), one definition for both
engines: the automaton parses them, and an XGrammar slot gets the same pattern in place of its
``format`` keyword (XGrammar 0.2.8's own ``date``, ``time``, ``date-time`` and ``ipv4`` rules
accept values the formats' definitions refuse: ``2023-02-31``, ``0000-01-01``, ``23:59:60Z``,
``01.2.3.4``). Their languages are those of ``jsonschema``'s format checker, the tests' oracle:

- ``date``: RFC 3339 ``full-date`` with the days of each month and leap years, years 0001-9999
  (``datetime.date.fromisoformat``);
- ``time``: RFC 3339 ``full-time`` without leap seconds, ``T`` / ``Z`` in either case
  (``rfc3339-validator``, which ``jsonschema`` uses for ``time`` and ``date-time``);
- ``date-time``: ``date``, ``T``, ``time``;
- ``ipv4``: dotted decimal, octets 0-255 without leading zeros (``ipaddress.IPv4Address``);
- ``uuid``: 8-4-4-4-12 hexadecimal digits (the hyphenated form ``jsonschema`` requires);
- ``email``, ``idn-email``: ``local@label.tld`` with bounded parts (the checker asks for an ``@``;
  the bounds keep a sampled address finite).
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import numpy.typing as npt

from trierouter.registry.slots.format_tables import TABLES
from trierouter.registry.slots.fragment import Fragment, string_fragment
from trierouter.registry.slots.nfa import (
    DIGIT,
    _Node,
    alt,
    cls,
    lit,
    nfa_fragment,
    opt,
    rep,
    seq,
)
from trierouter.registry.slots.ranges import integer_range_fragment, integer_range_node
from trierouter.registry.slots.regex import pattern_fragment, pattern_node

__all__ = [
    "FORMAT_PATTERNS",
    "format_and_pattern",
    "format_and_pattern_fragment",
    "format_node",
    "format_pattern",
    "integer_range_fragment",
    "integer_range_node",
    "pattern_lengths",
    "quoted_pattern_fragment",
]


# -- string formats --------------------------------------------------------------------------


_YEAR = r"(?:[1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9])"
_MOD4 = r"(?:0[48]|[2468][048]|[13579][26])"  # two digits, a non-zero multiple of 4
_LEAP_YEAR = rf"(?:\d{{2}}{_MOD4}|{_MOD4}00)"
_MONTH_DAY = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
    r"|02-(?:0[1-9]|1\d|2[0-8]))"
)
DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_HOUR = r"(?:[01]\d|2[0-3])"
_MINUTE = r"[0-5]\d"
# ``(?:\.\d+|)`` rather than ``(?:\.\d+)?``: XGrammar 0.2.8 reads an optional group that ends
# in a repetition as if its first part were optional too
TIME = rf"{_HOUR}:{_MINUTE}:{_MINUTE}(?:\.\d+|)(?:[Zz]|[+-]{_HOUR}:{_MINUTE})"
DATE_TIME = rf"{DATE}[Tt]{TIME}"
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
IPV4 = rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}"
_HEX = "[0-9a-fA-F]"
UUID = rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
# ``local@label.tld``, every part bounded: jsonschema's checker only asks for an ``@``, and
# XGrammar's own email rule has no length bound (a sampled address ran past max_tokens)
_LABEL = r"[A-Za-z0-9-]{1,63}"
EMAIL = rf"[A-Za-z0-9._%+-]{{1,64}}@{_LABEL}(?:\.{_LABEL}){{1,3}}"

FORMAT_PATTERNS: dict[str, str] = {
    "date": DATE,
    "time": TIME,
    "date-time": DATE_TIME,
    "ipv4": IPV4,
    "uuid": UUID,
    "email": EMAIL,
    "idn-email": EMAIL,
}
"""Format name → a regular expression (no anchors) whose full matches are its language."""

_LENGTHS = {"date": (10, 10), "time": (9, None), "date-time": (20, None), "ipv4": (7, 15),
            "uuid": (36, 36), "email": (5, 320), "idn-email": (5, 320)}  # fmt: skip
"""Shortest and longest value of each format (None: unbounded, a fraction of a second)."""


def format_pattern(fmt: str, min_length: int = 0, max_length: int | None = None) -> str | None:
    """The regular expression of format ``fmt`` whose values also have ``min_length`` to
    ``max_length`` characters, or None when no such expression is built here (a bound that
    would cut into a value other than its fraction of a second)."""
    pattern = FORMAT_PATTERNS.get(fmt)
    if pattern is None:
        return None
    shortest, longest = _LENGTHS[fmt]
    if min_length > shortest:
        return None
    if max_length is None or (longest is not None and max_length >= longest):
        return pattern
    if longest is not None or max_length < shortest:
        return None
    # time / date-time: bound the digits of the fraction, per kind of offset
    head = (DATE + "[Tt]" if fmt == "date-time" else "") + f"{_HOUR}:{_MINUTE}:{_MINUTE}"
    parts = []
    for offset, size in (("[Zz]", 1), (f"[+-]{_HOUR}:{_MINUTE}", 6)):
        room = max_length - (shortest - 1) - size  # characters left for "." and digits
        if room < 0:
            continue
        frac = rf"(?:\.\d{{1,{room - 1}}}|)" if room >= 2 else ""
        parts.append(f"{head}{frac}{offset}")
    return "(?:" + "|".join(parts) + ")" if parts else None


def format_node(fmt: str) -> _Node | None:
    """The unquoted language of string format ``fmt`` (:data:`FORMAT_PATTERNS`), or None."""
    pattern = FORMAT_PATTERNS.get(fmt)
    return None if pattern is None else pattern_node(pattern)


_CONSTANT = {
    p: TABLES[d]
    for p in FORMAT_PATTERNS.values()
    if (d := hashlib.blake2b(p.encode(), digest_size=8).hexdigest()) in TABLES
}
"""A fixed format's pattern → its constant table (tables of another pattern's text: none)."""


def quoted_pattern_fragment(
    pattern: str,
    *,
    constant: bool = True,
) -> Fragment:
    """The quoted full matches of ``pattern`` (one in the supported subset): a fixed format's
    automaton decoded from its constant table (:mod:`.format_tables`, generated from the same
    pattern; ``constant=False``: built from the text), any other pattern's built by
    :func:`~trierouter.registry.slots.regex.pattern_fragment`."""
    hit = _CONSTANT.get(pattern) if TABLES else None
    if hit is not None and constant:
        edges = np.frombuffer(bytes.fromhex(hit.edges), dtype=np.uint8).reshape(3, -1)
        src, byte, dst = edges.astype(np.int32)
        accept = np.zeros(hit.n, dtype=bool)
        accept[list(hit.accept)] = True
        return Fragment(src, byte, dst, hit.n, accept)
    frag = pattern_fragment(pattern)
    if frag is None:
        raise ValueError(f"pattern outside the supported subset: {pattern!r}")
    return frag


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
    base = pattern_fragment(pattern)
    assert base is not None
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
    return integer_range_fragment(lo, hi)


@functools.lru_cache(maxsize=4096)
def _format_fragment(fmt: str) -> Fragment | None:
    pattern = FORMAT_PATTERNS.get(fmt)
    return None if pattern is None else quoted_pattern_fragment(pattern)


def _includes(big: Fragment, small: Fragment) -> bool:
    """Every string ``small`` accepts, ``big`` accepts (a walk over the pairs of states)."""
    tb, ts = big.table, small.table
    seen = {(0, 0)}
    todo = [(0, 0)]
    while todo:
        b, s = todo.pop()
        if small.accept[s] and (b < 0 or not big.accept[b]):
            return False
        for byte in np.flatnonzero(ts[s] >= 0).tolist():
            nb = int(tb[b, byte]) if b >= 0 else -1
            pair = (nb, int(ts[s, byte]))
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return True


@functools.lru_cache(maxsize=4096)
def format_and_pattern(fmt: str, pattern: str) -> str | None:
    """One regular expression for a string with both ``format`` and ``pattern``: the format's
    when the pattern allows all of it, the pattern's when the format allows all of it (both
    full matches; the pattern in the supported subset), else None."""
    exact = FORMAT_PATTERNS.get(fmt)
    theirs = pattern_node(pattern)
    if exact is None or theirs is None:
        return None
    ours = pattern_node(exact)
    assert ours is not None
    a, b = nfa_fragment(ours), nfa_fragment(theirs)
    if _includes(b, a):
        return exact
    if _includes(a, b):
        return pattern.removeprefix("^").removesuffix("$")
    return None


@functools.lru_cache(maxsize=1024)
def format_and_pattern_fragment(fmt: str, pattern: str) -> Fragment | None:
    """The quoted strings in format ``fmt`` that fully match ``pattern`` too (the product of
    the two automata), or None when the pattern is outside the supported subset."""
    exact = FORMAT_PATTERNS.get(fmt)
    theirs = pattern_node(pattern)
    if exact is None or theirs is None:
        return None
    # ``pattern`` is a search: without its anchors any ASCII text may come before or after
    # (a format's values are ASCII)
    anything = rep(cls(bytes(range(0x20, 0x7F))), 0, None)
    if not pattern.startswith("^"):
        theirs = seq(anything, theirs)
    if not (pattern.endswith("$") and not pattern.endswith("\\$")):
        theirs = seq(theirs, anything)
    a = pattern_fragment(exact)
    assert a is not None
    b = nfa_fragment(seq(lit('"'), theirs, lit('"')))
    ta, tb = a.table, b.table
    ids = {(0, 0): 0}
    order = [(0, 0)]
    rows: list[npt.NDArray[np.int32]] = []
    i = 0
    while i < len(order):
        x, y = order[i]
        i += 1
        row = np.full(256, -1, dtype=np.int32)
        both = np.flatnonzero((ta[x] >= 0) & (tb[y] >= 0)).tolist()
        for byte in both:
            pair = (int(ta[x, byte]), int(tb[y, byte]))
            if pair not in ids:
                ids[pair] = len(order)
                order.append(pair)
            row[byte] = ids[pair]
        rows.append(row)
    accept = np.array([bool(a.accept[x] and b.accept[y]) for x, y in order])
    if not accept.any():
        return None
    return Fragment.dense(np.stack(rows), accept)


@functools.lru_cache(maxsize=4096)
def pattern_lengths(pattern: str) -> tuple[int, int | None] | None:
    """Shortest and longest full match of ``pattern`` in characters (None: unbounded), for a
    pattern in the supported subset (ASCII: a character is a byte); None outside it."""
    node = pattern_node(pattern)
    if node is None:
        return None
    frag = nfa_fragment(node)
    table = frag.table
    n = frag.n
    succ = [np.flatnonzero(table[s] >= 0) for s in range(n)]
    nxt = [sorted({int(table[s, b]) for b in succ[s].tolist()}) for s in range(n)]
    # states that can still reach an accepting one
    back: dict[int, list[int]] = {}
    for s in range(n):
        for t in nxt[s]:
            back.setdefault(t, []).append(s)
    live = {s for s in range(n) if frag.accept[s]}
    todo = list(live)
    while todo:
        for a in back.get(todo.pop(), []):
            if a not in live:
                live.add(a)
                todo.append(a)
    if 0 not in live:
        return None
    # shortest: breadth first; longest: a cycle among live states is unbounded
    dist = {0: 0}
    frontier = [0]
    shortest = 0 if frag.accept[0] else -1
    while frontier and shortest < 0:
        new = []
        for s in frontier:
            for t in nxt[s]:
                if t in live and t not in dist:
                    dist[t] = dist[s] + 1
                    if frag.accept[t] and shortest < 0:
                        shortest = dist[t]
                    new.append(t)
        frontier = new
    longest: dict[int, int] = {}
    on_path: set[int] = set()

    def walk(s: int) -> int | None:  # longest remaining length from s (None: unbounded)
        if s in longest:
            return longest[s]
        if s in on_path:
            return None
        on_path.add(s)
        best = 0 if frag.accept[s] else -1
        for t in nxt[s]:
            if t not in live:
                continue
            r = walk(t)
            if r is None:
                return None
            best = max(best, r + 1)
        on_path.discard(s)
        longest[s] = best
        return best

    top = walk(0)
    return shortest, top
