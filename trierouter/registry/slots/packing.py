"""Packed token rows and byte classes for the tool automata: XGrammar-layout bit rows from id
lists, and an automaton's byte alphabet compressed to classes (numpy, or the compiled core)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.registry import core as _backend
from trierouter.registry.slots.fragment import I32, NO_EDGE, Fragment

__all__ = ["compress", "pack_ids", "pack_rows", "popcount"]


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


def popcount(rows: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
    """Set bits per packed row."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2
        out = np.bitwise_count(rows.view(np.uint32)).sum(axis=1, dtype=np.int64)
    else:  # pragma: no cover - numpy 1.26
        out = np.unpackbits(rows.view(np.uint8), axis=1).sum(axis=1, dtype=np.int64)
    return np.asarray(out, dtype=np.int64)


_MIX = np.random.default_rng(0x5EED).integers(1, 2**62, size=1 << 16, dtype=np.int64) | 1


def compress(
    frag: Fragment, native: bool = False, narrow: bool = False
) -> tuple[npt.NDArray[np.signedinteger[Any]], I32]:
    """``frag``'s dense table over byte classes (bytes with the same edges everywhere share a
    column) and the class of each byte (``native``: computed by the compiled core; ``narrow``:
    the table in the narrowest type its states fit, :func:`narrow_table`)."""
    frag = frag.edges()
    if native:
        table, byte_class = _backend.native_core().dfa_compress(
            np.ascontiguousarray(frag.src, dtype=np.int32),
            np.ascontiguousarray(frag.byte, dtype=np.int32),
            np.ascontiguousarray(frag.dst, dtype=np.int32),
            frag.n,
        )
        return (narrow_table(table) if narrow else table), byte_class
    n = frag.n
    dense = np.full((256, n), NO_EDGE, dtype=np.int64)  # one row per byte
    dense[frag.byte, frag.src] = frag.dst
    if n <= len(_MIX):  # group bytes by a hash of their column, then check the grouping
        h = (dense + 1) @ _MIX[:n]
        _, first, byte_class = np.unique(h, return_index=True, return_inverse=True)
        exact = np.array_equal(dense, dense[first][byte_class.ravel()])
    else:
        exact = False
    if not exact:  # a hash collision (never seen) or a huge automaton: compare columns
        cols = np.ascontiguousarray(dense).view(np.dtype((np.void, 8 * n))).ravel()
        _, first, byte_class = np.unique(cols, return_index=True, return_inverse=True)
    table = np.ascontiguousarray(dense[first].T, dtype=np.int32)
    return (narrow_table(table) if narrow else table), byte_class.astype(np.int32).ravel()


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
