"""Label scores from a transformers model: exact best-path search, token trees, canonical paths.

:class:`TransformersScorer` is the classifier's engine (:mod:`trierouter.classify`): it holds a
causal LM and its tokenizer, and scores the values of a :class:`~trierouter.registry.trie.
ChoiceSet` after a context by their constrained log-probability (the model's distribution
renormalised over the tokens the set allows, summed along a token path):

* :meth:`~TransformersScorer.search`: the exact top-n by best-first search over the trie of
  token paths, frontier nodes expanded in batches over the prompt's KV cache; past
  ``max_expansions`` the best open paths are completed greedily (inexact);
* :meth:`~TransformersScorer.score_tree`: every value's exact score from one forward call over
  the set's token tree (:mod:`trierouter.router.tree_scores`);
* :meth:`~TransformersScorer.score_canonical`: each value's canonical path (its tokenization)
  in one forward call per tree of ``limit`` nodes (:mod:`trierouter.router.path_scores`);
* :meth:`~TransformersScorer.score_sets`: several sets' values on their canonical paths after
  one context, in ONE forward call (the union of their paths as one tree);
* :func:`chat_context`: the prompt every router scores after (the model's chat template over a
  system message and the conversation, the assistant's turn opened);
* :meth:`~TransformersScorer.think` and :meth:`~TransformersScorer.generate_lines`: greedy free
  text (think-then-answer, unconstrained answers) through
  :func:`trierouter.router.transformers.generate` and ``model.generate``.
"""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trierouter.errors import missing
from trierouter.registry.call_formats import has_chat_template
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.path_scores import canonical_paths, path_scores, path_tree, path_trees
from trierouter.router.tree_scores import TokenTree, greedy_label, tree_logits, tree_scores

__all__ = ["LabelScore", "PathScores", "TransformersScorer", "as_messages", "chat_context"]

PathScores = dict[str, tuple[float, tuple[int, ...]]]
"""``{value: (constrained log-probability, its canonical path closed)}``."""


