"""Routing policy for large sets: the full trie below a threshold, a shortlist or √K groups above.

    routed = route_set(values, index)           # policy="auto"
    choices = routed.choices_for(query)         # the ChoiceSet to decode this request with
    value = routed.value_of(decoded_text)       # back to the original value

``trie``: one ChoiceSet over all values. ``shortlist``: a retriever proposes ``k`` values per
query and a ChoiceSet is compiled over exactly those (≈1.5 ms for k=100 with a 151K-token
vocabulary). ``hierarchy``: one ChoiceSet over ``group label + sep + value`` strings, so decoding
picks a group, then a member. ``auto``: ``trie`` up to ``threshold`` values; beyond it
``shortlist`` when a retriever (or texts to build one) is given, else ``hierarchy``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from trierouter.errors import NoCandidatesError
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.shortlist._common import Retriever, check_k
from trierouter.shortlist.bm25 import BM25Index
from trierouter.shortlist.hierarchy import Hierarchy, PathFn, build_hierarchy

__all__ = ["DEFAULT_THRESHOLD", "Policy", "RoutedSet", "route_set"]

Policy = Literal["auto", "trie", "shortlist", "hierarchy"]
DEFAULT_THRESHOLD = 50_000


class RoutedSet:
    """A large set prepared for decoding under one policy (see :func:`route_set`)."""

    def __init__(
        self,
        values: Sequence[str],
        index: TokenIndex | Vocabulary,
        *,
        policy: Literal["trie", "shortlist", "hierarchy"],
        retriever: Retriever | None = None,
        hierarchy: Hierarchy | None = None,
        k: int = 64,
        terminator: str | None = None,
        cache_size: int = 32,
    ) -> None:
        self.values = list(values)
        self.index = index
        self.policy = policy
        self.retriever = retriever
        self.hierarchy = hierarchy
        self.k = check_k(k)
        self.terminator = terminator
        self._members = frozenset(self.values)
        self._full: ChoiceSet | None = None
        self._cache: OrderedDict[bytes, ChoiceSet] = OrderedDict()
        self._cache_size = cache_size
        self._recent: OrderedDict[tuple[str, int], npt.NDArray[np.int64]] = OrderedDict()
        if policy == "trie":
            self._full = compile_choices(self.values, index, terminator=terminator)
        elif policy == "hierarchy":
            assert hierarchy is not None
            self._full = hierarchy.compile(index, terminator=terminator)
        elif retriever is None:
            raise ValueError("policy='shortlist' needs a retriever")

    def __repr__(self) -> str:
        return f"RoutedSet({len(self.values)} values, policy={self.policy!r}, k={self.k})"

    def shortlist(self, query: str, k: int | None = None) -> list[str]:
        """The values a request may choose from, best first (all of them, in order, unless the
        policy is shortlist)."""
        if self.retriever is None:
            return self.values
        ids = self._search(query, k or self.k)
        vals = self.retriever.values
        return [vals[i] for i in ids]

    def _search(self, query: str, k: int) -> npt.NDArray[np.int64]:
        """The retriever's ranked ids, remembered for the last few queries (a classifier asks
        twice per text: to list the candidates in its prompt, then to compile them)."""
        assert self.retriever is not None
        key = (query, k)
        hit = self._recent.get(key)
        if hit is None:
            hit = np.asarray(self.retriever.search_ids([query], k)[0], dtype=np.int64)
            self._recent[key] = hit
            if len(self._recent) > 8:
                self._recent.popitem(last=False)
        return hit

    def choices_for(self, query: str | None = None, *, k: int | None = None) -> ChoiceSet:
        """The ChoiceSet to decode this request with (compiled per request for a shortlist).

        Raises :class:`~trierouter.errors.NoCandidatesError` when the retriever finds nothing
        for ``query`` (never an arbitrary fallback set)."""
        if self._full is not None:
            return self._full
        if query is None:
            raise ValueError("policy='shortlist' needs the request's query text")
        assert self.retriever is not None
        ids = np.sort(self._search(query, k or self.k))
        if not len(ids):
            raise NoCandidatesError(
                f"the retriever found no value for the query {query!r:.80} (nothing indexed "
                "matches it), so there is nothing to choose from; use a retriever that ranks "
                "every query, e.g. Shortlist.build(...) with its embedding model, or rephrase",
                query=query,
            )
        key = ids.tobytes()
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        vals = self.retriever.values
        cs = compile_choices([vals[i] for i in ids], self.index, terminator=self.terminator)
        self._cache[key] = cs
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return cs

    def value_of(self, text: str) -> str | None:
        """The original value a decoded string stands for, ``None`` if it is none."""
        if self.hierarchy is not None:
            return self.hierarchy.value_of(text)
        return text if text in self._members else None


def route_set(
    values: Sequence[str],
    index: TokenIndex | Vocabulary,
    *,
    policy: Policy = "auto",
    threshold: int = DEFAULT_THRESHOLD,
    retriever: Retriever | None = None,
    texts: Sequence[str] | None = None,
    path: PathFn | Sequence[Sequence[str]] | None = None,
    k: int = 64,
    sep: str = " / ",
    terminator: str | None = None,
) -> RoutedSet:
    """Prepare ``values`` for decoding under ``policy`` (see the module docstring).

    ``retriever``: any shortlist over exactly these values (a
    :class:`~trierouter.shortlist.Shortlist` from ``Shortlist.build``, a BM25, embedding or
    hybrid index, or anything with ``values`` and ``search_ids``); its ranked order is kept by
    :meth:`RoutedSet.shortlist`. For ``shortlist`` without a ``retriever``, a
    :class:`BM25Index` is built over ``texts`` (default: the values): fast to build, but
    ``Shortlist.build`` ranks better where the set has synonyms or examples to tune on. For
    ``hierarchy``, ``path`` gives each value's labels from coarse to fine (see
    :func:`build_hierarchy`).
    """
    if policy not in ("auto", "trie", "shortlist", "hierarchy"):
        raise ValueError(f"policy={policy!r}; expected 'auto', 'trie', 'shortlist' or 'hierarchy'")
    if isinstance(values, str):
        raise TypeError("values must be a sequence of str, got a single str; wrap it in a list")
    if texts is not None:
        if len(texts) != len(values):
            raise ValueError(f"texts has {len(texts)} entries for {len(values)} values")
        first: dict[str, str] = {}
        for v, t in zip(values, texts, strict=True):
            first.setdefault(v, t)
        texts = list(first.values())
    vals = list(dict.fromkeys(values))
    chosen = policy
    if policy == "auto":
        if len(vals) <= threshold:
            chosen = "trie"
        else:
            chosen = "shortlist" if retriever is not None or texts is not None else "hierarchy"
    if chosen == "shortlist":
        if retriever is None:
            retriever = BM25Index.build(vals, texts)
        elif list(retriever.values) != vals:
            raise ValueError("retriever indexes other values than the values given")
        return RoutedSet(
            vals, index, policy="shortlist", retriever=retriever, k=k, terminator=terminator
        )
    if chosen == "hierarchy":
        h = build_hierarchy(vals, path, sep=sep)
        return RoutedSet(vals, index, policy="hierarchy", hierarchy=h, terminator=terminator)
    return RoutedSet(vals, index, policy="trie", terminator=terminator)
