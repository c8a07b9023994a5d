"""The Classifier: one label out of a large set, scored by a router engine (see the package
docstring, :mod:`trierouter.classify`).

The engines are the router's: :class:`~trierouter.router.label_scorer.TransformersScorer`
(exact and canonical scores, think, free text) and
:class:`~trierouter.router.vllm.offline.OfflineChooser` (greedy labels); this module holds what
the classifier adds to them: prompts, shortlists, mapping labels back, the combined ranking.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from trierouter.classify_combine import (
    WEIGHTS,
    Combine,
    calibrate,
    combined_ranking,
    combined_score,
)
from trierouter.errors import NoCandidatesError
from trierouter.registry.index import TokenIndex
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.label_scorer import LabelScore, TransformersScorer
from trierouter.router.tree_scores import token_tree
from trierouter.router.vllm.offline import OfflineChooser
from trierouter.shortlist import Retriever
from trierouter.shortlist.hierarchy import PathFn
from trierouter.shortlist.policy import DEFAULT_THRESHOLD, Policy, RoutedSet, route_set

__all__ = [
    "ANSWER",
    "DEFAULT_PROMPT",
    "THINK_CLOSE",
    "THINK_OPEN",
    "Classifier",
    "Engine",
    "Prediction",
    "ScoreMode",
]

Engine = Literal["transformers", "vllm"]
ScoreMode = Literal["auto", "exact", "canonical"]
"""Which score a classifier computes (see the module docstring, "Long labels")."""

DEFAULT_PROMPT = "Classify the text with exactly one label.\n{labels}Text: {text}\n"
"""The default prompt: ``{text}`` is the input, ``{labels}`` the candidate list (when short)."""

ANSWER = "Label: "
THINK_OPEN = "<think>\n"
THINK_CLOSE = "</think>"
LIST_LIMIT = 50


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
            if len(cands) <= LIST_LIMIT:
                lines = [
                    f"- {c}: {self._description[c]}" if self._description[c] != c else f"- {c}"
                    for c in cands
                ]
                listing = "Labels:\n" + "\n".join(lines) + "\n"
        body = self.prompt.replace("{labels}", listing).replace("{text}", text)
        return body + (THINK_OPEN if think else ANSWER)

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


class _Transformers(TransformersScorer):
    """The transformers engine with the classifier's per-text steps."""

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
            contexts, thoughts = self.think(
                contexts,
                clf.index,
                close=THINK_CLOSE,
                max_tokens=clf.think_tokens,
                answer="\n" + ANSWER,
                batch_size=clf.batch_size,
            )
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
                paths = self.canonical(cs, fit=clf.score == "auto", limit=clf.canonical_limit)
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

    def generate_free(self, clf: Classifier, texts: list[str], max_new_tokens: int) -> list[str]:
        return self.generate_lines([clf.free_prompt(t) for t in texts], max_new_tokens)


class _Vllm(OfflineChooser):
    """The vLLM engine with the classifier's per-text steps (greedy labels, no scores)."""

    def classify(
        self,
        clf: Classifier,
        texts: list[str],
        top_n: int,
        think: bool,
        progress: Callable[[int], None] | None,
    ) -> list[Prediction]:
        prompts, choices, served = [], [], []
        notes: dict[int, str] = {}
        for i, text in enumerate(texts):
            try:
                cands = clf.routed.choices_for(text).values
            except NoCandidatesError as exc:
                notes[i] = str(exc)
                continue
            served.append(i)
            prompts.append(clf.render_prompt(text, think=think))
            choices.append(cands)
        outs = self.choose(
            prompts,
            choices,
            think=THINK_CLOSE if think else None,
            think_tokens=clf.think_tokens,
            prefix="\n" + ANSWER,
        )
        by_text = dict(zip(served, zip(choices, outs, strict=True), strict=True))
        preds = []
        for i, text in enumerate(texts):
            if i in notes:
                preds.append(
                    Prediction(text=text, label=None, exact=False, note=notes[i], score_kind=None)
                )
            else:
                cands, generated = by_text[i]
                thought = None
                if think:
                    head, sep, tail = generated.partition(THINK_CLOSE)
                    thought, generated = head + sep, tail.removeprefix("\n" + ANSWER)
                preds.append(
                    Prediction(
                        text=text,
                        label=clf._label_of(generated),
                        exact=False,
                        thought=thought,
                        candidates=len(cands),
                        ranking="greedy",
                        score_kind=None,
                    )
                )
            if progress is not None:
                progress(i + 1)
        return preds

    def generate_free(self, clf: Classifier, texts: list[str], max_new_tokens: int) -> list[str]:
        return self.generate_lines([clf.free_prompt(t) for t in texts], max_new_tokens)
