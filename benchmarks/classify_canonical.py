"""Long labels: canonical-path scores vs the exact score's search fallback, on the tiny model.

    OMP_NUM_THREADS=1 python benchmarks/classify_canonical.py [--n 40] [--k 20] [--before-n 1]

The label set stands in for a taxonomy of long names (HPO terms are not shipped): ICD-10-CM
descriptions of at least ``--min-chars`` characters, each a label, with the code's inclusion
terms as its synonyms. A BM25 shortlist (``Shortlist.build``, no embeddings) indexes the
labels and the synonyms less ``--n`` held out (``hold_out_synonyms``); the held-out ones are the
calibration pseudo-queries of ``Classifier.calibrate_combine`` (each text: all ``--k``
candidates scored). The model is the tests' tiny random-weight Qwen2-tokenizer model (one
thread): the numbers are the scoring machinery's cost, not a real model's.

Arms (same process, same texts):

- ``canonical``: ``calibrate_combine`` on all ``--n`` texts with ``score="auto"`` (the default:
  the every-tokenization tree does not fit 512 nodes, so canonical paths, one forward call).
- ``exact_search``: what ran before, ``score="exact"``: the tree does not fit, so the best-first
  search (``max_expansions`` 2048, then greedy completion). It is timed on the first
  ``--before-n`` texts only (minutes per text), each stopped at ``--before-budget`` seconds
  (then counted at the budget: ``lower_bound``); ``seconds_for_n_extrapolated`` is the mean
  times ``--n`` and says so.
- How one call lays out the canonical paths, per text on the first ``--n`` texts: ``tree`` (the
  prompt, then every path as one sequence with tree attention, one call: what the library
  does), ``kv_batch`` (the prompt's KV cache once, then every path as one padded batch row on
  it: two calls) and ``loop`` (one call per candidate over prompt + path, no cache: the
  oracle). Their scores are compared with the tree's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trierouter.classify import Classifier
from trierouter.classify_combine import hold_out_synonyms
from trierouter.data import icd10cm_codes, icd10cm_description, icd10cm_synonyms
from trierouter.registry.trie import ChoiceSet
from trierouter.router.path_scores import canonical_paths, path_scores, path_tree
from trierouter.router.tree_scores import token_tree, tree_logits
from trierouter.shortlist import Shortlist
from trierouter.tiny_model import build_tiny_model

RESULTS = ROOT / "benchmarks" / "results"


def label_set(min_chars: int, size: int) -> tuple[list[str], dict[str, list[str]]]:
    """Long descriptions as labels (the first ``size`` in code order) and their synonyms."""
    syn = icd10cm_synonyms()
    labels: list[str] = []
    synonyms: dict[str, list[str]] = {}
    for c in icd10cm_codes():
        d = icd10cm_description(c)
        if len(d) >= min_chars and c in syn and d not in synonyms:
            labels.append(d)
            synonyms[d] = [t for t in syn[c] if t != d]
            if len(labels) == size:
                break
    return labels, {d: ts for d, ts in synonyms.items() if ts}


def constrained(cs: ChoiceSet, state: int, row: Any, t: int) -> float:
    import torch

    allowed = torch.from_numpy(cs.mask(state).astype("int64"))
    return float(row[t].double() - torch.logsumexp(row[allowed].double(), 0))


def score_rows(cs: ChoiceSet, path: tuple[int, ...], rows: Any) -> float:
    """A closed path's constrained log-probability from its rows of logits (row j predicts
    token j)."""
    s, total = cs.root, 0.0
    for j, t in enumerate(path):
        total += constrained(cs, s, rows[j], t)
        s = cs.advance(s, t)
    return total


def kv_batch(
    model: Any, context: list[int], cs: ChoiceSet, paths: dict[str, Any]
) -> dict[str, float]:
    """The prompt's KV cache once, then every path as a row of one padded batch on it."""
    import torch
    from transformers import DynamicCache

    with torch.inference_mode():
        out = model(input_ids=torch.tensor([context]), use_cache=True, logits_to_keep=1)
        root, cache = out.logits[0, -1], out.past_key_values
        names = list(paths)
        opened = [list(paths[v][:-1]) for v in names]  # the close is predicted by the last row
        b, width, n = len(names), max(len(p) for p in opened), len(context)
        ids = torch.zeros((b, width), dtype=torch.long)
        mask = torch.zeros((b, n + width), dtype=torch.long)
        mask[:, :n] = 1
        for r, p in enumerate(opened):
            ids[r, : len(p)] = torch.tensor(p)
            mask[r, n : n + len(p)] = 1
        pos = torch.arange(n, n + width).expand(b, -1)
        kv = [
            (la.keys.expand(b, -1, -1, -1), la.values.expand(b, -1, -1, -1)) for la in cache.layers
        ]
        past = DynamicCache(ddp_cache_data=kv, config=model.config)
        logits = model(
            input_ids=ids,
            past_key_values=past,
            position_ids=pos,
            attention_mask=mask,
            use_cache=False,
        ).logits
    out_scores = {}
    for r, v in enumerate(names):
        rows = torch.cat([root[None], logits[r, : len(opened[r])]])
        out_scores[v] = score_rows(cs, paths[v], rows)
    return out_scores


