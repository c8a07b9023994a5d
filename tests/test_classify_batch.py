"""benchmarks/classify_batch.py's batched mode computes what one text per call computes: several
texts' prompts and token trees in one padded forward call give every candidate the same score
(1e-5, float32), the same best path and the same greedy label as ``tree_logits`` per text."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import load_script

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.test_classify import _one_thread, tiny
from trierouter.classify import Classifier
from trierouter.data import icd10cm_codes, icd10cm_description
from trierouter.router.tree_scores import greedy_label, token_tree, tree_logits, tree_scores

PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "classify_batch.py"
__all__ = ["_one_thread", "tiny"]  # the tiny model and one thread, as in test_classify
TEXTS = [
    "cholera due to vibrio cholerae",
    "typhoid fever",
    "salmonella enteritis with a much longer description of the case to pad the others",
    "amoebic dysentery",
]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script(PATH)


def test_batched_trees_score_as_one_text_per_call(bench: ModuleType, tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    codes = icd10cm_codes()[:5000]
    descs = [icd10cm_description(c) for c in codes]
    clf = Classifier(codes, descriptions=descs, model=(model, tok), policy="shortlist", k=12)
    contexts, trees = [], []
    for text in TEXTS:
        tree = token_tree(clf.routed.choices_for(text), limit=512)
        assert tree is not None
        contexts.append(tok(clf.render_prompt(text))["input_ids"])
        trees.append(tree)
    assert len({len(c) + len(t) for c, t in zip(contexts, trees, strict=True)}) > 1  # padded
    for size in (1, 3, 4):
        batched = []
        for s in range(0, len(TEXTS), size):
            batched += bench.tree_logits_batch(model, contexts[s : s + size], trees[s : s + size])
        for ctx, tree, got in zip(contexts, trees, batched, strict=True):
            one = tree_logits(model, ctx, tree)
            assert got.shape == one.shape
            a, b = tree_scores(tree, one), tree_scores(tree, got)
            assert a.keys() == b.keys() and len(a) == 12
            for v in a:
                assert abs(a[v][0] - b[v][0]) < 1e-5 and a[v][1] == b[v][1]
            assert greedy_label(tree, one) == greedy_label(tree, got)
