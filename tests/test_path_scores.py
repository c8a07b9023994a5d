"""Canonical-path scores against independent oracles, on the tiny model.

The oracle of a canonical score is a plain loop: per label, the tokenizer's own encoding of the
label text, one forward call of the model over ``context + tokens + end id`` (no KV cache, no
tree attention), and the constrained log-softmax at each step renormalised over the tokens found
by comparing token bytes with the label strings (``tests/test_classify``'s ``_allowed``), the
best end id closing it. The exact score's oracle is ``brute_force_scores`` (every tokenization
of every label); a canonical score is one path's, so never above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.test_classify import (
    _allowed,
    _labels,
    _one_thread,
    _token_bytes,
    brute_force_scores,
    tiny,
)
from trierouter.classify import Classifier
from trierouter.data import icd10cm_codes, icd10cm_description
from trierouter.router.path_scores import canonical_paths, path_trees, spell_longest
from trierouter.router.tree_scores import token_tree

__all__ = ["_one_thread", "tiny"]  # the tiny model and one thread, as in test_classify
TEXTS = ["Displaced fracture of the neck of the left femur", "cholera with dehydration"]


def _long_labels(n: int = 24) -> list[str]:
    """ICD-10-CM descriptions of 90+ characters: every-tokenization trees far past 512 nodes."""
    descs = sorted({icd10cm_description(c) for c in icd10cm_codes()})
    long = [d for d in descs if len(d) >= 90]
    step = len(long) // n
    return long[::step][:n]


def oracle_canonical(
    model: Any, tok: Any, context: list[int], labels: Sequence[str]
) -> dict[str, tuple[float, list[int]]]:
    """Per label: the constrained log-probability of its own encoding closed by the best end
    id, and that path; one forward call per label."""
    by_bytes, ends = _token_bytes(tok)
    id_bytes = {i: b for b, ids in by_bytes.items() for i in ids}
    values = [v.encode() for v in labels]
    out = {}
    for label in labels:
        ids = tok(label, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([context + ids])).logits[0, len(context) - 1 :]
        total, prefix = 0.0, b""
        for j, t in enumerate(ids):
            row = logits[j].double()
            total += float(
                row[t] - torch.logsumexp(row[_allowed(values, prefix, by_bytes, ends)], 0)
            )
            prefix += id_bytes[t]
        assert prefix == label.encode()  # the encoding spells the label
        row = logits[len(ids)].double()
        norm = torch.logsumexp(row[_allowed(values, prefix, by_bytes, ends)], 0)
        close = max(ends, key=lambda e: float(row[e]))
        out[label] = (total + float(row[close] - norm), [*ids, close])
    return out


def test_canonical_scores_equal_a_per_label_loop_of_plain_forward_calls(
    tiny: tuple[Any, Any],
) -> None:
    model, tok = tiny
    labels = _long_labels()
    clf = Classifier(labels, model=(model, tok), score="canonical")
    assert token_tree(clf.routed.choices_for(TEXTS[0]), limit=10_000) is None  # exact: huge
    for text, p in zip(TEXTS, clf.classify(TEXTS, top_n=len(labels)), strict=True):
        assert p.score_kind == "canonical" and not p.exact and p.respelled == []
        assert p.forward_calls == 1 and len(p.scores) == len(labels)
        context = tok(clf.render_prompt(text))["input_ids"]
        want = oracle_canonical(model, tok, context, labels)
        for s in p.scores:
            assert abs(s.logprob - want[s.label][0]) < 1e-5, (s.label, s.logprob, want[s.label])
            assert list(s.tokens) == want[s.label][1]
        got = [s.logprob for s in p.scores]
        assert got == sorted(got, reverse=True)
        assert p.label == max(want, key=lambda v: want[v][0])


def test_canonical_never_above_exact_and_exact_still_brute_force(tiny: tuple[Any, Any]) -> None:
    """On labels with several token paths each (prefixes of one another), the exact tree still
    equals the all-tokenizations brute force, and every canonical score is at most it."""
    model, tok = tiny
    labels = _labels()
    exact = Classifier(labels, model=(model, tok), tree_limit=4096, score="exact")
    canon = Classifier(labels, model=(model, tok), score="canonical")
    below = 0
    for text, e, c in zip(
        TEXTS,
        exact.classify(TEXTS, top_n=len(labels)),
        canon.classify(TEXTS, top_n=len(labels)),
        strict=True,
    ):
        assert e.score_kind == "exact" and e.exact and c.score_kind == "canonical"
        context = tok(exact.render_prompt(text))["input_ids"]
        best, every = brute_force_scores(model, tok, context, labels)
        ex = {s.label: s.logprob for s in e.scores}
        assert ex.keys() == set(labels)
        assert all(abs(ex[v] - best[v]) < 1e-5 for v in labels)
        want = oracle_canonical(model, tok, context, labels)
        for s in c.scores:
            assert abs(s.logprob - want[s.label][0]) < 1e-5
            assert abs(every[s.tokens] - s.logprob) < 1e-5  # one of the label's paths
            assert s.logprob <= ex[s.label] + 1e-6
            below += s.logprob < ex[s.label] - 1e-6
    assert below > 0  # some canonical path is not the best one: the two scores differ


def test_auto_records_which_score_and_canonical_limit_splits_calls(
    tiny: tuple[Any, Any],
) -> None:
    model, tok = tiny
    short = Classifier(_labels(), model=(model, tok), tree_limit=4096)  # score="auto"
    [p] = short.classify(TEXTS[:1])
    assert p.score_kind == "exact" and p.exact and p.forward_calls == 1
    labels = _long_labels()
    auto = Classifier(labels, model=(model, tok))
    [p] = auto.classify(TEXTS[:1], top_n=len(labels))
    assert p.score_kind == "canonical" and p.forward_calls == 1  # not the best-first search
    one = {s.label: s.logprob for s in p.scores}
    split = Classifier(labels, model=(model, tok), score="canonical", canonical_limit=64)
    [q] = split.classify(TEXTS[:1], top_n=len(labels))
    assert q.score_kind == "canonical" and q.forward_calls > 1
    assert q.expansions >= p.expansions  # prefixes shared across calls are computed again
    assert all(abs(s.logprob - one[s.label]) < 1e-5 for s in q.scores)
    assert q.greedy == p.greedy
    # auto with canonical paths that do not fit one call: the search, as before
    small = Classifier(labels, model=(model, tok), canonical_limit=64, max_expansions=8)
    [r] = small.classify(TEXTS[:1], top_n=2)
    assert r.score_kind == "exact" and not r.exact and r.expansions >= 8
    with pytest.raises(ValueError, match="score="):
        Classifier(labels, model=(model, tok), score="best")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="canonical_limit"):
        Classifier(labels, model=(model, tok), canonical_limit=1)


def test_a_tokenization_off_the_set_is_respelled_and_reported(tiny: tuple[Any, Any]) -> None:
    """An encoding that does not spell the label in the set (as a tokenizer adding a prefix
    space would give) is replaced by the longest-match spelling, named in ``respelled``."""
    model, tok = tiny
    labels = _long_labels(6)
    clf = Classifier(labels, model=(model, tok), score="canonical")
    cs = clf.routed.choices_for(TEXTS[0])
    encode = clf._backend.encode_batch
    space = labels[2]

    def prefixed(texts: list[str]) -> list[list[int]]:
        return [encode([" " + t])[0] if t == space else encode([t])[0] for t in texts]

    paths, respelled = canonical_paths(cs, prefixed, clf.vocabulary)
    assert respelled == [space]
    by_bytes, _ = _token_bytes(tok)
    rest, want = space.encode(), []
    while rest:  # the longest token that is a prefix of what is left (the smallest id on ties)
        k = max(k for k in range(1, len(rest) + 1) if rest[:k] in by_bytes)
        want.append(min(by_bytes[rest[:k]]))
        rest = rest[k:]
    assert list(paths[space]) == want == list(spell_longest(cs, space, clf.vocabulary))
    assert all(
        list(paths[v]) == tok(v, add_special_tokens=False)["input_ids"]
        for v in labels
        if v != space
    )
    with pytest.raises(ValueError, match="limit=3"):
        path_trees(cs, paths, 3)
