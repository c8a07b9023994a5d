"""Byte automata for tool-call arguments: fragments, wired together without subset construction.

A tool's arguments are a regular language for almost every schema agents use: objects with
ordered (optionally skippable) properties, enums, booleans, numbers, free strings, dates, UUIDs,
arrays of those. :class:`Fragment` is a deterministic byte automaton for such a piece (a dense
``[states, 256]`` table, ``-1`` = no edge); fragments are built once per distinct slot schema and
wired by :class:`Builder` into one automaton per tool (JSON keeps the first bytes of what follows
a value disjoint from the value's own continuations).

Exit states (``exits``) hand over to another engine (an XGrammar matcher for a slot that is not
regular); tokens never cross an exit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.registry.core import native_core

__all__ = ["NO_EDGE", "Fragment"]


I32 = npt.NDArray[np.int32]
NO_EDGE = -1


# -- fragments -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Exit:
    """Hand over to engine ``key`` here; come back at state ``reentry`` once its value is done."""

    key: str
    reentry: int

    def shifted(self, off: int) -> Exit:
        return Exit(self.key, self.reentry + off)


def exit_fragment(key: str) -> Fragment:
    """A value served by another engine: state 0 hands over, state 1 (accepting) is after it."""
    frag = Fragment.empty([False, True])
    frag.exits[0] = Exit(key, 1)
    return frag


@dataclass(slots=True)
class Fragment:
    """A deterministic byte automaton piece, start state 0, as an edge list
    (``src --byte--> dst``); ``klass`` marks free-string interior states, ``exits`` hand-overs."""

    src: I32
    byte: I32
    dst: I32
    n: int
    accept: npt.NDArray[np.bool_]
    klass: npt.NDArray[np.int16] = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    exits: dict[int, Any] = field(default_factory=dict)
    """State → label of the engine that takes over there (no edges leave an exit)."""
    origin: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per state, ``piece << 32 | local state`` when the state is a copy of a registered quoted
    piece's state (:mod:`~trierouter.registry.slots.pieces`), else ``-1``."""
    wire: tuple[Any, ...] | None = None
    """Not wired yet (``Builder.finish(defer=True)``): the core's ``dfa_wire`` arguments,
    and ``src``, ``byte``, ``dst`` empty. A tool's whole automaton in an eager registry, wired
    with its masks on the masks' thread (:class:`~trierouter.registry.slots.masks.ToolAutomaton`
    takes it; nothing else does)."""
    _accepting: list[int] | None = field(default=None, init=False, compare=False, repr=False)

    def accepting_states(self) -> list[int]:
        """The accepting states (computed once: a fragment is never changed once built)."""
        if self._accepting is None:
            self._accepting = np.flatnonzero(self.accept).tolist()
        return self._accepting

    def __post_init__(self) -> None:
        if len(self.klass) != self.n:
            self.klass = np.full(self.n, -1, dtype=np.int16)
        if len(self.origin) != self.n:
            self.origin = np.full(self.n, -1, dtype=np.int64)

    @classmethod
    def dense(
        cls,
        table: I32,
        accept: npt.NDArray[np.bool_],
        klass: npt.NDArray[np.int16] | None = None,
        exits: dict[int, Any] | None = None,
    ) -> Fragment:
        src, byte = np.nonzero(table >= 0)
        return cls(
            src.astype(np.int32),
            byte.astype(np.int32),
            table[src, byte].astype(np.int32),
            len(table),
            accept,
            klass if klass is not None else np.zeros(0, dtype=np.int16),
            dict(exits or {}),
        )

    @classmethod
    def empty(cls, accept: Sequence[bool]) -> Fragment:
        z = np.zeros(0, dtype=np.int32)
        return cls(z, z, z, len(accept), np.asarray(accept, dtype=bool))

    def edges(self) -> Fragment:
        """``self``, once its edges are wired (else ``ValueError``: a deferred fragment's edges
        exist only in the automaton built from it)."""
        if self.wire is not None:
            raise ValueError("this fragment is not wired yet: build its ToolAutomaton")
        return self

    @property
    def table(self) -> I32:
        """The dense ``[n, 256]`` table (``-1`` = no edge)."""
        self.edges()
        t = np.full((self.n, 256), NO_EDGE, dtype=np.int32)
        t[self.src, self.byte] = self.dst
        return t

    def start_edges(self) -> tuple[I32, I32]:
        m = self.edges().src == 0
        return self.byte[m], self.dst[m]

    def matches(self, data: bytes) -> bool:
        t = self.table
        s = 0
        for b in data:
            s = int(t[s, b])
            if s < 0:
                return False
        return bool(self.accept[s])


