"""numpy references of the compiled core's shortlist and vocabulary kernels: the tests' oracles.

The library runs each kernel in the core alone (``trierouter.registry._core``); these are the
whole-array forms they replaced, kept so the tests can compare the two on the same inputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from trierouter.shortlist.bm25 import analyze

if TYPE_CHECKING:
    from trierouter.registry.vocabulary import Vocabulary
    from trierouter.shortlist.bm25 import BM25Index

__all__ = ["best_per_value", "bm25_scores", "join_tokens", "pack_tokens", "top_positive"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def top_positive(scores: F64, k: int) -> I64:
    """:func:`trierouter.shortlist._common.top_positive` in numpy."""
    hit = np.flatnonzero(scores > 0)
    if len(hit) <= k:
        return hit
    if k <= 0:
        return hit[:0]
    s = scores[hit]
    kth = np.partition(s, len(s) - k)[len(s) - k]  # the k-th largest
    above = hit[s > kth]
    tied = hit[s == kth][: k - len(above)]
    return np.sort(np.concatenate([above, tied]))


def bm25_scores(index: BM25Index, query: str, *, ngram_weight: float | None = None) -> F64:
    """:meth:`BM25Index.scores` in numpy: every posting's weight gathered, one bincount."""
    weight = index.ngram_weight if ngram_weight is None else ngram_weight
    fields = index._fields
    for f in fields:
        f.finalize(index.k1, index.b)
    words, grams = analyze(query, ngram=index.ngram)
    d, w = fields[0].postings(words, 1.0)
    if index.ngram and weight:  # both fields in one bincount
        dg, wg = fields[1].postings(grams, weight)
        d, w = np.concatenate([d, dg]), np.concatenate([w, wg])
    return np.asarray(np.bincount(d, weights=w, minlength=index.n_rows), np.float64)


def best_per_value(index: BM25Index, row_scores: F64) -> F64:
    """:meth:`ValueOwners.best_per_value` in numpy (``maximum.at`` over every row)."""
    out = np.full(len(index.values), -np.inf)
    np.maximum.at(out, index._owner, row_scores)
    return out


def join_tokens(vocab: Vocabulary) -> bytes:
    """What :attr:`Vocabulary.content_hash` digests of the tokens' bytes: those of the
    matchable tokens joined by ``b"\\0"``, built with array operations."""
    lengths = np.diff(vocab.offsets)
    ids = np.flatnonzero(vocab.matchable)
    sel = lengths[ids]
    joined = np.zeros(max(int(sel.sum()) + len(ids) - 1, 0), dtype=np.uint8)
    before = np.repeat(np.arange(len(ids), dtype=np.int64), sel)  # separators before
    joined[np.arange(len(before), dtype=np.int64) + before] = vocab.buffer[
        np.repeat(vocab.matchable, lengths)
    ]
    return joined.tobytes()


def pack_tokens(vocab: Vocabulary) -> tuple[npt.NDArray[np.uint8], I64]:
    """:attr:`Vocabulary.buffer` and :attr:`Vocabulary.offsets` in numpy."""
    lengths = np.fromiter(map(len, vocab.tokens), dtype=np.int64, count=len(vocab.tokens))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.frombuffer(b"".join(vocab.tokens), dtype=np.uint8), offsets
