"""Token counts of byte strings cut greedily, longest token first (the turn closer's sizes).

:class:`GreedyCounter` counts one string (``count``) or every suffix of one string
(``suffix_counts``) in Python, and every suffix of many strings at once in numpy
(``suffix_counts_many``): a trie of the vocabulary's pieces walked one depth at a time over all
positions gives each position's longest piece, then pointer doubling adds the pieces up to each
string's end. The three agree exactly (tests/test_closing.py checks it); the batched form is
what sizes a new 1,000-tool set's names inside a server's step.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from trierouter.registry.vocabulary import Vocabulary

__all__ = ["INF", "MAX_PIECE", "GreedyCounter", "counter", "flat_texts"]

INF = 1 << 40
"""The count of a string some byte of which no token spells (no completion)."""
MAX_PIECE = 32
"""The longest token (in bytes) the cut considers."""

I64 = npt.NDArray[np.int64]


def flat_texts(texts: Sequence[bytes]) -> tuple[npt.NDArray[np.uint8], I64, I64]:
    """``(data, offsets, left)``: the texts laid out one after the other with one extra slot
    after each (its end), the first slot of each text (and the total), and per slot the bytes
    from there to its text's end (0 at the end slot)."""
    sizes = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(sizes + 1, out=offsets[1:])
    data = np.frombuffer(b"".join(t + b"\0" for t in texts), dtype=np.uint8)
    owner = np.repeat(np.arange(len(texts)), sizes + 1)
    left = offsets[1:][owner] - 1 - np.arange(int(offsets[-1]), dtype=np.int64)
    return data, offsets, left


