"""Quoted pieces: slot automata whose token masks are computed once and shared by every tool.

A *quoted piece* is a leaf fragment (a pattern, a format, an enum of strings...) in which every
edge into an accepting state reads ``"`` and no state hands over to another engine. Wired into a
tool's automaton, a copy of a non-accepting piece state keeps exactly the piece's own edges
(:class:`~trierouter.registry.slots.fragment.Builder` adds edges only at accepting states and
exits), and a token without a ``"`` byte can never reach an accepting state from there. So, for
such a state ``q`` copying piece state ``s``, exactly:

    mask(q) = standalone(piece, s)  ∪  {tokens containing ``"`` that the tool's automaton
                                         accepts from q}

(a token allowed in the standalone piece is allowed in the tool, whose edges are a superset).
The standalone masks are computed once per vocabulary and piece
(:func:`rows`), so the wide states of a
pattern like ``[a-z0-9-]{1,64}`` (18,000 allowed tokens each) cost every further tool only
the ~1% of tokens that hold a quote. Pieces are interned by content (their edges and
acceptance), so equal pieces from different schemas or registries share one entry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.registry import core as _backend
from trierouter.registry.slots.fragment import I32, Fragment
from trierouter.registry.slots.packing import MaskTable, compress

__all__ = ["piece", "rows", "shared_rows", "tag", "with_lists"]

_QUOTE = 0x22
_lock = threading.Lock()
_ids: dict[bytes, int] = {}
_pieces: list[Fragment] = []
_alphabets: list[bytes] = []  # per piece, the bytes of its edges (256 bits, little-endian)


def _key(frag: Fragment) -> bytes:
    """A digest of the piece's content: its size, edges and acceptance, in a compact encoding
    (a byte is one byte, a state two when every state fits; the sizes fix the layout) that
    SHA-256 reads in under half the time BLAKE2b took over int32 columns (uuid: 14 -> 6 us)."""
    n, e = frag.n, len(frag.src)
    state = np.int16 if n <= 1 << 15 else np.int32
    h = hashlib.sha256(np.array([n, e], dtype=np.int64).tobytes())
    h.update(frag.byte.astype(np.uint8).tobytes())
    h.update(frag.src.astype(state).tobytes())
    h.update(frag.dst.astype(state).tobytes())
    h.update(frag.accept.astype(bool).tobytes())
    return h.digest()


WIDE = 512
"""A piece state whose standalone mask holds this many tokens is served from a shared row."""
BUDGET = 256 << 20
"""Bytes of shared piece rows kept per vocabulary (least recently used dropped first; an
automaton keeps the rows it uses)."""
WIDE_BYTES = 16
"""A piece is shared only if some state has edges on at least this many bytes."""


def _maybe_wide(frag: Fragment) -> bool:
    return bool(len(frag.src)) and int(np.bincount(frag.src, minlength=frag.n).max()) >= WIDE_BYTES


def tag(frag: Fragment) -> Fragment:
    """``frag`` with every state's ``origin`` set if it is a quoted piece, else ``frag``."""
    if frag.n == 0 or frag.exits or bool(frag.accept[0]):
        return frag
    if not _maybe_wide(frag):
        return frag  # every state has few edges: its masks are small walks, nothing to share
    if (frag.klass >= 0).any():
        return frag
    into = frag.accept[frag.dst]
    if not into.any() or bool((frag.byte[into] != _QUOTE).any()):
        return frag
    key = _key(frag)
    with _lock:
        pid = _ids.get(key)
        if pid is None:
            pid = _ids[key] = len(_pieces)
            _pieces.append(dataclasses.replace(frag, origin=np.zeros(0, dtype=np.int64)))
            used = np.bincount(frag.byte, minlength=256) > 0
            _alphabets.append(np.packbits(used, bitorder="little").tobytes())
    origin = np.arange(pid << 32, (pid << 32) + frag.n, dtype=np.int64)
    return Fragment(
        frag.src, frag.byte, frag.dst, frag.n, frag.accept, frag.klass, frag.exits, origin
    )


def piece(pid: int) -> Fragment:
    """The registered piece ``pid`` (untagged)."""
    return _pieces[pid]


def shared_rows(tables: Any, pid: int) -> MaskTable | None:
    """:func:`rows` of piece ``pid``, or None when no state of the piece alone can have a
    wide mask in the vocabulary of ``tables``: fewer than :data:`WIDE` of its tokens are
    spelled with the piece's bytes alone (a uuid's: 458 of Qwen2's), and a state's standalone
    mask holds only such tokens. A narrow piece's states are walked in each automaton (short
    walks) instead of from its shared lists, which cost a second walk and their sharing on
    first use. The verdict is kept per vocabulary and piece."""
    wide: bool | None = tables._wide.get(pid)
    if wide is None:
        spelled = _backend.native_core().spelled_count(tables.trie, _alphabets[pid], WIDE)
        wide = tables._wide[pid] = spelled >= WIDE
    return rows(tables, pid) if wide else None


def rows(tables: Any, pid: int) -> MaskTable:
    """Piece ``pid`` alone against the vocabulary of ``tables`` (a
    :class:`~trierouter.registry.slots.masks.VocabTables`): each non-accepting local state's
    standalone mask, packed when it holds :data:`WIDE` tokens or more, else as a list of its
    tokens without a ``"`` (a one-block :class:`~trierouter.registry.slots.packing.MaskTable`:
    the wide rows its base rows). Native backend only; built on first use, kept per vocabulary,
    shared by every automaton embedding the piece (one walk of the token trie per state)."""
    with tables._pieces_lock:
        hit: MaskTable | None = tables._pieces.get(pid)
        if hit is not None:
            tables._pieces.move_to_end(pid)
            return hit
    frag = piece(pid)
    table, bc = compress(frag)
    states = np.flatnonzero(~frag.accept).astype(np.int64)
    core = _backend.native_core()
    ptr, ids = core.dfa_masks(table, bc, states, tables.trie)
    # in one pass: the wide lists packed, the narrow ones kept in local state order without the
    # quote tokens (walked per tool)
    hit = MaskTable.one_block(
        *core.csr_split(ptr, ids, states, frag.n, WIDE, tables.has_quote, tables.words)
    )
    with tables._pieces_lock:
        tables._pieces[pid] = hit
        tables._pieces_bytes += hit.nbytes
        while tables._pieces_bytes > BUDGET and len(tables._pieces) > 1:
            _, old = tables._pieces.popitem(last=False)
            tables._pieces_bytes -= old.nbytes
    return hit


def with_lists(
    ptr: npt.NDArray[np.int64],
    ids: I32,
    extra: list[tuple[npt.NDArray[Any], MaskTable, npt.NDArray[np.int64]]],
) -> tuple[npt.NDArray[np.int64], I32]:
    """The CSR lists ``ids[ptr[s]:ptr[s + 1]]`` with, for each ``(states, piece, local)`` of
    ``extra``, the piece's list of each ``local`` state appended to that of ``states``'s entry
    (unsorted; the two are disjoint: the quote tokens are walked, the piece lists have none)."""
    core = _backend.native_core()
    for states, hit, local in extra:
        if len(states):
            lo, hi = hit.ptr[local], hit.ptr[local + 1]
            ptr, ids = core.csr_extend(ptr, ids, states.astype(np.int64), lo, hi, hit.ids)
    return ptr, ids
