"""The native backend: the C++ core (``trierouter.registry._core``) compiles and serves.

Compile is one pass from the values to the serving arrays (Aho-Corasick over the token bytes in
a forward trie), nothing is built lazily, and a step or a bitmask fill is one call into C++.
It serves both layouts (:mod:`trierouter.registry.compact`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import EmptySetError
from trierouter.registry.backends.interface import Arrays, BackendName, TokenForms
from trierouter.registry.choice_inputs import check_terminator, encode_values, unreachable_error
from trierouter.registry.compact import COMPACT_KEYS, LAYOUTS, compact_arrays
from trierouter.registry.core import native_core

__all__ = ["SPLIT_MIN", "NativeBackend", "NativeServing", "compile_threads"]

I64 = npt.NDArray[np.int64]

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


class NativeServing:
    """A set's serving calls, each one call into the core's ``Core``."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.advance = core.advance
        self.mask = core.mask
        self.fill = core.fill
        self.is_terminal = core.is_terminal

    def advance_batch(self, states: npt.ArrayLike, tokens: npt.ArrayLike) -> I64:
        core = self.core
        try:  # int64 1-D arrays of one length: one call (a server's every step)
            nxt: I64 = core.advance_batch(states, tokens)
            return nxt
        except (TypeError, ValueError, BufferError):
            pass  # other shapes, types or sequences: converted below (or their error raised)
        st = np.asarray(states, dtype=np.int64)
        tk = np.asarray(tokens, dtype=np.int64)
        if st.ndim == 1 and st.shape == tk.shape and st.flags.c_contiguous:
            out = np.empty(len(st), dtype=np.int64)
            core.advance_batch(st, np.ascontiguousarray(tk), out)
            return out
        st, tk = np.broadcast_arrays(st, tk)
        shape = st.shape
        st1 = np.ascontiguousarray(st).reshape(-1)
        tk1 = np.ascontiguousarray(tk).reshape(-1)
        out = np.empty(len(st1), dtype=np.int64)
        core.advance_batch(st1, tk1, out)
        return out.reshape(shape)

    def fill_batch(self, states: I64, bitmask: Any, rows: I64 | None) -> None:
        self.core.fill_batch(states, bitmask, rows)

    def apply_sparse(
        self, states: I64, view: npt.NDArray[Any], rows: I64 | None, bits: int, size: int
    ) -> None:
        self.core.apply_sparse(states, view, rows, bits, size)

    def copy_sparse(
        self,
        states: I64,
        src: npt.NDArray[Any] | None,
        dst: npt.NDArray[Any],
        rows: I64 | None,
        bits: int,
        size: int,
    ) -> None:
        self.core.copy_sparse(states, src, dst, rows, bits, size)

    def prepare(self) -> None:
        """Nothing to build: the core serves from the arrays as they are."""


class NativeBackend:
    """The C++ core; :class:`~trierouter.errors.CoreBuildError` when it is missing or stale."""

    name: BackendName = "native"
    layouts: tuple[str, ...] = LAYOUTS
    index_on_disk: bool = (
        False  # the forward trie is built in C++, faster than reading a cache file
    )

    def core(self) -> ModuleType:
        return native_core()

    def warm_index(self, index: TokenForms) -> None:
        _ = index.native_trie

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
        """Values to serving arrays in one core call; ``compact``: the compact layout's arrays
        (straight from the compile, or derived from the full layout where some byte of the
        values has no single-byte token); ``threads``: chunks of at least :data:`SPLIT_MIN`
        values walked on threads of their own (default :func:`compile_threads`)."""
        core = native_core()
        vocab = index.vocabulary
        if isinstance(values, (str, bytes)):
            encode_values(values)  # raises the documented error
        items = values if isinstance(values, (list, tuple)) else list(values)
        if not items:
            raise EmptySetError("values: the set is empty; a choice needs at least one value")
        check_terminator(terminator)
        term = terminator.encode("utf-8") if isinstance(terminator, str) else b""
        try:
            arrays, bad = core.compile(
                items,
                index.native_trie,
                term,
                vocab.end_ids,
                allow_end,
                COMPACT_KEYS if compact else 0,
                threads if threads is not None else compile_threads(),
                SPLIT_MIN,
            )
        except (TypeError, UnicodeEncodeError):
            encode_values(items)  # raises InvalidValueError naming the value
            raise
        if bad is not None:
            buf = arrays["value_bytes"].tobytes()
            off = arrays["value_offsets"].tolist()
            uniq = [buf[off[i] : off[i + 1]] for i in range(len(off) - 1)]
            raise unreachable_error(uniq, term, bad, index, vocab)
        out: Arrays = arrays
        if compact and "compact_info" not in out:  # a byte no single token spells
            out = compact_arrays(out, index, terminator, vocab.end_ids, allow_end)
        return out

    def serve(
        self, arrays: Arrays, *, width: int, n_nodes: int, compact: tuple[Any, ...] | None
    ) -> NativeServing:
        core = native_core().Core(
            arrays["row_ptr"],
            arrays["tokens"],
            arrays["children"],
            arrays["far_pos"],
            arrays["far_child"],
            arrays["ends"],
            width,
            compact,
        )
        return NativeServing(core)
