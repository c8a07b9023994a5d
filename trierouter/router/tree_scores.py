"""Every label of a small set scored exactly in one forward call: its token tree, as a tree.

    tree = token_tree(cs, limit=512)                 # None if the set has more token paths
    logits = tree_logits(model, context_ids, tree)   # one forward: prompt + tree tokens
    best = tree_scores(tree, logits)                 # {label: (logprob, token path)}, all labels

A :class:`~trierouter.registry.trie.ChoiceSet` over a shortlist of ``k`` labels has few token
paths (each label one or a few spellings, prefixes shared). Laid out as one sequence after the
prompt, each tree token attending to the prompt and to its own ancestors only (a 4-D attention
mask, positions by depth), one forward call returns the next-token distribution after every
path prefix at once: the prompt and every shared prefix are computed once, and nothing is
searched. A label's score is then exactly what the best-first search of
:class:`~trierouter.classify.Classifier` computes (its best path's constrained log-probability,
the end id included), for all labels rather than the top few; :func:`greedy_label` is greedy
constrained decoding read off the same logits.

``prefix``: a prompt head shared by many texts may be computed once and passed as a KV cache
(``prefix_cache``): only the rest of the prompt and the tree are computed per text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trierouter.registry.trie import ChoiceSet

__all__ = [
    "PrefixCache",
    "TokenTree",
    "greedy_label",
    "token_tree",
    "tree_attention",
    "tree_logits",
    "tree_scores",
]


@dataclass(frozen=True)
class TokenTree:
    """The token paths of a ChoiceSet: node 0 is the root (the prompt's last position)."""

    cs: ChoiceSet
    """The set the tree spells."""
    tokens: list[int]
    """Per tree node ``i >= 1``, the token that leads to it (``tokens[0]`` unused)."""
    parent: list[int]
    """Per tree node, its parent node (``-1`` for the root)."""
    depth: list[int]
    """Per tree node, its depth (the root 0)."""
    state: list[int]
    """Per tree node, the ChoiceSet state reached."""

    def __len__(self) -> int:
        return len(self.tokens)


def token_tree(cs: ChoiceSet, *, limit: int = 512) -> TokenTree | None:
    """Every token path of ``cs`` as a tree, or ``None`` when it has more than ``limit`` nodes
    (the caller then searches instead). End ids are edges to a completed label, not nodes."""
    tokens, parent, depth, state = [0], [-1], [0], [cs.root]
    i = 0
    while i < len(tokens):
        s = state[i]
        allowed = cs.mask(s)
        nxt = cs.advance_batch(np.full(len(allowed), s), allowed)
        for t, c in zip(allowed.tolist(), nxt.tolist(), strict=True):
            if c in (cs.END, cs.DEAD):
                continue
            if len(tokens) >= limit:
                return None
            tokens.append(t)
            parent.append(i)
            depth.append(depth[i] + 1)
            state.append(c)
        i += 1
    return TokenTree(cs, tokens, parent, depth, state)


class PrefixCache:
    """The KV cache of a prompt head shared by many texts, computed once (see the module doc)."""

    def __init__(self, model: Any, ids: list[int]) -> None:
        import torch

        self.ids = list(ids)
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([self.ids]), use_cache=True, logits_to_keep=1)
        self.cache = out.past_key_values

    def fork(self) -> Any:
        """A copy the next forward call may extend (the shared one stays untouched)."""
        import copy

        return copy.deepcopy(self.cache)


