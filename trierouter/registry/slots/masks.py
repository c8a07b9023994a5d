"""Token masks of a tool's byte automaton, computed over the vocabulary.

The allowed tokens at a state are the tokens whose bytes all stay inside the automaton from
there, so a token may cross from a value into the text after it (``"},`` ...) exactly as an FSM
over the whole string allows. Inside a free JSON string (14 interior classes: plain, after
``\\``, inside ``\\uXXXX``, inside a multi-byte UTF-8 character) the tokens that stay inside the
string depend on the class only: one shared packed row per class and vocabulary, and only the
~1% of tokens that contain a ``"`` are walked from the state itself.

Every state's mask is computed when the automaton is built, in calls into the compiled core: a
walk of the token trie in lockstep with the automaton for states outside strings (tokens sharing
a prefix share its steps), the ``"`` tokens against each string state; the per-class string rows
and counts come from the core as well, once per vocabulary
(:mod:`trierouter.testing.masks_reference` simulates the same masks in numpy, for the tests).
The masks are kept in one
:class:`~trierouter.registry.slots.packing.MaskTable` per automaton: the shared rows (a string
class's, a shared piece's) as base rows, each state's own tokens as a list.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from trierouter.registry.core import native_core
from trierouter.registry.slots import pieces as _pieces
from trierouter.registry.slots.fragment import (
    _INTERIOR,
    I32,
    N_STRING_CLASSES,
    S_PLAIN,
    Fragment,
    string_class,
)
from trierouter.registry.slots.packing import MaskTable, compress, pack_ids
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["ToolAutomaton", "VocabTables", "pack_ids"]


class VocabTables:
    """What mask computation needs from a vocabulary, built once per vocabulary and width."""

    _cache: ClassVar[OrderedDict[tuple[str, int], VocabTables]] = OrderedDict()
    _lock = threading.Lock()
    cache_size: ClassVar[int] = 4
    """Vocabularies whose tables are kept, least recently used dropped first."""

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
        self.has_quote = has_quote
        """Per token id, whether its bytes hold a ``"``."""
        self.all_ids = ids.astype(np.int32)
        self._string_rows: npt.NDArray[np.int32] | None = None
        self._counts: tuple[npt.NDArray[np.int16], npt.NDArray[np.bool_]] | None = None
        self._counted: dict[tuple[int, int], npt.NDArray[np.int32]] = {}
        self._count_order: dict[int, tuple[npt.NDArray[np.int64], I32]] = {}
        self.words = (self.width + 31) // 32
        self.offsets = np.ascontiguousarray(off, dtype=np.int64)
        self._trie: Any = None
        self._quote_trie: Any = None
        self._pieces: OrderedDict[int, MaskTable] = OrderedDict()
        self._pieces_bytes = 0
        self._wide: dict[int, bool] = {}  # per piece: can a state be wide (shared_rows)
        self._pieces_lock = threading.Lock()

    @property
    def quote_trie(self) -> Any:
        """The native token trie of the tokens holding a ``"`` (walked from every state inside
        a string or a shared piece)."""
        if self._quote_trie is None:
            has = np.zeros(len(self.lengths), dtype=np.uint8)
            has[self.quote_ids] = 1
            self._quote_trie = native_core().TokenTrie(self.vocab.tokens, has)
        return self._quote_trie

    @property
    def trie(self) -> Any:
        """The core's token trie of this vocabulary (shared with its TokenIndex)."""
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
                t.string_rows()  # eager: the per-class string rows and counts, in C++
                t._string_counts()
                _ = t.quote_trie
                while len(cls._cache) > cls.cache_size:
                    cls._cache.popitem(last=False)
            else:
                cls._cache.move_to_end(key)
            return t

    def finals(self, table: I32, state: int, ids: I32, byte_class: I32) -> I32:
        """The state after each token of ``ids`` from ``state`` (``-1``: refused), all tokens
        stepped together, one byte column at a time."""
        st = np.full(len(ids), state, dtype=np.int32)
        if not len(ids):
            return st
        lens = self.lengths[ids]
        pos = self.start[ids]
        for j in range(int(lens.max())):
            live = np.flatnonzero((lens > j) & (st >= 0))
            if not len(live):
                break
            st[live] = table[st[live], byte_class[self.buffer[pos[live] + j]]]
        return st

    def _string_counts(self) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.bool_]]:
        """Per class: characters each token completes while staying inside a string (``-1``
        if it does not stay inside), and whether it ends inside a character."""
        if self._counts is None:
            ids = self.all_ids
            fin, n = native_core().walk_counts(
                _INTERIOR, np.arange(N_STRING_CLASSES), S_PLAIN, ids, self.buffer, self.offsets
            )
            fin = fin.reshape(N_STRING_CLASSES, len(ids))
            n = n.reshape(N_STRING_CLASSES, len(ids))
            ok = fin >= 0
            self._counts = (np.where(ok, n, np.int16(-1)).astype(np.int16), ok & (fin != S_PLAIN))
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
            ptr, ids = native_core().dfa_masks(
                inner, np.arange(256, dtype=np.int32), np.arange(N_STRING_CLASSES), self.trie
            )
            for k in range(N_STRING_CLASSES):
                rows[k] = pack_ids(ids[ptr[k] : ptr[k + 1]], self.width)
            self._string_rows = rows
        return self._string_rows