def trie_fragment(options: Sequence[bytes], labels: Sequence[Any] | None = None) -> Fragment:
    """A trie over ``options`` (none a prefix of another when labelled); the end of option ``i``
    accepts, or is an exit labelled ``labels[i]``."""
    rows: list[dict[int, int]] = [{}]
    ends: dict[int, int] = {}
    src: list[int] = []
    byte: list[int] = []
    for i, opt_ in enumerate(options):
        s = 0
        for b in opt_:
            nxt = rows[s].get(b)
            if nxt is None:
                nxt = len(rows)
                rows.append({})
                rows[s][b] = nxt
                src.append(s)
                byte.append(b)
            s = nxt
        ends[s] = i
    n = len(rows)
    dst = np.arange(1, n, dtype=np.int32)  # nodes are numbered in creation order
    accept = np.zeros(n, dtype=bool)
    exits: dict[int, Any] = {}
    for s, i in ends.items():
        if labels is None:
            accept[s] = True
        else:
            exits[s] = labels[i]
    return Fragment(
        np.asarray(src, dtype=np.int32), np.asarray(byte, dtype=np.int32), dst, n, accept,
        exits=exits,
    )  # fmt: skip


# JSON string interior classes. A state inside a free string has ``klass = u + 16 * (r + 1)``:
# ``u`` its class, ``r`` the characters still allowed (``-1``: unbounded); ``klass = -1`` elsewhere.
MAX_COUNTED = 64
"""Longest ``maxLength`` served exactly; a longer bound is served as this many characters."""


def string_class(k: int) -> tuple[int, int]:
    """``(class, characters left or -1)`` of a string-interior ``klass`` value."""
    return k % 16, k // 16 - 1


S_PLAIN, S_ESC, S_U1, S_U2, S_U3, S_U4, S_C1, S_C2, S_C3, S_E0, S_ED, S_F0, S_F4, S_UD = range(14)
N_STRING_CLASSES = 14


def _string_interior() -> I32:
    """Edges between interior classes (``"`` from PLAIN is left to the caller)."""
    t = np.full((N_STRING_CLASSES, 256), NO_EDGE, dtype=np.int32)
    plain = [b for b in range(0x20, 0x80) if b not in (0x22, 0x5C)]
    t[S_PLAIN, plain] = S_PLAIN
    t[S_PLAIN, 0x5C] = S_ESC
    t[S_PLAIN, 0xC2:0xE0] = S_C1
    t[S_PLAIN, 0xE0] = S_E0
    t[S_PLAIN, 0xE1:0xED] = S_C2
    t[S_PLAIN, 0xED] = S_ED
    t[S_PLAIN, 0xEE:0xF0] = S_C2
    t[S_PLAIN, 0xF0] = S_F0
    t[S_PLAIN, 0xF1:0xF4] = S_C3
    t[S_PLAIN, 0xF4] = S_F4
    t[S_C1, 0x80:0xC0] = S_PLAIN
    t[S_C2, 0x80:0xC0] = S_C1
    t[S_C3, 0x80:0xC0] = S_C2
    t[S_E0, 0xA0:0xC0] = S_C1
    t[S_ED, 0x80:0xA0] = S_C1
    t[S_F0, 0x90:0xC0] = S_C2
    t[S_F4, 0x80:0x90] = S_C2
    t[S_ESC, list(b'"\\/bfnrt')] = S_PLAIN
    t[S_ESC, ord("u")] = S_U1
    hexd = list(b"0123456789abcdefABCDEF")
    # no surrogate escapes (\uD800-\uDFFF): an escape is one character, as JSON Schema counts
    # (a character outside the BMP is written as its UTF-8 bytes instead), and no lone
    # surrogate reaches the arguments
    t[S_U1, [h for h in hexd if h not in b"dD"]] = S_U2
    t[S_U1, list(b"dD")] = S_UD
    t[S_UD, list(b"01234567")] = S_U3
    t[S_U2, hexd] = S_U3
    t[S_U3, hexd] = S_U4
    t[S_U4, hexd] = S_PLAIN
    return t


_INTERIOR = _string_interior()


def string_fragment(min_length: int = 0, max_length: int | None = None) -> Fragment:
    """A JSON string, quotes included: XGrammar's ``basic_string`` over valid UTF-8, with at
    least ``min_length`` and at most ``max_length`` characters (an escape is one character)."""
    c = N_STRING_CLASSES
    top = min_length if max_length is None else max_length
    n = 2 + c * (top + 1)  # 0 = before the quote, interior copies per count, last = closed
    table = np.full((n, 256), NO_EDGE, dtype=np.int32)
    table[0, 0x22] = 1
    klass = np.full(n, -1, dtype=np.int16)
    for p in range(top + 1):
        base = 1 + c * p
        inner = _INTERIOR.copy()
        done = inner == S_PLAIN  # edges that complete a character
        inner[inner >= 0] += base
        if p < top:
            inner[done] = base + c + S_PLAIN  # one more character: the next count's PLAIN
        elif max_length is not None:
            inner[:] = NO_EDGE  # no room for another character
        table[base : base + c] = inner
        left = -1 if max_length is None else max_length - p
        klass[base : base + c] = np.arange(c, dtype=np.int16) + 16 * (left + 1)
        if p >= min_length:
            table[base + S_PLAIN, 0x22] = n - 1
    accept = np.zeros(n, dtype=bool)
    accept[n - 1] = True
    return Fragment.dense(table, accept, klass)


