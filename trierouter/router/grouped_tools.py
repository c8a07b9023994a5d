"""√K routing over a tool registry: the model picks a group exactly, then a tool inside it.

    router = GroupedRouter(groups, index, scorer, descriptions=descs)
    route = router.route("What is the weather in Oslo tomorrow?")
    route.tool, route.group          # the choice
    route.groups, route.tools        # every candidate considered, with its search and model score

Step 1, the group: the search (:class:`~trierouter.shortlist.tool_text.ToolIndex`, BM25 over
each tool's text) scores every tool once; a group's search score is its best member's
(:meth:`~trierouter.shortlist.tool_groups.ToolGroups.rank`). The ``keep_groups`` best groups
(``None``: every group) are listed in the prompt by label, and the model scores each label on
its canonical token path, all in one tree after the prompt, one forward call per
``tree_limit`` nodes (:mod:`trierouter.router.path_scores`); the chosen group is the argmax of
those constrained log-probabilities, less ``combine`` times the log of one plus the
candidate's search rank (``combine=0``: the model alone; ties: the search's order).
``keep_groups=1`` is the search's own top group and costs no forward call.

Step 2, the tool: the search restricted to the chosen group (the same BM25 scores, members
only); its ``keep_tools`` best members are listed with their descriptions and scored the same
way (names on their canonical paths), the argmax by the same rule chosen; ``keep_tools=1``
is the restricted search's top member. Every score is recorded in the :class:`GroupedRoute`,
so a user can see why a group or a tool was or was not chosen; forward calls and their time
are counted apart from the search's.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.classify_combine import combined_score
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import compile_choices
from trierouter.router.label_scorer import TransformersScorer, chat_context
from trierouter.shortlist.tool_groups import ToolGroups
from trierouter.shortlist.tool_text import ToolIndex

__all__ = [
    "GROUP_PROMPT",
    "TOOL_PROMPT",
    "Candidate",
    "GroupChoice",
    "GroupedRoute",
    "GroupedRouter",
]

GROUP_PROMPT = (
    "You route a user's request to the group of tools that can answer it. The groups:\n"
    "{listing}\nAnswer with the name of one group, exactly as written."
)
"""Step 1's system message (``{listing}``: one ``- label`` line per candidate group)."""

TOOL_PROMPT = (
    "You choose the one tool that answers the user's request. The tools:\n{listing}\n"
    "Answer with the name of one tool, exactly as written."
)
"""Step 2's system message (``{listing}``: one ``- name: description`` line per tool)."""


@dataclass(frozen=True)
class Candidate:
    """A group or tool considered, with its scores."""

    name: str
    """The group's label or the tool's name."""
    search: float
    """Its search score (a group's: its best member's BM25 score)."""
    model: float | None
    """The model's constrained log-probability of its canonical path; ``None`` when the step
    used no model (one candidate, or ``keep_*=1``)."""
    combined: float | None = None
    """What the choice maximises: ``model - combine * log(1 + search rank)`` (rank 0 = the
    search's first); ``None`` without a model score."""


@dataclass
class GroupedRoute:
    """What :meth:`GroupedRouter.route` chose and why."""

    tool: str | None
    """The chosen tool (``None``: the search matched nothing)."""
    group: str | None
    """The chosen group's label."""
    groups: list[Candidate] = field(default_factory=list)
    """The candidate groups, in the search's order."""
    tools: list[Candidate] = field(default_factory=list)
    """The chosen group's candidate tools, in the restricted search's order."""
    ranking: list[str] = field(default_factory=list)
    """The tools reached, best first: the scored candidates by the choice's rule, then the
    rest of the group's restricted search."""
    forward_calls: int = 0
    """Forward calls of the model for this route."""
    search_ms: float = 0.0
    """Time in the search and the grouping (no model)."""
    model_ms: float = 0.0
    """Time in the model's forward calls and their scoring."""

    def explain(self) -> str:
        """Why this group and tool, as text: each step's candidates in the search's order,
        with the search score, the model's score and the combined one (``*``: chosen)."""
        lines = []
        for step, cands, chosen in (
            ("group", self.groups, self.group),
            ("tool", self.tools, self.tool),
        ):
            lines.append(f"{step}: {chosen} of {len(cands)} candidates")
            for c in cands:
                model = "—" if c.model is None else f"{c.model:.3f}"
                comb = "—" if c.combined is None else f"{c.combined:.3f}"
                mark = "*" if c.name == chosen else " "
                lines.append(
                    f"{mark} {c.name}  search {c.search:g}  model {model}  combined {comb}"
                )
        return "\n".join(lines)


@dataclass(frozen=True)
class GroupChoice:
    """Step 1's outcome: the query, every tool's search score, the chosen group's index (-1:
    the search matched nothing) and the route so far."""

    query: str
    scores: npt.NDArray[np.float64]
    group: int
    route: GroupedRoute


