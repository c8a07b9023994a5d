"""The free answer -> label mapping of benchmarks/classify.py's free_mapped arm, against a brute
force over every label (and the retriever's answer when no label starts the answer)."""

from __future__ import annotations

import random
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import load_script

PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "_classify_arms.py"
LABELS = ["E10", "E10.9", "E10.65", "I38", "N18.9", "N18.1", "S68.119S", "S68.119", "A1", "flu"]
BOUNDARY = re.compile(r"($|[\s:;,)\]]|\.($|\s))")


@pytest.fixture(scope="module")
def arms() -> ModuleType:
    return load_script(PATH)


def brute(answer: str, labels: list[str]) -> str | None:
    """The longest label that starts the (stripped) answer and ends at a boundary."""
    text = answer.strip().strip("`*\"'")
    fits = [lab for lab in labels if text.startswith(lab) and BOUNDARY.match(text, len(lab))]
    return max(fits, key=len, default=None)


def nearest(text: str) -> str:
    """A stand-in retriever: the label sharing the most characters with the text."""
    return max(LABELS, key=lambda lab: (len(set(lab) & set(text)), lab))


def test_map_free_equals_brute_force(arms: ModuleType) -> None:
    rng = random.Random(0)
    tails = ["", ":", ": Type 1 diabetes", " stage 1", ".", ". Done", ".9", "9", "X", ",", ")", "S"]
    heads = ["", " ", "`", "**", "'"]
    answers = ["", "  ", "Chronic kidney disease", "no idea", "E1", "e10.9", "E10.9.1"]
    for _ in range(400):
        h = rng.choice(heads)
        answers.append(h + rng.choice(LABELS) + rng.choice(tails) + h[::-1])
    seen = set()
    for answer in answers:
        label, how = arms.map_free(answer, set(LABELS), nearest)
        expected = brute(answer, LABELS)
        if not answer.strip().strip("`*\"'"):
            assert (label, how) == (None, "empty")
        elif expected is not None:
            assert (label, how) == (expected, "code"), answer
        else:
            assert (label, how) == (nearest(answer.strip().strip("`*\"'")), "retriever"), answer
        seen.add(how)
    assert seen == {"empty", "code", "retriever"}
    assert arms.map_free("E10.9: Type 1 diabetes", set(LABELS), nearest) == ("E10.9", "code")
    assert arms.map_free("E10.", set(LABELS), nearest) == ("E10", "code")


def test_free_summary_counts(arms: ModuleType) -> None:
    rows = [
        {"label": "E10", "gold": ["E10"], "how": "code", "seconds": 1.0},
        {"label": "I38", "gold": ["E10"], "how": "retriever", "seconds": 3.0},
        {"label": None, "gold": ["E10"], "how": "empty", "seconds": 2.0},
        {"label": "flu", "gold": ["flu"], "how": "retriever", "seconds": 2.0},
    ]
    s = arms.free_summary(rows)
    assert (s["n"], s["free_mapped"], s["code_hits"]) == (4, 0.5, 1)
    assert (s["mapped_by_code"], s["mapped_by_retriever"], s["empty"]) == (0.25, 0.5, 0.25)
    assert s["seconds_per_text"] == 2.0