# -- wiring fragments into one automaton ----------------------------------------------------


class Builder:
    """Concatenate fragments into one edge list; link accepting states to a fragment's start.

    Edges are only ever added at accepting states and exits (``link``; ``edge`` is only used
    at the accepting state of a literal): a copied fragment's other states keep exactly their
    own edges, which the shared piece masks (:mod:`~trierouter.registry.slots.pieces`) rely
    on.

    The edges are wired by the compiled core in one call at :meth:`finish` (``add`` / ``link``
    / ``edge`` only record what to copy; :class:`trierouter.testing.slots_reference.Builder`,
    which builds numpy arrays at every call, is the reference the tests compare it with)."""

    def __init__(self) -> None:
        self._frags: list[Fragment] = []
        self._offs: list[int] = []
        self._where: dict[int, tuple[int, int]] = {}
        """Linkable state -> (index of its fragment, its state there)."""
        self._lstate: list[int] = []  # linked states
        self._lfrom: list[int] = []  # what each copies: fragment << 32 | its state there
        self._extra: list[int] = []  # flat (src, byte, dst)
        self._acc: dict[int, bool] = {}  # acceptance set by link
        self.exits: dict[int, Any] = {}
        self.n = 0

    def add(self, frag: Fragment, entries: Sequence[int] = ()) -> int:
        """Copy ``frag`` in; return the offset of its state 0. ``link`` may target its state 0
        and the states ``entries`` (plus the offset)."""
        off = self.n
        i = len(self._frags)
        self._frags.append(frag.edges())
        self._offs.append(off)
        self._where[off] = (i, 0)
        for e in entries:
            self._where[off + int(e)] = (i, int(e))
        for s, label in frag.exits.items():
            self.exits[s + off] = label.shifted(off) if isinstance(label, Exit) else label
        self.n += frag.n
        return off

    def _accepts(self, state: int) -> bool:
        hit = self._acc.get(state)
        if hit is not None:
            return hit
        i, local = self._where[state]
        return bool(self._frags[i].accept[local])

    def accepting(self, off: int, frag: Fragment) -> list[int]:
        return [s + off for s in frag.accepting_states()]

    def link(self, states: Iterable[int], target: int) -> None:
        """From each of ``states`` (accepting, or an exit), continue as from fragment start
        ``target``: its edges are copied and the state takes its acceptance and exit."""
        i, local = self._where[target]
        states = list(states)
        self._lstate += states
        self._lfrom += [i << 32 | local] * len(states)
        exits, acc = self.exits, self._acc
        if target in states:  # the reference's order matters: state by state
            for s in states:
                acc[s] = self._accepts(target)
                exits.pop(s, None)
                if target in exits:
                    exits[s] = exits[target]
            return
        a = self._accepts(target)
        label = exits.get(target)
        for s in states:
            acc[s] = a
            if label is None:
                exits.pop(s, None)
            else:
                exits[s] = label

    def edge(self, state: int, byte: int, target: int) -> None:
        self._extra += (state, byte, target)

    def finish(self, defer: bool = False) -> Fragment:
        """``defer``: the wiring left to the core call that builds the automaton's masks
        (:meth:`ToolAutomaton.masks_call`, on the masks' thread in an eager registry): the
        fragment holds the ``dfa_wire`` arguments (:attr:`Fragment.wire`) and no edges; an
        ambiguous continuation is then raised by that call."""
        frags = self._frags
        wire = (
            [f.src for f in frags],
            [f.byte for f in frags],
            [f.dst for f in frags],
            self._offs,
            self.n,
            self._lstate,
            self._lfrom,
            self._extra,
        )
        if defer:
            src = byte = dst = np.zeros(0, dtype=np.int32)
        else:
            src, byte, dst = native_core().dfa_wire(*wire)
        accept = np.concatenate([f.accept for f in frags])
        if self._acc:
            accept[np.fromiter(self._acc, np.int64, len(self._acc))] = np.fromiter(
                self._acc.values(), bool, len(self._acc)
            )
        return Fragment(
            src,
            byte,
            dst,
            self.n,
            accept,
            np.concatenate([f.klass for f in frags]),
            dict(self.exits),
            np.concatenate([f.origin for f in frags]),
            wire if defer else None,
        )


# -- per-vocabulary tables -------------------------------------------------------------------
