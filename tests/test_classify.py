"""Classifier: exact label scores against a brute force, greedy decoding, large sets, evaluation.

The brute force is independent of the trie: every token path of every label is enumerated from
the tokenizer's own token bytes (GPT-2 byte map), the constrained distribution at each step is
renormalised over tokens found by comparing strings, and each label's paths are scored in one
forward call of the model over the full sequences (no KV cache). The classifier's score of a label
is the best of its paths (see ``trierouter/classify.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trierouter.classify import Classifier, evaluate, load_examples, load_labels
from trierouter.data.icd10cm import (
    icd10cm_codes,
    icd10cm_description,
    icd10cm_path,
    write_icd10cm_eval_set,
)
from trierouter.router.transformers import generate
from trierouter.testing.tiny_model import build_tiny_model

TEXTS = ["Displaced fracture of the neck of the left femur", "cholera", "tool: get the user"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    d = build_tiny_model(tmp_path_factory.mktemp("clf") / "qwen2")
    tok = transformers.AutoTokenizer.from_pretrained(str(d))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(d)).eval()
    return model, tok


def _labels() -> list[str]:
    # short ICD-10-CM codes plus words that are prefixes of each other (several token paths)
    return [*icd10cm_codes(60, seed=3), "get", "get_user", "getter", "ab", "abc", "b"]


def _token_bytes(tok: Any) -> tuple[dict[bytes, list[int]], list[int]]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    decoder = {c: b for b, c in bytes_to_unicode().items()}
    special = set(tok.all_special_ids) | set(tok.added_tokens_decoder)
    by_bytes: dict[bytes, list[int]] = {}
    for piece, i in tok.get_vocab().items():
        if i not in special:
            by_bytes.setdefault(bytes(decoder[c] for c in piece), []).append(i)
    ends = sorted({tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")})
    return by_bytes, ends


def _segmentations(rest: bytes, by_bytes: dict[bytes, list[int]]) -> list[list[int]]:
    if not rest:
        return [[]]
    out = []
    for k in range(1, len(rest) + 1):
        for t in by_bytes.get(rest[:k], ()):
            out.extend([t, *tail] for tail in _segmentations(rest[k:], by_bytes))
    return out


def _allowed(
    values: Sequence[bytes], prefix: bytes, by_bytes: dict[bytes, list[int]], ends: list[int]
) -> list[int]:
    out: set[int] = set()
    for v in values:
        if v.startswith(prefix):
            rest = v[len(prefix) :]
            if not rest:
                out.update(ends)
            for k in range(1, len(rest) + 1):
                out.update(by_bytes.get(rest[:k], ()))
    return sorted(out)


def brute_force_scores(
    model: Any, tok: Any, context: list[int], labels: list[str], only: Sequence[str] = ()
) -> tuple[dict[str, float], dict[tuple[int, ...], float]]:
    """Best path log-prob per label (of ``only``, default all), and the log-prob of every path;
    one forward call per label."""
    by_bytes, ends = _token_bytes(tok)
    values = [v.encode() for v in labels]
    id_bytes = {i: b for b, ids in by_bytes.items() for i in ids}
    best: dict[str, float] = {}
    every: dict[tuple[int, ...], float] = {}
    allowed_cache: dict[bytes, list[int]] = {}
    for label, v in zip(labels, values, strict=True):
        if only and label not in only:
            continue
        paths = [[*s, e] for s in _segmentations(v, by_bytes) for e in ends]
        width = max(len(p) for p in paths)
        ids = torch.tensor([context + p + [ends[0]] * (width - len(p)) for p in paths])
        with torch.inference_mode():
            # only the positions that predict path tokens (full logits would take gigabytes)
            logits = model(input_ids=ids, logits_to_keep=width + 1).logits
        for r, p in enumerate(paths):
            total, prefix = 0.0, b""
            for j, t in enumerate(p):
                if prefix not in allowed_cache:
                    allowed_cache[prefix] = _allowed(values, prefix, by_bytes, ends)
                allowed = allowed_cache[prefix]
                row = logits[r, j].double()
                z = row[allowed]
                total += float(row[t] - torch.logsumexp(z, 0))
                prefix += id_bytes.get(t, b"")
            every[tuple(p)] = total
            best[label] = max(best.get(label, -float("inf")), total)
    return best, every


@pytest.mark.parametrize("tree_limit", [0, 4096], ids=["search", "one-forward-tree"])
def test_scores_equal_brute_force_and_top1_vs_greedy(
    tiny: tuple[Any, Any], tree_limit: int
) -> None:
    model, tok = tiny
    labels = _labels()
    assert len(labels) <= 100
    clf = Classifier(labels, model=(model, tok), tree_limit=tree_limit, score="exact")
    preds = clf.classify(TEXTS, top_n=len(labels))
    agree = 0
    for text, p in zip(TEXTS, preds, strict=True):
        assert p.exact and len(p.scores) == len(labels)
        # the tree scores every label in one forward call; the search needs several
        assert (p.forward_calls == 1) == bool(tree_limit) and p.forward_calls >= 1
        context = tok(clf.render_prompt(text))["input_ids"]
        best, every = brute_force_scores(model, tok, context, labels)
        for s in p.scores:
            assert abs(s.logprob - best[s.label]) < 1e-5, (s.label, s.logprob, best[s.label])
            assert abs(every[s.tokens] - s.logprob) < 1e-5  # the path reported is that path
        got = [s.logprob for s in p.scores]
        assert got == sorted(got, reverse=True)
        assert p.label == max(best, key=best.__getitem__)
        # greedy decoding never beats the exact top-1; it agrees when its path is the best
        [g] = generate(model, tok, [context], clf.routed.choices_for(text), do_sample=False)
        greedy_score = every[tuple(g.token_ids)]
        assert greedy_score <= p.scores[0].logprob + 1e-6  # float32 logits
        if abs(greedy_score - p.scores[0].logprob) < 1e-6:
            assert g.choices["choice0"] == p.label
            agree += 1
        if tree_limit:  # greedy read off the tree's logits is the decoder's greedy choice
            assert p.greedy == g.choices["choice0"]
    assert agree >= 1  # on this model and these texts the greedy path is the best at least once


def test_tree_with_a_cached_prompt_head_gives_the_same_scores(tiny: tuple[Any, Any]) -> None:
    from trierouter.router.tree_scores import PrefixCache, token_tree, tree_logits, tree_scores

    model, tok = tiny
    labels = _labels()
    clf = Classifier(labels, model=(model, tok))
    cs = clf.routed.choices_for(TEXTS[0])
    tree = token_tree(cs, limit=4096)
    assert tree is not None and token_tree(cs, limit=10) is None  # too many nodes: search
    context = tok(clf.render_prompt(TEXTS[0]))["input_ids"]
    whole = tree_scores(tree, tree_logits(model, context, tree))
    head = PrefixCache(model, context[:7])
    for _ in range(2):  # the shared head's cache is reused, never extended
        cached = tree_scores(tree, tree_logits(model, context, tree, prefix=head))
        assert cached.keys() == whole.keys() == set(labels)
        assert all(abs(cached[v][0] - whole[v][0]) < 1e-5 for v in labels)
        assert all(cached[v][1] == whole[v][1] for v in labels)
    with pytest.raises(ValueError, match="prefix"):
        tree_logits(model, [1, *context], tree, prefix=head)


def test_budget_gives_exact_path_scores_but_not_exact_ranking(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    labels = _labels()
    clf = Classifier(labels, model=(model, tok), max_expansions=1, tree_limit=0, score="exact")
    [p] = clf.classify(TEXTS[:1], top_n=3)
    assert not p.exact and len(p.scores) == 3 and p.label in labels
    context = tok(clf.render_prompt(TEXTS[0]))["input_ids"]
    _, every = brute_force_scores(model, tok, context, labels, [s.label for s in p.scores])
    for s in p.scores:
        assert abs(every[s.tokens] - s.logprob) < 1e-5


def test_icd10cm_hierarchy_and_shortlist(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    codes = icd10cm_codes()
    assert len(codes) > 70_000
    hier = Classifier(codes, model=(model, tok), policy="hierarchy", path=icd10cm_path, top_n=2)
    [p] = hier.classify(TEXTS[:1])
    assert p.label in set(codes) and len(p.scores) == 2
    assert p.candidates == len(codes)
    descs = [icd10cm_description(c) for c in codes[:5000]]
    short = Classifier(
        codes[:5000], descriptions=descs, model=(model, tok), policy="shortlist", k=16
    )
    [p] = short.classify(["cholera due to vibrio cholerae"], top_n=3)
    assert p.candidates == 16 and p.label in short.candidates("cholera due to vibrio cholerae")
    assert p.forward_calls == 1 and p.greedy in short.candidates("cholera due to vibrio cholerae")
    # nothing matches: no label, and the reason, rather than a label from arbitrary codes
    [p] = short.classify(["?! ... ;;"])
    assert p.label is None and p.scores == [] and p.candidates == 0
    assert p.note is not None and "no value for the query" in p.note


def test_think_then_answer(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    labels = icd10cm_codes(40)
    clf = Classifier(labels, model=(model, tok), think=True, think_tokens=8)
    preds = clf.classify(TEXTS[:2], top_n=2)
    for p in preds:
        assert p.label in labels and p.thought is not None and p.thought.endswith("</think>")


def test_bad_arguments(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    with pytest.raises(ValueError, match="engine"):
        Classifier(["a"], model=(model, tok), engine="onnx")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\{text\}"):
        Classifier(["a"], model=(model, tok), prompt="no placeholder")
    with pytest.raises(ValueError, match="empty"):
        Classifier([], model=(model, tok))
    with pytest.raises(ValueError, match="descriptions"):
        Classifier(["a", "b"], descriptions=["x"], model=(model, tok))
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        Classifier(["a"], model="/nonexistent/model")
    clf = Classifier(["a", "b"], model=(model, tok))
    with pytest.raises(TypeError, match="wrap"):
        clf.classify("a text")  # type: ignore[arg-type]


def test_evaluate_on_icd10cm_sample(tiny: tuple[Any, Any], tmp_path: Path) -> None:
    model, tok = tiny
    data, labels_file = write_icd10cm_eval_set(tmp_path, n_labels=30, n_examples=6)
    labels, descriptions = load_labels(labels_file)
    examples = load_examples(data)
    assert len(labels) == 30 and len(examples) == 6 and all(g in labels for _, g in examples)
    assert json.loads(data.read_text().splitlines()[0]).keys() >= {"text", "label"}
    clf = Classifier(labels, descriptions=descriptions, model=(model, tok), think_tokens=4)
    results = {r.mode: r for r in evaluate(clf, examples)}
    assert set(results) == {"unconstrained", "constrained", "think"}
    assert results["constrained"].validity == 1.0 and results["think"].validity == 1.0
    assert all(r.n == 6 for r in results.values())


def test_free_answer_is_the_first_line_of_unstopped_greedy_generation(
    tiny: tuple[Any, Any],
) -> None:
    """generate_free stops at the end of the first line; the oracle generates every token."""
    model, tok = tiny
    clf = Classifier(_labels(), model=(model, tok))
    texts = [f"note {i}: {w}" for i, w in enumerate(["cough", "fever", "rash", "pain", "fall"])]
    got = clf.generate_free(texts, max_new_tokens=24)
    for text, answer in zip(texts, got, strict=True):
        prompt = clf.free_prompt(text)
        assert prompt + " " == clf.render_prompt(text)  # the model writes the space itself
        ids = torch.tensor([tok(prompt)["input_ids"]])
        with torch.inference_mode():
            full = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                  max_new_tokens=24, do_sample=False,
                                  pad_token_id=tok.pad_token_id or tok.eos_token_id)  # fmt: skip
        new = [int(t) for t in full[0, ids.shape[1] :] if int(t) not in clf.vocabulary.end_ids]
        assert answer == tok.decode(new, skip_special_tokens=True).strip().split("\n")[0].strip()
