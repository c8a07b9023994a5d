"""Each label's canonical token path scored, every label of a set in one forward call.

    paths, respelled = canonical_paths(cs, encode, vocabulary)  # {label: its canonical tokens}
    tree = path_tree(cs, paths)                   # those paths as one TokenTree, prefixes shared
    logits = tree_logits(model, context, tree)    # one forward call (router.tree_scores)
    scores = path_scores(tree, paths, logits)     # {label: (logprob, path incl. its close)}

:func:`~trierouter.router.tree_scores.token_tree` lays out *every* token path of a set, which
grows exponentially with the length of a label (20 long taxonomy names: over 100,000 nodes). A
model writes a label the way its tokenizer spells it, so this module scores that one path per
label: the **canonical path** is the tokenizer's own encoding of the label text (no special
tokens), closed by the best token that ends the value there (an end id, or a terminator's).
Where that encoding is not a path of the set (a tokenizer that adds a prefix space or normalises
the text), the label is spelt by longest match instead (the longest allowed token at each step)
and reported in ``respelled``.

The score is the same quantity as the exact one (:mod:`trierouter.router.tree_scores`): the
*constrained* log-probability, at every step the model's distribution renormalised over the
tokens the set allows there, summed along the path, the closing token included. The canonical
path is one of the label's paths, so its score is at most the exact (best-path) score, equal
when the canonical path is the best one. The tree has one node per distinct canonical-path
prefix (at most the labels' total token count), laid out after the prompt as one sequence with
tree attention: the prompt and every shared prefix are computed once, in one forward call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from trierouter.registry.trie import ChoiceSet
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.tree_scores import TokenTree

__all__ = ["canonical_paths", "path_scores", "path_tree", "path_trees", "spell_longest"]

Encode = Callable[[list[str]], list[list[int]]]
"""Encodes texts (a batch) to token ids, without special tokens."""


def _walk(cs: ChoiceSet, tokens: Sequence[int]) -> int:
    """The state after ``tokens`` from the root; ``cs.DEAD`` when they are not a path of the set
    (an end id on the way counts as not a path)."""
    s = cs.root
    for t in tokens:
        s = cs.advance(s, int(t))
        if s in (cs.END, cs.DEAD):
            return cs.DEAD
    return s


def spell_longest(cs: ChoiceSet, value: str, vocabulary: Vocabulary) -> tuple[int, ...]:
    """``value`` spelt by longest match in ``cs``: at each step the allowed token with the
    longest bytes that stays on the value (ties: the smallest id)."""
    rest = value.encode("utf-8")
    s, out = cs.root, []
    while rest:
        best, size = -1, 0
        for t in cs.mask(s).tolist():
            b = vocabulary.token_bytes(t)
            if len(b) > size and rest.startswith(b):
                best, size = t, len(b)
        if best < 0:
            raise ValueError(f"{value!r} cannot be spelt in the set (is it one of its values?)")
        out.append(best)
        s, rest = cs.advance(s, best), rest[size:]
    return tuple(out)


def canonical_paths(
    cs: ChoiceSet,
    encode: Encode,
    vocabulary: Vocabulary,
    values: Sequence[str] | None = None,
) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """The canonical path (without its close) of each of ``values`` (default: every value of
    ``cs``): ``encode``'s tokens where they spell the value in ``cs``, else
    :func:`spell_longest`'s; and the values spelt by longest match."""
    vals = list(cs.values if values is None else values)
    out: dict[str, tuple[int, ...]] = {}
    respelled: list[str] = []
    for v, ids in zip(vals, encode(vals), strict=True):
        s = _walk(cs, ids)
        if s != cs.DEAD and ids and cs.value_at(s) == v:
            out[v] = tuple(int(t) for t in ids)
        else:
            out[v] = spell_longest(cs, v, vocabulary)
            respelled.append(v)
    return out, respelled


def path_tree(cs: ChoiceSet, paths: Mapping[str, Sequence[int]]) -> TokenTree:
    """The paths as one :class:`TokenTree` (shared prefixes once, nodes in first-seen order)."""
    tokens, parent, depth, state = [0], [-1], [0], [cs.root]
    child: dict[tuple[int, int], int] = {}
    for path in paths.values():
        i = 0
        for t in path:
            c = child.get((i, t))
            if c is None:
                nxt = cs.advance(state[i], t)
                if nxt in (cs.END, cs.DEAD):
                    raise ValueError(f"token {t} is not allowed after {path}: not a set's path")
                c = len(tokens)
                child[(i, t)] = c
                tokens.append(t)
                parent.append(i)
                depth.append(depth[i] + 1)
                state.append(nxt)
            i = c
    return TokenTree(cs, tokens, parent, depth, state)


def path_trees(
    cs: ChoiceSet, paths: Mapping[str, Sequence[int]], limit: int
) -> list[tuple[TokenTree, dict[str, Sequence[int]]]]:
    """The paths split into trees of at most ``limit`` nodes each (in ``paths``' order, so
    sorted labels keep their shared prefixes together), each with the paths it holds."""
    groups: list[dict[str, Sequence[int]]] = [{}]
    seen: set[tuple[int, ...]] = set()
    for value, path in paths.items():
        new = {tuple(path[:k]) for k in range(1, len(path) + 1)} - seen
        if groups[-1] and 1 + len(seen) + len(new) > limit:
            groups.append({})
            seen = set()
            new = {tuple(path[:k]) for k in range(1, len(path) + 1)}
        if 1 + len(new) > limit:
            raise ValueError(f"{value!r}: its path alone has more than limit={limit} nodes")
        groups[-1][value] = path
        seen |= new
    return [(path_tree(cs, g), g) for g in groups if g]


def path_scores(
    tree: TokenTree, paths: Mapping[str, Sequence[int]], logits: Any
) -> dict[str, tuple[float, tuple[int, ...]]]:
    """Each path's constrained log-probability, closed by its best closing token, and the
    closed path (``logits``: :func:`~trierouter.router.tree_scores.tree_logits` of ``tree``)."""
    import torch

    cs = tree.cs
    child = {(tree.parent[i], tree.tokens[i]): i for i in range(1, len(tree))}
    lse: dict[int, float] = {}

    def norm(i: int) -> float:  # log of the allowed tokens' total mass at node i
        if i not in lse:
            allowed = torch.from_numpy(cs.mask(tree.state[i]).astype(np.int64))
            lse[i] = float(torch.logsumexp(logits[i, allowed].double(), 0))
        return lse[i]

    out: dict[str, tuple[float, tuple[int, ...]]] = {}
    for value, path in paths.items():
        total, i = 0.0, 0
        for t in path:
            total += float(logits[i, t]) - norm(i)
            i = child[(i, t)]
        allowed = cs.mask(tree.state[i])
        closes = allowed[cs.advance_batch(np.full(len(allowed), tree.state[i]), allowed) == cs.END]
        if len(closes) == 0:
            raise ValueError(f"{value!r}: no token closes it at the end of its path")
        z = logits[i, torch.from_numpy(closes.astype(np.int64))].double()
        j = int(torch.argmax(z))
        out[value] = (total + float(z[j]) - norm(i), (*path, int(closes[j])))
    return out
