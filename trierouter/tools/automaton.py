"""Byte automata for tool-call arguments, with token masks computed over the tokenizer index.

A tool's arguments are a regular language for almost every schema agents use: objects with
ordered (optionally skippable) properties, enums, booleans, numbers, free strings, dates, UUIDs,
arrays of those. :class:`Fragment` is a deterministic byte automaton for such a piece (a dense
``[states, 256]`` table, ``-1`` = no edge); fragments are built once per distinct slot schema and
wired into one :class:`ToolAutomaton` per tool without any subset construction (JSON keeps the
first bytes of what follows a value disjoint from the value's own continuations).

Masks: the allowed tokens at a state are the tokens whose bytes all stay inside the automaton
from there, so a token may cross from a value into the text after it (``"},`` ...) exactly as an
FSM over the whole string allows. They are computed on first visit and kept:

- inside a free JSON string (13 interior classes: plain, after ``\\``, inside ``\\uXXXX``, inside a
  multi-byte UTF-8 character) the tokens that stay inside the string depend on the class only;
  they are one shared packed row per class and vocabulary, and only the ~1% of tokens that
  contain a ``"`` are simulated against the state's own continuation;
- elsewhere only the tokens whose first byte has an edge are simulated, all at once with numpy,
  sorted by length so each byte column touches only the tokens still long enough.

Exit states (``exits``) hand over to another engine (an XGrammar matcher for a slot that is not
regular); tokens never cross an exit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from trierouter.registry.vocabulary import Vocabulary

__all__ = [
    "NO_EDGE",
    "Fragment",
    "ToolAutomaton",
    "VocabTables",
    "alt",
    "cls",
    "lit",
    "nfa_fragment",
    "opt",
    "rep",
    "seq",
]

I32 = npt.NDArray[np.int32]
NO_EDGE = -1

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


class _Nfa:
    def __init__(self) -> None:
        self.edges: list[list[tuple[frozenset[int], int]]] = []
        self.eps: list[list[int]] = []

    def state(self) -> int:
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

    def closure(self, states: Iterable[int]) -> frozenset[int]:
        seen = set(states)
        todo = list(seen)
        while todo:
            s = todo.pop()
            for t in self.eps[s]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return frozenset(seen)


def nfa_fragment(node: _Node) -> Fragment:
    """Determinize ``node`` into a :class:`Fragment` (states numbered in discovery order)."""
    nfa = _Nfa()
    start = nfa.state()
    final = nfa.build(node, start)
    first = nfa.closure([start])
    ids = {first: 0}
    order = [first]
    rows: list[npt.NDArray[np.int32]] = []
    i = 0
    while i < len(order):
        cur = order[i]
        i += 1
        targets: dict[int, set[int]] = {}
        for s in cur:
            for chars, t in nfa.edges[s]:
                for c in chars:
                    targets.setdefault(c, set()).add(t)
        row = np.full(256, NO_EDGE, dtype=np.int32)
        for c, ts in targets.items():
            key = nfa.closure(ts)
            if key not in ids:
                ids[key] = len(order)
                order.append(key)
            row[c] = ids[key]
        rows.append(row)
    table = np.stack(rows)
    accept = np.array([final in s for s in order], dtype=bool)
    return Fragment(table, accept)


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
    table = np.full((2, 256), NO_EDGE, dtype=np.int32)
    accept = np.array([False, True])
    return Fragment(table, accept, exits={0: Exit(key, 1)})


@dataclass(slots=True)
class Fragment:
    """A deterministic byte automaton piece: start state 0, ``table[s, byte]`` the next state."""

    table: I32
    accept: npt.NDArray[np.bool_]
    klass: npt.NDArray[np.int8] = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    exits: dict[int, Any] = field(default_factory=dict)
    """State → label of the engine that takes over there (no edges leave an exit)."""

    def __post_init__(self) -> None:
        if len(self.klass) != len(self.table):
            self.klass = np.full(len(self.table), -1, dtype=np.int8)

    @property
    def n(self) -> int:
        return len(self.table)

    def matches(self, data: bytes) -> bool:
        s = 0
        for b in data:
            s = int(self.table[s, b])
            if s < 0:
                return False
        return bool(self.accept[s])


def trie_fragment(options: Sequence[bytes], labels: Sequence[Any] | None = None) -> Fragment:
    """A trie over ``options`` (none a prefix of another when labelled); the end of option ``i``
    accepts, or is an exit labelled ``labels[i]``."""
    rows: list[dict[int, int]] = [{}]
    ends: dict[int, int] = {}
    for i, opt_ in enumerate(options):
        s = 0
        for b in opt_:
            nxt = rows[s].get(b)
            if nxt is None:
                nxt = len(rows)
                rows.append({})
                rows[s][b] = nxt
            s = nxt
        ends[s] = i
    table = np.full((len(rows), 256), NO_EDGE, dtype=np.int32)
    for s, row in enumerate(rows):
        if row:
            table[s, list(row)] = list(row.values())
    accept = np.zeros(len(rows), dtype=bool)
    exits: dict[int, Any] = {}
    for s, i in ends.items():
        if labels is None:
            accept[s] = True
        else:
            exits[s] = labels[i]
    return Fragment(table, accept, exits=exits)


# JSON string interior classes (the ``klass`` of a state inside a free string)
S_PLAIN, S_ESC, S_U1, S_U2, S_U3, S_U4, S_C1, S_C2, S_C3, S_E0, S_ED, S_F0, S_F4 = range(13)
N_STRING_CLASSES = 13


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
    t[S_U1, hexd] = S_U2
    t[S_U2, hexd] = S_U3
    t[S_U3, hexd] = S_U4
    t[S_U4, hexd] = S_PLAIN
    return t


_INTERIOR = _string_interior()


def string_fragment() -> Fragment:
    """A free JSON string, quotes included: XGrammar's ``basic_string`` over valid UTF-8."""
    n = 2 + N_STRING_CLASSES  # 0 = before the opening quote, 1..13 interior, 14 = closed
    table = np.full((n, 256), NO_EDGE, dtype=np.int32)
    table[0, 0x22] = 1
    inner = _INTERIOR.copy()
    inner[inner >= 0] += 1
    table[1 : 1 + N_STRING_CLASSES] = inner
    table[1, 0x22] = n - 1
    accept = np.zeros(n, dtype=bool)
    accept[n - 1] = True
    klass = np.full(n, -1, dtype=np.int8)
    klass[1 : 1 + N_STRING_CLASSES] = np.arange(N_STRING_CLASSES, dtype=np.int8)
    return Fragment(table, accept, klass)


