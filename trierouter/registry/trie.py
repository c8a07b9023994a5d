"""ChoiceSet: a finite set of strings compiled into a byte trie with per-node allowed tokens.

The minimal DFA of a finite set is its trie, so the token masks of every node can be computed
once: node ``n`` allows token ``t`` iff ``path(n) + bytes(t)`` is a prefix of some value (of some
``value + terminator`` when a terminator is given), and at a node where a value is complete the
end ids as well. A request's state is one integer (a node id); a decoding step is a lookup.

Node ids: ``0 .. n_nodes-1`` are trie nodes in preorder (0 is the root), ``END = n_nodes`` is
the state after an end id, ``DEAD = n_nodes + 1`` the state after a token the set does not allow
(both allow only the end ids, so a stray request is steered to stop rather than left with an
all-masked row).

Two backends (:mod:`trierouter.registry.core`) compile and serve with identical results: the C++
core (default) and the numpy reference (``backend="numpy"`` or ``TRIEROUTER_BACKEND=numpy``).
Both build the same arrays, bit for bit, so a saved set serves under either.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import (
    CorruptFileError,
    EmptySetError,
    InvalidValueError,
    UnreachableValueError,
    VocabularyMismatchError,
)
from trierouter.registry import core as _backend
from trierouter.registry.arrays import build_trie, pack_strings, ranges
from trierouter.registry.compact import (
    COMPACT_ARRAYS,
    COMPACT_KEYS,
    LAYOUTS,
    check_layout,
    compact_arrays,
    compact_spec,
    stored_states,
)
from trierouter.registry.index import TokenIndex, TriePairs
from trierouter.registry.store import load_arrays, save_arrays
from trierouter.registry.validate import Checker
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["ChoiceSet", "compile_choices"]

_KIND = "trierouter.ChoiceSet"
_FORMAT = 3  # 3: bound to the vocabulary's content (any width); 2: to its content and width
# children are stored as uint16 offsets from their node; two codes stand for far targets
_TO_END = 0xFFFF
_FAR = 0xFFFE
_VALUE_ARRAYS = {"value_bytes", "value_offsets"}

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


def _encode_values(values: Iterable[str]) -> list[bytes]:
    if isinstance(values, (str, bytes)):
        raise InvalidValueError(
            f"values must be an iterable of strings, got a single {type(values).__name__}: "
            f"{values!r:.60}; wrap it in a list"
        )
    items = values if isinstance(values, (list, tuple)) else list(values)
    try:
        return [v.encode("utf-8") for v in items]
    except (AttributeError, UnicodeEncodeError):
        pass
    for i, v in enumerate(items):
        if not isinstance(v, str):
            raise InvalidValueError(f"values[{i}] = {v!r:.80} is {type(v).__name__}, expected str")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidValueError(
                f"values[{i}] = {v!r:.80} is not encodable as UTF-8 ({exc.reason}); "
                "lone surrogates cannot be produced by a tokenizer"
            ) from exc
    raise AssertionError("unreachable")  # pragma: no cover


class ChoiceSet:
    """A compiled finite set: trie nodes, allowed tokens per node (CSR) and transitions.

    Build one with :func:`compile_choices` (or :meth:`ChoiceSet.compile`); persist it with
    :meth:`save` / :meth:`load`. ``advance`` and ``mask`` are the stateless serving API.
    """

    def __init__(
        self,
        *,
        vocabulary_hash: str,
        width: int,
        end_ids: tuple[int, ...],
        terminator: str | None,
        arrays: dict[str, npt.NDArray[Any]],
        backend: str | None = None,
        index: TokenIndex | None = None,
        checked: bool = False,
    ) -> None:
        self.backend = _backend.resolve_backend(backend)
        self.layout = "compact" if "compact_info" in arrays else "full"
        """``"full"`` (every row stored) or ``"compact"`` (rows walked on demand where at most
        :data:`~trierouter.registry.compact.COMPACT_KEYS` values lie below a node)."""
        check_layout(self.layout, self.backend)
        if self.layout == "compact" and index is None:
            raise ValueError("a compact set serves over its tokenizer's index: pass index=")
        self.vocabulary_hash = vocabulary_hash
        """:attr:`Vocabulary.content_hash` of the tokenizer the set was compiled for."""
        self.vocabulary_name = ""
        self.width = width
        self.end_ids = end_ids
        self.terminator = terminator
        self._arrays = arrays
        self.row_ptr: I32 = arrays["row_ptr"]
        self.tokens: I32 = arrays["tokens"]
        self.children: npt.NDArray[np.uint16] = arrays["children"]
        self._far_pos: I32 = arrays["far_pos"]
        self._far_child: I32 = arrays["far_child"]
        self.ends: I32 = arrays["ends"]
        compact = self.layout == "compact"
        self.n_nodes = int(arrays["compact_info"][0]) if compact else len(self.row_ptr) - 3
        self.END = self.n_nodes
        self.DEAD = self.n_nodes + 1
        self.compile_seconds = 0.0
        self._core: Any = None
        self._advance: Callable[[int, int], int]
        self._mask: Callable[[int], I32]
        if self.backend == "native":
            core = _backend.native_core().Core(
                self.row_ptr,
                self.tokens,
                self.children,
                self._far_pos,
                self._far_child,
                self.ends,
                self.width,
                compact_spec(arrays, index, terminator, end_ids, not checked)
                if index and compact
                else None,
            )
            self._core = core
            self._advance, self._mask = core.advance, core.mask
            # the hot calls go straight to C++ (no Python frame in between)
            self.advance = core.advance  # type: ignore[method-assign]
            self.mask = core.mask  # type: ignore[method-assign]
            self.fill_next_token_bitmask = core.fill  # type: ignore[method-assign]
        else:
            self._advance, self._mask = _serving_functions(self)

    # -- building ----------------------------------------------------------------------------------
    @classmethod
    def compile(
        cls,
        values: Iterable[str],
        index: TokenIndex | Vocabulary,
        *,
        terminator: str | None = None,
        allow_end: bool = True,
        backend: str | None = None,
        layout: str = "full",
        threads: int | None = None,
    ) -> ChoiceSet:
        """Same as :func:`compile_choices`."""
        return compile_choices(
            values,
            index,
            terminator=terminator,
            allow_end=allow_end,
            backend=backend,
            layout=layout,
            threads=threads,
        )

    # -- serving -----------------------------------------------------------------------------------
    @property
    def root(self) -> int:
        """The start state."""
        return 0

    def advance(self, state: int, token: int) -> int:
        """Next state after ``token`` (``DEAD`` if the token is not allowed); never raises."""
        return self._advance(state, token)

    def mask(self, state: int) -> I32:
        """Allowed token ids at ``state``, sorted (a view; no copy)."""
        return self._mask(state)

    def is_terminal(self, state: int) -> bool:
        """A value is complete at ``state`` (end ids allowed) or the state is ``END``."""
        if self._core is not None:
            return bool(self._core.is_terminal(state))
        if state == self.END:
            return True
        if not 0 <= state < self.n_nodes:
            return False
        i = int(np.searchsorted(self.ends, state))
        return i < len(self.ends) and int(self.ends[i]) == state

    def value_at(self, state: int) -> str | None:
        """The value completed at ``state``, if any (``END`` has no node: track it yourself)."""
        if not 0 <= state < self.n_nodes:
            return None
        i = int(np.searchsorted(self.ends, state))
        if i < len(self.ends) and int(self.ends[i]) == state:
            return self.values[i]
        return None

    @cached_property
    def values(self) -> list[str]:
        """The distinct values, in byte order (without terminator)."""
        buf = self._arrays["value_bytes"].tobytes()
        off = self._arrays["value_offsets"].tolist()
        return [buf[off[i] : off[i + 1]].decode("utf-8") for i in range(len(off) - 1)]

    def __len__(self) -> int:
        return len(self.ends)

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and value in self._value_set

    @cached_property
    def _value_set(self) -> frozenset[str]:
        return frozenset(self.values)

    @property
    def n_pairs(self) -> int:
        """Number of (state, allowed token) pairs stored (the compact layout: in the rows it
        keeps)."""
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        """Bytes of the compiled arrays (what :meth:`save` writes, minus the header)."""
        return int(sum(a.nbytes for a in self._arrays.values()))

    @cached_property
    def batch_keys(self) -> I64:
        """``state * width + token`` for every stored pair, sorted: the batch lookup table."""
        nodes = np.repeat(np.arange(len(self.row_ptr) - 1, dtype=np.int64), np.diff(self.row_ptr))
        return nodes * self.width + self.tokens

    @cached_property
    def _words(self) -> tuple[I32, npt.NDArray[np.intp], npt.NDArray[np.int32]]:
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

    def prepare(self) -> ChoiceSet:
        """Build the serving tables now instead of on the first bitmask fill or batch step
        (numpy backend: packed-mask words, batch lookup keys; the native backend has none to
        build); engines call this when they load a set."""
        if self._core is None:
            _ = self._words, self.batch_keys
        return self

    @property
    def bitmask_words(self) -> int:
        """Int32 words per packed mask row: ``ceil(width / 32)``."""
        return (self.width + 31) // 32

    def fill_next_token_bitmask(
        self, state: int, bitmask: npt.NDArray[np.int32], index: int = 0
    ) -> None:
        """Write the packed mask of ``state`` into ``bitmask[index]`` (XGrammar layout).

        ``bitmask``: int32 rows of at least :attr:`bitmask_words` words (numpy, or a torch CPU
        tensor on the native backend), written in place; states out of range get ``DEAD``'s row.
        """
        if self._core is not None:
            self._core.fill(state, bitmask, index)
            return
        _, widx, wbits = self._words
        ptr = self._wptr_view
        if not 0 <= state < len(ptr) - 1:
            state = self.DEAD
        lo, hi = ptr[state], ptr[state + 1]
        row = bitmask[index]
        row.fill(0)
        row[widx[lo:hi]] = wbits[lo:hi]

    @cached_property
    def _wptr_view(self) -> memoryview:
        return self._words[0].data

    def advance_batch(self, states: npt.ArrayLike, tokens: npt.ArrayLike) -> I64:
        """Vectorized :meth:`advance`: next state for every (state, token); ``DEAD`` if refused."""
        if self._core is not None:
            try:  # int64 1-D arrays of one length: one call (a server's every step)
                nxt: I64 = self._core.advance_batch(states, tokens)
                return nxt
            except (TypeError, ValueError, BufferError):
                pass  # other shapes, types or sequences: converted below (or their error raised)
        st = np.asarray(states, dtype=np.int64)
        tk = np.asarray(tokens, dtype=np.int64)
        if self._core is not None:
            if st.ndim == 1 and st.shape == tk.shape and st.flags.c_contiguous:
                out = np.empty(len(st), dtype=np.int64)
                self._core.advance_batch(st, np.ascontiguousarray(tk), out)
                return out
            st, tk = np.broadcast_arrays(st, tk)
            shape = st.shape
            st1 = np.ascontiguousarray(st).reshape(-1)
            tk1 = np.ascontiguousarray(tk).reshape(-1)
            out = np.empty(len(st1), dtype=np.int64)
            self._core.advance_batch(st1, tk1, out)
            return out.reshape(shape)
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
        special = np.flatnonzero(d >= _FAR)
        if len(special):  # the end state, or a target stored out of line
            code = d[special]
            nxt[special[code == _TO_END]] = self.END
            far = special[code == _FAR]
            nxt[far] = self._far_child[self._far_pos.searchsorted(pos[far])]
        nxt[~hit] = self.DEAD
        return nxt.reshape(shape)

    def fill_bitmask_batch(
        self,
        states: npt.ArrayLike,
        bitmask: npt.NDArray[np.int32],
        rows: npt.ArrayLike | None = None,
    ) -> None:
        """Fill ``bitmask[rows[i]]`` (default: row ``i``) with the packed mask of ``states[i]``.

        One call for the batch on the native backend, written straight into ``bitmask`` (numpy,
        or a torch CPU tensor); only the rows named are touched.
        """
        st = np.asarray(states, dtype=np.int64)
        if self._core is not None:
            rw = None if rows is None else np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
            self._core.fill_batch(np.ascontiguousarray(st).reshape(-1), bitmask, rw)
            return
        rw = np.arange(len(st), dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
        wptr, widx, wbits = self._words
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

    def apply_mask_inplace(
        self, states: npt.ArrayLike, logits: Any, rows: npt.ArrayLike | None = None
    ) -> None:
        """Mask ``logits[rows[i]]`` (default: row ``i``) to the tokens allowed at ``states[i]``.

        The sparse path: each row keeps the values of its allowed ids and every other entry
        becomes ``-inf``; no bitmask is built or read, so a row costs one fill plus its few
        allowed ids. ``logits``: a 2-D float32/float16/bfloat16 CPU array (numpy or torch),
        changed in place; columns past the row's width are masked too.
        """
        st = np.ascontiguousarray(states, dtype=np.int64).reshape(-1)
        rw = None if rows is None else np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
        view, bits, size = _raw_logits(logits)
        if self._core is not None:
            self._core.apply_sparse(st, view, rw, bits, size)
            return
        targets = np.arange(len(st)) if rw is None else rw
        for r, ids in self._rows_ids(st, targets, view.shape[1]):
            kept = view[r, ids].copy()
            view[r] = bits
            view[r, ids] = kept

    def copy_allowed(
        self,
        states: npt.ArrayLike,
        src: Any | None,
        dst: Any,
        rows: npt.ArrayLike | None = None,
    ) -> None:
        """Write only the allowed tokens of ``states[i]`` in row ``rows[i]`` (default ``i``) of
        ``dst``: copied from the same row of ``src``, or set to ``-inf`` when ``src`` is None.

        Every other entry of ``dst`` is left as it is, so a ``dst`` kept at ``-inf`` becomes the
        masked logits at the cost of the allowed ids alone; calling it again with the same
        states and ``src=None`` restores the ``-inf``. ``src`` and ``dst``: 2-D CPU arrays of one
        shape and float dtype (numpy or torch).
        """
        st = np.ascontiguousarray(states, dtype=np.int64).reshape(-1)
        rw = None if rows is None else np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
        out, bits, size = _raw_logits(dst)
        view = None
        if src is not None:
            view, _, src_size = _raw_logits(src)
            if src_size != size or view.shape != out.shape:
                raise ValueError(f"src {view.shape} and dst {out.shape} differ in shape or dtype")
        if self._core is not None:
            self._core.copy_sparse(st, view, out, rw, bits, size)
            return
        targets = np.arange(len(st)) if rw is None else rw
        if len(targets) and (targets.min() < 0 or targets.max() >= len(out)):
            raise IndexError(f"rows out of range for {len(out)} dst rows")
        for r, ids in self._rows_ids(st, targets, out.shape[1]):
            out[r, ids] = bits if view is None else view[r, ids]

    def _rows_ids(
        self, states: npt.NDArray[np.int64], rows: npt.NDArray[np.int64], width: int
    ) -> Iterator[tuple[int, I32]]:
        """The numpy paths of the sparse logits writers: per ``(states[i], rows[i])`` the row
        and the ids allowed at the state below ``width`` (a state out of range: ``DEAD``'s)."""
        for s, r in zip(states.tolist(), rows.tolist(), strict=True):
            ok = s if 0 <= s < len(self.row_ptr) - 1 else self.DEAD
            ids = self.tokens[self.row_ptr[ok] : self.row_ptr[ok + 1]]
            yield r, ids[ids < width]

    def __repr__(self) -> str:
        term = f", terminator={self.terminator!r}" if self.terminator is not None else ""
        layout = ", compact" if self.layout == "compact" else ""
        return (
            f"ChoiceSet({len(self)} values, {self.n_nodes} nodes, {self.n_pairs} pairs, "
            f"{self.nbytes / 1e6:.2f} MB{term}{layout})"
        )

    # -- persistence -------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the set (atomically) to one memory-mappable file."""
        meta = {
            "format": _FORMAT,
            "vocabulary": self.vocabulary_hash,
            "tokenizer": self.vocabulary_name,
            "width": self.width,
            "end_ids": list(self.end_ids),
            "terminator": self.terminator,
            "layout": self.layout,
        }
        save_arrays(path, _KIND, self._arrays, meta)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        vocabulary: Vocabulary | TokenIndex,
        *,
        mmap: bool = False,
        verify: bool = True,
        backend: str | None = None,
    ) -> ChoiceSet:
        """Read a set written by :meth:`save`; refused unless it was compiled for the tokens of
        ``vocabulary`` (its width may differ: a model's logits may be wider than the tokenizer,
        and the set serves at the width of the vocabulary it is loaded with).

        The file is read into memory once and checked (checksum, every id and offset): the set
        then serves what was checked, whatever happens to the file. ``mmap=True`` maps the file
        instead (its pages shared between processes): the file must then never be rewritten in
        place while the set is in use (truncating a mapped file kills the process with SIGBUS;
        :meth:`save` replaces a file by renaming a new one over it, which is safe)."""
        vocab = vocabulary.vocabulary if isinstance(vocabulary, TokenIndex) else vocabulary
        arrays, meta = load_arrays(path, _KIND, mmap=mmap, verify=verify)
        fmt = meta.get("format")
        if fmt not in (2, _FORMAT):
            raise CorruptFileError(f"{path}: set format {fmt}, expected {_FORMAT}")
        saved_width = meta.get("width")
        if not isinstance(saved_width, int) or isinstance(saved_width, bool) or saved_width < 1:
            raise CorruptFileError(f"{path}: metadata width={saved_width!r:.40} is not a width")
        if fmt == 2:  # bound to content and width: compare at the saved width
            ok = saved_width >= len(vocab) and (
                meta.get("vocabulary") == vocab.with_width(saved_width).hash
            )
        else:
            ok = meta.get("vocabulary") == vocab.content_hash
        if not ok:
            name = meta.get("tokenizer") or "another tokenizer"
            raise VocabularyMismatchError(
                f"{path}: compiled for {name!r} (vocabulary {str(meta.get('vocabulary'))[:12]}), "
                f"not for {vocab.name or 'this vocabulary'!r} ({vocab.content_hash[:12]}): load "
                "it with the tokenizer it was compiled for, or recompile it for this one"
            )
        term = meta.get("terminator")
        if term is not None and not isinstance(term, str):
            raise CorruptFileError(f"{path}: metadata terminator={term!r:.40} is not a str")
        end_ids = meta.get("end_ids")
        if (
            not isinstance(end_ids, list)
            or len(end_ids) > vocab.width
            or not all(
                isinstance(e, int) and not isinstance(e, bool) and 0 <= e < vocab.width
                for e in end_ids
            )
        ):
            raise CorruptFileError(f"{path}: metadata end_ids={end_ids!r:.60} are not token ids")
        layout = meta.get("layout", "full")
        if layout not in LAYOUTS:
            raise CorruptFileError(f"{path}: metadata layout={layout!r:.40} is not a layout")
        _check_arrays(Checker(path, arrays), len(vocab), compact=layout == "compact")
        index = None
        if layout == "compact":
            check_layout(layout, _backend.resolve_backend(backend))
            index = vocabulary if isinstance(vocabulary, TokenIndex) else TokenIndex.get(vocab)
        try:
            cs = cls(
                vocabulary_hash=vocab.content_hash,
                width=vocab.width,
                end_ids=tuple(int(e) for e in end_ids),
                terminator=term,
                arrays=arrays,
                backend=backend,
                index=index,
            )
        except ValueError as exc:  # the core's checks of a compact layout
            if layout != "compact":
                raise
            raise CorruptFileError(f"{path}: {exc} (crafted or damaged file)") from exc
        name = meta.get("tokenizer")
        cs.vocabulary_name = name if isinstance(name, str) else ""
        return cs

    @staticmethod
    def saved_tokenizer(path: str | os.PathLike[str]) -> str:
        """The name of the tokenizer a saved set was compiled for (``""`` if unnamed)."""
        _, meta = load_arrays(path, _KIND, mmap=True, verify=False)
        name = meta.get("tokenizer")
        return name if isinstance(name, str) else ""


