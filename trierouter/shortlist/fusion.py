"""How a :class:`~trierouter.shortlist.Shortlist` combines BM25 and the embedding.

Two rules, both over the union of each method's top ``depth`` values:

- ``"rrf"``: weighted reciprocal-rank fusion, ``bm25 / (c + rank_bm25) + embedding / (c +
  rank_embedding)``; fixed weights for every query.
- ``"score"``: ``(1 - a) * bm25_score / top_bm25_score + a * cosine``, where the embedding's
  share ``a`` is fixed (``embedding / (bm25 + embedding)``) or, with ``steep`` or
  ``length_weight`` set, chosen per query from how sure the embedding is and how long the query
  is: ``a = sigmoid(steep * (top_cosine - midpoint) + length_weight * (short_query - words))``.
  A terse query the embedding cannot place (a low best cosine: abbreviations, shorthand) leans
  on BM25's character n-grams; a short plain phrase the embedding places well leans on the
  embedding. Every value in the union is scored by both methods exactly (the BM25 score of
  every row is computed anyway; cosines of BM25-only values are computed from their vectors).

:func:`terse` writes the second query style cross-validation uses besides the set's own
synonyms and examples: each description rewritten tersely, the way short titles and shorthand
are written. It needs nothing but the descriptions.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_FUSION", "Fusion", "fusion_grid", "terse"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Fusion:
    """How BM25 and the embedding rankings are combined (module docstring).

    A zero weight switches that method off (it is then not even run at query time).
    """

    bm25: float
    """Weight of BM25 (``"rrf"``; ``"score"`` with a fixed share)."""
    embedding: float
    """Weight of the embedding (``"rrf"``; ``"score"`` with a fixed share)."""
    c: float = 60.0
    """Rank offset of ``"rrf"``: small values trust each list's top ranks more."""
    ngram_weight: float = 0.5
    """Weight of BM25's character n-gram field against its word field."""
    extra_rows: bool = True
    """Index synonyms and examples as extra texts of their values (else descriptions only:
    questions that name several things can mislead more than they help)."""
    method: str = "rrf"
    """``"rrf"`` or ``"score"``."""
    steep: float = 0.0
    """``"score"``: how fast the embedding's share rises with its best cosine (0: fixed)."""
    midpoint: float = 0.75
    """``"score"``: the best cosine at which the share is one half (length term aside)."""
    length_weight: float = 0.0
    """``"score"``: how much each query word fewer than ``short_query`` adds to the share."""
    short_query: float = 3.0
    """``"score"``: the query length (BM25 words) where the length term is zero."""

    def __post_init__(self) -> None:
        if self.method not in ("rrf", "score"):
            raise ValueError(f"method={self.method!r}; expected 'rrf' or 'score'")
        if self.bm25 < 0 or self.embedding < 0 or not (self.bm25 or self.embedding):
            raise ValueError("bm25 and embedding weights must be >= 0, and not both 0")

    @property
    def adaptive(self) -> bool:
        """Whether the embedding's share changes per query."""
        return self.method == "score" and bool(self.steep or self.length_weight)

    @property
    def name(self) -> str:
        rows = "" if self.extra_rows else ", descriptions only"
        if not self.embedding:
            return f"bm25(ngram={self.ngram_weight:g}{rows})"
        if not self.bm25:
            return f"embedding{'(descriptions only)' if rows else ''}"
        if self.adaptive:
            return (
                f"adaptive(cosine {self.midpoint:g} x{self.steep:g}, words "
                f"{self.short_query:g} x{self.length_weight:g}, ngram={self.ngram_weight:g}{rows})"
            )
        if self.method == "score":
            share = self.embedding / (self.bm25 + self.embedding)
            return f"score(embedding share={share:.2g}, ngram={self.ngram_weight:g}{rows})"
        return (
            f"rrf(bm25={self.bm25:g}, embedding={self.embedding:g}, c={self.c:g}, "
            f"ngram={self.ngram_weight:g}{rows})"
        )

    def embedding_share(self, top_cosine: float, words: int) -> float:
        """``a`` of the ``"score"`` rule for a query (module docstring)."""
        if not self.adaptive:
            return self.embedding / (self.bm25 + self.embedding)
        x = self.steep * (top_cosine - self.midpoint)
        x += self.length_weight * (self.short_query - words)
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))

    def combine(
        self,
        bm25_scores: F64,
        cosines: F64,
        *,
        top_cosine: float,
        words: int,
        bm25_ranks: F64 | None = None,
        cosine_ranks: F64 | None = None,
    ) -> F64:
        """Fused scores of candidate values from both methods' scores (``"score"``) or ranks
        (``"rrf"``: 1-based, ``inf`` outside a method's list)."""
        if self.method == "rrf":
            assert bm25_ranks is not None and cosine_ranks is not None
            out: F64 = self.bm25 / (self.c + bm25_ranks) + self.embedding / (self.c + cosine_ranks)
            return out
        a = self.embedding_share(top_cosine, words)
        top = float(bm25_scores.max()) if len(bm25_scores) else 0.0
        out = (1.0 - a) * bm25_scores / (top if top > 0 else 1.0) + a * cosines
        return out


