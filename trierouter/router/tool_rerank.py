"""The tool to call, chosen among a search's candidates by the model's own scores of their names.

    reranker = ToolReranker(model, tokenizer, index=ToolIndex.build(registry), k=32)
    reranker.calibrate(examples)          # the registry's own (query, tool) examples, never tests
    ranking = reranker.rank(messages)     # ToolRanking: every candidate, combined order
    ranking.tool                          # the chosen name; ranking.tools[i]: its scores

A search (:class:`~trierouter.shortlist.tool_text.ToolIndex`, BM25 over each tool's text) finds
the question's tool among its first 5 far more often than first. Far more candidates than fit
as descriptions in a prompt fit as *names* in one forward call: the prompt is the model's chat
template with a short instruction and the conversation (every turn, not only the last line),
then the assistant's turn, where the model would write the tool's name. Each candidate's name
is scored on its **canonical path** (its tokenizer's own encoding, closed by the best end id),
all candidates as one token tree after the prompt in ONE forward call
(:mod:`trierouter.router.path_scores`): the score is the *constrained* log-probability, the
model's distribution renormalised at every step over the tokens that continue some candidate's
name (``score_kind = "canonical"``: at most the exact best-path score, equal when the canonical
path is the best one). It is combined with the search rank as the classifier combines
(:mod:`trierouter.classify_combine`): ``logprob - w * log(1 + search_rank)``; ``w = 0`` is the
model alone, a large ``w`` the search's order. :meth:`ToolReranker.calibrate` chooses ``w`` on
the registry owner's own example queries.

The scoring engine is the classifier's and the grouped router's:
:class:`~trierouter.router.label_scorer.TransformersScorer` (``reranker.scorer``), whose
:meth:`~trierouter.router.label_scorer.TransformersScorer.score_sets` also scores several
candidate sets after one prompt in one forward call.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from trierouter.classify_combine import (
    WEIGHTS,
    Combine,
    calibrate,
    combined_ranking,
    combined_score,
)
from trierouter.registry.index import TokenIndex
from trierouter.router.label_scorer import TransformersScorer, as_messages, chat_context

__all__ = [
    "DEFAULT_INSTRUCTION",
    "RankedTool",
    "ToolRanking",
    "ToolReranker",
    "as_messages",
    "one_line",
    "rank_by",
    "tool_prompt",
]

DEFAULT_INSTRUCTION = (
    "You choose the one tool (function) to call for the user's request. "
    "Answer with the tool's exact name only."
)
"""The system instruction of :func:`tool_prompt` (fixed, not tuned; what the prompt lists of
the candidates is compared on BFCL's dev split in ``benchmarks/tool_rerank.py``)."""

ScoreKind = Literal["canonical"]
Listing = Literal["none", "names", "descriptions"]
ONE_LINE_CHARS = 80
"""The most characters of a candidate's description shown by ``listing="descriptions"``."""


def one_line(text: str, limit: int = ONE_LINE_CHARS) -> str:
    """``text``'s first sentence, whitespace collapsed, cut at a word within ``limit``."""
    flat = " ".join(text.split())
    head = flat.split(". ", 1)[0]
    if len(head) <= limit:
        return head
    return head[:limit].rsplit(" ", 1)[0] + "..."


@dataclass(frozen=True, slots=True)
class RankedTool:
    """One candidate tool and how it was ranked."""

    name: str
    """The tool's name."""
    search_rank: int
    """Its position in the search's candidates (0 = the search's first)."""
    search_score: float
    """The search's score (BM25 for a ToolIndex; as given for explicit candidates)."""
    logprob: float
    """The model's constrained log-probability of the name's canonical path after the prompt
    (renormalised over the candidates' names at every step, the closing end id included)."""
    combined: float
    """``logprob - weight * log(1 + search_rank)``: what the ranking sorts by."""
    tokens: tuple[int, ...] = ()
    """The canonical path scored, the closing end id included."""


@dataclass(frozen=True)
class ToolRanking:
    """The candidates of one conversation, best first by the combined score."""

    tools: list[RankedTool]
    """Every candidate, in combined order (ties: the search's order)."""
    weight: float
    """``w`` of the combined score."""
    score_kind: ScoreKind = "canonical"
    """Which model score was computed: ``"canonical"``, each name's canonical path (see the
    module docstring), constrained to the candidates."""
    tree_nodes: int = 0
    """Nodes of the token tree laid out after the prompt (the root included)."""
    prompt_tokens: int = 0
    """Tokens of the prompt (chat template, instruction, conversation)."""
    forward_calls: int = 0
    """The model's forward calls (1 when there are candidates)."""
    respelled: list[str] = field(default_factory=list)
    """Names whose encoding did not spell them in the set, scored on their longest-match
    spelling instead."""
    search_ms: float = 0.0
    """Milliseconds of the search (0 for explicit candidates)."""
    model_ms: float = 0.0
    """Milliseconds of the prompt, the set's compile and the forward call."""
    query: str = ""
    """What the search looked for (empty for explicit candidates)."""

    @property
    def tool(self) -> str | None:
        """The chosen tool (``None`` when the search found nothing)."""
        return self.tools[0].name if self.tools else None

    def names(self) -> list[str]:
        """The candidates' names, best first."""
        return [t.name for t in self.tools]

    def explain(self) -> str:
        """Why the tool was chosen, as text: one line per candidate, best first, with its
        search rank and score, the model's log-probability and the combined score."""
        head = (
            f"{len(self.tools)} candidates for {self.query[:80]!r}, "
            f"combined = logprob - {self.weight:g} * log(1 + search rank), "
            f"{self.score_kind} scores"
        )
        rows = [
            f"{'*' if i == 0 else ' '} {t.name}  search #{t.search_rank + 1} ({t.search_score:g})"
            f"  logprob {t.logprob:.3f}  combined {t.combined:.3f}"
            for i, t in enumerate(self.tools)
        ]
        return "\n".join([head, *rows])


def tool_prompt(
    tokenizer: Any,
    conversation: str | Sequence[Mapping[str, Any]],
    *,
    instruction: str = DEFAULT_INSTRUCTION,
    listed: Sequence[str] | Mapping[str, str] | None = None,
) -> list[int]:
    """The prompt's token ids (:func:`~trierouter.router.label_scorer.chat_context`): the chat
    template over the ``instruction`` as the system message, the whole conversation, and the
    assistant's turn opened, where the model writes the tool's name. ``listed``: names to show
    in the instruction, a mapping with a one-line description each (``None``: none shown)."""
    system = instruction
    if isinstance(listed, Mapping):
        system += "\nTools:" + "".join(
            f"\n- {n}: {d}" if d else f"\n- {n}" for n, d in listed.items()
        )
    elif listed:
        system += "\nTools: " + ", ".join(listed)
    return chat_context(tokenizer, conversation, system)


class ToolReranker:
    """Ranks a search's candidate tools by the model's canonical-path name scores combined with
    the search rank (module docstring).

    ``model``, ``tokenizer``: a transformers causal LM and its tokenizer (with its chat
    template). ``index``: the search (a :class:`~trierouter.shortlist.tool_text.ToolIndex`, or
    anything with ``search(query, k) -> [(name, score)]``); optional when candidates are
    passed to :meth:`rank`. ``k``: candidates per conversation. ``combine``: the weight ``w``
    or a :class:`~trierouter.classify_combine.Combine` (``0``: the model alone, until
    :meth:`calibrate`). ``listing``: what the instruction shows of the candidates (sorted by
    name, not in the search's order): ``"none"``, their ``"names"``, or ``"descriptions"``
    (name and :func:`one_line` of ``descriptions[name]``; longer prompt, slower call).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        index: Any = None,
        k: int = 32,
        combine: float | Combine = 0.0,
        instruction: str = DEFAULT_INSTRUCTION,
        listing: Listing = "none",
        descriptions: Mapping[str, str] | None = None,
    ) -> None:
        if k < 1:
            raise ValueError(f"k={k}: expected >= 1 candidates")
        self.model = model
        self.tokenizer = tokenizer
        self.scorer = TransformersScorer((model, tokenizer))
        self.index = index
        self.k = k
        self.combine = combine if isinstance(combine, Combine) else Combine(float(combine))
        self.instruction = instruction
        if listing not in ("none", "names", "descriptions"):
            raise ValueError(f"listing={listing!r}: expected 'none', 'names' or 'descriptions'")
        if listing == "descriptions" and descriptions is None:
            raise ValueError("listing='descriptions' needs descriptions={name: text}")
        self.listing: Listing = listing
        self.descriptions = descriptions or {}
        self.token_index = TokenIndex.get(self.scorer.vocabulary)

    def listed(self, names: Sequence[str]) -> list[str] | dict[str, str] | None:
        """What the prompt shows of ``names`` (see ``listing``)."""
        if self.listing == "names":
            return sorted(names)
        if self.listing == "descriptions":
            return {n: one_line(self.descriptions.get(n, "")) for n in sorted(names)}
        return None

    def search(self, conversation: str | Sequence[Mapping[str, Any]]) -> tuple[str, Any]:
        """The search's query for ``conversation`` (its last user and tool turns, newest
        first, as the server searches) and its ``(name, score)`` candidates."""
        from trierouter.router.vllm.tool_search import conversation_query

        if self.index is None:
            raise ValueError("no index: pass index= to ToolReranker, or candidates= to rank()")
        query = conversation_query(as_messages(conversation))
        return query, self.index.search(query, self.k)

    def rank(
        self,
        conversation: str | Sequence[Mapping[str, Any]],
        *,
        candidates: Sequence[tuple[str, float]] | None = None,
    ) -> ToolRanking:
        """Every candidate of ``conversation``, best first by the combined score.

        ``candidates``: ``(name, search score)`` pairs in the search's order (default: the
        index's top ``k`` for the conversation's query)."""
        query, ms = "", 0.0
        if candidates is None:
            t0 = time.perf_counter()
            query, candidates = self.search(conversation)
            ms = (time.perf_counter() - t0) * 1000
        cands = list(dict.fromkeys((str(n), float(s)) for n, s in candidates))
        names = [n for n, _ in cands]
        if len(set(names)) != len(names):
            raise ValueError("candidates: a name appears twice with different scores")
        t0 = time.perf_counter()
        if not names:
            return ToolRanking([], self.combine.weight, search_ms=ms, query=query)
        context = tool_prompt(
            self.tokenizer,
            conversation,
            instruction=self.instruction,
            listed=self.listed(names),
        )
        [scores], nodes, respelled = self.scorer.score_sets(context, [names], self.token_index)
        ranking = rank_by(cands, scores, self.combine.weight)
        return ToolRanking(
            ranking,
            self.combine.weight,
            tree_nodes=nodes,
            prompt_tokens=len(context),
            forward_calls=1,
            respelled=respelled,
            search_ms=ms,
            model_ms=(time.perf_counter() - t0) * 1000,
            query=query,
        )

    def calibrate(
        self,
        examples: Sequence[tuple[str | Sequence[Mapping[str, Any]], str | Collection[str]]],
        *,
        weights: Sequence[float] = WEIGHTS,
    ) -> Combine:
        """Choose ``w`` on ``examples`` and use it from now on.

        ``examples``: ``(conversation, gold tool name or names)`` from the registry's own
        material (its owner's example queries, questions written for each tool), never test
        questions. Each is searched and scored once; the weight of ``weights`` with the best
        top-1 (then mean reciprocal rank, then the smaller weight) is kept, with the table of
        all, in the returned :class:`~trierouter.classify_combine.Combine`."""
        rows = []
        for conversation, gold in examples:
            r = self.rank(conversation)
            rows.append(
                {
                    "candidates": [t.name for t in sorted(r.tools, key=lambda t: t.search_rank)],
                    "model": {t.name: t.logprob for t in r.tools},
                    "gold": [gold] if isinstance(gold, str) else sorted(gold),
                }
            )
        w, table = calibrate(rows, weights)
        texts = tuple(c if isinstance(c, str) else str(c[-1].get("content")) for c, _ in examples)
        self.combine = Combine(
            w, calibrated_on=texts, by_weight={k: (v[0], v[1]) for k, v in table.items()}
        )
        return self.combine


def rank_by(
    candidates: Sequence[tuple[str, float]],
    scores: Mapping[str, tuple[float, tuple[int, ...]]],
    weight: float,
) -> list[RankedTool]:
    """``candidates`` (``(name, search score)``, the search's order) as :class:`RankedTool`,
    in :func:`~trierouter.classify_combine.combined_ranking`'s order (ties: the search's)."""
    names = [n for n, _ in candidates]
    rank = {n: r for r, n in enumerate(names)}
    search = dict(candidates)
    order = combined_ranking(names, {n: lp for n, (lp, _) in scores.items()}, weight)
    return [
        RankedTool(n, rank[n], search[n], lp, combined_score(lp, rank[n], weight), path)
        for n in order
        for lp, path in [scores[n]]
    ]
