"""The combined ranking of benchmarks/classify.py (model exact scores + retriever-rank prior):
checked against the formula written out per candidate, and the calibration against every weight."""

from __future__ import annotations

import math
import random
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import load_script

PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "_classify_fusion.py"


@pytest.fixture(scope="module")
def fusion() -> ModuleType:
    return load_script(PATH)


def _rows(seed: int, n: int = 40) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        cands = [f"C{i:02d}" for i in rng.sample(range(60), 8)]
        model = {c: -rng.expovariate(0.5) for c in cands if rng.random() > 0.1}
        gold = {cands[min(int(rng.expovariate(0.7)), 7)]}
        rows.append({"candidates": cands, "model": model, "gold": sorted(gold)})
    return rows


def test_ranking_is_the_written_out_score(fusion: ModuleType) -> None:
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


def test_calibration_picks_the_best_weight_on_its_rows(fusion: ModuleType) -> None:
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