class GroupedRouter:
    """Two-step routing over ``groups`` (see the module docstring).

    ``index``: the search over the same tools (its :attr:`~ToolIndex.names` must equal
    ``groups.names``); ``scorer``: the model (``None``: the search's choices only, as with
    ``keep_groups=keep_tools=1``); ``descriptions``: per tool name, shown in step 2's listing
    (cut to ``description_chars``)."""

    def __init__(
        self,
        groups: ToolGroups,
        index: ToolIndex,
        scorer: TransformersScorer | None,
        *,
        descriptions: Mapping[str, str] | None = None,
        keep_groups: int | None = 8,
        keep_tools: int = 8,
        rank_pool: int = 16,
        description_chars: int = 100,
        tree_limit: int = 4096,
        combine: float = 0.0,
    ) -> None:
        if index.names != groups.names:
            raise ValueError("index and groups must hold the same tools in the same order")
        if keep_groups is not None and keep_groups < 1:
            raise ValueError(f"keep_groups={keep_groups}: expected >= 1 or None (every group)")
        if keep_tools < 1:
            raise ValueError(f"keep_tools={keep_tools}: expected >= 1")
        self.groups = groups
        self.index = index
        self.scorer = scorer
        self.descriptions = dict(descriptions or {})
        self.keep_groups = keep_groups
        self.keep_tools = keep_tools
        self.rank_pool = max(rank_pool, keep_tools)
        self.description_chars = description_chars
        self.tree_limit = tree_limit
        self.combine = combine
        self._token_index: TokenIndex | None = None

    def route(self, query: str) -> GroupedRoute:
        """Choose a group, then a tool in it, for ``query`` (the conversation as search text)."""
        return self.choose_tool(self.choose_group(query))

    def choose_group(self, query: str) -> GroupChoice:
        """Step 1 alone: the group (another router over the same groups and index, with other
        ``keep_tools``, may take step 2 from it)."""
        t0 = time.perf_counter()
        scores = self.index.scores(query)
        ranked = self.groups.rank(scores, self.keep_groups)
        out = GroupedRoute(tool=None, group=None)
        out.search_ms = (time.perf_counter() - t0) * 1000
        if not ranked:
            return GroupChoice(query, scores, -1, out)
        labels = [self.groups.groups[g].label for g, _ in ranked]
        listing = "\n".join(f"- {lb}" for lb in labels)
        model = self._score(GROUP_PROMPT.format(listing=listing), query, labels, out)
        out.groups = [
            self._candidate(lb, s, model, r)
            for r, (lb, (_, s)) in enumerate(zip(labels, ranked, strict=True))
        ]
        pick = _argmax(out.groups)
        out.group = labels[pick]
        return GroupChoice(query, scores, ranked[pick][0], out)

    def choose_tool(self, choice: GroupChoice) -> GroupedRoute:
        """Step 2: the tool inside ``choice``'s group (a new route; ``choice`` is unchanged)."""
        out = copy.deepcopy(choice.route)
        if choice.group < 0:
            return out
        t1 = time.perf_counter()
        scores = choice.scores
        members = self.groups.member_ids(choice.group)
        ms = scores[members]
        order = members[np.lexsort((members, -ms))]
        names = self.groups.names
        pool = [int(i) for i in order[: self.rank_pool]]
        cands = pool[: self.keep_tools]
        out.search_ms += (time.perf_counter() - t1) * 1000
        tool_names = [names[i] for i in cands]
        listing = "\n".join(self._tool_line(n) for n in tool_names)
        model = self._score(TOOL_PROMPT.format(listing=listing), choice.query, tool_names, out)
        out.tools = [
            self._candidate(n, float(scores[i]), model, r)
            for r, (n, i) in enumerate(zip(tool_names, cands, strict=True))
        ]
        by_rule = sorted(range(len(out.tools)), key=lambda j: _key(out.tools[j], j))
        out.ranking = [tool_names[j] for j in by_rule] + [names[i] for i in pool[len(cands) :]]
        out.tool = out.ranking[0]
        return out

    def _candidate(
        self, name: str, search: float, model: dict[str, float] | None, rank: int
    ) -> Candidate:
        if model is None:
            return Candidate(name, search, None)
        m = model[name]
        return Candidate(name, search, m, combined_score(m, rank, self.combine))

    def _tool_line(self, name: str) -> str:
        desc = " ".join(self.descriptions.get(name, "").split())
        if len(desc) > self.description_chars:
            desc = desc[: self.description_chars - 1] + "…"
        return f"- {name}: {desc}" if desc else f"- {name}"

    def _score(
        self, system: str, query: str, values: Sequence[str], out: GroupedRoute
    ) -> dict[str, float] | None:
        """The model's canonical-path score of each of ``values`` after the chat prompt (system
        message, then the query as the user's); ``None`` without a model or with one value."""
        if self.scorer is None or len(values) < 2:
            return None
        t0 = time.perf_counter()
        scorer = self.scorer
        if self._token_index is None:
            self._token_index = TokenIndex.get(scorer.vocabulary)
        cs = compile_choices(values, self._token_index)
        context = chat_context(scorer.tokenizer, query, system)
        paths, _ = canonical_paths_of(scorer, cs)
        before = scorer.calls
        scored, _, _ = scorer.score_canonical(context, cs, paths, len(values), self.tree_limit)
        out.forward_calls += scorer.calls - before
        out.model_ms += (time.perf_counter() - t0) * 1000
        return {s.label: s.logprob for s in scored}


def canonical_paths_of(scorer: TransformersScorer, cs: Any) -> tuple[dict[str, Any], list[str]]:
    """Every value's canonical path in ``cs`` (never ``None``: no fit check)."""
    got = scorer.canonical(cs, fit=False, limit=0)
    assert got is not None  # fit=False always returns the paths
    return got


def _key(c: Candidate, j: int) -> tuple[float, int]:
    return (-(c.combined if c.combined is not None else 0.0), j)


def _argmax(cands: Sequence[Candidate]) -> int:
    """The best candidate by model score (ties and no model: the search's order)."""
    return min(range(len(cands)), key=lambda j: _key(cands[j], j))
