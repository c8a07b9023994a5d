"""A static int64 -> int32 hash map with open addressing, built and probed with whole arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

_MULT = np.uint64(0x9E3779B97F4A7C15)
EMPTY = np.int64(-1)


def _home(keys: npt.NDArray[np.int64], shift: np.uint64) -> npt.NDArray[np.int64]:
    with np.errstate(over="ignore"):
        return ((keys.astype(np.uint64) * _MULT) >> shift).astype(np.int64)


@dataclass(frozen=True, slots=True)
class HashMap:
    """Linear probing, load factor <= 1/2, keys >= 0."""

    keys: npt.NDArray[np.int64]
    values: npt.NDArray[np.int32]

    @property
    def bits(self) -> int:
        return len(self.keys).bit_length() - 1

    @classmethod
    def build(cls, keys: npt.NDArray[np.int64], values: npt.NDArray[np.int32]) -> HashMap:
        bits = max(4, int(2 * max(len(keys), 1) - 1).bit_length())
        size = 1 << bits
        mask = size - 1
        tkeys = np.full(size, EMPTY, dtype=np.int64)
        tvals = np.full(size, -1, dtype=np.int32)
        slot = _home(keys, np.uint64(64 - bits))
        pending = np.arange(len(keys))
        while len(pending):
            s = slot[pending]
            free = tkeys[s] == EMPTY
            cand = pending[free]
            # one winner per free slot
            _, first = np.unique(slot[cand], return_index=True)
            win = cand[first]
            tkeys[slot[win]] = keys[win]
            tvals[slot[win]] = values[win]
            placed = np.zeros(len(keys), dtype=bool)
            placed[win] = True
            pending = pending[~placed[pending]]
            moved = pending[tkeys[slot[pending]] != EMPTY]
            slot[moved] = (slot[moved] + 1) & mask
        return cls(tkeys, tvals)

    def get(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
        """Values for ``keys``; -1 where a key is absent."""
        bits = self.bits
        mask = (1 << bits) - 1
        slot = _home(keys, np.uint64(64 - bits))
        tk = self.keys[slot]
        hit = tk == keys
        out = np.where(hit, self.values[slot], np.int32(-1)).astype(np.int32, copy=False)
        pending = np.flatnonzero(~hit & (tk != EMPTY))
        while len(pending):
            slot[pending] = (slot[pending] + 1) & mask
            tk = self.keys[slot[pending]]
            hit = tk == keys[pending]
            out[pending[hit]] = self.values[slot[pending[hit]]]
            pending = pending[~hit & (tk != EMPTY)]
        return out