# -- wiring fragments into one automaton ----------------------------------------------------


class Builder:
    """Concatenate fragments into one table; link accepting states to another fragment's start."""

    def __init__(self) -> None:
        self._tables: list[I32] = []
        self._accept: list[npt.NDArray[np.bool_]] = []
        self._klass: list[npt.NDArray[np.int8]] = []
        self.exits: dict[int, Any] = {}
        self.n = 0

    def add(self, frag: Fragment) -> int:
        """Copy ``frag`` in; return the offset of its state 0."""
        off = self.n
        t = frag.table.copy()
        t[t >= 0] += off
        self._tables.append(t)
        self._accept.append(frag.accept.copy())
        self._klass.append(frag.klass)
        for s, label in frag.exits.items():
            self.exits[s + off] = label.shifted(off) if isinstance(label, Exit) else label
        self.n += frag.n
        return off

    def _flat(self) -> tuple[I32, npt.NDArray[np.bool_]]:
        if len(self._tables) > 1:
            self._tables = [np.concatenate(self._tables)]
            self._accept = [np.concatenate(self._accept)]
            self._klass = [np.concatenate(self._klass)]
        return self._tables[0], self._accept[0]

    def accepting(self, off: int, frag: Fragment) -> list[int]:
        return [int(s) + off for s in np.flatnonzero(frag.accept)]

    def link(self, states: Iterable[int], target: int) -> None:
        """From each of ``states`` (accepting, or an exit), continue as from state ``target``:
        its edges are copied and the state stops accepting."""
        table, accept = self._flat()
        row = table[target]
        has = row >= 0
        for s in states:
            cur = table[s]
            clash = has & (cur >= 0) & (cur != row)
            if clash.any():
                b = int(np.flatnonzero(clash)[0])
                raise ValueError(f"ambiguous continuation on byte {b!r} at state {s}")
            cur[has] = row[has]
            accept[s] = bool(accept[target])
            self.exits.pop(s, None)
            if target in self.exits:
                self.exits[s] = self.exits[target]

    def edge(self, state: int, byte: int, target: int) -> None:
        table, _ = self._flat()
        table[state, byte] = target

    def finish(self) -> tuple[I32, npt.NDArray[np.bool_], npt.NDArray[np.int8]]:
        table, accept = self._flat()
        return table, accept, self._klass[0]


