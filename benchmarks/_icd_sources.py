"""ICD-10-CM data for benchmarks/shortlist.py: codes, descriptions, the inclusion-term split
(synonyms to index vs held-out queries) and the other query sources, seeded."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from trierouter.data import icd10cm_codes, icd10cm_description
from trierouter.data.icd10cm_queries import (
    ICD10CM_QUERY_SOURCES,
    QuerySet,
    icd10cm_inclusion_terms,
    icd10cm_queries,
)

SEED = 0
ROWS_PER_TERM = 4  # a category-level term is indexed under at most this many of its leaves


@dataclass
class IcdData:
    codes: list[str]
    descs: list[str]
    synonyms: dict[str, list[str]]  # code -> training inclusion terms (indexed)
    train_terms: list[str]
    sources: dict[str, QuerySet]  # held-out queries per source


def term_targets(gold: frozenset[str], descs: dict[str, str]) -> list[str]:
    """The codes a training term is indexed under: 'unspecified' leaves first, then by code."""
    return sorted(gold, key=lambda c: ("unspecified" not in descs[c].lower(), c))[:ROWS_PER_TERM]


@lru_cache(maxsize=1)
def icd_data(max_per_source: int = 2000) -> IcdData:
    codes = icd10cm_codes()
    descs = [icd10cm_description(c) for c in codes]
    by_code = dict(zip(codes, descs, strict=True))
    terms = icd10cm_inclusion_terms()
    names = sorted(terms)
    random.Random(SEED).shuffle(names)
    half = len(names) // 2
    train, test = sorted(names[:half]), sorted(names[half:])
    synonyms: dict[str, list[str]] = {}
    for t in train:
        for c in term_targets(terms[t], by_code):
            synonyms.setdefault(c, []).append(t)
    sources: dict[str, QuerySet] = {}
    for s in ICD10CM_QUERY_SOURCES:
        if s == "inclusion":
            q = QuerySet(
                "inclusion",
                "simple-icd-10-cm inclusion terms, held-out half",
                test,
                [terms[t] for t in test],
            )
        else:
            q = icd10cm_queries(s)
        if len(q) > max_per_source:
            idx = sorted(random.Random(SEED).sample(range(len(q)), max_per_source))
            q = QuerySet(
                q.name,
                q.origin + f" (seeded sample of {max_per_source} of {len(q)})",
                [q.queries[i] for i in idx],
                [q.gold[i] for i in idx],
            )
        sources[s] = q
    return IcdData(codes, descs, synonyms, train, sources)


def fine_tune_pairs(data: IcdData, per_term: int = 2) -> list[tuple[str, str]]:
    """Pairs from training terms only: term -> a description of a code it is indexed under,
    and term -> another training term of the same code."""
    by_code = dict(zip(data.codes, data.descs, strict=True))
    pairs: list[tuple[str, str]] = []
    for code, ts in data.synonyms.items():
        for t in ts:
            pairs.append((t, by_code[code]))
        if len(ts) > 1:
            pairs += [(t, ts[(j + 1) % len(ts)]) for j, t in enumerate(ts)]
    return list(dict.fromkeys(pairs))
