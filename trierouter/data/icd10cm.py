"""ICD-10-CM FY2026 codes and descriptions (from the ``simple-icd-10-cm`` package)."""

from __future__ import annotations

import json
import os
import random
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

from trierouter.errors import missing

__all__ = ["icd10cm_codes", "icd10cm_description", "icd10cm_path", "write_icd10cm_eval_set"]


def _icd_module() -> Any:
    try:
        with warnings.catch_warnings():  # the package reads its data with a deprecated API
            warnings.simplefilter("ignore", DeprecationWarning)
            import simple_icd_10_cm as cm
    except ImportError as exc:
        raise missing("simple-icd-10-cm", "data") from exc
    return cm


def icd10cm_path(code: str) -> tuple[str, ...]:
    """Chapter, block, category ... of an ICD-10-CM code, as readable labels (coarse to fine):
    the ``path`` of :func:`trierouter.shortlist.build_hierarchy` for these codes."""
    cm = _icd_module()
    out = []
    for a in reversed(cm.get_ancestors(code)):
        desc = str(cm.get_description(a))
        desc = desc if len(desc) <= 60 else desc[:59] + "…"
        # chapter and block descriptions end with their code range already
        out.append(desc if cm.is_chapter(a) or cm.is_block(a) else f"{a} {desc}")
    return tuple(out)


@lru_cache(maxsize=1)
def _icd() -> tuple[str, ...]:
    cm = _icd_module()
    # the package lists five three-character codes (B20, F99, ...) twice: keep one of each
    return tuple(dict.fromkeys(c for c in cm.get_all_codes(True) if cm.is_leaf(c)))


def icd10cm_codes(k: int | None = None, *, seed: int = 0) -> list[str]:
    """The 74,731 distinct billable ICD-10-CM codes (``S72.001A``), or a seeded sample of ``k``."""
    codes = list(_icd())
    if k is None or k >= len(codes):
        return codes
    return sorted(random.Random(seed).sample(codes, k))


def icd10cm_description(code: str) -> str:
    """The official description of an ICD-10-CM code."""
    return str(_icd_module().get_description(code))


def write_icd10cm_eval_set(
    directory: str | os.PathLike[str],
    *,
    n_labels: int = 50,
    n_examples: int = 20,
    seed: int = 0,
) -> tuple[Path, Path]:
    """A small labelled set for ``trierouter eval``: ``data.jsonl`` and ``labels.jsonl``.

    ``n_labels`` seeded ICD-10-CM codes with their descriptions (``{"label", "description"}``
    per line) and ``n_examples`` texts, each an inclusion term of one of those codes (its
    description where it has none) with the code as gold label (``{"text", "label"}``).
    Returns ``(data_path, labels_path)``.
    """
    if n_labels < 1 or n_examples < 1:
        raise ValueError(f"n_labels={n_labels}, n_examples={n_examples}: expected >= 1 each")
    cm = _icd_module()
    codes = icd10cm_codes(n_labels, seed=seed)
    rng = random.Random(seed)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    labels_path, data_path = out / "labels.jsonl", out / "data.jsonl"
    with open(labels_path, "w", encoding="utf-8") as f:
        for c in codes:
            f.write(json.dumps({"label": c, "description": icd10cm_description(c)}) + "\n")
    with open(data_path, "w", encoding="utf-8") as f:
        for _ in range(n_examples):
            c = rng.choice(codes)
            terms = [str(t) for t in cm.get_inclusion_term(c)] or [icd10cm_description(c)]
            f.write(json.dumps({"text": rng.choice(terms), "label": c}) + "\n")
    return data_path, labels_path
