"""Shared pieces of the shortlist retrievers: value hashing, top-k by owner, the error type."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from trierouter.errors import IndexMismatchError
from trierouter.registry.core import native_core

__all__ = [
    "THREADS_LOCK",
    "IndexMismatchError",
    "Retriever",
    "ValueOwners",
    "best_per_owner",
    "top_positive",
    "values_hash",
]

THREADS_LOCK = threading.RLock()
"""Held while torch's or faiss's process-wide thread count is changed and restored, so two
concurrent searches (or a search and a fine-tune) cannot leave it at the other's value."""

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def top_positive(scores: F64, k: int) -> I64:
    """Ids of the (up to) ``k`` best positive ``scores``, best by (score, then lower id), in
    ascending id order: a deterministic top-k (``argpartition`` breaks ties arbitrarily), in
    the compiled core (:func:`trierouter.testing.kernels.top_positive` is the tests' numpy
    reference)."""
    out: I64 = native_core().top_positive(np.ascontiguousarray(scores, np.float64), k)
    return out


class ValueOwners:
    """Value ids and row owners shared by the retrievers: a value's id is its position in
    :attr:`values`; every indexed text is a row owned by one value (several rows: multi-vector)."""

    def __init__(self) -> None:
        self._values: list[str] = []
        self._ids: dict[str, int] = {}
        self._owner = np.zeros(0, np.int64)

    @property
    def values(self) -> list[str]:
        """Indexed values; a value's id is its position."""
        return self._values

    def __len__(self) -> int:
        return len(self._values)

    @property
    def n_rows(self) -> int:
        """Indexed texts (rows); at least one per value."""
        return len(self._owner)

    def owner_rows(self) -> tuple[I64, I64]:
        """Rows grouped by value: ``perm`` (row ids sorted by owner, stable) and ``starts``
        (value ``i``'s rows are ``perm[starts[i]:starts[i + 1]]``); cached until rows change."""
        return self._grouping()[:2]

    def _grouping(self) -> tuple[I64, I64, I64 | None, I64, I64]:
        """``perm``, ``starts``, each value's first row (None when value ``i``'s first row is
        row ``i``), and the other rows with their owners."""
        key = (id(self._owner), len(self._owner), len(self._values))
        cached = getattr(self, "_csr", None)
        if cached is None or cached[0] != key:
            perm = np.argsort(self._owner, kind="stable").astype(np.int64)
            starts = np.zeros(len(self._values) + 1, np.int64)
            np.cumsum(np.bincount(self._owner, minlength=len(self._values)), out=starts[1:])
            first = perm[starts[:-1]]
            rest = np.ones(len(perm), bool)
            rest[first] = False
            others = np.flatnonzero(rest)
            identity = bool(np.array_equal(first, np.arange(len(first))))
            groups = (perm, starts, None if identity else first, others, self._owner[others])
            cached = self._csr = (key, groups)
        return cached[1]

    def best_per_value(self, row_scores: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Per value id, the best score among its rows (every value has at least one row)."""
        _, _, first, others, owners = self._grouping()
        out = row_scores[: len(self._values)].copy() if first is None else row_scores[first]
        if not len(others):
            return out
        if row_scores.dtype == np.float64:  # the core's kernel takes float64 scores (BM25)
            native_core().scatter_max(out, np.ascontiguousarray(row_scores), others, owners)
        else:  # float32 (embedding similarities)
            # only rows that beat their value's first row (few for one query: most score 0)
            # go through the slow unbuffered maximum.at
            cand = row_scores[others]
            better = cand > out[owners]
            np.maximum.at(out, owners[better], cand[better])
        return out

    def rows_of(self, ids: I64) -> tuple[I64, I64]:
        """The rows of values ``ids``, concatenated, and offsets: value ``ids[j]``'s rows are
        ``rows[offsets[j]:offsets[j + 1]]``."""
        perm, starts = self.owner_rows()
        first = starts[ids]
        count = starts[ids + 1] - first
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(count, out=offsets[1:])
        idx = np.repeat(first - offsets[:-1], count) + np.arange(offsets[-1])
        return perm[idx], offsets

    def _value_ids(self, values: Sequence[str]) -> I64:
        """Ids of ``values`` (a new value gets the next id); the new rows' owners."""
        owners = np.empty(len(values), np.int64)
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise TypeError(f"values[{i}] = {v!r:.60} is {type(v).__name__}, expected str")
            j = self._ids.get(v)
            if j is None:
                j = self._ids[v] = len(self._values)
                self._values.append(v)
            owners[i] = j
        return owners


class Retriever(Protocol):
    """What the routing policy needs from a shortlist: values, and top-k values for a query."""

    @property
    def values(self) -> list[str]:
        """The values, in insertion order (a value's id is its position)."""
        ...

    def search(self, query: str, k: int = 64) -> list[str]:
        """The ``k`` values that best match ``query``, best first."""
        ...

    def search_ids(self, queries: Sequence[str], k: int = 64) -> list[I64]:
        """Value ids of the best ``k`` values per query, best first."""
        ...


def values_hash(values: Iterable[str]) -> str:
    """SHA-256 over the values in order (NUL separated, UTF-8)."""
    h = hashlib.sha256()
    for v in values:
        h.update(v.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


def best_per_owner(rows: I64, scores: F32, owner: I64, k: int) -> tuple[I64, F32]:
    """Collapse ranked document rows to ranked owners (multi-vector max: first hit wins).

    ``rows``/``scores`` are sorted best first (``-1`` rows are padding); the result holds at
    most ``k`` distinct owners with the score of their best row.
    """
    valid = rows >= 0
    rows, scores = rows[valid], scores[valid]
    owners = owner[rows]
    _, first = np.unique(owners, return_index=True)
    first.sort()
    first = first[:k]
    return owners[first].astype(np.int64), scores[first].astype(np.float32)


def check_k(k: int) -> int:
    """Validate a shortlist size."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k={k!r} must be a positive int")
    return k


def as_texts(values: Sequence[str], texts: Sequence[str] | None, what: str) -> list[str]:
    """The texts to index for ``values`` (the values themselves when ``texts`` is None)."""
    if isinstance(values, str):
        raise TypeError(f"{what}: values must be a sequence of str, got a single str; wrap it")
    if texts is None:
        return [str(v) for v in values]
    if isinstance(texts, str) or len(texts) != len(values):
        raise ValueError(
            f"{what}: texts must be a sequence with one text per value "
            f"({len(values)} values, got {len(texts) if not isinstance(texts, str) else 'a str'})"
        )
    return list(texts)
