"""Synthetic value sets for tests and benchmarks: tool names, non-ASCII labels, mixed values."""

from __future__ import annotations

import random

from trierouter.data.icd10cm import icd10cm_codes

__all__ = ["mixed_values", "non_ascii_labels", "tool_names"]


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
