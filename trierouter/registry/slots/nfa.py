"""Regular expressions over bytes for fixed formats, determinized by subset construction into a
:class:`~trierouter.registry.slots.fragment.Fragment`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from trierouter.registry.core import native_core
from trierouter.registry.slots.fragment import Fragment

__all__ = [
    "MAX_NFA_STATES",
    "TooManyStates",
    "alt",
    "cls",
    "lit",
    "nfa_fragment",
    "opt",
    "rep",
    "seq",
]


# -- regular expressions over bytes (for fixed formats), determinized by subset construction --


@dataclass(frozen=True, slots=True)
class _Node:
    kind: str  # "set", "seq", "alt", "rep"
    chars: frozenset[int] = frozenset()
    parts: tuple[_Node, ...] = ()
    lo: int = 0
    hi: int | None = 0


def cls(chars: str | bytes | Iterable[int]) -> _Node:
    """One byte out of ``chars`` (a string of single-byte characters, bytes or ints)."""
    if isinstance(chars, str):
        chars = chars.encode("latin-1")
    if isinstance(chars, (bytes, set, frozenset)):  # ints already (a str is encoded above)
        return _Node("set", frozenset(chars))
    return _Node("set", frozenset(int(c) for c in chars))


def lit(text: str | bytes) -> _Node:
    """A literal byte string."""
    data = text.encode() if isinstance(text, str) else text
    return seq(*(cls([b]) for b in data))


def seq(*parts: _Node) -> _Node:
    return _Node("seq", parts=parts)


def alt(*parts: _Node) -> _Node:
    return _Node("alt", parts=parts)


def rep(node: _Node, lo: int, hi: int | None) -> _Node:
    """``node{lo,hi}``; ``hi=None`` is unbounded."""
    return _Node("rep", parts=(node,), lo=lo, hi=hi)


def opt(node: _Node) -> _Node:
    return rep(node, 0, 1)


DIGIT = cls("0123456789")
HEX = cls("0123456789abcdefABCDEF")


MAX_NFA_STATES = 1 << 16
"""An expression whose NFA would have more states raises :class:`TooManyStates` while it is
built: nested counted repeats multiply (``(((a*){64}){64}){64}``: 528,450 NFA states for a
2-state DFA, 1.9 s to build here; one level more: 33.8 million)."""


class _Nfa:
    def __init__(self) -> None:
        self.edges: list[list[tuple[frozenset[int], int]]] = []
        self.eps: list[list[int]] = []

    def state(self) -> int:
        if len(self.edges) >= MAX_NFA_STATES:
            raise TooManyStates(f"the expression's NFA has more than {MAX_NFA_STATES:,} states")
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def build(self, node: _Node, start: int) -> int:
        """Add ``node`` from ``start``; return its end state."""
        if node.kind == "set":
            end = self.state()
            self.edges[start].append((node.chars, end))
            return end
        if node.kind == "seq":
            cur = start
            for p in node.parts:
                cur = self.build(p, cur)
            return cur
        if node.kind == "alt":
            end = self.state()
            for p in node.parts:
                s = self.state()
                self.eps[start].append(s)
                self.eps[self.build(p, s)].append(end)
            return end
        (inner,) = node.parts
        cur = start
        for _ in range(node.lo):
            cur = self.build(inner, cur)
        if node.hi is None:
            loop = self.state()
            self.eps[cur].append(loop)
            self.eps[self.build(inner, loop)].append(loop)
            return loop
        end = self.state()
        self.eps[cur].append(end)
        for _ in range(node.hi - node.lo):
            cur = self.build(inner, cur)
            self.eps[cur].append(end)
        return end


class TooManyStates(ValueError):
    """The determinized automaton, or the NFA it is built from, would have more states than
    allowed."""


def nfa_fragment(node: _Node, max_states: int | None = None) -> Fragment:
    """Determinize ``node`` into a :class:`Fragment` in the compiled core (its subset
    construction; :func:`trierouter.testing.slots_reference.subset_fragment` is the Python
    one the tests compare it with). ``max_states``: raise :class:`TooManyStates` past that many
    states (a subset construction can grow exponentially: ``(a|b)*a(a|b){19}`` has 2**20)."""
    nfa = _Nfa()
    start = nfa.state()
    final = nfa.build(node, start)
    return _native_subsets(nfa, start, final, max_states)


@functools.lru_cache(maxsize=4096)
def _packed(chars: frozenset[int]) -> bytes:
    """The 256-bit set of ``chars`` (bit ``b`` of byte ``b // 8``)."""
    row = np.zeros(256, dtype=bool)
    row[list(chars)] = True
    return np.packbits(row, bitorder="little").tobytes()


def _native_subsets(nfa: _Nfa, start: int, final: int, max_states: int | None) -> Fragment:
    src, dst, sets = [], [], []
    for v, edges in enumerate(nfa.edges):
        for chars, t in edges:
            src.append(v)
            dst.append(t)
            sets.append(chars)
    bits = np.frombuffer(b"".join(map(_packed, sets)), dtype=np.uint8).reshape(len(sets), 32)
    xs = [v for v, ts in enumerate(nfa.eps) for _ in ts]
    xd = [t for ts in nfa.eps for t in ts]
    out = native_core().nfa_determinize(
        len(nfa.edges),
        np.asarray(src, dtype=np.int32),
        np.asarray(dst, dtype=np.int32),
        bits,
        np.asarray(xs, dtype=np.int32),
        np.asarray(xd, dtype=np.int32),
        start,
        final,
        max_states or 0,
        True,  # the edge list (what Fragment.dense would take from the dense table)
    )
    if out is None:
        raise TooManyStates(f"the automaton has more than {max_states} states")
    src, byte, dst, accept = out
    return Fragment(src, byte, dst, len(accept), accept)
