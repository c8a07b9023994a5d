"""The combined ranking of benchmarks/classify.py: the model's exact label log-probabilities plus
a weighted prior from the retriever's rank, the weight calibrated on pseudo-queries only.

    score(c) = logprob_model(c) - w * log(1 + rank_retriever(c))        (rank 0 = first)

``w = 0`` is the model's exact top-1; a large ``w`` is the retriever's order (the model only
breaks ties, which ranks never have). :func:`calibrate` picks ``w`` from :data:`WEIGHTS` by the
top-1 accuracy on the calibration rows (pseudo-queries: synonyms held out of the index, never a
test query), ties broken by the mean reciprocal rank of the gold, then by the smaller weight.
The rule is fixed here, before any test outcome is read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0)
"""The weights tried (16 is, on k = 20 candidates, the retriever's order in practice)."""


def combined_ranking(
    candidates: Sequence[str], model: Mapping[str, float], weight: float
) -> list[str]:
    """``candidates`` (the retriever's order) reranked by the combined score; a candidate the
    model could not score (absent from ``model``) ranks after every scored one."""

    def key(item: tuple[int, str]) -> tuple[bool, float, int]:
        rank, c = item
        if c not in model:
            return (True, 0.0, rank)
        return (False, -(model[c] - weight * math.log1p(rank)), rank)

    return [c for _, c in sorted(enumerate(candidates), key=key)]


def reciprocal_rank(ranking: Sequence[str], gold: frozenset[str] | set[str]) -> float:
    """1 / (position of the first gold label, from 1); 0 when none is ranked."""
    return next((1.0 / (i + 1) for i, c in enumerate(ranking) if c in gold), 0.0)


def evaluate_weight(rows: Sequence[Mapping[str, Any]], weight: float) -> tuple[float, float]:
    """(top-1 accuracy, mean reciprocal rank) of the combined ranking over ``rows`` (each with
    ``candidates``, ``model`` {label: logprob} and ``gold``)."""
    if not rows:
        raise ValueError("no rows to evaluate")
    acc = mrr = 0.0
    for r in rows:
        ranking = combined_ranking(r["candidates"], r["model"], weight)
        gold = frozenset(r["gold"])
        acc += bool(ranking) and ranking[0] in gold
        mrr += reciprocal_rank(ranking, gold)
    return acc / len(rows), mrr / len(rows)


def calibrate(
    rows: Sequence[Mapping[str, Any]], weights: Sequence[float] = WEIGHTS
) -> tuple[float, dict[str, list[float]]]:
    """The weight of ``weights`` with the best (accuracy, MRR) on ``rows``, the smaller weight
    on a tie; and every weight's ``[accuracy, MRR]`` (keys as ``str(weight)``)."""
    table = {str(w): [round(x, 4) for x in evaluate_weight(rows, w)] for w in weights}
    best = max(weights, key=lambda w: (table[str(w)][0], table[str(w)][1], -w))
    return best, table
