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

With the native backend (:mod:`trierouter.registry.core`) every state's mask is computed when the
automaton is built, in two calls into the C++ core: a walk of the token trie in lockstep with the
automaton for states outside strings (tokens sharing a prefix share its steps), the ``"`` tokens
against each string state; the per-class string rows come from the same walk.

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

from trierouter.registry import core as _backend
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
    return Fragment.dense(table, accept)


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

    def __post_init__(self) -> None:
        if len(self.klass) != self.n:
            self.klass = np.full(self.n, -1, dtype=np.int16)

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

    @property
    def table(self) -> I32:
        """The dense ``[n, 256]`` table (``-1`` = no edge)."""
        t = np.full((self.n, 256), NO_EDGE, dtype=np.int32)
        t[self.src, self.byte] = self.dst
        return t

    def start_edges(self) -> tuple[I32, I32]:
        m = self.src == 0
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
    """Concatenate fragments into one edge list; link accepting states to a fragment's start."""

    def __init__(self) -> None:
        self._src: list[I32] = []
        self._byte: list[I32] = []
        self._dst: list[I32] = []
        self._accept: list[npt.NDArray[np.bool_]] = []
        self._klass: list[npt.NDArray[np.int16]] = []
        self._starts: dict[int, tuple[I32, I32]] = {}
        self.exits: dict[int, Any] = {}
        self.n = 0

    def add(self, frag: Fragment) -> int:
        """Copy ``frag`` in; return the offset of its state 0."""
        off = self.n
        self._src.append(frag.src + off)
        self._byte.append(frag.byte)
        self._dst.append(frag.dst + off)
        self._accept.append(frag.accept.copy())
        self._klass.append(frag.klass)
        b, d = frag.start_edges()
        self._starts[off] = (b, d + off)
        for s, label in frag.exits.items():
            self.exits[s + off] = label.shifted(off) if isinstance(label, Exit) else label
        self.n += frag.n
        return off

    def _flat_accept(self) -> npt.NDArray[np.bool_]:
        if len(self._accept) > 1:
            self._accept = [np.concatenate(self._accept)]
        return self._accept[0]

    def accepting(self, off: int, frag: Fragment) -> list[int]:
        return [int(s) + off for s in np.flatnonzero(frag.accept)]

    def link(self, states: Iterable[int], target: int) -> None:
        """From each of ``states`` (accepting, or an exit), continue as from fragment start
        ``target``: its edges are copied and the state takes its acceptance and exit."""
        b, d = self._starts[target]
        accept = self._flat_accept()
        for s in states:
            if len(b):
                self._src.append(np.full(len(b), s, dtype=np.int32))
                self._byte.append(b)
                self._dst.append(d)
            accept[s] = bool(accept[target])
            self.exits.pop(s, None)
            if target in self.exits:
                self.exits[s] = self.exits[target]

    def edge(self, state: int, byte: int, target: int) -> None:
        self._src.append(np.array([state], dtype=np.int32))
        self._byte.append(np.array([byte], dtype=np.int32))
        self._dst.append(np.array([target], dtype=np.int32))

    def finish(self) -> Fragment:
        """The wired fragment; ``ValueError`` if two edges leave a state on the same byte."""
        src = np.concatenate(self._src) if self._src else np.zeros(0, dtype=np.int32)
        byte = np.concatenate(self._byte) if self._byte else np.zeros(0, dtype=np.int32)
        dst = np.concatenate(self._dst) if self._dst else np.zeros(0, dtype=np.int32)
        key = src.astype(np.int64) * 256 + byte
        order = np.argsort(key, kind="stable")
        key, src, byte, dst = key[order], src[order], byte[order], dst[order]
        same = key[1:] == key[:-1]
        if same.any():
            if (dst[1:][same] != dst[:-1][same]).any():
                i = int(np.flatnonzero(same & (dst[1:] != dst[:-1]))[0])
                raise ValueError(f"ambiguous continuation on byte {int(byte[i])} at state {src[i]}")
            keep = np.concatenate([[True], ~same])
            src, byte, dst = src[keep], byte[keep], dst[keep]
        return Fragment(
            src,
            byte,
            dst,
            self.n,
            self._flat_accept(),
            np.concatenate(self._klass),
            dict(self.exits),
        )


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
        self._counts: tuple[npt.NDArray[np.int16], npt.NDArray[np.bool_]] | None = None
        self._counted: dict[tuple[int, int], npt.NDArray[np.int32]] = {}
        self._count_order: dict[int, tuple[npt.NDArray[np.int64], I32]] = {}
        self.words = (self.width + 31) // 32
        self.offsets = np.ascontiguousarray(off, dtype=np.int64)
        self.native = _backend.default_backend() == "native"
        self._trie: Any = None

    @property
    def trie(self) -> Any:
        """The native backend's token trie of this vocabulary (shared with its TokenIndex)."""
        if self._trie is None:
            from trierouter.registry.index import TokenIndex

            self._trie = TokenIndex.get(self.vocab).native_trie
        return self._trie

    @classmethod
    def get(cls, vocab: Vocabulary) -> VocabTables:
        key = (vocab.hash, vocab.width)
        with cls._lock:
            t = cls._cache.get(key)
            if t is None:
                t = cls._cache[key] = VocabTables(vocab)
                if t.native:  # eager: the per-class string rows and counts, in C++
                    t.string_rows()
                    t._string_counts()
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

    def _string_counts(self) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.bool_]]:
        """Per class: characters each token completes while staying inside a string (``-1``
        if it does not stay inside), and whether it ends inside a character."""
        if self._counts is None and self.native:
            ids = self.all_ids
            fin, n = _backend.native_core().walk_counts(
                _INTERIOR, np.arange(N_STRING_CLASSES), S_PLAIN, ids, self.buffer, self.offsets
            )
            fin = fin.reshape(N_STRING_CLASSES, len(ids))
            n = n.reshape(N_STRING_CLASSES, len(ids))
            ok = fin >= 0
            self._counts = (np.where(ok, n, np.int16(-1)).astype(np.int16), ok & (fin != S_PLAIN))
        if self._counts is None:
            ids = self.all_ids
            counts = np.full((N_STRING_CLASSES, len(ids)), -1, dtype=np.int16)
            mid = np.zeros((N_STRING_CLASSES, len(ids)), dtype=bool)
            lens = self.lengths[ids]
            pos = self.start[ids]
            for k in range(N_STRING_CLASSES):
                st = np.full(len(ids), k, dtype=np.int32)
                n = np.zeros(len(ids), dtype=np.int16)
                for j in range(int(lens.max()) if len(lens) else 0):
                    live = np.flatnonzero((lens > j) & (st >= 0))
                    if len(live) == 0:
                        break
                    st[live] = _INTERIOR[st[live], self.buffer[pos[live] + j]]
                    n[live] += st[live] == S_PLAIN
                ok = st >= 0
                counts[k, ok] = n[ok]
                mid[k] = ok & (st != S_PLAIN)
            self._counts = (counts, mid)
        return self._counts

    def counted_row(self, k: int, left: int) -> npt.NDArray[np.int32]:
        """Packed row: tokens that stay inside a string from class ``k`` and complete at most
        ``left`` characters (a character they leave unfinished counts)."""
        key = (k, left)
        row = self._counted.get(key)
        if row is None:
            # from the nearest row already built for a smaller bound: add the tokens whose
            # count lies in between (rows for every bound of a maxLength string cost little)
            need = self._by_count(k)
            below = [b for kk, b in self._counted if kk == k and b < left]
            if below:
                lo = max(below)
                row = self._counted[(k, lo)].copy()
                a, b = np.searchsorted(need[0], [lo, left], side="right")
                ids = need[1][a:b]
                np.bitwise_or.at(
                    row.view(np.uint32),
                    ids >> 5,
                    np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)),
                )
            else:
                row = pack_ids(need[1][: np.searchsorted(need[0], left, side="right")], self.width)
            self._counted[key] = row
        return row

    def _by_count(self, k: int) -> tuple[npt.NDArray[np.int64], I32]:
        """Class ``k``'s tokens that stay inside a string, by characters used (sorted)."""
        hit = self._count_order.get(k)
        if hit is None:
            counts, mid = self._string_counts()
            ok = counts[k] >= 0
            need = counts[k][ok].astype(np.int64) + mid[k][ok]
            order = np.argsort(need, kind="stable")
            hit = (need[order], self.all_ids[ok][order].astype(np.int32))
            self._count_order[k] = hit
        return hit

    def string_rows(self) -> npt.NDArray[np.int32]:
        """Packed rows: per interior class, the tokens that stay inside a free string."""
        if self._string_rows is None:
            rows = np.zeros((N_STRING_CLASSES, self.words), dtype=np.int32)
            inner = _INTERIOR  # ``"`` from PLAIN has no edge here: closing is not staying inside
            if self.native:
                ptr, ids = _backend.native_core().dfa_masks(
                    inner, np.arange(256, dtype=np.int32), np.arange(N_STRING_CLASSES), self.trie
                )
                for k in range(N_STRING_CLASSES):
                    rows[k] = pack_ids(ids[ptr[k] : ptr[k + 1]], self.width)
            else:
                for k in range(N_STRING_CLASSES):
                    rows[k] = pack_ids(self.simulate(inner, k, self.all_ids), self.width)
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

    def __init__(self, frag: Fragment, tables: VocabTables) -> None:
        # compress the byte alphabet: bytes with the same edges everywhere share one class
        order = np.lexsort((frag.src, frag.byte))
        src, byte, dst = frag.src[order], frag.byte[order], frag.dst[order]
        bounds = np.searchsorted(byte, np.arange(257))
        classes: dict[bytes, int] = {b"": 0}
        byte_class = np.zeros(256, dtype=np.int32)
        for b in range(256):
            lo, hi = bounds[b], bounds[b + 1]
            sig = src[lo:hi].tobytes() + dst[lo:hi].tobytes()
            byte_class[b] = classes.setdefault(sig, len(classes))
        table = np.full((frag.n, len(classes)), NO_EDGE, dtype=np.int32)
        table[src, byte_class[byte]] = dst
        self.table = table
        self.byte_class = byte_class
        self.accept = frag.accept
        self.klass = frag.klass
        self.exits = frag.exits
        self.t = tables
        self._masks: dict[int, tuple[int, I32 | None, npt.NDArray[np.int32] | None]] = {}
        self._toward: dict[int, I32] = {}
        self._dist: npt.NDArray[np.int32] | None = None
        self._lock = threading.Lock()
        if tables.native:
            self.materialize()  # eager: every state's mask in two calls into the core

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
        return self._store(state, k, ids)

    def _store(
        self, state: int, k: int, ids: I32
    ) -> tuple[int, I32 | None, npt.NDArray[np.int32] | None]:
        t = self.t
        packed = None
        m: tuple[int, I32 | None, npt.NDArray[np.int32] | None]
        if len(ids) > _BIG:
            packed = pack_ids(ids, t.width)
            if k >= 0:
                packed |= self._base_row(k)
            m = (-1, None, packed)
        else:
            m = (k, ids, None)
        with self._lock:
            self._masks[state] = m
        return m

    def _base_row(self, k: int) -> npt.NDArray[np.int32]:
        u, left = string_class(k)
        return self.t.string_rows()[u] if left < 0 else self.t.counted_row(u, left)

    def _distances(self) -> npt.NDArray[np.int32]:
        """Bytes from each state to the nearest accepting or exit state (reverse BFS)."""
        if self._dist is None:
            n = self.n_states
            src, col = np.nonzero(self.table >= 0)
            dst = self.table[src, col]
            pairs = np.unique(dst.astype(np.int64) * n + src)
            rdst, rsrc = pairs // n, pairs % n
            start = np.searchsorted(rdst, np.arange(n + 1))
            dist = np.full(n, np.iinfo(np.int32).max, dtype=np.int32)
            frontier = [int(x) for x in np.flatnonzero(self.accept)] + list(self.exits)
            for x in frontier:
                dist[x] = 0
            d = 0
            while frontier:
                d += 1
                nxt = []
                for x in frontier:
                    for y in rsrc[start[x] : start[x + 1]].tolist():
                        if dist[y] > d:
                            dist[y] = d
                            nxt.append(y)
                frontier = nxt
            self._dist = dist
        return self._dist

    def toward_end(self, state: int) -> I32 | None:
        """The allowed tokens after which the nearest end (acceptance or an exit) is closer;
        None if there are none. What a budget steers to once a value has run long."""
        with self._lock:
            hit = self._toward.get(state)
        if hit is None:
            dist = self._distances()
            ids = self.allowed(state)
            ends = np.fromiter((self.advance(state, int(t)) for t in ids), np.int64, len(ids))
            ok = ends >= 0
            ok[ok] = dist[ends[ok]] < dist[state]
            hit = ids[ok]
            with self._lock:
                self._toward[state] = hit
        return hit if len(hit) else None

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
            row[:] = self._base_row(k)
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
        """Compute every state's mask now (instead of on first visit); the native backend does
        this when the automaton is built."""
        todo = np.asarray(
            [s for s in range(self.n_states) if s not in self.exits and s not in self._masks],
            dtype=np.int64,
        )
        if not self.t.native:
            for s in todo.tolist():
                self._mask(s)
            return
        core = _backend.native_core()
        t = self.t
        k = self.klass[todo] if len(todo) else np.zeros(0, dtype=np.int16)
        plain, strings = todo[k < 0], todo[k >= 0]
        if len(plain):
            ptr, ids = core.dfa_masks(self.table, self.byte_class, plain, t.trie)
            for i, s in enumerate(plain.tolist()):
                self._store(s, -1, ids[ptr[i] : ptr[i + 1]])
        if len(strings):
            ptr, ids = core.dfa_list_masks(
                self.table, self.byte_class, strings, t.quote_ids, t.buffer, t.offsets
            )
            for i, s in enumerate(strings.tolist()):
                self._store(s, int(self.klass[s]), ids[ptr[i] : ptr[i + 1]])
            for kl in sorted({int(x) for x in self.klass[strings]}):
                self._base_row(kl)  # the per-class rows these states OR in, built now
