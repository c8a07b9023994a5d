"""The numpy reference backend: whole-array operations, the tests' oracle for the C++ core.

Compile: the values sorted into a trie in preorder, every (node, token) pair found by the
backward walk over the tokenizer's reversed-token tables
(:meth:`~trierouter.registry.index.TokenIndex.trie_pairs`), one stable sort of packed keys
into CSR rows. Serving: memoryview reads for a step, searchsorted over packed keys for a batch,
per-state packed words for bitmasks. It serves the full layout only.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import EmptySetError
from trierouter.registry.arrays import TriePairs, build_trie, pack_strings, ranges
from trierouter.registry.backends.interface import Arrays, BackendName, TokenForms
from trierouter.registry.choice_arrays import FAR, TO_END
from trierouter.registry.choice_inputs import check_terminator, encode_values, unreachable_error

__all__ = ["NumpyReference", "NumpyServing"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


class NumpyReference:
    """The numpy reference: compiles the same arrays as the core, bit for bit."""

    name: BackendName = "numpy"
    layouts: tuple[str, ...] = ("full",)
    index_on_disk: bool = True  # the reversed-token tables, read back from the cache folder

    def core(self) -> ModuleType | None:
        return None

    def warm_index(self, index: TokenForms) -> None:
        index.reverse_tables()

    def compile(
        self,
        values: Iterable[str],
        index: TokenForms,
        *,
        terminator: str | None,
        allow_end: bool,
        compact: bool,
        threads: int | None,
    ) -> Arrays:
        """Whole-array operations over the reversed-token index (one thread; ``compact`` is
        refused before: :func:`~trierouter.registry.compact.check_layout`)."""
        vocab = index.vocabulary
        encoded = encode_values(values)
        if not encoded:
            raise EmptySetError("values: the set is empty; a choice needs at least one value")
        check_terminator(terminator)
        term = terminator.encode("utf-8") if terminator else b""
        uniq = sorted(set(encoded))
        strings = [u + term for u in uniq] if term else uniq
        if term:  # value + terminator may sort differently from the values
            order = sorted(range(len(strings)), key=strings.__getitem__)
            strings = [strings[i] for i in order]
            uniq = [uniq[i] for i in order]
        buf, starts, lengths = pack_strings(strings)
        trie = build_trie(buf, starts, lengths)
        n = trie.size
        if n + 2 > np.iinfo(np.int32).max:  # node ids are stored as int32
            raise OverflowError(
                f"{n:,} trie nodes: node ids would overflow int32; split the set into smaller ones"
            )
        ends = trie.ends
        end_state, dead_state = n, n + 1
        # end ids: at every complete value, and in the END / DEAD states (which only allow them)
        eos = np.asarray(vocab.end_ids, dtype=np.int64)
        complete = np.unique(ends) if allow_end else np.zeros(0, dtype=np.int64)
        src = np.concatenate([complete, [end_state, dead_state]])
        grp, pos = ranges(np.zeros(len(src), dtype=np.int64), np.full(len(src), len(eos)))
        eos_pairs = TriePairs(src[grp], eos[pos], np.full(len(grp), end_state, dtype=np.int64))
        used = np.bincount(buf, minlength=256) > 0
        if not np.any(used & ~index.can_spell_bytes()):
            pairs = index.trie_pairs(trie, extra=eos_pairs)
        else:
            pairs = index.trie_pairs(trie)
            reach, live = _spellable(pairs, n, ends)
            bad = np.flatnonzero(~reach[ends])
            if len(bad):
                raise unreachable_error(uniq, term, bad.tolist(), index, vocab)
            keep = live[pairs.child] & reach[pairs.node]
            pairs = TriePairs(
                np.concatenate([pairs.node[keep], eos_pairs.node]),
                np.concatenate([pairs.token[keep], eos_pairs.token]),
                np.concatenate([pairs.child[keep], eos_pairs.child]),
            )
        row_ptr, tokens, children, far_pos, far_child = _csr(pairs, n + 2, vocab.width, end_state)
        vbuf, vstarts, vlengths = pack_strings(uniq) if term else (buf, starts, lengths)
        voff = np.append(vstarts, vstarts[-1] + vlengths[-1]).astype(np.int64)
        return {
            "row_ptr": row_ptr,
            "tokens": tokens,
            "children": children,
            "far_pos": far_pos,
            "far_child": far_child,
            "ends": ends.astype(np.int32),
            "value_bytes": vbuf.copy(),
            "value_offsets": voff,
        }

    def serve(
        self, arrays: Arrays, *, width: int, n_nodes: int, compact: tuple[Any, ...] | None
    ) -> NumpyServing:
        return NumpyServing(arrays, width, n_nodes)


def _csr(
    pairs: TriePairs, n_states: int, width: int, end_state: int
) -> tuple[I32, I32, npt.NDArray[np.uint16], I32, I32]:
    """Sort pairs by (node, token) into CSR rows; one packed-key sort when it fits 63 bits.

    Returns ``row_ptr, tokens, children, far_pos, far_child``: ``children`` are uint16 offsets
    from the row's node, ``TO_END`` for the end state, ``FAR`` where the target sits in
    ``far_child`` at the pair position listed in ``far_pos``.
    """
    node, token, child = pairs.node, pairs.token, pairs.child
    # the child as its uint16 code: offset from the node, or one of the two escape codes
    code = child - node
    far = (code < 0) | (code >= FAR)
    code[far] = FAR
    code[child == end_state] = TO_END
    far &= child != end_state
    token_bits = max(1, int(width - 1).bit_length())
    node_bits = max(1, int(n_states).bit_length())
    if node_bits + token_bits + 16 <= 63:
        keys = (((node << token_bits) | token) << 16) | code
        keys.sort(kind="stable")  # timsort: the walk emits long sorted runs
        children = keys.astype(np.uint16)
        keys >>= 16
        token_s = (keys & ((1 << token_bits) - 1)).astype(np.int32)
        keys >>= token_bits
        node_s = keys
    else:  # huge sets: the packed key would overflow
        order = np.lexsort((token, node))
        node_s, token_s, children = node[order], token[order].astype(np.int32), code[order]
        children = children.astype(np.uint16)
    counts = np.bincount(node_s, minlength=n_states)
    row_ptr = np.zeros(n_states + 1, dtype=np.int64)
    np.cumsum(counts, out=row_ptr[1:])
    if row_ptr[-1] >= 2**31:
        raise OverflowError("more than 2**31 (state, token) pairs: split the set")
    # far targets, in the order their pairs have in the rows (each (node, token) is unique)
    far_idx = np.flatnonzero(far)
    far_order = np.lexsort((token[far_idx], node[far_idx]))
    far_child = child[far_idx][far_order].astype(np.int32)
    far_pos = np.flatnonzero(children == FAR).astype(np.int32)
    return row_ptr.astype(np.int32), token_s, children, far_pos, far_child


def _spellable(
    pairs: TriePairs, n_nodes: int, targets: I64
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Forward reachability from the root and backward reachability to ``targets``."""
    reach = np.zeros(n_nodes, dtype=bool)
    reach[0] = True
    while True:
        new = reach.copy()
        new[pairs.child[reach[pairs.node]]] = True
        if np.array_equal(new, reach):
            break
        reach = new
    live = np.zeros(n_nodes, dtype=bool)
    live[targets] = True
    while True:
        new = live.copy()
        new[pairs.node[live[pairs.child]]] = True
        if np.array_equal(new, live):
            break
        live = new
    return reach, live