def _raw_logits(logits: Any) -> tuple[npt.NDArray[Any], int, int]:
    """A writable 2-D numpy view of ``logits`` as raw words, with the bits of ``-inf``."""
    arr = logits
    if not isinstance(arr, np.ndarray):
        import torch

        if not isinstance(arr, torch.Tensor) or arr.device.type != "cpu":
            raise TypeError(
                f"logits must be a numpy array or a torch CPU tensor, got {type(logits).__name__}"
            )
        if arr.dtype in (torch.float16, torch.bfloat16):
            bits = 0xFC00 if arr.dtype == torch.float16 else 0xFF80
            return arr.view(torch.int16).numpy().view(np.uint16), bits, 2
        arr = arr.numpy()
    if arr.ndim != 2:
        raise ValueError(f"logits must be 2-D (rows, vocabulary), got shape {arr.shape}")
    if arr.dtype == np.float32:
        return arr.view(np.uint32), 0xFF800000, 4
    if arr.dtype == np.float16:
        return arr.view(np.uint16), 0xFC00, 2
    raise TypeError(f"logits dtype {arr.dtype}: expected float32, float16 or bfloat16")


def _check_arrays(c: Checker, width: int, *, compact: bool = False) -> None:
    """Everything the serving functions rely on, checked before a loaded set is used: CSR rows
    over valid token ids, sorted within each row (binary search), every child code leading to a
    state, far targets where the codes say, completed nodes and value offsets in range (a
    compact layout's keys are checked by the core)."""
    names = {"row_ptr", "tokens", "children", "far_pos", "far_child", "ends"} | _VALUE_ARRAYS
    c.names(names | COMPACT_ARRAYS if compact else names)
    row_ptr = c.array("row_ptr", np.int32)
    if compact:
        states, n_nodes = stored_states(c)
        n_states = n_nodes + 2
        if len(row_ptr) != len(states) + 1:
            raise c.fail(f"row_ptr has {len(row_ptr)} entries for {len(states)} stored rows")
    else:
        if len(row_ptr) < 4:
            raise c.fail("row_ptr has fewer than 4 entries (a root, END and DEAD)")
        n_states = len(row_ptr) - 1
        n_nodes = n_states - 2
        states = np.arange(n_states, dtype=np.int64)
    tokens = c.array("tokens", np.int32)
    c.offsets("row_ptr", row_ptr, len(tokens))
    c.within("tokens", tokens, 0, width)
    children = c.array("children", np.uint16, size=len(tokens))
    if len(tokens) > 1:
        step = np.diff(tokens.astype(np.int64))
        row_start = np.zeros(len(tokens), dtype=bool)
        row_start[row_ptr[:-1][np.diff(row_ptr) > 0]] = True
        if bool(((step <= 0) & ~row_start[1:]).any()):
            raise c.fail("tokens are not strictly increasing within a row")
    node = np.repeat(states, np.diff(row_ptr))
    near = children < _FAR
    target = node[near] + children[near]
    if len(target) and int(target.max()) >= n_states:
        raise c.fail("children lead past the last state")
    far_pos = c.array("far_pos", np.int32)
    if not np.array_equal(far_pos, np.flatnonzero(children == _FAR)):
        raise c.fail("far_pos does not list the far children")
    far_child = c.array("far_child", np.int32, size=len(far_pos))
    c.within("far_child", far_child, 0, n_states)
    ends = c.array("ends", np.int32)
    c.within("ends", ends, 0, n_nodes)
    c.increasing("ends", ends)
    values = c.strings("value")
    if len(values) != len(ends):
        raise c.fail(f"{len(values)} values for {len(ends)} completed nodes")


