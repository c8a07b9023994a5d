"""The registry-size pool without BFCL's near-duplicates (``bfcl_offline.py --distinct``).

BFCL ships the same function under several names (``gcd``, ``math.gcd``, ``math_gcd`` next to
``number_theory.gcd``; ``calculate_BMI`` next to ``calculate_bmi``); pooled together, the model
may call another name for the same function and the official checker counts it wrong, which
measures BFCL's redundancy, not routing. Rule: a pooled function is a near-duplicate of a
question's function when

- its name, lowercased with non-alphanumerics removed, equals that of the question's function
  (``calculate_BMI`` / ``calculate_bmi``, ``math_gcd`` / ``math.gcd``; the last name component
  alone would also pair ``geometry_circle.calculate`` with ``electric_field.calculate``), or
- the cosine of their embeddings (the shipped all-MiniLM-L6-v2, text ``"name description"``,
  as the shortlist indexes them) is at least :data:`NEAR_COSINE`.

:data:`NEAR_COSINE` = 0.80 separates, in the previous 10,000-tool run, the ten wrong answers
that called a same-purpose function under another name (cosine 0.845-0.984: ``gcd`` /
``number_theory.gcd`` 0.953, ``calculate_BMI`` 0.967, ``rectangle.area`` /
``geometry_rectangle.calculate`` 0.868, ``compound_interest`` / ``calc_Compound_Interest``
0.851...) from the five that called a different function (0.621-0.745: ``us_history.
get_president`` for ``us_history.get_event_info``...). Near-duplicates of any evaluated
question's functions leave the pool; where two evaluated questions' own functions are
near-duplicates of each other, both stay in the pool and each is kept out of the other's
shortlist (counted as ``conflicts``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

NEAR_COSINE = 0.80
NAMES_RULE = "same name lowercased without non-alphanumerics (no similarity cutoff)"
"""The rule fixed before any run on it (``--distinct-rule names``, ``scale_names`` in the JSON):
only functions that are the same name spelt otherwise (``calculate_BMI`` / ``calculate_bmi``,
``math_gcd`` / ``math.gcd``) leave the pool."""
_ALNUM = re.compile(r"[^a-z0-9]")


def flat_name(name: str) -> str:
    """The name lowercased, alphanumerics only."""
    return _ALNUM.sub("", name.lower())


def text_of(tool: dict[str, Any]) -> str:
    fn = tool["function"]
    return f"{fn['name']} {fn.get('description', '')}"


def near_duplicates(
    own: dict[str, list[dict[str, Any]]],
    pool: list[dict[str, Any]],
    cosine: float | None = NEAR_COSINE,
) -> tuple[set[str], dict[str, set[str]], dict[str, Any]]:
    """``(removed, conflicts, report)``: pool names to leave out, per question the other
    questions' own functions to keep out of its shortlist, and counts with examples.
    ``cosine=None``: the name rule alone (:data:`NAMES_RULE`, written down before any run on
    it), no embeddings."""
    from trierouter.shortlist import Embedder

    emb = Embedder() if cosine is not None else None
    pool_vecs = emb.encode([text_of(t) for t in pool]) if emb is not None else None
    pool_names = [t["function"]["name"] for t in pool]
    pool_flat = np.asarray([flat_name(n) for n in pool_names])
    own_names = {t["function"]["name"] for ts in own.values() for t in ts}
    banned: dict[str, set[str]] = {}
    by_name_rule: set[str] = set()
    by_cosine: set[str] = set()
    examples: dict[str, list[str]] = {}
    for q, tools in own.items():
        mine = {t["function"]["name"] for t in tools}
        close = np.zeros(len(pool), dtype=bool)
        if emb is not None and pool_vecs is not None and cosine is not None:
            vecs = emb.encode([text_of(t) for t in tools])
            close = (vecs @ pool_vecs.T).max(axis=0) >= cosine
        same = np.zeros(len(pool), dtype=bool)
        for t in tools:
            same |= pool_flat == flat_name(t["function"]["name"])
        hit = np.flatnonzero(same | close)
        names = {pool_names[j] for j in hit} - mine
        banned[q] = names
        by_name_rule |= {pool_names[j] for j in np.flatnonzero(same)} - mine
        by_cosine |= {pool_names[j] for j in np.flatnonzero(close)} - mine
        if names:
            examples[q] = sorted(names)[:6]
    removed = set().union(*banned.values()) - own_names if banned else set()
    conflicts = {q: names & own_names for q, names in banned.items()}
    report = {
        "rule": NAMES_RULE
        if cosine is None
        else f"same name lowercased without non-alphanumerics, or MiniLM cosine >= {cosine} "
        "(text: name + description)",
        "removed": len(removed),
        "removed_by_name": len(by_name_rule - own_names),
        "removed_by_cosine": len(by_cosine - own_names),
        "questions_with_conflicts": sum(bool(c) for c in conflicts.values()),
        "conflicts": {q: sorted(c) for q, c in conflicts.items() if c},
        "examples": dict(list(examples.items())[:12]),
    }
    return removed, conflicts, report
