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

:func:`name_scores` scores several candidate sets after one prompt in one forward call (the
union of their paths as one tree; tree attention makes a node's logits depend on its own path
only, so each set's scores are those of its own call, renormalised over its own names).
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
from trierouter.registry.call_formats import has_chat_template
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.path_scores import canonical_paths, path_scores, path_tree
from trierouter.router.tree_scores import TokenTree, tree_logits

__all__ = [
    "DEFAULT_INSTRUCTION",
    "RankedTool",
    "ToolRanking",
    "ToolReranker",
    "as_messages",
    "name_scores",
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


def as_messages(conversation: str | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A conversation as chat messages: a string is one user message."""
    if isinstance(conversation, str):
        return [{"role": "user", "content": conversation}]
    out = [dict(m) for m in conversation]
    if not out or any("role" not in m for m in out):
        raise ValueError("conversation: expected a string or a non-empty list of {'role', ...}")
    return out


def tool_prompt(
    tokenizer: Any,
    conversation: str | Sequence[Mapping[str, Any]],
    *,
    instruction: str = DEFAULT_INSTRUCTION,
    listed: Sequence[str] | Mapping[str, str] | None = None,
) -> list[int]:
    """The prompt's token ids: the tokenizer's chat template over the ``instruction`` (a system
    message, before the conversation's own system text), the whole conversation, and the
    assistant's turn opened, where the model writes the tool's name. ``listed``: names to show
    in the instruction, a mapping with a one-line description each (``None``: none shown)."""
    if not has_chat_template(tokenizer):
        raise ValueError(
            "the tokenizer has no chat_template: set tokenizer.chat_template (the served "
            "model's) so the prompt is the one the model was trained on"
        )
    system = instruction
    if isinstance(listed, Mapping):
        system += "\nTools:" + "".join(
            f"\n- {n}: {d}" if d else f"\n- {n}" for n, d in listed.items()
        )
    elif listed:
        system += "\nTools: " + ", ".join(listed)
    messages = as_messages(conversation)
    if messages[0]["role"] == "system":
        own = messages.pop(0).get("content")
        if isinstance(own, str) and own.strip():
            system += "\n\n" + own
    ids = tokenizer.apply_chat_template(
        [{"role": "system", "content": system}, *messages],
        add_generation_prompt=True,
        tokenize=True,
    )
    if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def _encoder(tokenizer: Any) -> Any:
    def encode(texts: list[str]) -> list[list[int]]:
        return [list(map(int, r)) for r in tokenizer(texts, add_special_tokens=False)["input_ids"]]

    return encode


def name_scores(
    model: Any,
    tokenizer: Any,
    index: TokenIndex,
    context: list[int],
    name_sets: Sequence[Sequence[str]],
) -> tuple[list[dict[str, tuple[float, tuple[int, ...]]]], int, list[str]]:
    """Each set's names scored on their canonical paths after ``context``, renormalised over
    that set's own names, all sets in ONE forward call.

    Returns per set ``{name: (constrained log-probability, closed path)}``, the nodes of the
    tree computed, and the names respelled by longest match."""
    sets = [list(dict.fromkeys(s)) for s in name_sets]
    union = list(dict.fromkeys(n for s in sets for n in s))
    if not union:
        return [{} for _ in sets], 0, []
    encode = _encoder(tokenizer)
    cs_all = compile_choices(union, index)
    paths, respelled = canonical_paths(cs_all, encode, index.vocabulary)
    tree = path_tree(cs_all, paths)
    logits = tree_logits(model, context, tree)
    node: dict[tuple[int, ...], int] = {(): 0}
    for i in range(1, len(tree)):
        node[(*_path_of(tree, tree.parent[i]), tree.tokens[i])] = i
    out: list[dict[str, tuple[float, tuple[int, ...]]]] = []
    for names in sets:
        if not names:
            out.append({})
            continue
        cs = cs_all if len(names) == len(union) else compile_choices(names, index)
        own = {n: paths[n] for n in names}
        sub = path_tree(cs, own)
        rows = [node[_path_of(sub, i)] for i in range(len(sub))]
        out.append(path_scores(sub, own, logits[rows]))
    return out, len(tree), respelled


def _path_of(tree: TokenTree, i: int) -> tuple[int, ...]:
    path: list[int] = []
    while i > 0:
        path.append(tree.tokens[i])
        i = tree.parent[i]
    return tuple(reversed(path))


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
        from trierouter.router.transformers import model_width

        self.model = model
        self.tokenizer = tokenizer
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
        vocabulary = Vocabulary.from_tokenizer(tokenizer, width=model_width(model))
        self.token_index = TokenIndex.get(vocabulary)

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
        [scores], nodes, respelled = name_scores(
            self.model, self.tokenizer, self.token_index, context, [names]
        )
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