def _serving_functions(
    cs: ChoiceSet,
) -> tuple[Callable[[int, int], int], Callable[[int], I32]]:
    """The single-step hot path as closures over memoryviews.

    Memoryview item reads are the fastest way to reach array items from Python (also over a
    memmap), and closure variables the fastest names: this keeps a step near 0.3 µs.
    """
    ptr = cs.row_ptr.data
    tok = cs.tokens.data
    child = cs.children.data
    far_pos = cs._far_pos.data
    far_child = cs._far_child
    tokens = cs.tokens
    end, dead = cs.END, cs.DEAD
    n_states = len(ptr) - 1

    def advance(state: int, token: int) -> int:
        if not 0 <= state < n_states:
            return dead
        hi = ptr[state + 1]
        i = bisect_left(tok, token, ptr[state], hi)
        if i < hi and tok[i] == token:
            d: int = child[i]
            if d < _FAR:
                return state + d
            if d == _TO_END:
                return end
            return int(far_child[bisect_left(far_pos, i)])
        return dead

    def mask(state: int) -> I32:
        if not 0 <= state < n_states:
            raise ValueError(f"state={state}: not a state of this set (0..{n_states - 1})")
        return tokens[ptr[state] : ptr[state + 1]]

    return advance, mask


def _csr(
    pairs: TriePairs, n_states: int, width: int, end_state: int
) -> tuple[I32, I32, npt.NDArray[np.uint16], I32, I32]:
    """Sort pairs by (node, token) into CSR rows; one packed-key sort when it fits 63 bits.

    Returns ``row_ptr, tokens, children, far_pos, far_child``: ``children`` are uint16 offsets
    from the row's node, ``_TO_END`` for the end state, ``_FAR`` where the target sits in
    ``far_child`` at the pair position listed in ``far_pos``.
    """
    node, token, child = pairs.node, pairs.token, pairs.child
    # the child as its uint16 code: offset from the node, or one of the two escape codes
    code = child - node
    far = (code < 0) | (code >= _FAR)
    code[far] = _FAR
    code[child == end_state] = _TO_END
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
    far_pos = np.flatnonzero(children == _FAR).astype(np.int32)
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


