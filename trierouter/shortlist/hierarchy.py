"""√K grouping: rewrite K values as ``group label + sep + value`` over ≈⌈√K⌉ balanced groups.

One :class:`~trierouter.ChoiceSet` compiled over those strings makes the decoding two-level by
itself: the model first spells a group label (one of ≈√K), then a member of that group (≤ 2⌈√K⌉),
in one generation; :meth:`Hierarchy.value_of` maps the decoded string back to the value.

Groups come from structure the values already have, given as a path of labels per value from
coarse to fine (an API per tool, ICD-10-CM chapter / block / category per code), or from
k-means over embeddings. Balancing (Proposition 2): with ``s = ⌈√K⌉``, a group of more than
``2s`` members is split along the next level of its path (or, at the last level, into runs of at
most ``s`` consecutive members); consecutive groups of fewer than ``s/2`` members are packed
together until they reach ``s``. Every group then has at most ``2s`` members and all groups but
the last packed one have at least ``s/2``, so ``s/2 - 1 < G ≤ 2s + 1`` (in practice close to s).
"""

from __future__ import annotations

import importlib
import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trierouter.errors import missing
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary

__all__ = [
    "Group",
    "Hierarchy",
    "build_hierarchy",
    "kmeans_paths",
    "namespace_path",
]

PathFn = Callable[[str], Sequence[str]]


@dataclass(frozen=True)
class Group:
    """One group of the rewritten set."""

    label: str
    """What the model spells first (unique among the groups)."""
    members: tuple[str, ...]
    """The original values in this group, in input order."""


def _sqrt_ceil(k: int) -> int:
    return max(1, math.isqrt(k - 1) + 1) if k > 0 else 1


class Hierarchy:
    """Values rewritten into labelled groups; compile it once, map decoded strings back."""

    def __init__(self, groups: Sequence[Group], *, sep: str = " / ") -> None:
        if not sep:
            raise ValueError("sep must be a non-empty string")
        self.sep = sep
        self.groups = tuple(groups)
        self._value_of: dict[str, str] = {}
        self._group_of: dict[str, int] = {}
        labels = [g.label for g in self.groups]
        if len(set(labels)) != len(labels):
            dup = next(lb for lb, c in Counter(labels).items() if c > 1)
            raise ValueError(f"group labels must be unique; {dup!r} appears more than once")
        for gi, g in enumerate(self.groups):
            for m in g.members:
                if m in self._group_of:
                    raise ValueError(f"value {m!r} is in more than one group")
                self._group_of[m] = gi
                s = g.label + sep + m
                if s in self._value_of:
                    raise ValueError(
                        f"{s!r} is ambiguous (labels or values contain sep={sep!r}); choose "
                        "another sep"
                    )
                self._value_of[s] = m

    def __len__(self) -> int:
        return len(self._group_of)

    def __repr__(self) -> str:
        sizes = self.sizes
        return (
            f"Hierarchy({len(self)} values in {len(self.groups)} groups, "
            f"sizes {min(sizes, default=0)}..{max(sizes, default=0)}, sep={self.sep!r})"
        )

    @property
    def sizes(self) -> list[int]:
        """Members per group."""
        return [len(g.members) for g in self.groups]

    @property
    def n_groups(self) -> int:
        """G, the number of groups."""
        return len(self.groups)

    def strings(self) -> list[str]:
        """``label + sep + value`` for every value, group by group."""
        return list(self._value_of)

    def string_of(self, value: str) -> str:
        """The rewritten string of ``value`` (``KeyError`` for an unknown value)."""
        return self.groups[self._group_of[value]].label + self.sep + value

    def group_of(self, value: str) -> str:
        """The label of ``value``'s group."""
        return self.groups[self._group_of[value]].label

    def value_of(self, text: str) -> str | None:
        """The value a decoded string stands for; ``None`` if it is not one of the strings."""
        return self._value_of.get(text)

    def compile(
        self, index: TokenIndex | Vocabulary, *, terminator: str | None = None
    ) -> ChoiceSet:
        """One ChoiceSet over all rewritten strings: decoding picks the group, then the member."""
        return compile_choices(self.strings(), index, terminator=terminator)


