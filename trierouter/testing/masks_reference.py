"""Token masks of a tool automaton by numpy simulation: the oracle for the compiled core's masks.

The library computes every state's mask in the core (a walk of the token trie in lockstep with
the automaton, the ``"`` tokens against each string state, shared piece rows;
:class:`~trierouter.registry.slots.masks.ToolAutomaton`). :class:`ReferenceMasks` computes
them the way the numpy backend did, lazily per state: inside a free string the class's shared
row (every token simulated over the string interior) plus the ``"`` tokens simulated from the
state; elsewhere every token whose first byte has an edge, simulated byte column by byte column.
It shares no mask code with the core, and knows nothing of shared pieces.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from trierouter.registry.slots.fragment import (
    _INTERIOR,
    N_STRING_CLASSES,
    S_PLAIN,
    Fragment,
    string_class,
)
from trierouter.registry.slots.packing import pack_ids, set_bits
from trierouter.registry.vocabulary import Vocabulary
from trierouter.testing.slots_reference import compress

__all__ = ["ReferenceMasks", "ReferenceTables"]

I32 = npt.NDArray[np.int32]


class ReferenceTables:
    """A vocabulary's tokens arranged for simulation, and the string rows by simulation."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.width = vocab.width
        self.words = (self.width + 31) // 32
        buf = vocab.buffer
        self.buffer = np.concatenate([buf, np.zeros(1, dtype=np.uint8)])
        off = vocab.offsets
        self.start = off[:-1]
        self.lengths = np.diff(off)
        ids = np.flatnonzero(vocab.matchable)
        ids = ids[np.argsort(-self.lengths[ids], kind="stable")]  # longest first
        self.all_ids = ids.astype(np.int32)
        first = np.full(len(self.lengths), -1, dtype=np.int16)
        first[ids] = buf[off[ids]]
        self.first = first
        has_quote = np.zeros(len(self.lengths), dtype=bool)
        qpos = np.flatnonzero(buf == 0x22)
        if len(qpos):
            has_quote[np.searchsorted(off, qpos, side="right") - 1] = True
        self.quote_ids = ids[has_quote[ids]].astype(np.int32)
        self._rows: dict[tuple[int, int], npt.NDArray[np.int32]] = {}
        self._counts: tuple[npt.NDArray[np.int16], npt.NDArray[np.bool_]] | None = None

    def candidates(self, row: I32) -> I32:
        """Tokens whose first byte has an edge in ``row``, longest first."""
        cand = self.all_ids[row[self.first[self.all_ids]] >= 0]
        return cand[np.argsort(-self.lengths[cand], kind="stable")]

    def simulate(self, table: I32, state: int, cand: I32, byte_class: I32 | None = None) -> I32:
        """The tokens of ``cand`` (longest first) that stay alive from ``state``, sorted."""
        if len(cand) == 0:
            return cand
        st = np.full(len(cand), state, dtype=np.int32)
        lens = self.lengths[cand]
        pos = self.start[cand]
        for j in range(int(lens.max())):
            live = np.flatnonzero((lens > j) & (st >= 0))
            if len(live) == 0:
                break
            b = self.buffer[pos[live] + j]
            st[live] = table[st[live], b if byte_class is None else byte_class[b]]
        return np.sort(cand[st >= 0])

    def string_counts(self) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.bool_]]:
        """Per interior class: characters each token completes while staying inside a string
        (``-1`` if it leaves), and whether it ends inside a character."""
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

    def string_rows(self) -> npt.NDArray[np.int32]:
        """Packed rows: per interior class, the tokens that stay inside a free string."""
        rows = np.zeros((N_STRING_CLASSES, self.words), dtype=np.int32)
        for k in range(N_STRING_CLASSES):
            rows[k] = self.base_row(k)
        return rows

    def base_row(self, k: int) -> npt.NDArray[np.int32]:
        """The packed row every state of string class ``k`` shares: the tokens that stay inside
        the string (and, for a counted string, complete at most the characters left)."""
        u, left = string_class(k)
        row = self._rows.get((u, left))
        if row is None:
            if left < 0:
                ids = self.simulate(_INTERIOR, u, self.all_ids)
            else:
                counts, mid = self.string_counts()
                ok = counts[u] >= 0
                need = counts[u].astype(np.int64) + mid[u]
                ids = self.all_ids[ok & (need <= left)]
            row = self._rows[(u, left)] = pack_ids(ids, self.width)
        return row


class ReferenceMasks:
    """Every state's mask of one automaton, simulated on first visit."""

    def __init__(self, frag: Fragment, tables: ReferenceTables) -> None:
        self.table, self.byte_class = compress(frag)
        self.klass = frag.klass
        self.exits = frag.exits
        self.n_states = frag.n
        self.t = tables

    def allowed(self, state: int) -> I32:
        """Sorted token ids allowed at ``state`` (beyond a string class's shared row)."""
        t, tab, bc = self.t, self.table, self.byte_class
        if int(self.klass[state]) >= 0:
            return t.simulate(tab, state, t.quote_ids, bc)
        first_edges = tab[state][bc]  # per byte: the edge's target, -1 none
        return t.simulate(tab, state, t.candidates(first_edges), bc)

    def fill(self, state: int, row: npt.NDArray[np.int32]) -> None:
        """Overwrite ``row`` (one packed row) with the tokens allowed at ``state``."""
        k = int(self.klass[state])
        row[:] = self.t.base_row(k) if k >= 0 else 0
        set_bits(row, self.allowed(state))