class NumpyServing:
    """A full-layout set served from its arrays with numpy (and memoryviews for one step)."""

    core = None

    def __init__(self, arrays: Arrays, width: int, n_nodes: int) -> None:
        self.row_ptr: I32 = arrays["row_ptr"]
        self.tokens: I32 = arrays["tokens"]
        self.children: npt.NDArray[np.uint16] = arrays["children"]
        self.far_pos: I32 = arrays["far_pos"]
        self.far_child: I32 = arrays["far_child"]
        self.ends: I32 = arrays["ends"]
        self.width = width
        self.n_nodes = n_nodes
        self.END, self.DEAD = n_nodes, n_nodes + 1
        self.advance, self.mask = self._step_functions()

    def _step_functions(self) -> tuple[Callable[[int, int], int], Callable[[int], I32]]:
        """The single-step hot path as closures over memoryviews.

        Memoryview item reads are the fastest way to reach array items from Python (also over a
        memmap), and closure variables the fastest names: this keeps a step near 0.3 µs.
        """
        ptr = self.row_ptr.data
        tok = self.tokens.data
        child = self.children.data
        far_pos = self.far_pos.data
        far_child = self.far_child
        tokens = self.tokens
        end, dead = self.END, self.DEAD
        n_states = len(ptr) - 1

        def advance(state: int, token: int) -> int:
            if not 0 <= state < n_states:
                return dead
            hi = ptr[state + 1]
            i = bisect_left(tok, token, ptr[state], hi)
            if i < hi and tok[i] == token:
                d: int = child[i]
                if d < FAR:
                    return state + d
                if d == TO_END:
                    return end
                return int(far_child[bisect_left(far_pos, i)])
            return dead

        def mask(state: int) -> I32:
            if not 0 <= state < n_states:
                raise ValueError(f"state={state}: not a state of this set (0..{n_states - 1})")
            return tokens[ptr[state] : ptr[state + 1]]

        return advance, mask

    def is_terminal(self, state: int) -> bool:
        if state == self.END:
            return True
        if not 0 <= state < self.n_nodes:
            return False
        i = int(np.searchsorted(self.ends, state))
        return i < len(self.ends) and int(self.ends[i]) == state

    @cached_property
    def batch_keys(self) -> I64:
        """``state * width + token`` for every stored pair, sorted: the batch lookup table."""
        nodes = np.repeat(np.arange(len(self.row_ptr) - 1, dtype=np.int64), np.diff(self.row_ptr))
        return nodes * self.width + self.tokens

    @cached_property
    def words(self) -> tuple[I32, npt.NDArray[np.intp], npt.NDArray[np.int32]]:
        """Per state, the non-zero 32-bit words of its packed mask: (word_ptr, word_idx, bits)."""
        tok = self.tokens
        n_states = len(self.row_ptr) - 1
        word = tok >> 5
        bits = np.left_shift(np.uint32(1), (tok & 31).astype(np.uint32))
        # a word group starts where the word index changes, and at every row start
        start = np.ones(len(tok), dtype=bool)
        np.not_equal(word[1:], word[:-1], out=start[1:])
        start[self.row_ptr[:-1][np.diff(self.row_ptr) > 0]] = True
        heads = np.flatnonzero(start)
        wbits = np.bitwise_or.reduceat(bits, heads) if len(heads) else bits[:0]
        lengths = np.diff(self.row_ptr)
        head_rows = np.repeat(np.arange(n_states, dtype=np.int32), lengths)[heads]
        counts = np.bincount(head_rows, minlength=n_states)
        wptr = np.zeros(len(self.row_ptr), dtype=np.int64)
        np.cumsum(counts, out=wptr[1:])
        return wptr.astype(np.int32), word[heads].astype(np.intp), wbits.view(np.int32)

    @cached_property
    def _wptr_view(self) -> memoryview:
        return self.words[0].data

    def prepare(self) -> None:
        """Build the packed-mask words and the batch lookup keys now."""
        _ = self.words, self.batch_keys

    def fill(self, state: int, bitmask: Any, index: int = 0) -> None:
        _, widx, wbits = self.words
        ptr = self._wptr_view
        if not 0 <= state < len(ptr) - 1:
            state = self.DEAD
        lo, hi = ptr[state], ptr[state + 1]
        row = bitmask[index]
        row.fill(0)
        row[widx[lo:hi]] = wbits[lo:hi]

    def advance_batch(self, states: npt.ArrayLike, tokens: npt.ArrayLike) -> I64:
        st = np.asarray(states, dtype=np.int64)
        tk = np.asarray(tokens, dtype=np.int64)
        keys = self.batch_keys
        if not len(keys):  # no pairs at all (a vocabulary without end ids, the empty value)
            return np.full(np.broadcast(st, tk).shape, self.DEAD, dtype=np.int64)
        st, tk = np.broadcast_arrays(st, tk)
        shape = st.shape
        st, tk = st.reshape(-1), tk.reshape(-1)  # flat: the indexing below is 1-D
        q = st * self.width + tk
        bad = ((st | tk) < 0) | (tk >= self.width) | (st > self.DEAD)
        if bad.any():
            q[bad] = -1
        pos = keys.searchsorted(q)
        hit = keys.take(pos, mode="clip") == q
        d = self.children.take(pos, mode="clip")
        nxt = st + d
        special = np.flatnonzero(d >= FAR)
        if len(special):  # the end state, or a target stored out of line
            code = d[special]
            nxt[special[code == TO_END]] = self.END
            far = special[code == FAR]
            nxt[far] = self.far_child[self.far_pos.searchsorted(pos[far])]
        nxt[~hit] = self.DEAD
        return nxt.reshape(shape)

    def fill_batch(self, states: I64, bitmask: Any, rows: I64 | None) -> None:
        st = states
        rw = np.arange(len(st), dtype=np.int64) if rows is None else rows
        wptr, widx, wbits = self.words
        lo = wptr[st].astype(np.int64)
        cnt = wptr[st + 1].astype(np.int64) - lo
        grp, pos = ranges(lo, cnt)
        nwords = bitmask.shape[-1]
        if rows is None and len(st) == bitmask.shape[0]:
            bitmask.fill(0)
        else:
            bitmask[rw] = 0
        if bitmask.flags.c_contiguous:
            bitmask.reshape(-1)[rw[grp] * nwords + widx[pos]] = wbits[pos]
        else:  # rows with a stride (a view): reshape would copy, and the bits would be lost
            bitmask[rw[grp], widx[pos]] = wbits[pos]

    def apply_sparse(
        self, states: I64, view: npt.NDArray[Any], rows: I64 | None, bits: int, size: int
    ) -> None:
        targets = np.arange(len(states)) if rows is None else rows
        for r, ids in self._rows_ids(states, targets, view.shape[1]):
            kept = view[r, ids].copy()
            view[r] = bits
            view[r, ids] = kept

    def copy_sparse(
        self,
        states: I64,
        src: npt.NDArray[Any] | None,
        dst: npt.NDArray[Any],
        rows: I64 | None,
        bits: int,
        size: int,
    ) -> None:
        targets = np.arange(len(states)) if rows is None else rows
        if len(targets) and (targets.min() < 0 or targets.max() >= len(dst)):
            raise IndexError(f"rows out of range for {len(dst)} dst rows")
        for r, ids in self._rows_ids(states, targets, dst.shape[1]):
            dst[r, ids] = bits if src is None else src[r, ids]

    def _rows_ids(
        self, states: I64, rows: npt.NDArray[np.int64], width: int
    ) -> Iterator[tuple[int, I32]]:
        """Per ``(states[i], rows[i])`` the row and the ids allowed at the state below
        ``width`` (a state out of range: ``DEAD``'s)."""
        for s, r in zip(states.tolist(), rows.tolist(), strict=True):
            ok = s if 0 <= s < len(self.row_ptr) - 1 else self.DEAD
            ids = self.tokens[self.row_ptr[ok] : self.row_ptr[ok + 1]]
            yield r, ids[ids < width]
