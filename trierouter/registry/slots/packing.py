"""Packed token rows and byte classes for the tool automata: XGrammar-layout bit rows from id
lists, :class:`MaskTable` (every state's token mask: a shared packed row OR'd with a sparse list),
and an automaton's byte alphabet compressed to classes (by the compiled core)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.registry.core import native_core
from trierouter.registry.slots.fragment import I32, Fragment

__all__ = ["MaskTable", "compress", "pack_ids", "pack_rows", "popcount", "set_bits"]


def pack_ids(ids: npt.ArrayLike, width: int) -> npt.NDArray[np.int32]:
    """Packed XGrammar-layout row with the bits of ``ids`` set."""
    words = (width + 31) // 32
    bits = np.zeros(words * 32, dtype=bool)
    bits[np.asarray(ids, dtype=np.int64)] = True
    return np.packbits(bits, bitorder="little").view(np.int32).copy()


def pack_rows(
    ptr: npt.NDArray[np.int64], ids: I32, which: npt.NDArray[np.int64], width: int
) -> npt.NDArray[np.int32]:
    """Packed rows (one per entry of ``which``) of the CSR lists ``ids[ptr[i]:ptr[i + 1]]``."""
    words = (width + 31) // 32
    bits = np.zeros((len(which), words * 32), dtype=bool)
    if len(which):
        lo, hi = ptr[which], ptr[which + 1]
        n = hi - lo
        at = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
        row = np.repeat(np.arange(len(which), dtype=np.int64), n)
        bits[row, ids[at]] = True
    return np.packbits(bits, axis=1, bitorder="little").view(np.int32).reshape(len(which), words)


def set_bits(row: npt.NDArray[np.int32], ids: I32) -> None:
    """Set the bits of ``ids`` in the packed ``row``."""
    if len(ids):
        bit = np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32))
        np.bitwise_or.at(row.view(np.uint32), ids >> 5, bit)


@dataclass(eq=False)
class MaskTable:
    """Every state's token mask, the one table of the tool automata: state ``s``'s mask is its
    base row ``blocks[block[s]][row[s]]`` (none where ``block[s] < 0``) OR'd with the tokens of
    its sparse list ``ids[ptr[s]:ptr[s + 1]]``, or ``packed[s]`` whole where that list was long.

    The blocks are shared, never copied: a vocabulary's per-class string rows and counted rows
    (:class:`~trierouter.registry.slots.masks.VocabTables`), a shared piece's wide rows (itself a
    one-block table, :func:`~trierouter.registry.slots.pieces.rows`)."""

    blocks: list[npt.NDArray[np.int32]]
    """2-D packed rows that states take as their base."""
    block: I32
    """Per state, the block of its base row, or ``-1`` (no base row)."""
    row: I32
    """Per state, its base row within that block."""
    ptr: npt.NDArray[np.int64]
    """Per state (``n + 1`` entries), the span of its list in ``ids``."""
    ids: I32
    """The states' sparse lists, concatenated."""
    packed: dict[int, npt.NDArray[np.int32]] = field(default_factory=dict)
    """States whose whole mask is one packed row (:meth:`pack_long`)."""

    @classmethod
    def one_block(
        cls, where: I32, rows: npt.NDArray[np.int32], ptr: npt.NDArray[np.int64], ids: I32
    ) -> MaskTable:
        """The table whose base rows are ``rows[where[s]]`` (none where ``where[s] < 0``)."""
        return cls([rows], np.where(where >= 0, 0, -1).astype(np.int32), where, ptr, ids)

    @property
    def nbytes(self) -> int:
        """The packed rows (the shared blocks counted in full) and the lists."""
        rows = sum(b.nbytes for b in self.blocks) + sum(r.nbytes for r in self.packed.values())
        return int(rows + self.ids.nbytes)

    def pack_long(self, limit: int, width: int) -> None:
        """Keep each state whose list holds more than ``limit`` tokens as one packed row, its
        base row included (a row is filled faster than a long list is scattered)."""
        ptr, block = self.ptr, self.block
        if ptr[-1] <= limit or not len(big := np.flatnonzero((ptr[1:] - ptr[:-1]) > limit)):
            return
        packed = pack_rows(ptr, self.ids, big, width)
        for j, s in enumerate(big.tolist()):
            if block[s] >= 0:
                packed[j] |= self.blocks[block[s]][self.row[s]]
            self.packed[s] = packed[j]

    def fill(self, state: int, out: npt.NDArray[np.int32]) -> None:
        """Overwrite ``out`` (one packed row) with the mask of ``state``."""
        packed = self.packed.get(state)
        if packed is not None:
            out[:] = packed
            return
        b = int(self.block[state])
        if b >= 0:
            out[:] = self.blocks[b][int(self.row[state])]
        else:
            out[:] = 0
        set_bits(out, self.ids[int(self.ptr[state]) : int(self.ptr[state + 1])])


def popcount(rows: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
    """Set bits per packed row."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2
        out = np.bitwise_count(rows.view(np.uint32)).sum(axis=1, dtype=np.int64)
    else:  # pragma: no cover - numpy 1.26
        out = np.unpackbits(rows.view(np.uint8), axis=1).sum(axis=1, dtype=np.int64)
    return np.asarray(out, dtype=np.int64)


def compress(
    frag: Fragment, narrow: bool = False
) -> tuple[npt.NDArray[np.signedinteger[Any]], I32]:
    """``frag``'s dense table over byte classes (bytes with the same edges everywhere share a
    column) and the class of each byte, computed by the compiled core
    (:func:`trierouter.testing.slots_reference.compress` is the numpy reference); ``narrow``:
    the table in the narrowest type its states fit, :func:`narrow_table`."""
    frag = frag.edges()
    table, byte_class = native_core().dfa_compress(
        np.ascontiguousarray(frag.src, dtype=np.int32),
        np.ascontiguousarray(frag.byte, dtype=np.int32),
        np.ascontiguousarray(frag.dst, dtype=np.int32),
        frag.n,
    )
    return (narrow_table(table) if narrow else table), byte_class


def narrow_table(table: npt.NDArray[np.int32]) -> npt.NDArray[np.signedinteger[Any]]:
    """``table`` in the narrowest signed type its states (and ``-1``, no edge) fit: an eager
    registry holds every automaton's table (10,000 real tools: 1.1M states, 212 MB as int32),
    and most automata have fewer than 128 or 32,768 states. The compiled core reads any of
    them."""
    n = len(table)
    if n <= 1 << 7:  # (np.iinfo(np.int8).max + 1, without np.iinfo's cost on every automaton)
        return table.astype(np.int8)
    if n <= 1 << 15:
        return table.astype(np.int16)
    return table