def compile_choices(
    values: Iterable[str],
    index: TokenIndex | Vocabulary,
    *,
    terminator: str | None = None,
    allow_end: bool = True,
    backend: str | None = None,
    layout: str = "full",
    threads: int | None = None,
) -> ChoiceSet:
    """Compile ``values`` against a tokenizer index into a :class:`ChoiceSet`.

    ``terminator``: ``None`` (default) ends a value with the vocabulary's end ids; a string (for
    example ``'"'``) must follow each value instead, and tokens that cross from a value into it
    are allowed, as an FSM over ``value + terminator`` allows them (the end ids follow it).
    ``allow_end=False`` leaves the end ids out where a value is complete (the set is followed by
    more output, as inside a decoding plan); ``END`` and ``DEAD`` still allow only them.
    Duplicates collapse; a value may be a prefix of another; the empty string is a value.
    ``backend``: ``"native"`` (the C++ core) or ``"numpy"`` (the reference); default
    ``$TRIEROUTER_BACKEND``, else native (see :mod:`trierouter.registry.core`).
    ``layout``: ``"full"`` (default: every node's row stored, a step is a lookup) or
    ``"compact"`` (native only: the rows of nodes with at most
    :data:`~trierouter.registry.compact.COMPACT_KEYS` values below are walked when asked for;
    the same masks and states in a fraction of the memory, a walk per step on those nodes).
    ``threads``: the native compile of a large set (from 2 x :data:`SPLIT_MIN` values) sorts,
    builds and fills its rows in up to this many threads, in chunks of consecutive values (the
    arrays are those of one thread, bit for bit); default: the CPUs this process may run on;
    ``1``: one thread.
    Raises :class:`EmptySetError`, :class:`InvalidValueError` or :class:`UnreachableValueError`.
    """
    t0 = time.perf_counter()
    which = _backend.resolve_backend(backend)
    check_layout(layout, which)
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ValueError(f"threads={threads!r}: a positive int, or None for the CPUs available")
    if isinstance(index, Vocabulary):
        index = TokenIndex.get(index, backend=which)
    if which == "native":
        n_threads = threads if threads is not None else compile_threads()
        cs = _compile_native(values, index, terminator, allow_end, layout == "compact", n_threads)
        if layout == "compact" and cs.layout == "full":  # a byte no single token spells
            cs = ChoiceSet(
                vocabulary_hash=cs.vocabulary_hash,
                width=cs.width,
                end_ids=cs.end_ids,
                terminator=terminator,
                arrays=compact_arrays(cs._arrays, index, terminator, cs.end_ids, allow_end),
                backend="native",
                index=index,
                checked=True,  # made by the core from this compile
            )
    else:
        cs = _compile_numpy(values, index, terminator, allow_end)
    cs.vocabulary_name = index.vocabulary.name
    cs.compile_seconds = time.perf_counter() - t0
    return cs