# -- building -----------------------------------------------------------------------------------
def build_hierarchy(
    values: Sequence[str],
    path: PathFn | Sequence[Sequence[str]] | None = None,
    *,
    sep: str = " / ",
    group_size: int | None = None,
) -> Hierarchy:
    """Group ``values`` along ``path`` (labels from coarse to fine, per value) into balanced
    groups of about ``group_size`` (default ⌈√K⌉) members.

    ``path`` is a function of the value or a sequence with one path per value; without one, the
    values are cut into runs of consecutive values (use :func:`kmeans_paths` for semantic groups).
    """
    if isinstance(values, str):
        raise TypeError("values must be a sequence of str, got a single str; wrap it in a list")
    vals = list(dict.fromkeys(values))
    if not vals:
        raise ValueError("values is empty")
    if path is None:
        paths: list[Sequence[str]] = [() for _ in vals]
    elif callable(path):
        paths = [path(v) for v in vals]
    else:
        if len(path) != len(values):
            raise ValueError(f"path has {len(path)} entries for {len(values)} values")
        first: dict[str, Sequence[str]] = {}
        for v, p in zip(values, path, strict=True):
            first.setdefault(v, p)
        paths = [first[v] for v in vals]
    s = group_size or _sqrt_ceil(len(vals))
    if s < 1:
        raise ValueError(f"group_size={group_size} must be >= 1")
    units = _expand(list(range(len(vals))), vals, paths, 0, "", s)
    packed = _pack(units, s)
    return Hierarchy(_unique_labels(packed, vals), sep=sep)


def _expand(
    items: list[int], vals: list[str], paths: list[Sequence[str]], depth: int, label: str, s: int
) -> list[tuple[str, list[int]]]:
    """Units of at most 2s members: a group too big is split along the next path level."""
    if len(items) <= 2 * s and label:
        return [(label, items)]
    sub: dict[str, list[int]] = {}
    rest: list[int] = []  # members whose path ends here
    for i in items:
        if len(paths[i]) > depth:
            sub.setdefault(paths[i][depth], []).append(i)
        else:
            rest.append(i)
    if len(sub) > 1 or (sub and (rest or not label)):
        out: list[tuple[str, list[int]]] = []
        if rest:
            out += _chunks(rest, vals, label, s)
        for lb, members in sub.items():
            out += _expand(members, vals, paths, depth + 1, lb, s)
        return out
    if sub:  # one child only: descend without a new label
        return _expand(items, vals, paths, depth + 1, label, s)
    return _chunks(items, vals, label, s)


def _chunks(items: list[int], vals: list[str], label: str, s: int) -> list[tuple[str, list[int]]]:
    """Runs of at most s consecutive members (in value order), labelled with their range."""
    if len(items) <= 2 * s:
        return [(label or _range_label(vals, items), items)]
    items = sorted(items, key=vals.__getitem__)
    n = math.ceil(len(items) / s)
    cuts = np.linspace(0, len(items), n + 1).round().astype(int)
    out = []
    for a, b in itertools.pairwise(cuts.tolist()):
        part = items[a:b]
        rng = _range_label(vals, part)
        out.append((f"{label} ({rng})" if label else rng, part))
    return out


def _range_label(vals: list[str], items: list[int]) -> str:
    a, b = vals[items[0]], vals[items[-1]]
    return a if a == b else f"{_short(a)} .. {_short(b)}"


def _short(v: str, n: int = 40) -> str:
    return v if len(v) <= n else v[: n - 1] + "…"


