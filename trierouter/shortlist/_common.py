"""Shared pieces of the shortlist retrievers: value hashing, top-k by owner, the error type."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from trierouter.errors import IndexMismatchError

__all__ = [
    "IndexMismatchError",
    "Retriever",
    "best_per_owner",
    "values_hash",
]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


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
