"""Whole-array building blocks: sorted byte strings -> a trie in preorder, slices, CSR.

These work on a concatenated ``uint8`` buffer plus start offsets and lengths, never on numpy
``bytes_`` arrays (which strip trailing NUL bytes), and never pad values to the longest one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]


def pack_strings(strings: list[bytes]) -> tuple[U8, I64, I64]:
    """Concatenate byte strings into one buffer; return ``(buffer, starts, lengths)``."""
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    starts = np.zeros(len(strings), dtype=np.int64)
    if len(strings) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    buf = np.frombuffer(b"".join(strings), dtype=np.uint8)
    return buf, starts, lengths


def ranges(starts: I64, counts: I64) -> tuple[I64, I64]:
    """For groups ``g`` with ``counts[g]`` items: ``(group of each item, starts[g] + rank)``."""
    total = int(counts.sum())
    group = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    first = np.zeros(len(counts), dtype=np.int64)
    if len(counts) > 1:
        np.cumsum(counts[:-1], out=first[1:])
    rank = np.arange(total, dtype=np.int64) - first[group]
    return group, starts[group] + rank


def common_prefix_lengths(buf: U8, starts: I64, lengths: I64) -> I64:
    """``lcp[i]`` = length of the common prefix of string ``i-1`` and ``i`` (``lcp[0] = 0``).

    The strings must be sorted. Bytes are compared eight at a time through an unaligned
    little-endian uint64 view of the buffer; work is linear in the compared bytes / 8.
    """
    n = len(starts)
    lcp = np.zeros(n, dtype=np.int64)
    if n < 2:
        return lcp
    minlen = np.minimum(lengths[:-1], lengths[1:])
    padded = np.zeros(len(buf) + 8, dtype=np.uint8)
    padded[: len(buf)] = buf
    # words[p] = the 8 bytes at offset p (little endian): a strided view, no copy
    words = np.ndarray(shape=(len(buf) + 1,), dtype="<u8", buffer=padded, strides=(1,))
    nwords = (minlen + 7) >> 3
    group, pos_prev = ranges(starts[:-1], nwords)
    chunk = pos_prev - starts[:-1][group]  # word index within the pair
    pos_prev = starts[:-1][group] + (chunk << 3)
    pos_cur = starts[1:][group] + (chunk << 3)
    x = words[pos_prev] ^ words[pos_cur]
    diff = np.flatnonzero(x)
    lcp[1:] = minlen
    if len(diff):
        g = group[diff]
        first = np.ones(len(g), dtype=bool)
        first[1:] = g[1:] != g[:-1]
        d = diff[first]
        xd = x[d]
        low = xd & (~xd + np.uint64(1))  # lowest set bit: the first differing byte
        byte = np.log2(low.astype(np.float64)).astype(np.int64) >> 3
        at = (chunk[d] << 3) + byte
        gg = g[first]
        lcp[1:][gg] = np.minimum(at, minlen[gg])
    return lcp


@dataclass(frozen=True, slots=True)
class TriePairs:
    """Every distinct (node, token) pair of a trie: ``token[i]`` at ``node[i]`` -> ``child[i]``."""

    node: I64
    token: I64
    child: I64


@dataclass(frozen=True, slots=True)
class Trie:
    """A byte trie in preorder: node 0 is the root, children follow their parent."""

    parent: I32
    """Parent of each node (root: -1)."""
    byte: U8
    """Byte on the edge into each node (root: 0)."""
    depth: I64
    """Depth of each node (root: 0)."""
    ends: I64
    """Node where each input string ends (strings in input order)."""

    @property
    def size(self) -> int:
        return len(self.parent)


def build_trie(buf: U8, starts: I64, lengths: I64) -> Trie:
    """Trie of strings that are sorted and distinct, node ids in preorder."""
    k = len(starts)
    lcp = common_prefix_lengths(buf, starts, lengths)
    new = lengths - lcp  # nodes each string adds (0 only for the empty string)
    first_id = np.ones(k, dtype=np.int64)
    if k > 1:
        np.cumsum(new[:-1], out=first_id[1:])
        first_id[1:] += 1
    owner, node = ranges(first_id, new)
    total = 1 + len(node)
    rank = node - first_id[owner]
    depth = np.zeros(total, dtype=np.int64)
    depth[1:] = lcp[owner] + 1 + rank
    byte = np.zeros(total, dtype=np.uint8)
    byte[1:] = buf[starts[owner] + lcp[owner] + rank]
    parent = np.empty(total, dtype=np.int32)
    parent[0] = -1
    parent[1:] = (node - 1).astype(np.int32)
    # The first node a string adds hangs below the node at depth lcp on its path: in preorder,
    # the ancestor of x at depth d is the last node before x whose depth is d.
    heads = np.flatnonzero((new > 0) & (lcp > 0))
    if len(heads):
        dtype = np.uint16 if int(depth.max()) < 65536 else np.int64
        by_depth = np.argsort(depth.astype(dtype), kind="stable")
        keys = depth[by_depth] * total + by_depth
        query = lcp[heads] * total + first_id[heads]
        parent[first_id[heads]] = by_depth[np.searchsorted(keys, query) - 1]
    roots = np.flatnonzero((new > 0) & (lcp == 0))
    parent[first_id[roots]] = 0
    ends = np.where(new > 0, first_id + new - 1, 0)
    # a string that is a prefix of the next one still ends at its own last node: covered above
    return Trie(parent=parent, byte=byte, depth=depth, ends=ends)
