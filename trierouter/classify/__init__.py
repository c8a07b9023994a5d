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

Engines: ``"transformers"`` (everything above,
:class:`~trierouter.router.label_scorer.TransformersScorer`) and ``"vllm"`` (vLLM's in-process
``LLM`` with trierouter's logits processor, :class:`~trierouter.router.vllm.offline.
OfflineChooser`; greedy labels, think-then-answer, no scores).

Modules: :mod:`.classifier` (the :class:`Classifier` and its predictions) and :mod:`.evaluation`
(:func:`evaluate` and the readers of label and example files).
"""

from trierouter.classify.classifier import (
    DEFAULT_PROMPT,
    Classifier,
    Engine,
    Prediction,
    ScoreMode,
)
from trierouter.classify.evaluation import (
    MODES,
    DataError,
    ModeResult,
    evaluate,
    load_examples,
    load_labels,
)
from trierouter.router.label_scorer import LabelScore

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