def tree_logits(
    model: Any, context: list[int], tree: TokenTree, *, prefix: PrefixCache | None = None
) -> Any:
    """Next-token logits (float32, ``(len(tree), width)``) after the context and each tree
    node's path, in one forward call (the context's first ``len(prefix.ids)`` tokens, when a
    ``prefix`` is given, are read from its cache and must equal it)."""
    import torch

    start = 0
    past = None
    if prefix is not None:
        if context[: len(prefix.ids)] != prefix.ids:
            raise ValueError("context does not start with the prefix's tokens")
        start = len(prefix.ids)
        past = prefix.fork()
    rest = context[start:]
    if not rest:
        raise ValueError("the context must have at least one token beyond the prefix")
    n_ctx, n_rest = len(context), len(rest)
    q = n_rest + len(tree) - 1
    allowed = tree_attention(tree, n_ctx, start)
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    pos = list(range(start, n_ctx)) + [n_ctx - 1 + d for d in tree.depth[1:]]
    ids = rest + tree.tokens[1:]
    keep = torch.arange(n_rest - 1, q)  # the context's last position, then every tree node
    with torch.inference_mode():
        out = model(
            input_ids=torch.tensor([ids]),
            position_ids=torch.tensor([pos]),
            attention_mask=mask[None, None],
            past_key_values=past,
            use_cache=past is not None,
            logits_to_keep=keep,
        )
    return out.logits[0].float()


def tree_attention(tree: TokenTree, n_ctx: int, start: int = 0) -> Any:
    """The boolean attention pattern of :func:`tree_logits`, ``(queries, keys)``: the context's
    last ``n_ctx - start`` tokens causally (the first ``start`` are a cached prefix everyone
    sees), then each tree token the whole context, its ancestors and itself."""
    import torch

    n_rest, n_tree = n_ctx - start, len(tree) - 1
    allowed = torch.zeros((n_rest + n_tree, n_ctx + n_tree), dtype=torch.bool)
    allowed[:, :start] = True
    allowed[:n_rest, start:n_ctx] = torch.ones((n_rest, n_rest), dtype=torch.bool).tril()
    allowed[n_rest:, start:n_ctx] = True
    for i in range(1, len(tree)):  # a tree token sees its ancestors and itself
        row = n_rest + i - 1
        j = i
        while j > 0:
            allowed[row, n_ctx + j - 1] = True
            j = tree.parent[j]
    return allowed


def _log_softmax_allowed(tree: TokenTree, logits: Any) -> list[tuple[list[int], list[float]]]:
    import torch

    out = []
    for i in range(len(tree)):
        allowed = tree.cs.mask(tree.state[i])
        z = logits[i, torch.from_numpy(allowed.astype(np.int64))].double()
        out.append((allowed.tolist(), (z - torch.logsumexp(z, 0)).tolist()))
    return out


def tree_scores(tree: TokenTree, logits: Any) -> dict[str, tuple[float, tuple[int, ...]]]:
    """Every label's best token path and its constrained log-probability (end id included)."""
    cs = tree.cs
    child = {(tree.parent[i], tree.tokens[i]): i for i in range(1, len(tree))}
    path_lp = [0.0] * len(tree)
    paths: list[tuple[int, ...]] = [()] * len(tree)
    best: dict[str, tuple[float, tuple[int, ...]]] = {}
    for i, (allowed, logp) in enumerate(_log_softmax_allowed(tree, logits)):
        # nodes are in breadth-first order: a parent's score is known before its children's
        for t, lp in zip(allowed, logp, strict=True):
            c = child.get((i, t))
            if c is not None:
                path_lp[c] = path_lp[i] + lp
                paths[c] = (*paths[i], t)
            elif cs.advance(tree.state[i], t) == cs.END:
                value = cs.value_at(tree.state[i])
                score = path_lp[i] + lp
                if value is not None and (value not in best or score > best[value][0]):
                    best[value] = (score, (*paths[i], t))
    return best


def greedy_label(tree: TokenTree, logits: Any) -> str | None:
    """Greedy constrained decoding read off the tree's logits: the best allowed token at
    every step (an end id completes the label)."""
    import torch

    cs = tree.cs
    child = {(tree.parent[i], tree.tokens[i]): i for i in range(1, len(tree))}
    i = 0
    for _ in range(len(tree) + 1):
        allowed = cs.mask(tree.state[i])
        if len(allowed) == 0:
            return None
        z = logits[i, torch.from_numpy(allowed.astype(np.int64))]
        t = int(allowed[int(torch.argmax(z))])
        c = child.get((i, t))
        if c is None:
            return cs.value_at(tree.state[i]) if cs.advance(tree.state[i], t) == cs.END else None
        i = c
    return None
