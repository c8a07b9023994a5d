"""The combined ranking of a shortlist classifier: the model's exact label scores plus the
retriever's rank, one weight, calibrated on the label set's own synonyms or examples.

    score(c) = logprob_model(c) - w * log(1 + rank_retriever(c))        (rank 0 = first)

``logprob_model`` is the exact constrained log-probability of the label's best token path
(:class:`~trierouter.classify.LabelScore`), ``rank_retriever`` its position in the shortlist.
``w = 0`` is the model's exact top-1; a large ``w`` is the retriever's order (the model then
only breaks ties, which ranks never have). A candidate the model could not score ranks after
every scored one.

:func:`calibrate` picks ``w`` from :data:`WEIGHTS` by the top-1 accuracy of the combined
ranking on calibration rows, ties broken by the mean reciprocal rank of the gold, then by the
smaller weight. The calibration texts must be the label set's own material, never a test query:
:func:`hold_out_synonyms` holds some synonyms out of the retriever's index so that they can
serve as pseudo-queries (``Classifier.calibrate_combine`` runs the model on them).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "WEIGHTS",
    "Combine",
    "calibrate",
    "combined_ranking",
    "combined_score",
    "evaluate_weight",
    "hold_out_synonyms",
    "reciprocal_rank",
]

WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0)
"""The weights :func:`calibrate` tries (16 is, on 20 candidates, the retriever's order in
practice)."""


@dataclass(frozen=True)
class Combine:
    """How a classifier combines the model's scores with the retriever's rank."""

    weight: float
    """``w`` of the combined score (see the module docstring)."""
    calibrated_on: tuple[str, ...] = ()
    """The texts the weight was chosen on (empty when it was given explicitly)."""
    by_weight: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Every weight tried: ``str(weight) -> (top-1 accuracy, mean reciprocal rank)``."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.weight) or self.weight < 0:
            raise ValueError(f"combine weight={self.weight}: expected a finite number >= 0")


def combined_score(logprob: float, rank: int, weight: float) -> float:
    """The combined score of a candidate at retriever rank ``rank`` (0 = first)."""
    return logprob - weight * math.log1p(rank)


def combined_ranking(
    candidates: Sequence[str], model: Mapping[str, float], weight: float
) -> list[str]:
    """``candidates`` (the retriever's order) reranked by the combined score; a candidate the
    model could not score (absent from ``model``) ranks after every scored one."""

    def key(item: tuple[int, str]) -> tuple[bool, float, int]:
        rank, c = item
        if c not in model:
            return (True, 0.0, rank)
        return (False, -combined_score(model[c], rank, weight), rank)

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
    if not weights:
        raise ValueError("no weights to try")
    table = {str(w): [round(x, 4) for x in evaluate_weight(rows, w)] for w in weights}
    best = max(weights, key=lambda w: (table[str(w)][0], table[str(w)][1], -w))
    return best, table


def hold_out_synonyms(
    synonyms: Mapping[str, Sequence[str]], n: int, *, seed: int = 0
) -> tuple[dict[str, list[str]], list[tuple[str, frozenset[str]]]]:
    """Split a label set's synonyms (``{label: [synonym, ...]}``) into those to index and
    ``n`` held out as calibration pseudo-queries, drawn with ``random.Random(seed)``.

    Returns the synonyms to give the retriever (the held-out ones removed, labels left with
    none dropped) and the held-out ``(synonym, labels it names)`` pairs for
    ``Classifier.calibrate_combine``."""
    gold: dict[str, set[str]] = {}
    for label, terms in synonyms.items():
        for t in terms:
            gold.setdefault(t, set()).add(label)
    if not 0 < n <= len(gold):
        raise ValueError(f"n={n}: expected 1..{len(gold)} (the distinct synonyms)")
    held = random.Random(f"calibration:{seed}").sample(sorted(gold), n)
    out = set(held)
    kept = {c: [t for t in ts if t not in out] for c, ts in synonyms.items()}
    return {c: ts for c, ts in kept.items() if ts}, [(t, frozenset(gold[t])) for t in held]
