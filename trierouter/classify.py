"""Classifier: one label out of a large set, with exact scores of the top labels.

    clf = Classifier(codes, descriptions=descs, model="path/to/model")
    [p] = clf.classify(["Displaced fracture of the left femoral neck, initial encounter"])
    p.label, p.scores            # "S72.002A", [LabelScore("S72.002A", -0.41, ...), ...]

**What a score is.** The score of a label is the log-probability of its most likely token path
under *constrained* decoding: at every step the model's distribution renormalised over the
tokens the set allows there (a softmax over the allowed logits), summed along the path, the
closing end id included. This is the probability a constrained sampler at temperature 1 gives
that path, so the scores of all paths of all labels sum to one. A label can be spelled by many
token paths (``S72`` as ``S``+``72`` or ``S7``+``2``); summing them is exponential, the
maximum is exact and cheap, so a score is the best path's.

**How it is computed.** A best-first search over the trie of token paths: the frontier is a
heap of partial paths keyed by their log-probability, which can only fall as a path grows, so
complete paths leave the heap in exactly decreasing order and the first ``top_n`` distinct
labels are the exact top ``top_n`` (a Dijkstra argument). Every trie path is expanded at most
once, whatever number of labels share it: shared prefixes are scored once. Frontier nodes are
expanded in batches of ``batch_size`` in one forward call that reuses the prompt's KV cache
(only the path tokens, a handful per label, are computed per node). The search stops after
``max_expansions`` nodes; the missing labels are then completed greedily from the best open
paths (their scores are still exact path log-probabilities) and ``Prediction.exact`` is False.

**Small sets in one forward call.** When the set's token paths form a tree of at most
``tree_limit`` nodes (a shortlist of tens of labels), nothing is searched: the prompt and the
whole tree go through the model in one forward call, each tree token attending to the prompt
and its own ancestors (:mod:`trierouter.router.tree_scores`), which gives every label's exact
score (the same number as the search's) and the greedy label at once.

**Long labels: canonical paths** (``score=``). The tree of *every* token path grows
exponentially with a label's length (20 long taxonomy names exceed 100,000 nodes), and the
search then needs thousands of expansions per text. The **canonical score** scores the path a
model actually writes instead: each label's own tokenization (the tokenizer's encoding of the
label, closed by the best end id), every candidate in one forward call
(:mod:`trierouter.router.path_scores`). It is the same constrained log-probability, of one path
of the label, so it is at most the exact score, equal when that path is the best one.
``score="exact"``: the token tree where it fits ``tree_limit``, else the search (as before);
``"canonical"``: always canonical paths; ``"auto"`` (default): the token tree where it fits,
else canonical paths where they fit ``canonical_limit`` tree nodes, else the search.
:attr:`Prediction.score_kind` says which score each prediction carries.

**Top-1 and greedy decoding.** ``label`` is the top-1 of that exact search. Greedy constrained
decoding picks the best *token* at every step, which is not always the best *path*: it returns
the same label whenever its own path is the best one (always for a set whose labels each have a
single path and the model is confident), and never a path scored above the top-1. The test suite
checks both facts against a brute force that scores every token path of every label with one
forward call per label.

**Large sets** go through :func:`~trierouter.shortlist.route_set`: the full trie up to 50,000
labels; beyond, a BM25 shortlist of ``k`` labels per text over the descriptions (or the labels),
or with ``policy="hierarchy"`` and a ``path`` the √K grouping (the model spells a group, then
a member; scores are those of the grouped strings).

**Think, then answer** (``think=True``): the model first writes free text until ``</think>``
(at most ``think_tokens`` tokens, greedy), then the label is chosen and scored after
``"\\nLabel: "`` given the thought.

**Combined with the retriever** (``combine=``, a shortlist only): the label is the top-1 of
the model's exact score plus a retriever-rank prior, ``logprob - w * log(1 + rank)``
(:mod:`trierouter.classify_combine`); every candidate is scored, ``w`` is given or calibrated
by :meth:`Classifier.calibrate_combine` on the set's own synonyms held out of the index
(:func:`~trierouter.classify_combine.hold_out_synonyms`), never on test queries.
``Prediction.ranking`` says which ranking chose the label; each ``LabelScore`` carries the
model's score, the retriever rank and the combined score.

Engines: ``"transformers"`` (everything above) and ``"vllm"`` (vLLM's in-process ``LLM`` with
trierouter's logits processor; greedy labels, think-then-answer, no scores).
"""

from __future__ import annotations