def _pack(units: list[tuple[str, list[int]]], s: int) -> list[tuple[str, list[int]]]:
    """Pack consecutive small units (< s/2 members) into groups of at least s members; a bin
    left small joins a neighbour when the result stays within 2s."""
    out: list[tuple[list[str], list[int]]] = []
    pending: tuple[list[str], list[int]] | None = None  # a small closed bin waiting for a home

    def emit(labels: list[str], items: list[int]) -> None:
        nonlocal pending
        if pending is not None:
            if len(pending[1]) + len(items) <= 2 * s:
                labels, items = pending[0] + labels, pending[1] + items
            else:
                out.append(pending)
            pending = None
        if 2 * len(items) < s:
            if out and len(out[-1][1]) + len(items) <= 2 * s:
                prev = out.pop()
                out.append((prev[0] + labels, prev[1] + items))
            else:
                pending = (labels, items)
            return
        out.append((labels, items))

    bin_labels: list[str] = []
    bin_items: list[int] = []
    for label, items in units:
        if 2 * len(items) >= s:
            if bin_items:
                emit(bin_labels, bin_items)
                bin_labels, bin_items = [], []
            emit([label], items)
            continue
        bin_labels.append(label)
        bin_items.extend(items)
        if len(bin_items) >= s:
            emit(bin_labels, bin_items)
            bin_labels, bin_items = [], []
    if bin_items:
        emit(bin_labels, bin_items)
    if pending is not None:
        out.append(pending)
    return [(_join_labels(labels), items) for labels, items in out]


def _join_labels(labels: list[str]) -> str:
    if len(labels) == 1:
        return labels[0]
    if len(labels) == 2:
        return f"{labels[0]}; {labels[1]}"
    return f"{labels[0]} .. {labels[-1]}"


def _unique_labels(groups: list[tuple[str, list[int]]], vals: list[str]) -> list[Group]:
    seen: Counter[str] = Counter(label for label, _ in groups)
    used: set[str] = set()
    out = []
    for label, items in groups:
        lb = label
        if seen[label] > 1 or lb in used:
            lb = f"{label} ({_range_label(vals, items)})"
            n = 2
            while lb in used:
                lb = f"{label} ({_range_label(vals, items)}) #{n}"
                n += 1
        used.add(lb)
        out.append(Group(lb, tuple(vals[i] for i in items)))
    return out


# -- paths from existing structure ---------------------------------------------------------------
def namespace_path(value: str, *, seps: str = ":/") -> tuple[str, ...]:
    """Namespaces of a tool name, coarse to fine: every prefix that ends before a separator,
    e.g. ``"github.com:repos/list"`` → ``("github.com", "github.com:repos")``; with
    ``seps="._"``, ``"get_user_by_id"`` → ``("get", "get_user", "get_user_by")``."""
    return tuple(
        value[: m.start()] for m in re.finditer(f"[{re.escape(seps)}]", value) if m.start()
    )


def kmeans_paths(
    vectors: npt.NDArray[np.float32],
    *,
    texts: Sequence[str] | None = None,
    n_groups: int | None = None,
    seed: int = 0,
    niter: int = 20,
) -> list[tuple[str]]:
    """One-level paths from spherical k-means over unit ``vectors`` (faiss), labelled by the
    words most typical of each cluster's ``texts`` (``cluster 17`` without texts)."""
    try:
        faiss = importlib.import_module("faiss")
    except ImportError as exc:
        raise missing("faiss-cpu", "shortlist") from exc
    x = np.ascontiguousarray(vectors, np.float32)
    n = len(x)
    g = min(n, n_groups or _sqrt_ceil(n))
    km = faiss.Kmeans(x.shape[1], g, niter=niter, seed=seed, spherical=True, verbose=False)
    km.train(x)
    _, assign = km.index.search(x, 1)
    labels = assign[:, 0].astype(np.int64)
    names = _cluster_names(labels, texts, g)
    return [(names[int(c)],) for c in labels]


def _cluster_names(labels: npt.NDArray[np.int64], texts: Sequence[str] | None, g: int) -> list[str]:
    if texts is None:
        return [f"cluster {c}" for c in range(g)]
    words = [set(re.findall(r"[a-z]{3,}", t.lower())) for t in texts]
    df: Counter[str] = Counter(w for ws in words for w in ws)
    per: list[Counter[str]] = [Counter() for _ in range(g)]
    for c, ws in zip(labels.tolist(), words, strict=True):
        per[c].update(ws)
    n = len(texts)
    names = []
    for c in range(g):
        top = sorted(per[c].items(), key=lambda kv: (-(kv[1] * math.log(n / df[kv[0]])), kv[0]))
        names.append(", ".join(w for w, _ in top[:3]) or f"cluster {c}")
    return names
