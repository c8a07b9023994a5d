"""Integer ranges for argument slots: the canonical decimals of ``[lo, hi]`` (either bound
open), as a regular expression node (the reference) and as an automaton built directly."""

from __future__ import annotations

from trierouter.registry.core import native_core
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


def integer_range_fragment(lo: int | None, hi: int | None) -> Fragment | None:
    """The canonical decimal integers in ``[lo, hi]`` (either bound may be None; None if
    empty) as an automaton built directly in the compiled core, each state the set of digit
    constraints still open: the language of :func:`integer_range_node` without its subset
    construction (:func:`trierouter.testing.slots_reference.integer_range_fragment` is the
    Python construction, the same states in the same order)."""
    zero = (lo is None or lo <= 0) and (hi is None or hi >= 0)
    pos = ("1" if lo is None or lo < 1 else str(lo), "" if hi is None else str(hi))
    neg = ("1" if hi is None or hi >= 0 else str(-hi), "" if lo is None else str(-lo))
    src, byte, dst, accept = native_core().int_range_dfa(
        zero,
        *(pos if hi is None or hi > 0 else ("", "")),
        *(neg if lo is None or lo < 0 else ("", "")),
    )
    return Fragment(src, byte, dst, len(accept), accept) if len(src) else None
