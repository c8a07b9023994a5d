"""A tool registry in ≈√K labelled groups: by namespace (an API, a dotted prefix), else learned.

    groups = ToolGroups.build(names, vectors=unit_vectors_of_the_tools_without_a_namespace)
    groups.label_of("stripe.com:GetCharges")     # 'stripe.com'
    groups.rank(index.scores(query))             # [(group id, best member's search score)]

A tool's **namespace** is the structure its name already has (:func:`tool_namespace`): an
OpenAPI operation ``api:operation`` belongs to its API (``googleapis.com/drive:files.list``:
``googleapis.com`` → ``googleapis.com/drive``), a dotted function ``math.gcd`` to ``math``. A
tool without one (``calculate_bmi``; with ``min_prefix``, also a dotted prefix too rare to
be a namespace) is put in a **learned group**: spherical k-means over the
embeddings the caller passes (``vectors``; the benchmark uses the shipped MiniLM's embeddings of
:func:`~trierouter.shortlist.tool_text.tool_text`), one cluster per ≈√K such tools, named by the
words most typical of its members' texts. Those paths are balanced into ≈⌈√K⌉ groups of at most
2⌈√K⌉ members by :func:`~trierouter.shortlist.hierarchy.build_hierarchy` (a large API split along
its next level, small namespaces packed with their neighbours in sorted order). A group's
**label** is what a model reads and spells: the deepest namespace its members share, or where they
span several, the most common of those (or cluster names), at most three; unique among the
groups.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trierouter.shortlist.hierarchy import build_hierarchy, kmeans_paths

__all__ = ["ToolGroup", "ToolGroups", "tool_namespace"]

F64 = npt.NDArray[np.float64]

_OP_HEAD = re.compile(r"^(?:(?:GET|PUT|POST|PATCH|DELETE|HEAD|OPTIONS) +)?/?([^./_ {]+)")


def tool_namespace(name: str) -> tuple[str, ...]:
    """The namespaces of a tool name, coarse to fine; ``()`` for a name without one.

    ``"googleapis.com/drive:files.list"`` → ``("googleapis.com", "googleapis.com/drive",
    "googleapis.com/drive:files")``; ``"1forge.com:GET /quotes"`` → ``("1forge.com",
    "1forge.com:quotes")``; ``"a.b.c"`` → ``("a", "a.b")``; ``"gcd"`` → ``()``."""
    if ":" in name:
        api, op = name.split(":", 1)
        parts = api.split("/")
        levels = ["/".join(parts[: i + 1]) for i in range(len(parts)) if parts[i]]
        head = _OP_HEAD.match(op)
        if head and head.group(1) != op:
            levels.append(f"{api}:{head.group(1)}")
        return tuple(dict.fromkeys(levels))
    dots = name.split(".")
    return tuple(".".join(dots[: i + 1]) for i in range(len(dots) - 1) if dots[i])


@dataclass(frozen=True)
class ToolGroup:
    """One group of tools."""

    label: str
    """What a model reads and spells for it (unique among the groups)."""
    members: tuple[str, ...]
    """Its tools' names."""
    learned: bool
    """Whether any member came from a learned group (no namespace of its own)."""


