"""Evaluation of a classifier on a labelled data set, and the readers of label and example
files."""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trierouter.classify.classifier import Classifier
from trierouter.errors import TrieRouterError

__all__ = ["MODES", "DataError", "ModeResult", "evaluate", "load_examples", "load_labels"]


@dataclass
class ModeResult:
    """Validity and accuracy of one decoding mode over a labelled data set."""

    mode: str
    n: int
    valid: int
    correct: int
    seconds: float

    @property
    def validity(self) -> float:
        return self.valid / self.n if self.n else 0.0

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0


MODES = ("unconstrained", "constrained", "think")


def evaluate(
    clf: Classifier,
    examples: Sequence[tuple[str, str]],
    *,
    modes: Sequence[str] = MODES,
    progress: Callable[[str, int], None] | None = None,
) -> list[ModeResult]:
    """Validity (the answer is a label) and accuracy of each decoding mode on ``examples``.

    ``unconstrained``: greedy free text, the first line after ``Label:``; ``constrained``: the
    classifier's label; ``think``: think-then-answer, then the constrained label.
    """
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"modes {unknown}: expected some of {', '.join(MODES)}")
    texts = [t for t, _ in examples]
    gold = [g for _, g in examples]
    members = set(clf.labels)
    out = []
    for mode in modes:
        t0 = time.perf_counter()
        step: Callable[[int], None] | None = None
        if progress is not None:
            step = functools.partial(progress, mode)

        if mode == "unconstrained":
            answers: list[str | None] = list(clf.generate_free(texts))
            if step is not None:
                step(len(texts))
        else:
            preds = clf.classify(texts, top_n=1, think=mode == "think", progress=step)
            answers = [p.label for p in preds]
        valid = sum(a is not None and a in members for a in answers)
        correct = sum(a == g for a, g in zip(answers, gold, strict=True))
        out.append(ModeResult(mode, len(texts), valid, correct, time.perf_counter() - t0))
    return out


class DataError(TrieRouterError, ValueError):
    """A labelled data set or label file could not be read."""


def load_labels(path: str | os.PathLike[str]) -> tuple[list[str], list[str] | None]:
    """Read a label set: ``(labels, descriptions or None)``, with
    :func:`trierouter.registry.values.read_values` (``.txt`` one label per line,
    ``label<TAB>description`` also accepted; ``.json``; ``.jsonl``)."""
    from trierouter.registry.values import read_values

    read = read_values(path)
    return read.values, read.descriptions


def load_examples(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """Read a labelled data set: JSONL, one ``{"text": ..., "label": ...}`` object per line."""
    p = Path(path)
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{p}:{n}: not valid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict) or not all(
            isinstance(obj.get(k), str) for k in ("text", "label")
        ):
            raise DataError(f'{p}:{n}: expected {{"text": "...", "label": "..."}}')
        out.append((obj["text"], obj["label"]))
    if not out:
        raise DataError(f'{p}: no examples; expected JSONL lines {{"text": ..., "label": ...}}')
    return out