SPLIT_MIN = 2048
"""The native compile splits its work into chunks of at least this many values, one per
thread (``compile_choices(threads=...)``): from 2 x 2,048 values, where a chunk's walk costs
more than starting a thread (measured: 10,000 tool names 15.5 -> 9.7 ms with 2 threads)."""


def compile_threads() -> int:
    """The default ``threads`` of :func:`compile_choices`: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # (no sched_getaffinity on this platform)
        return max(1, os.cpu_count() or 1)


def _check_terminator(terminator: object) -> None:
    if terminator is not None and not isinstance(terminator, str):
        raise InvalidValueError(
            f"terminator={terminator!r} must be a str (e.g. '\"') or None for the end ids"
        )


def _unreachable(
    uniq: list[bytes], term: bytes, bad: list[int], index: TokenIndex, vocab: Vocabulary
) -> UnreachableValueError:
    """The error for values no sequence of non-special tokens spells (``bad``: their indices
    in ``uniq``, the distinct values in the order of ``value + term``)."""
    used = np.zeros(256, dtype=bool)
    for i in bad:
        used[np.frombuffer(uniq[i] + term, dtype=np.uint8)] = True
    missing = np.flatnonzero(used & ~index.can_spell_bytes())
    shown = [uniq[i].decode("utf-8", "replace") for i in bad[:20]]
    reasons = [
        "no sequence of non-special tokens spells "
        + repr(uniq[i] + term)
        + "; bytes with no single-byte token: "
        + ", ".join(f"0x{b:02x}" for b in missing if b in uniq[i] + term)
        for i in bad
    ]
    return UnreachableValueError(
        f"{len(bad)} of {len(uniq)} values cannot be produced by "
        f"{vocab.name or 'this vocabulary'}"
        f" (first: {shown}); {reasons[0]}",
        values=[uniq[i].decode("utf-8", "replace") for i in bad],
        reasons=reasons,
    )


def _compile_native(
    values: Iterable[str],
    index: TokenIndex,
    terminator: str | None,
    allow_end: bool,
    compact: bool = False,
    threads: int = 1,
) -> ChoiceSet:
    """The C++ core: values to serving arrays in one call (csrc/); ``compact``: the
    compact layout's arrays straight from the compile, unless some byte of the values has no
    single-byte token (the full layout then, which the caller derives it from); ``threads``:
    chunks of at least :data:`SPLIT_MIN` values walked on threads of their own."""
    core = _backend.native_core()
    vocab = index.vocabulary
    if isinstance(values, (str, bytes)):
        _encode_values(values)  # raises the documented error
    items = values if isinstance(values, (list, tuple)) else list(values)
    if not items:
        raise EmptySetError("values: the set is empty; a choice needs at least one value")
    _check_terminator(terminator)
    try:
        arrays, bad = core.compile(
            items,
            index.native_trie,
            terminator.encode("utf-8") if isinstance(terminator, str) else b"",
            vocab.end_ids,
            allow_end,
            COMPACT_KEYS if compact else 0,
            threads,
            SPLIT_MIN,
        )
    except (TypeError, UnicodeEncodeError):
        _encode_values(items)  # raises InvalidValueError naming the value
        raise
    if bad is not None:
        buf = arrays["value_bytes"].tobytes()
        off = arrays["value_offsets"].tolist()
        uniq = [buf[off[i] : off[i + 1]] for i in range(len(off) - 1)]
        term = terminator.encode("utf-8") if terminator else b""
        raise _unreachable(uniq, term, bad, index, vocab)
    return ChoiceSet(
        vocabulary_hash=vocab.content_hash,
        width=vocab.width,
        end_ids=vocab.end_ids,
        terminator=terminator,
        arrays=arrays,
        backend="native",
        index=index,
        checked=True,  # the core's own arrays
    )


def _compile_numpy(
    values: Iterable[str], index: TokenIndex, terminator: str | None, allow_end: bool
) -> ChoiceSet:
    """The numpy reference: whole-array operations over the reversed-token index."""
    vocab = index.vocabulary
    encoded = _encode_values(values)
    if not encoded:
        raise EmptySetError("values: the set is empty; a choice needs at least one value")
    _check_terminator(terminator)
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
            raise _unreachable(uniq, term, bad.tolist(), index, vocab)
        keep = live[pairs.child] & reach[pairs.node]
        pairs = TriePairs(
            np.concatenate([pairs.node[keep], eos_pairs.node]),
            np.concatenate([pairs.token[keep], eos_pairs.token]),
            np.concatenate([pairs.child[keep], eos_pairs.child]),
        )
    row_ptr, tokens, children, far_pos, far_child = _csr(pairs, n + 2, vocab.width, end_state)
    vbuf, vstarts, vlengths = pack_strings(uniq) if term else (buf, starts, lengths)
    voff = np.append(vstarts, vstarts[-1] + vlengths[-1]).astype(np.int64)
    cs = ChoiceSet(
        vocabulary_hash=vocab.content_hash,
        width=vocab.width,
        end_ids=vocab.end_ids,
        terminator=terminator,
        arrays={
            "row_ptr": row_ptr,
            "tokens": tokens,
            "children": children,
            "far_pos": far_pos,
            "far_child": far_child,
            "ends": ends.astype(np.int32),
            "value_bytes": vbuf.copy(),
            "value_offsets": voff,
        },
        backend="numpy",
    )
    return cs
