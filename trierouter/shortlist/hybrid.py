"""Weighted reciprocal-rank fusion of retrievers over the same values."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trierouter.shortlist._common import Retriever, check_k
from trierouter.shortlist.bm25 import I64

__all__ = ["HybridIndex"]


class HybridIndex:
    """Weighted reciprocal-rank fusion of retrievers over the same values.

    ``score(v) = sum_i weights[i] / (c + rank_i(v))`` over the top ``depth`` of each retriever
    (rank from 1); values missing from a list contribute nothing for it.
    """

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        *,
        weights: Sequence[float] | None = None,
        c: float = 60.0,
        depth: int = 200,
    ) -> None:
        if not retrievers:
            raise ValueError("retrievers must name at least one retriever")
        first = retrievers[0].values
        for i, r in enumerate(retrievers[1:], 1):
            if r.values != first:
                raise ValueError(f"retrievers[{i}] indexes other values than retrievers[0]")
        self.retrievers = list(retrievers)
        self.weights = list(weights) if weights is not None else [1.0] * len(retrievers)
        if len(self.weights) != len(self.retrievers):
            raise ValueError(f"weights has {len(self.weights)} entries for {len(retrievers)}")
        self.c = c
        self.depth = depth

    @property
    def values(self) -> list[str]:
        """The shared values."""
        return self.retrievers[0].values

    def __len__(self) -> int:
        return len(self.values)

    def search(self, query: str, k: int = 64) -> list[str]:
        """The ``k`` best values by fused rank."""
        vals = self.values
        return [vals[i] for i in self.search_ids([query], k)[0]]

    def search_ids(self, queries: Sequence[str], k: int = 64) -> list[I64]:
        """Value ids of the best ``k`` values per query by fused rank."""
        check_k(k)
        lists = [r.search_ids(queries, max(k, self.depth)) for r in self.retrievers]
        return [
            fuse([lst[q] for lst in lists], k, weights=self.weights, c=self.c)
            for q in range(len(queries))
        ]


def fuse(rankings: Sequence[I64], k: int, *, weights: Sequence[float], c: float) -> I64:
    """Weighted reciprocal-rank fusion of ranked id lists; ties broken by smaller id."""
    ids = np.concatenate([np.asarray(r, np.int64) for r in rankings])
    if not len(ids):
        return ids
    sc = np.concatenate(
        [w / (c + np.arange(1, len(r) + 1)) for r, w in zip(rankings, weights, strict=True)]
    )
    uniq, inv = np.unique(ids, return_inverse=True)
    total = np.bincount(inv, weights=sc)
    order = np.lexsort((uniq, -total))[:k]
    out: I64 = uniq[order]
    return out
