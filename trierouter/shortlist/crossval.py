"""Choosing a shortlist's fusion by cross-validation on the set's own texts.

Two query styles, both made from the set alone (never from test queries):

- ``synonyms``: the set's synonyms and examples, leave-one-out (each is searched with its own
  rows removed from both indexes, so it must be found through the value's other texts);
- ``terse``: descriptions rewritten tersely by :func:`~trierouter.shortlist.fusion.terse`
  (shortened words, dropped qualifiers), each to be found as its own value.

Every candidate of :func:`~trierouter.shortlist.fusion.fusion_grid` is scored on both by the
mean of R@1, R@10 and R@100; the candidate with the best mean over the two styles wins. The
single methods are candidates too, so the choice is never below either of them on that
objective. Each query is scored once per method (BM25 at every n-gram weight, the embedding
by exact inner products); candidates only recombine the kept top lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.shortlist.bm25 import BM25Index, analyze
from trierouter.shortlist.fusion import Fusion, fusion_grid

__all__ = ["CvQueries", "choose_fusion"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

DEPTH = 200
KS = (1, 10, 100)


@dataclass
class CvQueries:
    """One query style: texts, gold value ids, query vectors (or None: BM25 only) and rows
    each query must not see (its own, for leave-one-out)."""

    name: str
    texts: list[str]
    gold: list[frozenset[int]]
    vectors: F32 | None
    exclude: list[I64]


@dataclass
class _Record:
    cand: I64
    bm25: F64  # (len(cand), n_weights)
    cos: F64
    bm25_rank: F64  # (len(cand), n_weights), 1-based, inf outside the top DEPTH
    cos_rank: F64
    top_cosine: float
    words: int
    gold: npt.NDArray[np.bool_]


def _top(scores: F64, k: int) -> I64:
    hit = np.flatnonzero(scores > -np.inf)
    if len(hit) > k:
        hit = hit[np.argpartition(-scores[hit], k - 1)[:k]]
    out: I64 = hit[np.lexsort((hit, -scores[hit]))]
    return out


def _ranks(scores: F64, valid: npt.NDArray[np.bool_]) -> F64:
    r = np.full(len(scores), np.inf)
    idx = np.flatnonzero(valid)
    order = idx[np.lexsort((idx, -scores[idx]))][:DEPTH]
    r[order] = np.arange(1, len(order) + 1)
    return r


def _records(
    bm25: BM25Index,
    vectors: F32 | None,
    n_values: int,
    qs: CvQueries,
    weights: Sequence[float],
    step: Callable[[float, str | None], None],
) -> dict[bool, list[_Record]]:
    """Per query, for both row sets (with and without the extra rows): the union of each
    method's top DEPTH values with every score and rank."""
    out: dict[bool, list[_Record]] = {True: [], False: []}
    extra = np.arange(n_values, bm25.n_rows, dtype=np.int64)
    for i0 in range(0, len(qs.texts), 256):
        chunk = qs.texts[i0 : i0 + 256]
        sims = None
        if vectors is not None and qs.vectors is not None:
            sims = (qs.vectors[i0 : i0 + 256] @ vectors.T).astype(np.float64)
        for j, text in enumerate(chunk):
            sw, sg = bm25.field_scores(text)
            words = len(analyze(text, ngram=0)[0])
            own = qs.exclude[i0 + j]
            for rows in (True, False):
                excl = [own] if rows else [own, extra]
                b_rows = []
                for w in weights:
                    s = sw + w * sg
                    for x in excl:
                        s[x] = 0.0
                    b = bm25.best_per_value(s)
                    b[b <= 0] = -np.inf
                    b_rows.append(b)
                lists = [_top(b, DEPTH) for b in b_rows]
                e_val = None
                if sims is not None:
                    e = sims[j].copy()
                    for x in excl:
                        e[x] = -np.inf
                    e_val = bm25.best_per_value(e)
                    lists.append(_top(e_val, DEPTH))
                cand = np.unique(np.concatenate(lists))
                b_mat = np.stack([np.maximum(b[cand], 0.0) for b in b_rows], axis=1)
                cos = e_val[cand] if e_val is not None else np.zeros(len(cand))
                out[rows].append(
                    _Record(
                        cand=cand,
                        bm25=b_mat,
                        cos=cos,
                        bm25_rank=np.stack(
                            [_ranks(b_mat[:, i], b_mat[:, i] > 0) for i in range(len(weights))],
                            axis=1,
                        ),
                        cos_rank=_ranks(cos, np.isfinite(cos)),
                        top_cosine=float(cos.max()) if len(cos) else 0.0,
                        words=words,
                        gold=np.isin(cand, list(qs.gold[i0 + j])),
                    )
                )
        step(6.0 * len(chunk), "cross-validation")
    return out


def _scores(f: Fusion, r: _Record, wi: int) -> F64:
    if not f.embedding:
        s = r.bm25[:, wi].copy()
        s[s <= 0] = -np.inf
        return s
    if not f.bm25:
        return r.cos
    return f.combine(
        r.bm25[:, wi],
        r.cos,
        top_cosine=r.top_cosine,
        words=r.words,
        bm25_ranks=r.bm25_rank[:, wi],
        cosine_ranks=r.cos_rank,
    )


def _recall(f: Fusion, recs: Sequence[_Record], wi: int) -> dict[str, float]:
    hits = np.zeros(len(KS))
    for r in recs:
        if not r.gold.any():
            continue
        s = _scores(f, r, wi)
        g = s[r.gold].max()
        if g == -np.inf:
            continue
        first = r.cand[r.gold & (s == g)].min()
        rank = int((s > g).sum() + ((s == g) & (r.cand < first)).sum())
        hits += [rank < k for k in KS]
    n = max(len(recs), 1)
    return {f"R@{k}": round(float(h / n), 4) for k, h in zip(KS, hits, strict=True)}


def _objective(r: Mapping[str, float]) -> float:
    return float(np.mean([r[f"R@{k}"] for k in KS]))


def choose_fusion(
    bm25: BM25Index,
    vectors: F32 | None,
    n_values: int,
    styles: Sequence[CvQueries],
    step: Callable[[float, str | None], None],
) -> tuple[Fusion, dict[str, Any]]:
    """The candidate with the best mean objective over ``styles`` (module docstring)."""
    grid = [f for f in fusion_grid() if vectors is not None or not f.embedding]
    weights = sorted({f.ngram_weight for f in grid})
    recs = {qs.name: _records(bm25, vectors, n_values, qs, weights, step) for qs in styles}
    results: dict[str, dict[str, Any]] = {}
    best: tuple[float, Fusion] | None = None
    for f in grid:
        wi = weights.index(f.ngram_weight)
        per = {name: _recall(f, by_rows[f.extra_rows], wi) for name, by_rows in recs.items()}
        score = float(np.mean([_objective(r) for r in per.values()]))
        results[f.name] = {**per, "objective": round(score, 4)}
        if best is None or score > best[0] + 1e-9:
            best = (score, f)
    assert best is not None
    return best[1], {
        "method": "leave-one-out over synonyms/examples, and terse rewrites of descriptions",
        "queries": {qs.name: len(qs.texts) for qs in styles},
        "objective": "mean over query styles of the mean of R@1, R@10, R@100",
        "candidates": results,
        "chosen": best[1].name,
    }