# -- per-vocabulary tables -------------------------------------------------------------------


class VocabTables:
    """What mask computation needs from a vocabulary, built once per vocabulary and width."""

    _cache: ClassVar[dict[tuple[str, int], VocabTables]] = {}
    _lock = threading.Lock()

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.width = vocab.width
        self.end_ids = np.asarray(sorted(vocab.end_ids), dtype=np.int32)
        buf = vocab.buffer
        self.buffer = np.concatenate([buf, np.zeros(1, dtype=np.uint8)])
        off = vocab.offsets
        lengths = np.diff(off)
        ok = vocab.matchable.copy()
        ids = np.flatnonzero(ok)
        ids = ids[np.argsort(-lengths[ids], kind="stable")]  # longest first
        self.start = off[:-1]
        self.lengths = lengths
        first = np.full(len(lengths), -1, dtype=np.int16)
        first[ids] = buf[off[ids]]
        self.first = first
        # candidates per first byte, each list longest first
        order = ids[np.argsort(first[ids], kind="stable")]
        fb = first[order]
        self._by_first = order.astype(np.int32)
        self._first_start = np.searchsorted(fb, np.arange(257)).astype(np.int64)
        has_quote = np.zeros(len(lengths), dtype=bool)
        qpos = np.flatnonzero(buf == 0x22)
        if len(qpos):
            owner = np.searchsorted(off, qpos, side="right") - 1
            has_quote[owner] = True
        self.quote_ids = ids[has_quote[ids]].astype(np.int32)
        self.all_ids = ids.astype(np.int32)
        self._string_rows: npt.NDArray[np.int32] | None = None
        self.words = (self.width + 31) // 32

    @classmethod
    def get(cls, vocab: Vocabulary) -> VocabTables:
        key = (vocab.hash, vocab.width)
        with cls._lock:
            t = cls._cache.get(key)
            if t is None:
                t = cls._cache[key] = VocabTables(vocab)
            return t

    def candidates(self, row: I32, byte_class: I32 | None = None) -> I32:
        """Tokens whose first byte has an edge in ``row`` (longest first within each byte)."""
        if byte_class is not None:
            row = row[byte_class]
        bytes_ = np.flatnonzero(row >= 0)
        if len(bytes_) == 0:
            return np.zeros(0, dtype=np.int32)
        if len(bytes_) == 1:
            b = int(bytes_[0])
            return self._by_first[self._first_start[b] : self._first_start[b + 1]]
        parts = [self._by_first[self._first_start[b] : self._first_start[b + 1]] for b in bytes_]
        cand = np.concatenate(parts)
        return cand[np.argsort(-self.lengths[cand], kind="stable")]

    def simulate(self, table: I32, state: int, cand: I32, byte_class: I32 | None = None) -> I32:
        """The tokens of ``cand`` (sorted longest first) that stay alive from ``state``; with
        ``byte_class``, ``table`` is indexed by the class of each byte."""
        if len(cand) == 0:
            return cand
        st = np.full(len(cand), state, dtype=np.int32)
        lens = self.lengths[cand]
        pos = self.start[cand]
        j = 0
        n_active = len(cand)
        while True:
            # tokens are sorted longest first: the first n_active are long enough for byte j
            while n_active and lens[n_active - 1] <= j:
                n_active -= 1
            if not n_active:
                break
            sub = st[:n_active]
            live = np.flatnonzero(sub >= 0)
            if len(live) == 0:
                break
            b = self.buffer[pos[live] + j]
            if byte_class is not None:
                b = byte_class[b]
            sub[live] = table[sub[live], b]
            j += 1
        return np.sort(cand[st >= 0])

    def string_rows(self) -> npt.NDArray[np.int32]:
        """Packed rows: per interior class, the tokens that stay inside a free string."""
        if self._string_rows is None:
            rows = np.zeros((N_STRING_CLASSES, self.words), dtype=np.int32)
            inner = _INTERIOR  # ``"`` from PLAIN has no edge here: closing is not staying inside
            for k in range(N_STRING_CLASSES):
                ids = self.simulate(inner, k, self.all_ids)
                rows[k] = pack_ids(ids, self.width)
            self._string_rows = rows
        return self._string_rows


