"""ChoiceSet: a finite set of strings compiled into a byte trie with per-node allowed tokens.

The minimal DFA of a finite set is its trie, so the token masks of every node can be computed
once: node ``n`` allows token ``t`` iff ``path(n) + bytes(t)`` is a prefix of some value (of some
``value + terminator`` when a terminator is given), and at a node where a value is complete the
end ids as well. A request's state is one integer (a node id); a decoding step is a lookup.

Node ids: ``0 .. n_nodes-1`` are trie nodes in preorder (0 is the root), ``END = n_nodes`` is
the state after an end id, ``DEAD = n_nodes + 1`` the state after a token the set does not allow
(both allow only the end ids, so a stray request is steered to stop rather than left with an
all-masked row).

Two backends (:mod:`trierouter.registry.backends`, one file each) compile and serve with
identical results: the C++ core (default) and the numpy reference (``backend="numpy"`` or
``TRIEROUTER_BACKEND=numpy``). Both build the same arrays, bit for bit, so a saved set serves
under either.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import CorruptFileError, VocabularyMismatchError
from trierouter.registry.backends import Serving, get_backend
from trierouter.registry.backends.native import SPLIT_MIN, compile_threads
from trierouter.registry.choice_arrays import check_arrays, raw_logits
from trierouter.registry.compact import LAYOUTS, check_layout, compact_spec
from trierouter.registry.index import TokenIndex
from trierouter.registry.store import load_arrays, save_arrays
from trierouter.registry.validate import Checker
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["SPLIT_MIN", "ChoiceSet", "compile_choices", "compile_threads"]

_KIND = "trierouter.ChoiceSet"
_FORMAT = 3  # 3: bound to the vocabulary's content (any width); 2: to its content and width

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


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
        impl = get_backend(backend)
        self.backend = impl.name
        """``"native"`` or ``"numpy"``: the backend serving the set."""
        self.layout = "compact" if "compact_info" in arrays else "full"
        """``"full"`` (every row stored) or ``"compact"`` (rows walked on demand where at most
        :data:`~trierouter.registry.compact.COMPACT_KEYS` values lie below a node)."""
        check_layout(self.layout, impl)
        compact = self.layout == "compact"
        if compact and index is None:
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
        self.n_nodes = int(arrays["compact_info"][0]) if compact else len(self.row_ptr) - 3
        self.END = self.n_nodes
        self.DEAD = self.n_nodes + 1
        self.compile_seconds = 0.0
        spec = None
        if compact and index is not None:
            spec = compact_spec(arrays, index, terminator, end_ids, not checked)
        serving: Serving = impl.serve(arrays, width=width, n_nodes=self.n_nodes, compact=spec)
        self._serving = serving
        self._core: Any = serving.core
        self._advance, self._mask = serving.advance, serving.mask
        # the hot calls are the backend's own (on the native backend straight into C++)
        self.advance = serving.advance  # type: ignore[method-assign,assignment]
        self.mask = serving.mask  # type: ignore[method-assign,assignment]
        self.fill_next_token_bitmask = serving.fill  # type: ignore[method-assign,assignment]

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
        return bool(self._serving.is_terminal(state))

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

    def prepare(self) -> ChoiceSet:
        """Build the serving tables now instead of on the first bitmask fill or batch step
        (numpy backend: packed-mask words, batch lookup keys; the native backend has none to
        build); engines call this when they load a set."""
        self._serving.prepare()
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
        self._serving.fill(state, bitmask, index)

    def advance_batch(self, states: npt.ArrayLike, tokens: npt.ArrayLike) -> I64:
        """Vectorized :meth:`advance`: next state for every (state, token); ``DEAD`` if refused."""
        return self._serving.advance_batch(states, tokens)

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
        st = np.ascontiguousarray(states, dtype=np.int64).reshape(-1)
        rw = None if rows is None else np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
        self._serving.fill_batch(st, bitmask, rw)

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
        view, bits, size = raw_logits(logits)
        self._serving.apply_sparse(st, view, rw, bits, size)

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
        out, bits, size = raw_logits(dst)
        view = None
        if src is not None:
            view, _, src_size = raw_logits(src)
            if src_size != size or view.shape != out.shape:
                raise ValueError(f"src {view.shape} and dst {out.shape} differ in shape or dtype")
        self._serving.copy_sparse(st, view, out, rw, bits, size)

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
        check_arrays(Checker(path, arrays), len(vocab), compact=layout == "compact")
        index = None
        if layout == "compact":
            check_layout(layout, get_backend(backend))
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
    impl = get_backend(backend)
    check_layout(layout, impl)
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ValueError(f"threads={threads!r}: a positive int, or None for the CPUs available")
    if isinstance(index, Vocabulary):
        index = TokenIndex.get(index, backend=impl.name)
    vocab = index.vocabulary
    arrays = impl.compile(
        values,
        index,
        terminator=terminator,
        allow_end=allow_end,
        compact=layout == "compact",
        threads=threads,
    )
    cs = ChoiceSet(
        vocabulary_hash=vocab.content_hash,
        width=vocab.width,
        end_ids=vocab.end_ids,
        terminator=terminator,
        arrays=arrays,
        backend=impl.name,
        index=index,
        checked=True,  # the backend's own arrays, from this compile
    )
    cs.vocabulary_name = vocab.name
    cs.compile_seconds = time.perf_counter() - t0
    return cs