import functools
import heapq
import json
import math
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from trierouter.classify_combine import (
    WEIGHTS,
    Combine,
    calibrate,
    combined_ranking,
    combined_score,
)
from trierouter.errors import NoCandidatesError, TrieRouterError, missing
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.path_scores import canonical_paths, path_scores, path_tree, path_trees
from trierouter.router.tree_scores import (
    TokenTree,
    greedy_label,
    token_tree,
    tree_logits,
    tree_scores,
)
from trierouter.shortlist import Retriever
from trierouter.shortlist.hierarchy import PathFn
from trierouter.shortlist.policy import DEFAULT_THRESHOLD, Policy, RoutedSet, route_set

__all__ = [
    "DEFAULT_PROMPT",
    "MODES",
    "Classifier",
    "DataError",
    "Engine",
    "LabelScore",
    "ModeResult",
    "Prediction",
    "ScoreMode",
    "evaluate",
    "load_examples",
    "load_labels",
]

Engine = Literal["transformers", "vllm"]
ScoreMode = Literal["auto", "exact", "canonical"]
"""Which score a classifier computes (see the module docstring, "Long labels")."""

DEFAULT_PROMPT = "Classify the text with exactly one label.\n{labels}Text: {text}\n"
"""The default prompt: ``{text}`` is the input, ``{labels}`` the candidate list (when short)."""

_ANSWER = "Label: "
_THINK_OPEN = "<think>\n"
_THINK_CLOSE = "</think>"
_LIST_LIMIT = 50


@dataclass(frozen=True, slots=True)
class LabelScore:
    """One label and the exact log-probability of its best token path."""

    label: str
    """The label (the original value, mapped back from a hierarchy string)."""
    logprob: float
    """Sum of constrained log-probabilities along ``tokens`` (end id included): the best
    path's (:attr:`Prediction.score_kind` ``"exact"``) or the canonical path's."""
    tokens: tuple[int, ...] = ()
    """The token path, the closing end id included."""
    retriever_rank: int | None = None
    """The label's position in the shortlist (0 = the retriever's first), set when combined."""
    combined: float | None = None
    """``logprob - w * log(1 + retriever_rank)`` when the classifier combines (``combine=``)."""


@dataclass
class Prediction:
    """The classification of one text."""

    text: str
    """The input text."""
    label: str | None
    """The chosen label: the top-1 of :attr:`ranking` (``None`` only if nothing was valid)."""
    scores: list[LabelScore] = field(default_factory=list)
    """The top labels, best first by :attr:`ranking` (empty with the vLLM engine)."""
    exact: bool = True
    """The scores are the exact (best-path) scores of the exact top-n: False when
    ``max_expansions`` cut the search short, or for canonical-path scores."""
    score_kind: Literal["exact", "canonical"] | None = "exact"
    """What each score is: ``"exact"`` the label's best token path (token tree or search),
    ``"canonical"`` its canonical path (the tokenizer's spelling; see ``score=``); ``None`` when
    nothing was scored (the vLLM engine, or no candidates)."""
    respelled: list[str] = field(default_factory=list)
    """Canonical scores only: labels whose tokenizer encoding is not a path of the set (a
    prefix space, normalised text), scored on their longest-match spelling instead."""
    thought: str | None = None
    """The free text written before the answer in think-then-answer mode."""
    candidates: int = 0
    """How many labels the model could choose from (the shortlist size, or all)."""
    expansions: int = 0
    """Trie paths whose next-token distribution was computed (one row of a forward call)."""
    forward_calls: int = 0
    """Forward calls of the model for this text (the prompt's included)."""
    greedy: str | None = None
    """The label greedy constrained decoding picks, read off the same forward call (set when
    the candidates were scored as one token tree, see ``tree_limit``; with canonical paths,
    only when greedy decoding stays on them)."""
    note: str | None = None
    """Why ``label`` is ``None`` when nothing could be chosen (e.g. the shortlist was empty)."""
    ranking: Literal["model", "combined", "greedy"] = "model"
    """What chose ``label``: ``"model"`` the exact scores, ``"combined"`` the exact scores with
    the retriever's rank (``combine=``), ``"greedy"`` greedy decoding (the vLLM engine)."""
    model_label: str | None = None
    """The top-1 of the model's exact scores alone (``label`` unless combined)."""