def pack_ids(ids: npt.ArrayLike, width: int) -> npt.NDArray[np.int32]:
    """Packed XGrammar-layout row with the bits of ``ids`` set."""
    words = (width + 31) // 32
    bits = np.zeros(words * 32, dtype=bool)
    bits[np.asarray(ids, dtype=np.int64)] = True
    return np.packbits(bits, bitorder="little").view(np.int32).copy()


_BIG = 2048


class ToolAutomaton:
    """One compiled byte automaton (a tool's arguments, or one slot) with lazy token masks.

    ``fill(state, row)`` writes the packed mask; ``advance(state, token)`` the next state
    (``-1`` when refused). Accepting states are where the automaton may end (the caller decides
    what follows: an end id, or the next stage); exits hand over to another engine.
    """

    def __init__(
        self,
        table: I32,
        accept: npt.NDArray[np.bool_],
        klass: npt.NDArray[np.int8],
        exits: dict[int, Any],
        tables: VocabTables,
    ) -> None:
        # compress the byte alphabet: identical columns share one class
        cols, inverse = np.unique(table, axis=1, return_inverse=True)
        self.table = np.ascontiguousarray(cols, dtype=np.int32)
        self.byte_class = inverse.reshape(-1).astype(np.int32)
        self.accept = accept
        self.klass = klass
        self.exits = exits
        self.t = tables
        self._masks: dict[int, tuple[int, I32 | None, npt.NDArray[np.int32] | None]] = {}
        self._lock = threading.Lock()

    @property
    def n_states(self) -> int:
        return len(self.table)

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes + self.accept.nbytes + self.klass.nbytes + 1024)

    def step_bytes(self, state: int, data: bytes) -> int:
        for b in data:
            if state < 0:
                return -1
            state = int(self.table[state, self.byte_class[b]])
        return state

    def advance(self, state: int, token: int) -> int:
        t = self.t
        if token >= len(t.lengths) or not t.vocab.matchable[token]:
            return -1
        lo = int(t.start[token])
        for b in t.buffer[lo : lo + int(t.lengths[token])].tolist():
            state = int(self.table[state, self.byte_class[b]])
            if state < 0:
                return -1
        return state

    def _mask(self, state: int) -> tuple[int, I32 | None, npt.NDArray[np.int32] | None]:
        m = self._masks.get(state)
        if m is not None:
            return m
        t = self.t
        k = int(self.klass[state])
        tab, bc = self.table, self.byte_class
        if k >= 0:
            ids = t.simulate(tab, state, t.quote_ids, bc)
        else:
            ids = t.simulate(tab, state, t.candidates(tab[state], bc), bc)
        packed = None
        if len(ids) > _BIG:
            packed = pack_ids(ids, t.width)
            if k >= 0:
                packed |= t.string_rows()[k]
            m = (-1, None, packed)
        else:
            m = (k, ids, None)
        with self._lock:
            self._masks[state] = m
        return m

    def allowed(self, state: int) -> I32:
        """Sorted token ids allowed at ``state`` (the automaton's own tokens only)."""
        row = np.zeros(self.t.words, dtype=np.int32)
        self.fill(state, row)
        bits = np.unpackbits(row.view(np.uint8), bitorder="little")
        return np.flatnonzero(bits[: self.t.width]).astype(np.int32)

    def fill(self, state: int, row: npt.NDArray[np.int32]) -> None:
        """Overwrite ``row`` (one packed row) with the tokens allowed at ``state``."""
        k, ids, packed = self._mask(state)
        if packed is not None:
            row[:] = packed
            return
        if k >= 0:
            row[:] = self.t.string_rows()[k]
        else:
            row[:] = 0
        assert ids is not None
        if len(ids):
            np.bitwise_or.at(
                row.view(np.uint32),
                ids >> 5,
                np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)),
            )

    def materialize(self) -> None:
        """Compute every state's mask now (instead of on first visit)."""
        for s in range(self.n_states):
            if s not in self.exits:
                self._mask(s)