DEFAULT_FUSION = Fusion(
    bm25=1.0,
    embedding=1.0,
    ngram_weight=1.0,
    method="score",
    steep=10.0,
    midpoint=0.7,
    length_weight=0.5,
    short_query=4.0,
)
"""Used when the set has no synonyms or examples to validate on: what cross-validation chose
on ICD-10-CM (74,731 codes, the training half of its inclusion terms and terse descriptions)."""


def fusion_grid() -> list[Fusion]:
    """The candidates cross-validation scores: each method alone, fixed-weight RRF, a fixed
    score share, and the query-adaptive share; with and without the extra rows."""
    out: list[Fusion] = []
    for rows in (True, False):
        out += [Fusion(1.0, 0.0, ngram_weight=w, extra_rows=rows) for w in (0.25, 0.5, 1.0)]
        out.append(Fusion(0.0, 1.0, extra_rows=rows))
        for w in (0.25, 0.5, 1.0):
            for emb in (0.5, 1.0, 2.0, 4.0):
                for c in (5.0, 20.0, 60.0):
                    out.append(Fusion(1.0, emb, c=c, ngram_weight=w, extra_rows=rows))
        for w in (0.5, 1.0):
            for share in (0.5, 0.6, 0.7, 0.8):
                out.append(
                    Fusion(1.0 - share, share, ngram_weight=w, extra_rows=rows, method="score")
                )
            for steep in (10.0, 15.0, 20.0):
                for mid in (0.7, 0.75, 0.8):
                    for lw, sq in ((0.0, 3.0), (0.5, 3.0), (0.5, 4.0), (1.0, 3.0), (1.0, 4.0)):
                        out.append(
                            Fusion(
                                1.0,
                                1.0,
                                ngram_weight=w,
                                extra_rows=rows,
                                method="score",
                                steep=steep,
                                midpoint=mid,
                                length_weight=lw,
                                short_query=sq,
                            )
                        )
    return out


_VOWELS = frozenset("aeiouAEIOU")
_SMALL = frozenset(("of", "the", "and", "with", "in"))


def _shorten(word: str, rng: random.Random) -> str:
    if len(word) < 6 or not word.isalpha():
        return word
    r = rng.random()
    if r < 0.45:
        return word[: rng.randint(3, 5)]
    if r < 0.7:
        return word[0] + "".join(ch for ch in word[1:] if ch not in _VOWELS)
    return word


def terse(text: str, rng: random.Random) -> str:
    """A terse rewrite of ``text``: half the time the qualifier after its last comma dropped;
    words of six letters or more cut to a 3-5 letter prefix (45%) or stripped of their vowels
    after the first letter (25%); small words (of, the, and, with, in) dropped 40% of the time.
    ``"Chronic kidney disease, stage 3"`` → e.g. ``"Chrnc kidne dss"``."""
    if "," in text and rng.random() < 0.5:
        text = text.rsplit(",", 1)[0]
    out: list[str] = []
    for w in re.findall(r"\S+", text):
        core = w.strip(",;()")
        if core.lower() in _SMALL and rng.random() < 0.4:
            continue
        out.append(w.replace(core, _shorten(core, rng)) if core else w)
    return " ".join(out)


def terse_queries(descriptions: Sequence[str], n: int, seed: int) -> tuple[list[str], list[int]]:
    """Up to ``n`` terse rewrites of seeded descriptions that differ from their source, with
    the index of the description (value) each comes from."""
    pick = sorted(random.Random(seed).sample(range(len(descriptions)), min(n, len(descriptions))))
    queries: list[str] = []
    owners: list[int] = []
    for i in pick:
        q = terse(descriptions[i], random.Random(seed * 1_000_003 + i))
        if q.strip() and q.lower() != descriptions[i].lower():
            queries.append(q)
            owners.append(i)
    return queries, owners