class ToolGroups:
    """A partition of a registry's tools into labelled groups (see the module docstring)."""

    def __init__(self, names: Sequence[str], groups: Sequence[ToolGroup]) -> None:
        self.names = list(names)
        self.groups = tuple(groups)
        pos = {n: i for i, n in enumerate(self.names)}
        if len(pos) != len(self.names):
            raise ValueError("names must be distinct")
        self.group_ids = np.full(len(self.names), -1, np.int64)
        """Per tool (in ``names`` order), its group's index."""
        for g, group in enumerate(self.groups):
            for m in group.members:
                i = pos.get(m)
                if i is None:
                    raise ValueError(f"group {group.label!r} holds {m!r}, which is not a tool")
                if self.group_ids[i] >= 0:
                    raise ValueError(f"tool {m!r} is in more than one group")
                self.group_ids[i] = g
        if (self.group_ids < 0).any():
            lost = self.names[int(np.flatnonzero(self.group_ids < 0)[0])]
            raise ValueError(f"tool {lost!r} is in no group")
        labels = [g.label for g in self.groups]
        if len(set(labels)) != len(labels):
            raise ValueError("group labels must be unique")
        self._pos = pos

    def __len__(self) -> int:
        return len(self.groups)

    def __repr__(self) -> str:
        sizes = [len(g.members) for g in self.groups]
        return (
            f"ToolGroups({len(self.names)} tools in {len(self.groups)} groups, sizes "
            f"{min(sizes)}..{max(sizes)}, {sum(g.learned for g in self.groups)} learned)"
        )

    def group_of(self, name: str) -> int:
        """The index of ``name``'s group (``KeyError`` for an unknown tool)."""
        return int(self.group_ids[self._pos[name]])

    def label_of(self, name: str) -> str:
        """The label of ``name``'s group."""
        return self.groups[self.group_of(name)].label

    def member_ids(self, group: int) -> npt.NDArray[np.int64]:
        """The tool indices (into ``names``) of group ``group``, in ``names`` order."""
        return np.flatnonzero(self.group_ids == group)

    def group_scores(self, scores: F64) -> F64:
        """Per group, its best member's score (``scores``: one per tool, in ``names`` order)."""
        if len(scores) != len(self.names):
            raise ValueError(f"scores has {len(scores)} entries for {len(self.names)} tools")
        out = np.full(len(self.groups), -np.inf)
        np.maximum.at(out, self.group_ids, np.asarray(scores, np.float64))
        return out

    def rank(self, scores: F64, k: int | None = None) -> list[tuple[int, float]]:
        """The groups by their best member's score, best first (ties: lower index first),
        those scoring above 0 only, at most ``k``: the search's group ranking."""
        gs = self.group_scores(scores)
        order = np.lexsort((np.arange(len(gs)), -gs))
        out = [(int(g), float(gs[g])) for g in order if gs[g] > 0]
        return out if k is None else out[:k]

    @classmethod
    def build(
        cls,
        names: Sequence[str],
        *,
        vectors: npt.NDArray[np.float32] | None = None,
        texts: Sequence[str] | None = None,
        group_size: int | None = None,
        min_prefix: int = 1,
        seed: int = 0,
    ) -> ToolGroups:
        """Group ``names`` (distinct tool names): by :func:`tool_namespace` where a name has
        one; the others by spherical k-means over ``vectors`` (unit vectors, one row per such
        tool, in ``names`` order) into one cluster per ``group_size`` tools, named from their
        ``texts`` (one per name, all of ``names``; optional). Without ``vectors``, tools without
        a namespace are cut into runs of sorted names (not learned; say so where it matters).
        ``group_size``: default ⌈√K⌉. ``min_prefix``: a dotted prefix (``math`` of
        ``math.gcd``) is a namespace only where at least this many tools share its first level;
        the others count as without one (an API's namespace always counts)."""
        names = list(names)
        if len(set(names)) != len(names):
            raise ValueError("names must be distinct")
        if not names:
            raise ValueError("names is empty")
        s = group_size or math.isqrt(len(names) - 1) + 1
        spaces = [tool_namespace(n) for n in names]
        if min_prefix > 1:
            heads = Counter(p[0] for n, p in zip(names, spaces, strict=True) if p and ":" not in n)
            spaces = [
                () if p and ":" not in n and heads[p[0]] < min_prefix else p
                for n, p in zip(names, spaces, strict=True)
            ]
        bare = [i for i, p in enumerate(spaces) if not p]
        learned: dict[int, tuple[str, ...]] = {}
        if bare and vectors is not None:
            vecs = np.asarray(vectors, np.float32)
            if len(vecs) != len(bare):
                raise ValueError(
                    f"vectors has {len(vecs)} rows for the {len(bare)} tools without a "
                    "namespace (pass one row per such tool, in names order)"
                )
            bare_texts = None if texts is None else [texts[i] for i in bare]
            n_groups = max(1, math.ceil(len(bare) / s))
            paths = kmeans_paths(vecs, texts=bare_texts, n_groups=n_groups, seed=seed)
            learned = {i: ("~" + p[0],) for i, p in zip(bare, paths, strict=True)}
        elif bare:
            learned = {i: ("~",) for i in bare}
        full = [learned.get(i, p) for i, p in enumerate(spaces)]
        # sorted: small namespaces are packed with their neighbours (BFCL's apart from APIs)
        order = sorted(range(len(names)), key=lambda i: (":" in names[i], full[i], names[i]))
        h = build_hierarchy(
            [names[i] for i in order], [full[i] for i in order], sep="\x00", group_size=s
        )
        path_of = dict(zip(names, full, strict=True))
        is_learned = {names[i] for i in learned}
        groups = []
        used: set[str] = set()
        for g in h.groups:
            label = _label([path_of[m] for m in g.members], used)
            used.add(label)
            groups.append(ToolGroup(label, g.members, any(m in is_learned for m in g.members)))
        return cls(names, groups)


def _label(paths: list[tuple[str, ...]], used: set[str]) -> str:
    """The deepest namespace all members share; else their most common first namespaces (or
    cluster names), at most three; ``#2``, ``#3`` ... where a label is taken."""
    depth = 0
    first = paths[0]
    while depth < len(first) and all(len(p) > depth and p[depth] == first[depth] for p in paths):
        depth += 1
    counts = Counter(p[depth] if len(p) > depth else "" for p in paths)
    if depth and (len(counts) == 1 or "" in counts):
        label = first[depth - 1]  # one namespace (or a run of it)
    else:  # several: the most common next levels
        top = sorted(counts, key=lambda u: (-counts[u], u))
        label = "; ".join(top[:3]) + ("; …" if len(top) > 3 else "")
    label = label.replace("~", "") or "other tools"
    n, out = 2, label
    while out in used:
        out, n = f"{label} #{n}", n + 1
    return out