class _PieceTrie:
    """The pieces as a trie: per depth, one sorted key per edge (``parent * 256 + byte``) and
    its child, and which nodes end a piece (node 0 is the root)."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        lens = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        raw = np.frombuffer(b"".join(p.ljust(MAX_PIECE, b"\0") for p in pieces), dtype=np.uint8)
        mat = raw.reshape(len(pieces), MAX_PIECE).astype(np.int64)
        parent = np.zeros(len(pieces), dtype=np.int64)
        keys, children, ends = [], [], []
        count = 1
        for d in range(MAX_PIECE):
            rows = np.flatnonzero(lens > d)
            if not len(rows):
                break
            uniq, inv = np.unique(parent[rows] * 256 + mat[rows, d], return_inverse=True)
            keys.append(uniq)
            children.append(np.arange(count, count + len(uniq), dtype=np.int64))
            parent[rows] = count + inv.reshape(-1)
            ends.append(parent[rows[lens[rows] == d + 1]])
            count += len(uniq)
        self.keys: list[I64] = keys
        """Per depth, the sorted keys of the edges into that depth's nodes (np.unique's order)."""
        self.children: list[I64] = children
        self.end = np.zeros(count, dtype=bool)
        if ends:
            self.end[np.concatenate(ends)] = True
        self.pairs = np.full(1 << 16, -1, dtype=np.int64)
        """The node after each first two bytes (``b0 * 256 + b1``; -1: none), the two widest
        depths looked up directly."""
        if len(keys) > 1:  # a depth-1 node's key is its byte; its id is 1 + its rank there
            first = keys[0][(keys[1] >> 8) - 1]
            self.pairs[first * 256 + (keys[1] & 255)] = children[1]

    def longest(self, data: npt.NDArray[np.uint8], left: I64) -> I64:
        """Per slot, the bytes of the longest piece starting there within its text (0: none)."""
        best = np.zeros(len(data), dtype=np.int64)
        node = np.zeros(len(data), dtype=np.int64)
        live = np.flatnonzero(left > 0)
        for d, (keys, children) in enumerate(zip(self.keys, self.children, strict=True)):
            live = live[left[live] > d]
            if not len(live):
                break
            if d == 1:  # the pairs' table: no search
                nxt = self.pairs[data[live].astype(np.int64) * 256 + data[live + 1]]
            else:
                key = node[live] * 256 + data[live + d]
                j = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
                nxt = np.where(keys[j] == key, children[j], -1)
            live = live[nxt >= 0]
            node[live] = nxt[nxt >= 0]
            best[live[self.end[node[live]]]] = d + 1
        return best


class GreedyCounter:
    """Tokens of a byte string cut greedily, longest matchable token (at most 32 bytes) first."""

    def __init__(self, vocab: Vocabulary) -> None:
        matchable = vocab.matchable.tolist()
        self.pieces = {
            t for i, t in enumerate(vocab.tokens) if matchable[i] and 0 < len(t) <= MAX_PIECE
        }
        self.singles = {t[0]: i for i, t in enumerate(vocab.tokens) if len(t) == 1 and matchable[i]}
        """Each byte's one-byte token (the last such id where several spell it)."""
        self.longest: dict[bytes, int] = {}
        """The longest piece starting with each 2-byte prefix (where the cut stops looking)."""
        for t in self.pieces:
            if len(t) >= 2 and len(t) > self.longest.get(t[:2], 0):
                self.longest[t[:2]] = len(t)
        self._trie: _PieceTrie | None = None

    def prepare(self) -> _PieceTrie:
        """The pieces' trie that ``suffix_counts_many`` walks (built once, 0.2-0.5 s for a
        150,000-token vocabulary: an engine builds it with its token index, not in a step)."""
        if self._trie is None:
            self._trie = _PieceTrie(sorted(self.pieces))
        return self._trie

    def count(self, data: bytes) -> int:
        n, i = 0, 0
        while i < len(data):
            for k in range(min(MAX_PIECE, len(data) - i), 0, -1):
                if data[i : i + k] in self.pieces:
                    break
            else:
                return INF  # a byte no token spells: no completion
            i += k
            n += 1
        return n

    def suffix_counts(self, data: bytes) -> list[int]:
        """``[count(data[d:]) for d in range(len(data) + 1)]`` in one pass from the end: the
        greedy cut at a position does not depend on where the cutting started, so each suffix's
        count is one more than the count after its first piece."""
        pieces, longest, size = self.pieces, self.longest, len(data)
        out = [0] * (size + 1)
        for i in range(size - 1, -1, -1):
            for k in range(min(longest.get(data[i : i + 2], 1), size - i), 0, -1):
                if data[i : i + k] in pieces:
                    rest = out[i + k]
                    out[i] = INF if rest >= INF else rest + 1
                    break
            else:
                out[i] = INF
        return out

    def suffix_counts_many(
        self, texts: Sequence[bytes], flat: tuple[npt.NDArray[np.uint8], I64, I64] | None = None
    ) -> I64:
        """``suffix_counts`` of every text, laid out as :func:`flat_texts` lays them (given as
        ``flat`` when the caller has it): text ``t``'s counts are
        ``out[offsets[t] : offsets[t + 1]]``."""
        data, _, left = flat_texts(texts) if flat is None else flat
        step = self.prepare().longest(data, left)
        slots = np.arange(len(data), dtype=np.int64)
        nxt = slots + step
        out = np.where(step > 0, 1, INF).astype(np.int64)
        out[left == 0] = 0  # a text's end: nothing left to cut
        jumps, most = 1, int(left.max(initial=0))
        while jumps < most:  # 2**k pieces per jump, until every jump lands at an end
            out = np.minimum(out + out[nxt], INF)
            nxt = nxt[nxt]
            jumps *= 2
        return out


_COUNTERS: OrderedDict[tuple[str, int], GreedyCounter] = OrderedDict()


def counter(vocab: Vocabulary) -> GreedyCounter:
    """The vocabulary's counter (a few kept, the pieces' trie built on first batched use)."""
    key = (vocab.hash, vocab.width)
    c = _COUNTERS.get(key)
    if c is None:
        c = _COUNTERS[key] = GreedyCounter(vocab)
        while len(_COUNTERS) > 4:
            _COUNTERS.popitem(last=False)
    return c