def as_messages(conversation: str | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A conversation as chat messages: a string is one user message."""
    if isinstance(conversation, str):
        return [{"role": "user", "content": conversation}]
    out = [dict(m) for m in conversation]
    if not out or any("role" not in m for m in out):
        raise ValueError("conversation: expected a string or a non-empty list of {'role', ...}")
    return out


def chat_context(
    tokenizer: Any, conversation: str | Sequence[Mapping[str, Any]], system: str
) -> list[int]:
    """The prompt's token ids: the tokenizer's chat template over ``system`` (a system message,
    before the conversation's own system text), the whole conversation, and the assistant's
    turn opened, where the model writes the value scored."""
    if not has_chat_template(tokenizer):
        raise ValueError(
            "the tokenizer has no chat_template: set tokenizer.chat_template (the served "
            "model's) so the prompt is the one the model was trained on"
        )
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


@dataclass(frozen=True, slots=True)
class LabelScore:
    """One label and the exact log-probability of its best token path."""

    label: str
    """The label (the original value, mapped back from a hierarchy string)."""
    logprob: float
    """Sum of constrained log-probabilities along ``tokens`` (end id included): the best
    path's (an exact score) or the canonical path's (``Prediction.score_kind``)."""
    tokens: tuple[int, ...] = ()
    """The token path, the closing end id included."""
    retriever_rank: int | None = None
    """The label's position in the shortlist (0 = the retriever's first), set when combined."""
    combined: float | None = None
    """``logprob - w * log(1 + retriever_rank)`` when the classifier combines (``combine=``)."""


class TransformersScorer:
    """A causal LM and its tokenizer, scoring the values of sets (see the module docstring).

    ``calls`` counts the model's forward calls so far.
    """

    def __init__(self, model: str | os.PathLike[str] | tuple[Any, Any]) -> None:
        """``model``: a local model folder (tokenizer included) or a ``(model, tokenizer)``."""
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
        from trierouter.router.transformers import model_width

        self.vocabulary = Vocabulary.from_tokenizer(self.tokenizer, width=model_width(self.model))
        self.end_ids = set(self.vocabulary.end_ids)
        self.calls = 0  # forward calls of the model so far
        self._spelled: dict[str, list[int]] = {}  # label text -> its token ids

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer(text)["input_ids"]]

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
        self, cs: ChoiceSet, *, fit: bool, limit: int
    ) -> tuple[dict[str, tuple[int, ...]], list[str]] | None:
        """The canonical paths of ``cs``'s labels and the respelled labels; ``None`` when
        ``fit`` and they do not fit one forward call (``limit`` tree nodes)."""
        if fit and len(cs) >= limit:
            return None  # one node per label at least: it cannot fit, do not encode them
        paths, respelled = canonical_paths(cs, self.encode_batch, self.vocabulary)
        if fit and len(path_tree(cs, paths)) > limit:
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

    def score_sets(
        self, context: list[int], name_sets: Sequence[Sequence[str]], index: TokenIndex
    ) -> tuple[list[PathScores], int, list[str]]:
        """Each set's values scored on their canonical paths after ``context``, renormalised
        over that set's own values, every set in ONE forward call: the union of their paths as
        one tree (tree attention makes a node's logits depend on its own path only, so each
        set's scores are those of its own call).

        Returns per set ``{value: (log-probability, closed path)}``, the nodes of the tree
        computed, and the values respelled by longest match."""
        sets = [list(dict.fromkeys(s)) for s in name_sets]
        union = list(dict.fromkeys(n for s in sets for n in s))
        if not union:
            return [{} for _ in sets], 0, []
        cs_all = compile_choices(union, index)
        paths, respelled = canonical_paths(cs_all, self.encode_batch, index.vocabulary)
        tree = path_tree(cs_all, paths)
        self.calls += 1
        logits = tree_logits(self.model, context, tree)
        node: dict[tuple[int, ...], int] = {(): 0}
        for i in range(1, len(tree)):
            node[(*_path_of(tree, tree.parent[i]), tree.tokens[i])] = i
        out: list[PathScores] = []
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

    def think(
        self,
        contexts: list[list[int]],
        index: TokenIndex,
        *,
        close: str,
        max_tokens: int,
        answer: str,
        batch_size: int,
    ) -> tuple[list[list[int]], list[str | None]]:
        """Greedy free text after each context until ``close`` (at most ``max_tokens``), then
        ``answer``: the new contexts and the thoughts (:func:`~trierouter.router.transformers.
        generate` over a :class:`~trierouter.router.plan.FreeText` plan)."""
        from trierouter.router.plan import FreeText, compile_plan
        from trierouter.router.transformers import generate

        plan = compile_plan([FreeText(until=close, max_tokens=max_tokens)], index)
        results = generate(
            self.model,
            self.tokenizer,
            contexts,
            plan,
            max_new_tokens=max_tokens + 16,
            batch_size=batch_size,
        )
        answer_ids = self.encode(answer)
        new_ctx, thoughts = [], []
        for ctx, r in zip(contexts, results, strict=True):
            toks = [t for t in r.token_ids if t not in self.end_ids]
            new_ctx.append(ctx + toks + answer_ids)
            thoughts.append(r.text)
        return new_ctx, list(thoughts)

    def prefill(self, context: list[int]) -> tuple[Any, Any]:
        torch = self.torch
        self.calls += 1
        out = self.model(input_ids=torch.tensor([context]), use_cache=True, logits_to_keep=1)
        return out.past_key_values, out.logits[0, -1]

    def expand(self, cache: Any, n_ctx: int, paths: list[tuple[int, ...]]) -> Any:
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
            cache, root_logits = self.prefill(context)
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
                logits = self.expand(cache, n_ctx, [e[2] for e in batch])
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
                logits = self.expand(cache, n_ctx, [path])[0]
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

    def generate_lines(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        """Unconstrained greedy text after each prompt, its first non-blank line (generation
        stops once that line has ended, or after ``max_new_tokens``)."""
        torch = self.torch
        out = []
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = next(iter(self.end_ids), 0)
        with torch.inference_mode():
            for prompt in prompts:
                ids = torch.tensor([self.encode(prompt)])
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


def _path_of(tree: TokenTree, i: int) -> tuple[int, ...]:
    path: list[int] = []
    while i > 0:
        path.append(tree.tokens[i])
        i = tree.parent[i]
    return tuple(reversed(path))
