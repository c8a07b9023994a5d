"""The combined ranking (model exact scores + retriever-rank prior): checked against the formula
written out per candidate, the calibration against every weight, the Classifier's combined
predictions against a brute-force recomputation from their components on a tiny model, and the
calibration's inputs against the label set's own held-out synonyms."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

import trierouter.classify_combine as fusion
from trierouter.classify_combine import Combine, hold_out_synonyms


def _rows(seed: int, n: int = 40) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        cands = [f"C{i:02d}" for i in rng.sample(range(60), 8)]
        model = {c: -rng.expovariate(0.5) for c in cands if rng.random() > 0.1}
        gold = {cands[min(int(rng.expovariate(0.7)), 7)]}
        rows.append({"candidates": cands, "model": model, "gold": sorted(gold)})
    return rows


def test_ranking_is_the_written_out_score() -> None:
    for row in _rows(0):
        cands, model = row["candidates"], row["model"]
        for w in (0.0, 0.5, 3.0):
            got = fusion.combined_ranking(cands, model, w)
            assert sorted(got) == sorted(cands)  # a reordering, nothing lost or added
            score = {c: model[c] - w * math.log(1 + r) for r, c in enumerate(cands) if c in model}
            scored = [c for c in got if c in model]
            assert [score[c] for c in scored] == sorted(score.values(), reverse=True)
            assert got[len(scored) :] == [c for c in cands if c not in model]  # unscored last
        if all(c in model for c in cands):
            assert fusion.combined_ranking(cands, model, 0.0)[0] == max(model, key=model.get)
            assert fusion.combined_ranking(cands, model, 1e9) == cands  # the retriever's order


def test_calibration_picks_the_best_weight_on_its_rows() -> None:
    rows = _rows(1)
    w, table = fusion.calibrate(rows)
    best = max(table.values())
    assert table[str(w)] == best
    assert all(table[str(x)] < best for x in fusion.WEIGHTS if x < w)  # smallest among ties
    for x in fusion.WEIGHTS:  # every entry is what evaluating that weight gives
        acc = sum(
            fusion.combined_ranking(r["candidates"], r["model"], x)[0] in r["gold"] for r in rows
        )
        assert table[str(x)][0] == round(acc / len(rows), 4)
    with pytest.raises(ValueError, match="no rows"):
        fusion.evaluate_weight([], 1.0)


def test_hold_out_synonyms_splits_the_sets_own_synonyms() -> None:
    syn = {"A": ["a1", "a2", "shared"], "B": ["b1", "shared"], "C": ["c1"]}
    kept, held = hold_out_synonyms(syn, 3, seed=4)
    assert (kept, held) == hold_out_synonyms(syn, 3, seed=4)  # seeded
    terms = {t for ts in syn.values() for t in ts}
    held_terms = {t for t, _ in held}
    assert len(held_terms) == 3 and held_terms <= terms
    assert not held_terms & {t for ts in kept.values() for t in ts}  # never indexed
    assert held_terms | {t for ts in kept.values() for t in ts} == terms  # nothing else lost
    for t, gold in held:  # the gold of a term: every label that lists it
        assert gold == {c for c, ts in syn.items() if t in ts}
    assert all(ts for ts in kept.values())
    with pytest.raises(ValueError, match="n=6"):
        hold_out_synonyms(syn, 6)
    with pytest.raises(ValueError, match="weight"):
        Combine(-1.0)


# -- on a tiny model ------------------------------------------------------------------------------
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.test_classify import _one_thread, brute_force_scores, tiny
from trierouter.classify import Classifier
from trierouter.data import icd10cm_codes, icd10cm_description, icd10cm_synonyms
from trierouter.shortlist import Shortlist

QUERIES = ["cholera due to vibrio", "typhoid fever with pneumonia", "salmonella infection"]
K = 8
__all__ = ["_one_thread", "tiny"]  # the tiny model and one thread, as in test_classify


@pytest.fixture(scope="module")
def world(tiny: tuple[Any, Any]) -> dict[str, Any]:
    model, tok = tiny
    codes = icd10cm_codes()[:2000]
    descs = [icd10cm_description(c) for c in codes]
    synonyms = icd10cm_synonyms(codes)
    indexed, held = hold_out_synonyms(synonyms, 5, seed=0)
    sl = Shortlist.build(
        codes, descriptions=descs, synonyms=indexed, use_embedding=False, progress=False
    )
    return {
        "pair": (model, tok),
        "codes": codes,
        "descs": descs,
        "synonyms": synonyms,
        "indexed": indexed,
        "held": held,
        "retriever": sl,
    }


def _classifier(world: dict[str, Any], **kw: Any) -> Classifier:
    return Classifier(
        world["codes"],
        descriptions=world["descs"],
        model=world["pair"],
        policy="shortlist",
        retriever=world["retriever"],
        k=K,
        **kw,
    )


@pytest.mark.parametrize("tree_limit", [0, 512], ids=["search", "one-forward-tree"])
def test_combined_ranking_equals_brute_force_from_components(
    world: dict[str, Any], tree_limit: int
) -> None:
    model, tok = world["pair"]
    w = 0.75
    clf = _classifier(world, combine=w, top_n=5, tree_limit=tree_limit, score="exact")
    for text, p in zip(QUERIES, clf.classify(QUERIES), strict=True):
        cands = clf.candidates(text)  # the retriever's order
        assert len(cands) == K and p.candidates == K and p.ranking == "combined"
        context = tok(clf.render_prompt(text))["input_ids"]
        best, _ = brute_force_scores(model, tok, context, cands)
        expected = {c: best[c] - w * math.log(1 + r) for r, c in enumerate(cands)}
        assert len(p.scores) == 5
        for s in p.scores:  # each component, and the combination, recomputed
            assert abs(s.logprob - best[s.label]) < 1e-5
            assert s.retriever_rank == cands.index(s.label)
            assert s.combined is not None and abs(s.combined - expected[s.label]) < 1e-5
        got = [s.combined for s in p.scores]
        assert got == sorted(got, reverse=True)  # best first by the combined score
        top = sorted(expected.values(), reverse=True)
        assert all(abs(g - t) < 1e-5 for g, t in zip(got, top, strict=False))  # the top 5
        assert p.label == p.scores[0].label and expected[p.label] > top[0] - 1e-5
        assert p.model_label is not None and best[p.model_label] > max(best.values()) - 1e-5
    plain = _classifier(world, top_n=5, tree_limit=tree_limit, score="exact").classify(QUERIES)
    assert all(p.ranking == "model" and p.label == p.model_label for p in plain)
    assert [p.model_label for p in plain] == [p.label for p in plain]


def test_calibration_sees_only_the_sets_held_out_synonyms(world: dict[str, Any]) -> None:
    model, tok = world["pair"]
    held = world["held"]
    held_terms = [t for t, _ in held]
    # they are the set's own synonyms, unseen by the retriever's index, not a test query
    all_terms = {t for ts in world["synonyms"].values() for t in ts}
    assert set(held_terms) <= all_terms
    assert not set(held_terms) & {t for ts in world["indexed"].values() for t in ts}
    assert not set(held_terms) & set(QUERIES)
    clf = _classifier(world)
    seen: list[str] = []
    backend_classify = clf._backend.classify

    def spy(clf_: Any, texts: list[str], *a: Any) -> Any:
        seen.extend(texts)
        return backend_classify(clf_, texts, *a)

    clf._backend.classify = spy  # type: ignore[method-assign]
    c = clf.calibrate_combine(held)
    assert seen == held_terms and c.calibrated_on == tuple(held_terms)  # nothing else scored
    assert clf.combine is c and c.weight in fusion.WEIGHTS
    # the table, recomputed from brute-force model scores of every candidate
    rows = []
    for text, gold in held:
        cands = clf.candidates(text)
        context = tok(clf.render_prompt(text))["input_ids"]
        best, _ = brute_force_scores(model, tok, context, cands)
        rows.append({"candidates": cands, "model": best, "gold": sorted(gold)})
    for x in fusion.WEIGHTS:
        acc, mrr = fusion.evaluate_weight(rows, x)
        assert c.by_weight[str(x)] == pytest.approx((acc, mrr), abs=1e-4)
    assert clf.classify(QUERIES[:1])[0].ranking == "combined"


def test_combine_needs_a_shortlist_and_exact_scores(world: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="shortlist"):
        Classifier(["a", "b"], model=world["pair"], combine=1.0)
    clf = Classifier(["a", "b"], model=world["pair"])
    with pytest.raises(ValueError, match="shortlist"):
        clf.calibrate_combine([("a", "a")])