def _load_labels_descriptions(
    labels: Sequence[str] | dict[str, str], descriptions: Sequence[str] | dict[str, str] | None
) -> tuple[list[str], list[str] | None]:
    if isinstance(labels, str):
        raise TypeError("labels must be a sequence of str or a {label: description} dict")
    if isinstance(labels, dict):
        if descriptions is not None:
            raise TypeError("labels is a {label: description} dict: do not pass descriptions")
        return list(labels), [str(v) for v in labels.values()]
    vals = [str(v) for v in labels]
    if descriptions is None:
        return vals, None
    if isinstance(descriptions, dict):
        return vals, [str(descriptions.get(v, v)) for v in vals]
    if len(descriptions) != len(vals):
        raise ValueError(f"descriptions has {len(descriptions)} entries for {len(vals)} labels")
    return vals, [str(d) for d in descriptions]


class Classifier:
    """Classify texts into one of ``labels`` with a local causal LM (see the module docstring).

    ``labels``: the label strings, or a ``{label: description}`` dict. ``descriptions``: one per
    label (used for the shortlist of large sets and the label list in short prompts).
    ``model``: a local model folder (``save_pretrained`` layout, tokenizer included), or a
    ``(model, tokenizer)`` pair of loaded transformers objects. ``engine``: ``"transformers"``
    or ``"vllm"``. ``prompt``: a template with ``{text}`` (and optionally ``{labels}``).
    ``policy``/``k``/``path``/``threshold``: how a large set is decoded (see
    :func:`~trierouter.shortlist.route_set`); ``retriever``: the shortlist for large sets
    (any, e.g. ``Shortlist.build(labels, descriptions=..., synonyms=...)``; default BM25 over
    the descriptions), its ranked order kept in :meth:`candidates`. ``think``:
    think-then-answer by default. ``tree_limit``: score a set whose token tree has at most this
    many nodes in one forward call (0: always search). A text whose shortlist is empty gets
    ``label=None`` and the reason in :attr:`Prediction.note`. ``combine``: rank by the model's
    exact scores and the retriever's rank together, with this weight (or a :class:`Combine`);
    see :meth:`calibrate_combine` to choose it (shortlist policy, transformers engine).
    ``score``: ``"auto"``, ``"exact"`` or ``"canonical"`` (module docstring, "Long labels");
    ``canonical_limit``: the most tree nodes of canonical paths per forward call (``"auto"``
    scores canonically only where one call holds them all; ``"canonical"`` uses several).
    """

    def __init__(
        self,
        labels: Sequence[str] | dict[str, str],
        *,
        descriptions: Sequence[str] | dict[str, str] | None = None,
        model: str | os.PathLike[str] | tuple[Any, Any],
        engine: Engine = "transformers",
        prompt: str = DEFAULT_PROMPT,
        policy: Policy = "auto",
        k: int = 64,
        path: PathFn | Sequence[Sequence[str]] | None = None,
        threshold: int = DEFAULT_THRESHOLD,
        retriever: Retriever | None = None,
        think: bool = False,
        think_tokens: int = 64,
        top_n: int = 5,
        max_expansions: int = 2048,
        batch_size: int = 64,
        tree_limit: int = 512,
        vllm_kwargs: dict[str, Any] | None = None,
        combine: float | Combine | None = None,
        score: ScoreMode = "auto",
        canonical_limit: int = 4096,
    ) -> None:
        if engine not in ("transformers", "vllm"):
            raise ValueError(f"engine={engine!r}; expected 'transformers' or 'vllm'")
        if "{text}" not in prompt:
            raise ValueError("prompt must contain '{text}' (and may contain '{labels}')")
        for name, v in (("top_n", top_n), ("max_expansions", max_expansions)):
            if v < 1:
                raise ValueError(f"{name}={v}: expected >= 1")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: expected >= 1")
        if score not in ("auto", "exact", "canonical"):
            raise ValueError(f"score={score!r}: expected 'auto', 'exact' or 'canonical'")
        if canonical_limit < 2:
            raise ValueError(f"canonical_limit={canonical_limit}: expected >= 2")
        self.labels, self.descriptions = _load_labels_descriptions(labels, descriptions)
        if not self.labels:
            raise ValueError("labels is empty; a classifier needs at least one label")
        self._description = dict(zip(self.labels, self.descriptions or self.labels, strict=True))
        self.engine: Engine = engine
        self.prompt = prompt
        self.think = think
        self.think_tokens = think_tokens
        self.top_n = top_n
        self.max_expansions = max_expansions
        self.batch_size = batch_size
        self.tree_limit = tree_limit
        self.score: ScoreMode = score
        self.canonical_limit = canonical_limit
        self._backend: _Transformers | _Vllm
        if engine == "transformers":
            self._backend = _Transformers(model)
        else:
            self._backend = _Vllm(model, vllm_kwargs or {})
        self.vocabulary: Vocabulary = self._backend.vocabulary
        self.index = TokenIndex.get(self.vocabulary)
        self.routed: RoutedSet = route_set(
            self.labels,
            self.index,
            policy=policy,
            threshold=threshold,
            texts=self.descriptions if policy in ("auto", "shortlist") else None,
            path=path,
            k=k,
            retriever=retriever,
        )
        self.combine: Combine | None = None
        if combine is not None:
            self._check_combine()
            self.combine = combine if isinstance(combine, Combine) else Combine(float(combine))

    def _check_combine(self) -> None:
        if self.engine != "transformers":
            raise ValueError("combine needs the exact scores: engine='transformers'")
        if self.routed.policy != "shortlist":
            raise ValueError(
                f"combine needs a retriever's ranking: policy='shortlist' (this set is routed "
                f"as {self.routed.policy!r})"
            )

    def calibrate_combine(
        self,
        examples: Sequence[tuple[str, str | Collection[str]]],
        *,
        weights: Sequence[float] = WEIGHTS,
    ) -> Combine:
        """Choose the combined ranking's weight on ``examples`` and use it from now on.

        ``examples``: ``(text, gold label or labels)`` pairs from the label set itself, never
        test queries: synonyms held out of the retriever's index
        (:func:`~trierouter.classify_combine.hold_out_synonyms`) or labelled examples kept
        apart. Each is classified once (every candidate scored exactly); the weight of
        ``weights`` with the best top-1 accuracy (then mean reciprocal rank, then the smaller
        weight) is kept, with the table of all, in the returned :class:`Combine`.
        """
        self._check_combine()
        texts = [t for t, _ in examples]
        kept, self.combine = self.combine, Combine(0.0)  # every candidate scored
        try:
            preds = self.classify(texts, top_n=self.routed.k)
        finally:
            self.combine = kept
        rows = [
            {
                "candidates": self.candidates(text),
                "model": {s.label: s.logprob for s in p.scores},
                "gold": [gold] if isinstance(gold, str) else sorted(gold),
            }
            for (text, gold), p in zip(examples, preds, strict=True)
        ]
        w, table = calibrate(rows, weights)
        self.combine = Combine(
            w, calibrated_on=tuple(texts), by_weight={k: (v[0], v[1]) for k, v in table.items()}
        )
        return self.combine

    def __repr__(self) -> str:
        return (
            f"Classifier({len(self.labels)} labels, engine={self.engine!r}, "
            f"policy={self.routed.policy!r})"
        )

    # -- prompts ----------------------------------------------------------------------------------
    def candidates(self, text: str) -> list[str]:
        """The labels the model may choose from for ``text`` (a shortlist, or all)."""
        return self.routed.shortlist(text)

    def render_prompt(self, text: str, *, think: bool = False) -> str:
        """The prompt for ``text``, up to where the model writes (thought or label)."""
        listing = ""
        if "{labels}" in self.prompt:
            cands = self.candidates(text)
            if len(cands) <= _LIST_LIMIT:
                lines = [
                    f"- {c}: {self._description[c]}" if self._description[c] != c else f"- {c}"
                    for c in cands
                ]
                listing = "Labels:\n" + "\n".join(lines) + "\n"
        body = self.prompt.replace("{labels}", listing).replace("{text}", text)
        return body + (_THINK_OPEN if think else _ANSWER)

    def free_prompt(self, text: str) -> str:
        """The prompt for free generation: :meth:`render_prompt` less its trailing space, which
        the model then writes itself with the answer's first token (after a lone space token
        Qwen2.5 drops the label's first character: ``18.1`` for ``N18.1``)."""
        return self.render_prompt(text).rstrip(" ")

    def _label_of(self, decoded: str | None) -> str | None:
        if decoded is None:
            return None
        return self.routed.value_of(decoded)

    # -- classification ---------------------------------------------------------------------------
    def classify(
        self,
        texts: Sequence[str],
        *,
        top_n: int | None = None,
        think: bool | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[Prediction]:
        """Classify each text; ``top_n`` labels scored (default: the constructor's).

        ``progress`` is called with the number of texts done after each one.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str; wrap a single text in a list")
        n = self.top_n if top_n is None else top_n
        if n < 1:
            raise ValueError(f"top_n={n}: expected >= 1")
        use_think = self.think if think is None else think
        return self._backend.classify(self, list(texts), n, use_think, progress)

    def generate_free(self, texts: Sequence[str], *, max_new_tokens: int = 32) -> list[str]:
        """Unconstrained greedy answers (the first line after ``Label:``), for evaluation.

        Generation stops once that line has ended (or after ``max_new_tokens``)."""
        return self._backend.generate_free(self, list(texts), max_new_tokens)


def _combine(
    candidates: list[str], scores: list[LabelScore], weight: float
) -> tuple[str | None, list[LabelScore]]:
    """The combined ranking's top-1 and the model's scores in that order, each with its
    retriever rank and combined score (:mod:`trierouter.classify_combine`)."""
    model = {s.label: s for s in scores}
    ranking = combined_ranking(candidates, {c: s.logprob for c, s in model.items()}, weight)
    rank = {c: r for r, c in enumerate(candidates)}
    ordered = [
        LabelScore(c, s.logprob, s.tokens, rank[c], combined_score(s.logprob, rank[c], weight))
        for c in ranking
        if (s := model.get(c)) is not None
    ]
    return (ranking[0] if ranking else None), ordered


# -- transformers ---------------------------------------------------------------------------------
class _Transformers:
    def __init__(self, model: str | os.PathLike[str] | tuple[Any, Any]) -> None:
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise missing("transformers", "transformers") from exc
        self.torch = torch
        if isinstance(model, tuple):
            self.model, self.tokenizer = model
        else:
            path = Path(model)
            if not (path / "config.json").is_file():
                raise FileNotFoundError(
                    f"model={str(model)!r} is not a local model folder (no config.json); pass "
                    "the folder of a save_pretrained model with its tokenizer"
                )
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
            self.model = transformers.AutoModelForCausalLM.from_pretrained(str(path))
            self.model.eval()
        emb = self.model.get_output_embeddings()
        width = int(emb.weight.shape[0]) if emb is not None else int(self.model.config.vocab_size)
        self.vocabulary = Vocabulary.from_tokenizer(self.tokenizer, width=width)
        self.end_ids = set(self.vocabulary.end_ids)
        self.calls = 0  # forward calls of the model so far
        self._spelled: dict[str, list[int]] = {}  # label text -> its token ids

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer(text)["input_ids"]]

    def classify(
        self,
        clf: Classifier,
        texts: list[str],
        top_n: int,
        think: bool,
        progress: Callable[[int], None] | None,
    ) -> list[Prediction]:
        contexts = [self.encode(clf.render_prompt(t, think=think)) for t in texts]
        thoughts: list[str | None] = [None] * len(texts)
        if think:
            contexts, thoughts = self._think(clf, contexts)
        out = []
        for i, (text, ctx) in enumerate(zip(texts, contexts, strict=True)):
            try:
                cs = clf.routed.choices_for(text)
            except NoCandidatesError as exc:
                out.append(
                    Prediction(
                        text=text, label=None, thought=thoughts[i], note=str(exc), score_kind=None
                    )
                )
                continue
            calls0 = self.calls
            greedy = None
            n = len(cs) if clf.combine is not None else top_n  # combined: score every one
            kind: Literal["exact", "canonical"] = "exact"
            respelled: list[str] = []
            tree = None
            if clf.tree_limit and clf.score != "canonical":
                tree = token_tree(cs, limit=clf.tree_limit)
            paths = None
            if tree is None and clf.score != "exact":
                paths = self.canonical(clf, cs)
            if tree is not None:  # every label exactly, in one forward call
                scores, greedy = self.score_tree(ctx, tree, n)
                exact, expansions = True, len(tree)
            elif paths is not None:  # every label's canonical path, in one forward call or more
                scores, greedy, expansions = self.score_canonical(
                    ctx, cs, paths[0], n, clf.canonical_limit
                )
                exact, kind, respelled = False, "canonical", paths[1]
            else:
                scores, exact, expansions = self.search(
                    ctx, cs, n, max_expansions=clf.max_expansions, batch_size=clf.batch_size
                )
            mapped = []
            for s in scores:
                label = clf._label_of(s.label)
                if label is not None:
                    mapped.append(LabelScore(label, s.logprob, s.tokens))
            model_label = mapped[0].label if mapped else None
            label = model_label
            if clf.combine is not None:
                label, mapped = _combine(clf.candidates(text), mapped, clf.combine.weight)
            out.append(
                Prediction(
                    text=text,
                    label=label,
                    scores=mapped[:top_n],
                    exact=exact,
                    thought=thoughts[i],
                    candidates=len(cs),
                    expansions=expansions,
                    forward_calls=self.calls - calls0,
                    greedy=clf._label_of(greedy),
                    ranking="model" if clf.combine is None else "combined",
                    model_label=model_label,
                    score_kind=kind,
                    respelled=[r for v in respelled if (r := clf._label_of(v)) is not None],
                )
            )
            if progress is not None:
                progress(i + 1)
        return out

    def score_tree(
        self, context: list[int], tree: TokenTree, top_n: int
    ) -> tuple[list[LabelScore], str | None]:
        """The exact top ``top_n`` labels of ``tree``'s set and the greedy label, from one
        forward call (:mod:`trierouter.router.tree_scores`); labels as spelled in the set."""
        self.calls += 1
        logits = tree_logits(self.model, context, tree)
        best = tree_scores(tree, logits)
        ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top_n]
        return [LabelScore(v, lp, path) for v, (lp, path) in ranked], greedy_label(tree, logits)

    def canonical(
        self, clf: Classifier, cs: ChoiceSet
    ) -> tuple[dict[str, tuple[int, ...]], list[str]] | None:
        """The canonical paths of ``cs``'s labels and the respelled labels, or ``None`` when
        ``score="auto"`` and they do not fit one forward call (``canonical_limit`` nodes)."""
        if clf.score == "auto" and len(cs) >= clf.canonical_limit:
            return None  # one node per label at least: it cannot fit, do not encode them
        paths, respelled = canonical_paths(cs, self.encode_batch, self.vocabulary)
        if clf.score == "auto" and len(path_tree(cs, paths)) > clf.canonical_limit:
            return None
        return paths, respelled

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens, cached per text (labels recur
        across the texts' shortlists)."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._spelled]
        if todo:
            ids = self.tokenizer(todo, add_special_tokens=False)["input_ids"]
            self._spelled.update(zip(todo, ([int(i) for i in r] for r in ids), strict=True))
        return [self._spelled[t] for t in texts]

    def score_canonical(
        self,
        context: list[int],
        cs: ChoiceSet,
        paths: dict[str, tuple[int, ...]],
        top_n: int,
        limit: int,
    ) -> tuple[list[LabelScore], str | None, int]:
        """The top ``top_n`` labels by canonical-path score, the greedy label (when greedy
        decoding stays on the canonical paths) and the tree nodes computed: one forward call
        per ``limit`` nodes (:mod:`trierouter.router.path_scores`)."""
        best: dict[str, tuple[float, tuple[int, ...]]] = {}
        greedy, nodes = None, 0
        for tree, part in path_trees(cs, paths, limit):
            self.calls += 1
            logits = tree_logits(self.model, context, tree)
            best.update(path_scores(tree, part, logits))
            nodes += len(tree)
            # the same argmax at every node in every call: a greedy path found whole is it
            greedy = greedy or greedy_label(tree, logits)
        ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top_n]
        return [LabelScore(v, lp, path) for v, (lp, path) in ranked], greedy, nodes

    def _think(
        self, clf: Classifier, contexts: list[list[int]]
    ) -> tuple[list[list[int]], list[str | None]]:
        from trierouter.router.plan import FreeText, compile_plan
        from trierouter.router.transformers import generate

        plan = compile_plan([FreeText(until=_THINK_CLOSE, max_tokens=clf.think_tokens)], clf.index)
        results = generate(
            self.model,
            self.tokenizer,
            contexts,
            plan,
            max_new_tokens=clf.think_tokens + 16,
            batch_size=clf.batch_size,
        )
        answer = self.encode("\n" + _ANSWER)
        new_ctx, thoughts = [], []
        for ctx, r in zip(contexts, results, strict=True):
            toks = [t for t in r.token_ids if t not in self.end_ids]
            new_ctx.append(ctx + toks + answer)
            thoughts.append(r.text)
        return new_ctx, list(thoughts)

    def _prefill(self, context: list[int]) -> tuple[Any, Any]:
        torch = self.torch
        self.calls += 1
        out = self.model(input_ids=torch.tensor([context]), use_cache=True, logits_to_keep=1)
        return out.past_key_values, out.logits[0, -1]

    def _expand(self, cache: Any, n_ctx: int, paths: list[tuple[int, ...]]) -> Any:
        """Next-token logits after ``context + path`` for each path (one forward call)."""
        torch = self.torch
        from transformers import DynamicCache

        self.calls += 1
        b = len(paths)
        width = max(len(p) for p in paths)
        # left padding inside the path segment, masked out: every row's last token is last, so
        # only one position per row goes through the output head (logits_to_keep=1)
        ids = torch.zeros((b, width), dtype=torch.long)
        mask = torch.ones((b, n_ctx + width), dtype=torch.long)
        pos = torch.full((b, width), n_ctx, dtype=torch.long)
        for r, p in enumerate(paths):
            pad = width - len(p)
            ids[r, pad:] = torch.tensor(p, dtype=torch.long)
            mask[r, n_ctx : n_ctx + pad] = 0
            pos[r, pad:] = torch.arange(n_ctx, n_ctx + len(p))
        kv = [
            (layer.keys.expand(b, -1, -1, -1), layer.values.expand(b, -1, -1, -1))
            for layer in cache.layers
        ]
        past = DynamicCache(ddp_cache_data=kv, config=self.model.config)
        out = self.model(
            input_ids=ids,
            past_key_values=past,
            position_ids=pos,
            attention_mask=mask,
            use_cache=False,
            logits_to_keep=1,
        )
        return out.logits[:, -1]

    def search(
        self,
        context: list[int],
        cs: ChoiceSet,
        top_n: int,
        *,
        max_expansions: int = 2048,
        batch_size: int = 64,
    ) -> tuple[list[LabelScore], bool, int]:
        """Best-first search of the top ``top_n`` labels of ``cs`` after ``context``.

        Returns the scores (labels as spelled in ``cs``), whether they are exact, and the
        number of expanded paths.
        """
        torch = self.torch
        with torch.inference_mode():
            cache, root_logits = self._prefill(context)
            n_ctx = len(context)
            # heap entries: (-logprob, seq, path, node); node < 0 marks a complete path
            heap: list[tuple[float, int, tuple[int, ...], int]] = []
            seq = 0
            found: list[LabelScore] = []
            seen: set[str] = set()
            expansions = 1

            def push_children(logits: Any, base: float, path: tuple[int, ...], node: int) -> None:
                nonlocal seq
                allowed = cs.mask(node)
                if len(allowed) == 0:
                    return
                z = logits[torch.from_numpy(allowed.astype(np.int64))].double()
                logp = (z - torch.logsumexp(z, 0)).tolist()
                for t, lp in zip(allowed.tolist(), logp, strict=True):
                    if not math.isfinite(lp):
                        continue
                    child = cs.advance(node, t)
                    if child == cs.DEAD:
                        continue
                    seq += 1
                    if child == cs.END:
                        heapq.heappush(heap, (-(base + lp), seq, (*path, t), -1 - node))
                    else:
                        heapq.heappush(heap, (-(base + lp), seq, (*path, t), child))

            push_children(root_logits, 0.0, (), cs.root)
            while heap and len(found) < top_n:
                # complete paths at the top of the heap are final, in decreasing order
                while heap and heap[0][3] < 0 and len(found) < top_n:
                    neg, _, path, code = heapq.heappop(heap)
                    value = cs.value_at(-1 - code)
                    if value is not None and value not in seen:
                        seen.add(value)
                        found.append(LabelScore(value, -neg, path))
                if len(found) >= top_n or not heap:
                    break
                if expansions >= max_expansions:
                    self._complete_greedily(cache, n_ctx, cs, heap, found, seen, top_n)
                    found.sort(key=lambda s: -s.logprob)
                    return found, False, expansions
                batch: list[tuple[float, int, tuple[int, ...], int]] = []
                while heap and len(batch) < batch_size and heap[0][3] >= 0:
                    batch.append(heapq.heappop(heap))
                logits = self._expand(cache, n_ctx, [e[2] for e in batch])
                expansions += len(batch)
                for r, (neg, _, path, node) in enumerate(batch):
                    push_children(logits[r], -neg, path, node)
            return found, True, expansions

    def _complete_greedily(
        self,
        cache: Any,
        n_ctx: int,
        cs: ChoiceSet,
        heap: list[tuple[float, int, tuple[int, ...], int]],
        found: list[LabelScore],
        seen: set[str],
        top_n: int,
    ) -> None:
        """Finish the best open paths greedily until ``top_n`` labels are found (inexact)."""
        torch = self.torch
        open_paths = sorted(heap)
        for neg, _, path, node in open_paths:
            if len(found) >= top_n:
                return
            score = -neg
            while node >= 0:
                logits = self._expand(cache, n_ctx, [path])[0]
                allowed = cs.mask(node)
                z = logits[torch.from_numpy(allowed.astype(np.int64))].double()
                logp = z - torch.logsumexp(z, 0)
                j = int(torch.argmax(logp))
                t = int(allowed[j])
                score += float(logp[j])
                child = cs.advance(node, t)
                path = (*path, t)
                if child == cs.END:
                    value = cs.value_at(node)
                    if value is not None and value not in seen:
                        seen.add(value)
                        found.append(LabelScore(value, score, path))
                    break
                node = child
            else:
                value = cs.value_at(-1 - node)
                if value is not None and value not in seen:
                    seen.add(value)
                    found.append(LabelScore(value, score, path))

    def _first_line_done(self, start: int) -> Any:
        """A stopping criterion: the answer's first non-blank line has ended (a newline after
        text), so greedy tokens beyond it, which the answer drops, are never computed."""
        import transformers

        decode, torch = self.tokenizer.decode, self.torch

        class FirstLine(transformers.StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                done = "\n" in decode(input_ids[0, start:], skip_special_tokens=True).lstrip()
                return torch.full((input_ids.shape[0],), done, dtype=torch.bool)

        return FirstLine()

    def generate_free(self, clf: Classifier, texts: list[str], max_new_tokens: int) -> list[str]:
        torch = self.torch
        out = []
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = next(iter(self.end_ids), 0)
        with torch.inference_mode():
            for text in texts:
                ids = torch.tensor([self.encode(clf.free_prompt(text))])
                gen = self.model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=pad,
                    stopping_criteria=[self._first_line_done(ids.shape[1])],
                )
                new = [int(t) for t in gen[0, ids.shape[1] :] if int(t) not in self.end_ids]
                answer = self.tokenizer.decode(new, skip_special_tokens=True)
                out.append(answer.strip().split("\n")[0].strip())
        return out


# -- vLLM -----------------------------------------------------------------------------------------
class _Vllm:
    def __init__(self, model: str | os.PathLike[str] | tuple[Any, Any], kwargs: dict[str, Any]):
        if isinstance(model, tuple):
            raise TypeError("engine='vllm' needs a model folder, not loaded objects")
        path = Path(model)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"model={str(model)!r} is not a local model folder (no config.json)"
            )
        try:
            from vllm import LLM
        except ImportError as exc:
            raise missing("vllm", "vllm") from exc
        from trierouter.router.vllm.processor import TrieRouterLogitsProcessor

        args: dict[str, Any] = {
            "dtype": "float32",
            "enforce_eager": True,
            "max_model_len": 1024,
            "seed": 0,
            "logits_processors": [TrieRouterLogitsProcessor],
        }
        args.update(kwargs)
        self.llm = LLM(str(path), **args)
        tokenizer = self.llm.get_tokenizer()
        width = int(self.llm.llm_engine.model_config.get_vocab_size())
        self.vocabulary = Vocabulary.from_tokenizer(tokenizer, width=width)

    def classify(
        self,
        clf: Classifier,
        texts: list[str],
        top_n: int,
        think: bool,
        progress: Callable[[int], None] | None,
    ) -> list[Prediction]:
        from vllm import SamplingParams

        prompts, params, sizes, served = [], [], [], []
        notes: dict[int, str] = {}
        for i, text in enumerate(texts):
            try:
                cands = clf.routed.choices_for(text).values
            except NoCandidatesError as exc:
                notes[i] = str(exc)
                continue
            served.append(i)
            extra: dict[str, Any] = {"trierouter_choices": list(cands)}
            if think:
                extra["trierouter_think"] = _THINK_CLOSE
                extra["trierouter_think_max_tokens"] = clf.think_tokens
                extra["trierouter_prefix"] = "\n" + _ANSWER
            prompts.append(clf.render_prompt(text, think=think))
            params.append(
                SamplingParams(temperature=0.0, max_tokens=clf.think_tokens + 64, extra_args=extra)
            )
            sizes.append(len(cands))
        outs = self.llm.generate(prompts, params, use_tqdm=False) if prompts else []
        by_text = dict(zip(served, zip(sizes, outs, strict=True), strict=True))
        preds = []
        for i, text in enumerate(texts):
            if i in notes:
                preds.append(
                    Prediction(text=text, label=None, exact=False, note=notes[i], score_kind=None)
                )
                if progress is not None:
                    progress(i + 1)
                continue
            size, o = by_text[i]
            generated = o.outputs[0].text
            thought = None
            if think:
                head, sep, tail = generated.partition(_THINK_CLOSE)
                thought, generated = head + sep, tail.removeprefix("\n" + _ANSWER)
            preds.append(
                Prediction(
                    text=text,
                    label=clf._label_of(generated),
                    exact=False,
                    thought=thought,
                    candidates=size,
                    ranking="greedy",
                    score_kind=None,
                )
            )
            if progress is not None:
                progress(i + 1)
        return preds

    def generate_free(self, clf: Classifier, texts: list[str], max_new_tokens: int) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
        outs = self.llm.generate([clf.free_prompt(t) for t in texts], params, use_tqdm=False)
        return [o.outputs[0].text.strip().split("\n")[0].strip() for o in outs]


# -- evaluation -----------------------------------------------------------------------------------
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