_BIG = 2048


class ToolAutomaton:
    """One compiled byte automaton (a tool's arguments, or one slot) and its token masks.

    ``fill(state, row)`` writes the packed mask; ``advance(state, token)`` the next state
    (``-1`` when refused). Accepting states are where the automaton may end (the caller decides
    what follows: an end id, or the next stage); exits hand over to another engine.
    """

    def __init__(self, frag: Fragment, tables: VocabTables, masks: bool = True) -> None:
        # compress the byte alphabet: bytes with the same edges everywhere share one class (a
        # fragment not wired yet: wired and compressed by the masks' core call, kept by _finish)
        self._wire, self._n = frag.wire, frag.n
        if frag.wire is None:
            self.table, self.byte_class = compress(frag, narrow=True)
        self.accept = frag.accept
        self.klass = frag.klass
        self.origin = frag.origin
        self.exits = frag.exits
        self.t = tables
        self.mask_table: MaskTable | None = None
        """Every state's mask (None until built: ``masks=False`` leaves it to the caller's
        :meth:`masks_call`)."""
        self._toward: dict[int, I32] = {}  # toward_end's rows, and the distances they use
        self._dist: npt.NDArray[np.int32] | None = None
        self._lock = threading.Lock()
        if masks:  # (masks=False: the caller runs masks_call)
            self.materialize()  # eager: every state's mask in two calls into the core

    @property
    def n_states(self) -> int:
        return self._n

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
            ends = self.t.finals(self.table, state, ids, self.byte_class)
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

    @property
    def ready(self) -> int:
        """States whose mask is built (all non-exit states once materialized, else none)."""
        return 0 if self.mask_table is None else self.n_states - len(self.exits)

    def fill(self, state: int, row: npt.NDArray[np.int32]) -> None:
        """Overwrite ``row`` (one packed row) with the tokens allowed at ``state`` (none
        outside ``0 .. n_states - 1``)."""
        if self.mask_table is None:
            self.materialize()
        assert self.mask_table is not None
        if 0 <= state < self.n_states:
            self.mask_table.fill(state, row)
        else:
            row[:] = 0

    def materialize(self) -> None:
        """Compute every state's mask now (the constructor does, unless ``masks=False``)."""
        if (call := self.masks_call()) is not None:
            call[1](native_core().dfa_masks(*call[0]))

    def masks_call(self) -> tuple[tuple[Any, ...], Callable[[Any], None]] | None:
        """The native masks of every state: the ``dfa_masks`` arguments and what keeps its
        result (None once built). The call may run on another thread, many in one
        ``dfa_masks_many`` (an eager registry); the keeping runs on the caller's."""
        if self.mask_table is not None:
            return None
        t = self.t
        n = self.n_states
        live: npt.NDArray[np.bool_] | None = None  # None: every state (no exit)
        if self.exits:
            live = np.ones(n, dtype=bool)
            live[np.fromiter(self.exits, np.int64, len(self.exits))] = False
        bblock, brow = np.full(n, -1, dtype=np.int32), np.zeros(n, dtype=np.int32)
        blocks: list[npt.NDArray[np.int32]] = []
        states = np.arange(n, dtype=np.int64)  # -1: an exit, no walk
        if live is not None:
            states[~live] = -1
        table = (self.table, self.byte_class) if self._wire is None else (self._wire,)
        strings = int(self.klass.max(initial=-1)) >= 0
        ps: list[int] = []  # the pieces embedded (their ids), from their states outside strings
        if int(self.origin.max(initial=-1)) >= 0:
            on_all = np.flatnonzero((self.origin >= 0) & (self.klass < 0))
            pid = self.origin[on_all] >> 32
            ps = pid[:1].tolist() if len(pid) and (pid == pid[0]).all() else np.unique(pid).tolist()
        hits = [(p, h) for p in ps if (h := _pieces.shared_rows(t, p)) is not None]
        if live is None and not strings and not hits:
            # no string, exit or wide piece (a narrow one's states walk as any): all walk the trie
            args: tuple[Any, ...] = (*table, states, t.trie)
            return args, functools.partial(self._finish, blocks, bblock, brow, [])
        # states inside a free string: the per-class row, and the quote tokens walked here
        quoted = self.klass >= 0
        if live is not None:
            quoted &= live
        on = np.flatnonzero(quoted)
        if len(on):  # the free rows as one block (row k: class k < 16), a counted row its own
            k = self.klass[on]
            blocks.append(t.string_rows())
            bblock[on], brow[on] = 0, k % 16
            if k.max() >= 16:  # counted strings (k // 16 - 1 characters left): shared, no copy
                for kl in np.unique(k[k >= 16]).tolist():
                    blocks.append(t.counted_row(*string_class(kl))[None])
                    bblock[on[k == kl]], brow[on[k == kl]] = len(blocks) - 1, 0
        # a shared piece's non-accepting states: its row if wide, else its list less quote tokens
        extra: list[tuple[npt.NDArray[Any], MaskTable, npt.NDArray[np.int64]]] = []
        if hits:
            if live is not None:  # (no exit is a piece state; kept as a guard)
                pid, on_all = pid[live[on_all]], on_all[live[on_all]]
            for p, hit in hits:
                on = on_all if len(ps) == 1 else on_all[pid == p]
                local = self.origin[on] & 0xFFFFFFFF
                keep = ~_pieces.piece(int(p)).accept[local]
                on, local = on[keep], local[keep]
                wide = hit.block[local] >= 0
                if wide.any():  # (a piece's table has one block: its wide rows)
                    blocks.append(hit.blocks[0])
                    bblock[on[wide]], brow[on[wide]] = len(blocks) - 1, hit.row[local[wide]]
                quoted[on] = True
                extra.append((on[~wide], hit, local[~wide]))
        # one walk per state, in state order: the quote tokens' trie where a mask is shared
        args = (*table, states, t.trie, 0, t.quote_trie, quoted.view(np.uint8))
        return args, functools.partial(self._finish, blocks, bblock, brow, extra)

    def _finish(
        self, blocks: list[I32], bblock: I32, brow: I32, extra: list[Any], result: tuple[Any, ...]
    ) -> None:
        """Keep the masks of :meth:`materialize` (``result``: the core's (ptr, ids), after the
        table and classes it made if it wired the automaton; the narrow pieces' lists,
        ``extra``, added): long lists packed whole, with their rows."""
        if self._wire is not None:
            self.table, self.byte_class, result = result
            self._wire = None
        ptr, ids = _pieces.with_lists(result[0], result[1], extra) if extra else result
        table = MaskTable(blocks, bblock, brow, ptr, ids)
        table.pack_long(_BIG, self.t.width)
        self.mask_table = table