def loop(model: Any, context: list[int], cs: ChoiceSet, paths: dict[str, Any]) -> dict[str, float]:
    """One forward call per candidate over prompt + path, no cache."""
    import torch

    out = {}
    with torch.inference_mode():
        for v, p in paths.items():
            ids = torch.tensor([context + list(p[:-1])])
            rows = model(input_ids=ids, logits_to_keep=len(p)).logits[0]
            out[v] = score_rows(cs, p, rows)
    return out


def layouts(clf: Classifier, texts: list[str]) -> dict[str, Any]:
    backend: Any = clf._backend
    model = backend.model
    secs: dict[str, list[float]] = {"tree": [], "kv_batch": [], "loop": []}
    diff = {"kv_batch": 0.0, "loop": 0.0}
    nodes, tokens = [], []
    for i, text in enumerate(texts):
        ctx = backend.encode(clf.render_prompt(text))
        cs = clf.routed.choices_for(text)
        paths, _ = canonical_paths(cs, backend.encode_batch, clf.vocabulary)
        tree = path_tree(cs, paths)
        nodes.append(len(tree))
        tokens.append(sum(len(p) for p in paths.values()))
        t0 = time.perf_counter()
        ref = path_scores(tree, paths, tree_logits(model, ctx, tree))
        secs["tree"].append(time.perf_counter() - t0)
        closed = {v: p for v, (_, p) in ref.items()}
        order = [("kv_batch", kv_batch), ("loop", loop)]
        for name, fn in order[:: 1 if i % 2 == 0 else -1]:
            t0 = time.perf_counter()
            got = fn(model, ctx, cs, closed)
            secs[name].append(time.perf_counter() - t0)
            diff[name] = max(diff[name], max(abs(got[v] - ref[v][0]) for v in ref))
    return {
        name: {
            "seconds_per_text_median": round(statistics.median(s), 4),
            "seconds_total": round(sum(s), 3),
            "forward_calls_per_text": {"tree": 1, "kv_batch": 2, "loop": "k"}[name],
            **({"max_abs_score_difference_vs_tree": round(diff[name], 7)} if name in diff else {}),
        }
        for name, s in secs.items()
    } | {
        "tree_nodes_median": statistics.median(nodes),
        "path_tokens_median": statistics.median(tokens),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=40, help="calibration texts")
    ap.add_argument("--k", type=int, default=20, help="shortlist size")
    ap.add_argument("--labels", type=int, default=2000)
    ap.add_argument("--min-chars", type=int, default=60)
    ap.add_argument("--before-n", type=int, default=1, help="texts timed with the search")
    ap.add_argument("--before-budget", type=int, default=150, help="seconds per such text")
    ap.add_argument("--out", default=str(RESULTS / "classify_canonical.json"))
    args = ap.parse_args()
    import torch
    import transformers

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        d = build_tiny_model(Path(tmp) / "qwen2")
        tok = transformers.AutoTokenizer.from_pretrained(str(d))
        model = transformers.AutoModelForCausalLM.from_pretrained(str(d)).eval()
    labels, synonyms = label_set(args.min_chars, args.labels)
    indexed, held = hold_out_synonyms(synonyms, args.n, seed=0)
    sl = Shortlist.build(labels, synonyms=indexed, use_embedding=False, progress=False)

    def clf(score: Any) -> Classifier:
        return Classifier(
            labels, model=(model, tok), policy="shortlist", retriever=sl, k=args.k, score=score
        )

    texts = [t for t, _ in held]
    after = clf("auto")
    cands = [after.routed.choices_for(t) for t in texts]
    tree_fits = sum(token_tree(cs, limit=after.tree_limit) is not None for cs in cands)
    kinds = [p.score_kind for p in after.classify(texts[:1], top_n=args.k)]  # warm-up
    t0 = time.perf_counter()
    combine = after.calibrate_combine(held)
    after_s = time.perf_counter() - t0
    preds = after.classify(texts, top_n=args.k)
    kinds = [p.score_kind for p in preds]
    print(
        f"canonical (auto): calibrate_combine on {args.n} texts {after_s:.2f} s, w={combine.weight}"
    )

    before = clf("exact")
    per_text: list[float] = []
    calls, exact_flags, unfinished = [], [], 0

    def stop(signum: int, frame: Any) -> None:
        raise TimeoutError

    signal.signal(signal.SIGALRM, stop)
    for text in texts[: args.before_n]:
        t0 = time.perf_counter()
        signal.alarm(args.before_budget)
        try:
            [p] = before.classify([text], top_n=args.k)
        except TimeoutError:
            unfinished += 1  # counted at the budget: a lower bound of its time
            per_text.append(time.perf_counter() - t0)
            print(f"exact (search): unfinished after {per_text[-1]:.0f} s", flush=True)
            continue
        finally:
            signal.alarm(0)
        per_text.append(time.perf_counter() - t0)
        calls.append(p.forward_calls)
        exact_flags.append(p.exact)
        print(f"exact (search): {per_text[-1]:.1f} s, {p.forward_calls} forward calls", flush=True)
    mean_before = statistics.mean(per_text)

    lay = layouts(after, texts)
    print(json.dumps(lay, indent=1))
    res = {
        "what": "calibrate_combine over long labels: canonical paths vs the exact score's search",
        "model": "tiny random-weight Qwen2-tokenizer model (trierouter.tiny_model), 1 thread",
        "labels": f"{len(labels)} ICD-10-CM descriptions of >= {args.min_chars} characters",
        "k": args.k,
        "n_texts": args.n,
        "candidate_sets_whose_full_tree_fits_512": tree_fits,
        "canonical": {
            "score": "auto",
            "score_kind_counts": {k: kinds.count(k) for k in set(kinds)},
            "calibrate_combine_seconds": round(after_s, 3),
            "seconds_per_text": round(after_s / args.n, 4),
            "weight": combine.weight,
        },
        "exact_search": {
            "score": "exact",
            "texts_timed": len(per_text),
            "seconds_per_text": [round(s, 2) for s in per_text],
            "forward_calls": calls,
            "exact_flags": exact_flags,
            "unfinished_at_budget": unfinished,
            "budget_seconds_per_text": args.before_budget,
            "seconds_for_n_extrapolated": round(mean_before * args.n, 1),
            "lower_bound": unfinished > 0,
        },
        "speedup_per_text": round(mean_before / (after_s / args.n), 1),
        "layouts": lay,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
