"""Integer ranges for argument slots: the canonical decimals of ``[lo, hi]`` (either bound
open), as a regular expression node (the reference) and as an automaton built directly."""

from __future__ import annotations

import numpy as np

from trierouter.registry import core as _backend
from trierouter.registry.slots.fragment import Fragment
from trierouter.registry.slots.nfa import DIGIT, _Node, alt, cls, lit, rep, seq

__all__ = ["integer_range_fragment", "integer_range_node"]


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


# A digits state of integer_range_fragment: a set of (digits left, lowest and highest allowed
# rest of the digits, None: any) for the values of one length, and ("tail", t): at least t more
# digits, any (a range without upper bound); ("tail0", t): the same, the first one not 0.
_Elem = tuple[int | str, object, object]


def _digits_start(lo: int, hi: int | None) -> frozenset[_Elem]:
    """The digits state before a canonical decimal in ``[max(lo, 1), hi]`` (hi None: any)."""
    a = max(lo, 1)
    if hi is not None and hi < a:
        return frozenset()
    n_a = len(str(a))
    out: set[_Elem] = set()
    for n in range(n_a, (len(str(hi)) if hi is not None else n_a) + 1):
        first, last = max(a, 10 ** (n - 1)), 10**n - 1 if hi is None else min(hi, 10**n - 1)
        if first <= last:
            out.add((n, str(first), str(last)))
    if hi is None:
        out.add(("tail0", n_a + 1, None))
    return frozenset(out)


def _digit_step(state: frozenset[_Elem], d: str) -> frozenset[_Elem]:
    out: set[_Elem] = set()
    for elem in state:
        r, low, high = elem
        if r.__class__ is str:  # a tail: ("tail" | "tail0", digits still needed, None)
            if r == "tail" or d != "0":
                out.add(("tail", max(low - 1, 0), None))  # type: ignore[operator]
            continue
        if not r:
            continue
        if low is not None:
            c = low[0]  # type: ignore[index]
            if d < c:
                continue
            low = low[1:] if d == c and low[1:].strip("0") else None  # type: ignore[index]
        if high is not None:
            c = high[0]  # type: ignore[index]
            if d > c:
                continue
            high = high[1:] if d == c and high[1:].strip("9") else None  # type: ignore[index]
        out.add((r - 1, low, high))  # type: ignore[operator]
    return frozenset(out)


def _native_range(lo: int | None, hi: int | None, zero: bool) -> Fragment | None:
    """:func:`integer_range_fragment` in the compiled core (bounds as decimal strings)."""
    pos = ("1" if lo is None or lo < 1 else str(lo), "" if hi is None else str(hi))
    neg = ("1" if hi is None or hi >= 0 else str(-hi), "" if lo is None else str(-lo))
    src, byte, dst, accept = _backend.native_core().int_range_dfa(
        zero,
        *(pos if hi is None or hi > 0 else ("", "")),
        *(neg if lo is None or lo < 0 else ("", "")),
    )
    return Fragment(src, byte, dst, len(accept), accept) if len(src) else None


def integer_range_fragment(
    lo: int | None, hi: int | None, *, native: bool | None = None
) -> Fragment | None:
    """The canonical decimal integers in ``[lo, hi]`` (either bound may be None; None if
    empty) as an automaton built directly, each state the set of digit constraints still
    open: the language of :func:`integer_range_node` without its subset construction (in the
    compiled core with the native backend, the same states in the same order)."""
    zero = (lo is None or lo <= 0) and (hi is None or hi >= 0)
    if native is None:
        native = _backend.default_core() is not None
    if native:
        return _native_range(lo, hi, zero)
    pos = _digits_start(max(lo, 0) if lo is not None else 0, hi) if hi is None or hi > 0 else None
    neg = None
    if lo is None or lo < 0:  # "-" then 1..(-lo), never "-0"
        neg = _digits_start(1 if hi is None or hi >= 0 else -hi, None if lo is None else -lo)
    if not zero and not pos and not neg:
        return None
    done: frozenset[_Elem] = frozenset({(0, None, None)})
    ids: dict[frozenset[_Elem], int] = {}
    order: list[frozenset[_Elem]] = []
    src: list[int] = []
    byte: list[int] = []
    dst: list[int] = []

    def state(key: frozenset[_Elem]) -> int:
        if key not in ids:
            ids[key] = len(order) + 1
            order.append(key)
        return ids[key]

    for d in "-0123456789":  # the start state (0): a sign, a lone zero, or a first digit
        if d == "-":
            nxt = neg
        elif d == "0":
            nxt = done if zero else None
        else:
            nxt = _digit_step(pos, d) if pos else None
        if nxt:
            src.append(0)
            byte.append(ord(d))
            dst.append(state(nxt))
    i = 0
    while i < len(order):
        key = order[i]
        i += 1
        # the step changes only at a digit some bound of ``key`` starts with (or at 0): one
        # step per run of digits between those, its edges added together
        cuts = {0}.union(*((ord(b[0]) - 48 for b in e[1:] if isinstance(b, str)) for e in key))
        edges = sorted(cuts | {c + 1 for c in cuts if c < 9})
        for a, b in zip(edges, [*edges[1:], 10], strict=True):
            nxt = _digit_step(key, chr(48 + a))
            if nxt:
                src += [i] * (b - a)
                byte += range(48 + a, 48 + b)
                dst += [state(nxt)] * (b - a)
    accept = np.zeros(len(order) + 1, dtype=bool)
    accept[1:] = [any(r == 0 or (r == "tail" and t == 0) for r, t, _ in k) for k in order]
    return Fragment(
        np.asarray(src, dtype=np.int32),
        np.asarray(byte, dtype=np.int32),
        np.asarray(dst, dtype=np.int32),
        len(order) + 1,
        accept,
    )
