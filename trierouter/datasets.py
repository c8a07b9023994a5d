"""Real and synthetic value sets for the demo, tests and benchmarks (no network).

Real sets come from packages: ICD-10-CM codes (``simple-icd-10-cm``), subdivision names
(``pycountry``). Synthetic tool names follow the shape of real API operations
(``verb_object_qualifier``, about 25 bytes), seeded and reproducible.
"""

from __future__ import annotations

import json
import os
import random
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

from trierouter.errors import missing

__all__ = [
    "icd10cm_codes",
    "icd10cm_description",
    "mixed_values",
    "non_ascii_labels",
    "tool_names",
    "write_icd10cm_eval_set",
]

_VERBS = (
    "get list create update delete search fetch sync send archive restore export "
    "import approve reject assign close open merge publish schedule cancel refund "
    "validate"
).split()
_OBJECTS = (
    "user order invoice payment report file team project issue comment repo branch "
    "event calendar message channel account customer product price stock shipment "
    "ticket lead contact campaign subscription webhook token secret cluster node "
    "volume backup dataset model job pipeline artifact release deployment alert "
    "incident metric dashboard"
).split()
_QUALIFIERS = (
    "by_id by_name details status history summary settings members permissions items "
    "attachments labels versions logs stats config schema owner tags notes"
).split()


def tool_names(k: int, *, seed: int = 0) -> list[str]:
    """``k`` distinct tool-like names such as ``list_invoice_attachments_v2`` (~25 bytes)."""
    if k < 0:
        raise ValueError(f"k={k} must be >= 0")
    rng = random.Random(seed)
    out: set[str] = set()
    names: list[str] = []
    while len(names) < k:
        parts = [rng.choice(_VERBS), rng.choice(_OBJECTS)]
        if rng.random() < 0.8:
            parts.append(rng.choice(_QUALIFIERS))
        if rng.random() < 0.5:
            parts.insert(1, rng.choice(_OBJECTS))
        name = "_".join(parts)
        if name in out or rng.random() < 0.6:
            name = (
                f"{name}_v{rng.randint(1, 99)}"
                if rng.random() < 0.5
                else f"{rng.choice(_OBJECTS)}.{name}"
            )
        if name not in out:
            out.add(name)
            names.append(name)
    return names


def _icd_module() -> Any:
    try:
        with warnings.catch_warnings():  # the package reads its data with a deprecated API
            warnings.simplefilter("ignore", DeprecationWarning)
            import simple_icd_10_cm as cm
    except ImportError as exc:
        raise missing("simple-icd-10-cm", "data") from exc
    return cm


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


_NON_ASCII = [
    "café",
    "crème brûlée",
    "naïve",
    "Zürich",
    "São Paulo",
    "Kraków",
    "Ærøskøbing",
    "Ελλάδα",
    "Москва",
    "東京都",
    "北京市",
    "서울특별시",
    "ไทย",
    "हिन्दी",
    "العربية",
    "עברית",
    "😀 smile",
    "🇫🇷 France",
    "👩‍💻 coder",
    "∑ sum",
    "日本語のラベル",
    "ℕ naturals",
    "emoji 🎉 party",
]


def non_ascii_labels(k: int, *, seed: int = 0) -> list[str]:
    """``k`` distinct labels with accents, CJK, RTL scripts and emoji (many multi-byte)."""
    rng = random.Random(seed)
    base = list(_NON_ASCII)
    try:
        import pycountry

        base += sorted(s.name for s in pycountry.subdivisions)
    except ImportError:
        pass
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < k:
        v = rng.choice(base)
        if v in seen or rng.random() < 0.3:
            v = f"{v} {rng.choice(_NON_ASCII)}"
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def mixed_values(k: int, *, seed: int = 0) -> list[str]:
    """A mix of tool names, ICD-10-CM-shaped codes, non-ASCII labels and prefix chains."""
    rng = random.Random(seed)
    n_tools = k // 2
    n_codes = k // 4
    n_labels = k // 8
    vals = tool_names(n_tools, seed=seed)
    try:
        vals += icd10cm_codes(n_codes, seed=seed)
    except ImportError:
        vals += [
            f"{rng.choice('ABCDEFGHJKLMNOPQRSTVZ')}{rng.randint(0, 99):02d}.{rng.randint(0, 9999)}"
            for _ in range(n_codes)
        ]
    vals += non_ascii_labels(n_labels, seed=seed)
    if not vals:
        vals = tool_names(1, seed=seed)
    # values that are prefixes of others: get, get_user, get_user_by_id ...
    while len(set(vals)) < k:
        base = rng.choice(vals)
        cut = rng.randint(1, max(1, len(base)))
        vals.append(base[:cut])
        if len(set(vals)) < k:
            vals.append(base + rng.choice(["", "_x", "2", ".", " é"]))
    out = list(dict.fromkeys(vals))[:k]
    rng.shuffle(out)
    return out
