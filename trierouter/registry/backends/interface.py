"""What a backend is: it compiles a set's values to its serving arrays and serves them.

A :class:`Backend` is chosen once by name (:func:`trierouter.registry.backends.get_backend`);
:class:`~trierouter.registry.trie.ChoiceSet` and
:class:`~trierouter.registry.index.TokenIndex` call it and never ask which one it is. Both
backends build the same arrays, bit for bit, so a set compiled by one serves under the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from trierouter.registry.arrays import Trie, TriePairs
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["Arrays", "Backend", "BackendName", "Serving", "TokenForms"]

BackendName = Literal["native", "numpy"]
Arrays = dict[str, npt.NDArray[Any]]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


class TokenForms(Protocol):
    """What a backend reads of a tokenizer's :class:`~trierouter.registry.index.TokenIndex`."""

    @property
    def vocabulary(self) -> Vocabulary: ...

    @property
    def native_trie(self) -> Any:
        """The C++ core's forward token trie (built on first use)."""

    def reverse_tables(self) -> Arrays:
        """The numpy reference's reversed-token tables (built on first use)."""

    def trie_pairs(self, trie: Trie, *, extra: TriePairs | None = None) -> TriePairs: ...

    def can_spell_bytes(self) -> npt.NDArray[np.bool_]: ...


class Serving(Protocol):
    """One set's serving calls. ``advance``, ``mask`` and ``fill`` are the hot path: the set
    binds them as its own methods (no Python frame in between on the native backend)."""

    @property
    def core(self) -> Any:
        """The C++ ``Core`` serving the set, or ``None`` (a matcher reads it)."""

    @property
    def advance(self) -> Callable[[int, int], int]:
        """Next state after a token (``DEAD`` if refused)."""

    @property
    def mask(self) -> Callable[[int], I32]:
        """Allowed token ids at a state, sorted."""

    @property
    def fill(self) -> Callable[[int, Any, int], None]:
        """Write a state's packed mask into a bitmask row."""

    def is_terminal(self, state: int) -> bool: ...

    def advance_batch(self, states: npt.ArrayLike, tokens: npt.ArrayLike) -> I64: ...

    def fill_batch(self, states: I64, bitmask: Any, rows: I64 | None) -> None:
        """``bitmask[rows[i]]`` (default row ``i``) = the packed mask of ``states[i]``."""

    def apply_sparse(
        self, states: I64, view: npt.NDArray[Any], rows: I64 | None, bits: int, size: int
    ) -> None:
        """Mask rows of raw logit words ``view`` to the allowed ids (``bits``: ``-inf``)."""

    def copy_sparse(
        self,
        states: I64,
        src: npt.NDArray[Any] | None,
        dst: npt.NDArray[Any],
        rows: I64 | None,
        bits: int,
        size: int,
    ) -> None:
        """Write the allowed ids of each row of ``dst``: from ``src``, or ``bits`` (``-inf``)."""

    def prepare(self) -> None:
        """Build what serving builds lazily, now."""


class Backend(Protocol):
    """A way to compile and serve sets (the C++ core, or the numpy reference)."""

    name: BackendName
    layouts: tuple[str, ...]
    """The layouts it serves (:data:`~trierouter.registry.compact.LAYOUTS`)."""
    index_on_disk: bool
    """Its tokenizer index form is the one cached on disk (the reversed-token tables)."""

    def core(self) -> ModuleType | None:
        """The compiled core it runs on (``None``: pure numpy)."""

    def warm_index(self, index: TokenForms) -> None:
        """Build the index form this backend compiles with."""

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
        """The serving arrays of ``values`` (the compact layout's when ``compact``)."""

    def serve(
        self, arrays: Arrays, *, width: int, n_nodes: int, compact: tuple[Any, ...] | None
    ) -> Serving:
        """Serving calls over ``arrays`` (``compact``: the core's compact-layout argument)."""
