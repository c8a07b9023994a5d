"""Does scoring several texts per forward call pay on the CPU? Batched vs unbatched token trees.

    OMP_NUM_THREADS=2 nice -n 10 python benchmarks/classify_batch.py [--source lay] [--n 16]
        [--batch 4 8] [--rounds 3] [--threads 2] [--dtype bfloat16]

The texts, candidates and prompts are those of ``benchmarks/results/classify.json`` (Qwen2.5-
Coder-0.5B-Instruct, the first ``--n`` texts of ``--source``, their k = 20 hybrid-shortlist
candidates as stored there, so no retriever runs). Per text: the prompt (the candidates listed),
the candidates' ChoiceSet, its token tree, then the exact scores of every candidate (top-5
kept) and the greedy label. Unbatched: one forward call per text (prompt + tree, tree
attention: ``trierouter.router.tree_scores.tree_logits``, what ``Classifier`` does).
Batched: ``--batch`` texts per forward call (:func:`tree_logits_batch` below, kept out of the
library: it does not pay on 2 cores): each row its own prompt + tree, left-padded to the longest
row. A control, ``packed_one``: ``tree_logits_batch`` with one text per call (is a difference
the batching or the code path?). The modes run on the same texts in the same process: per chunk of
``max(--batch)`` texts, every mode back to back in alternating order (the host is shared, and
its load moves by a factor of 3 within minutes), for ``--rounds`` rounds; seconds per text is
the median over rounds of each mode's wall time over all texts (preparation, forward,
scoring), the model loaded and every text's candidate set compiled by an untimed first pass.
The top-5 labels and scores of every mode are compared with one text per
call (bfloat16: padding changes the shapes of the matrix products, so the scores move by
bfloat16 rounding; in float32 they are equal to 1e-5, ``tests/test_classify_batch.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _classify_arms import load_pair, machine_meta
from _icd_sources import icd_data

from trierouter.classify import Classifier
from trierouter.router.tree_scores import (
    TokenTree,
    token_tree,
    tree_attention,
    tree_logits,
    tree_scores,
)

RESULTS = ROOT / "benchmarks" / "results"
MODEL = "qwen2.5-coder-0.5b-instruct"


class StoredShortlist:
    """The candidates classify.json stored per text, in their order, as a retriever."""

    def __init__(self, values: list[str], rows: list[dict[str, Any]]) -> None:
        self._values = values
        ids = {v: i for i, v in enumerate(values)}
        self._ids = {r["text"]: np.array([ids[c] for c in r["candidates"]]) for r in rows}

    @property
    def values(self) -> list[str]:
        return self._values

    def search_ids(self, queries: Any, k: int = 64) -> list[Any]:
        return [self._ids[q][:k] for q in queries]

    def search(self, query: str, k: int = 64) -> list[str]:
        return [self._values[i] for i in self.search_ids([query], k)[0]]


def tree_logits_batch(model: Any, contexts: list[list[int]], trees: list[TokenTree]) -> list[Any]:
    """``tree_logits`` of several texts in one forward call: one row per text (its context and
    its tree, ``tree_attention``'s pattern), left-padded to the longest (a pad token sees only
    itself and is never read), the output head on the last ``max tree size`` positions."""
    import torch

    lens = [len(c) + len(t) - 1 for c, t in zip(contexts, trees, strict=True)]
    b, width, keep = len(contexts), max(lens), max(len(t) for t in trees)
    ids = torch.zeros((b, width), dtype=torch.long)
    pos = torch.zeros((b, width), dtype=torch.long)
    allowed = torch.zeros((b, width, width), dtype=torch.bool)
    for r, (ctx, tree) in enumerate(zip(contexts, trees, strict=True)):
        n, pad = len(ctx), width - lens[r]
        ids[r, pad:] = torch.tensor(ctx + tree.tokens[1:])
        pos[r, pad:] = torch.tensor(list(range(n)) + [n - 1 + d for d in tree.depth[1:]])
        allowed[r, pad:, pad:] = tree_attention(tree, n)
        idx = torch.arange(pad)
        allowed[r, idx, idx] = True
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    with torch.inference_mode():
        out = model(
            input_ids=ids,
            position_ids=pos,
            attention_mask=mask[:, None],
            use_cache=False,
            logits_to_keep=keep,
        )
    logits = out.logits.float()
    return [logits[r, keep - len(t) :] for r, t in enumerate(trees)]


def prepare(clf: Classifier, text: str) -> tuple[list[int], TokenTree]:
    ctx = clf._backend.encode(clf.render_prompt(text))
    tree = token_tree(clf.routed.choices_for(text), limit=clf.tree_limit)
    assert tree is not None
    return ctx, tree


def top5(tree: TokenTree, logits: Any) -> list[tuple[str, float]]:
    best = tree_scores(tree, logits)
    return [(v, lp) for v, (lp, _) in sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:5]]


def run(
    clf: Classifier, texts: list[str], batch: int, *, packed: bool = True
) -> tuple[float, int, list[Any]]:
    """Wall seconds, forward calls and the top-5 of every text, ``batch`` texts per call
    (``packed=False``: the library's one-text ``tree_logits``)."""
    model = clf._backend.model
    t0 = time.perf_counter()
    out, calls = [], 0
    for s in range(0, len(texts), batch):
        prepared = [prepare(clf, t) for t in texts[s : s + batch]]
        if not packed:
            [(ctx, tree)] = prepared
            logits = [tree_logits(model, ctx, tree)]
        else:
            logits = tree_logits_batch(model, [c for c, _ in prepared], [t for _, t in prepared])
        calls += 1
        out += [top5(tree, lg) for (_, tree), lg in zip(prepared, logits, strict=True)]
    return time.perf_counter() - t0, calls, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default="lay")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--batch", type=int, nargs="+", default=[4, 8], help="texts per call")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    ap.add_argument("--out", default=str(RESULTS / "classify_batch.json"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    ref = json.loads((RESULTS / "classify.json").read_text())
    rows = ref["sources"][args.source]["rows"][: args.n]
    data = icd_data(2000)
    clf = Classifier(
        data.codes,
        descriptions=data.descs,
        model=load_pair(MODEL, args.dtype),
        policy="shortlist",
        retriever=StoredShortlist(data.codes, rows),
        k=ref["k"],
    )
    texts = [r["text"] for r in rows]
    load0 = [round(x, 2) for x in os.getloadavg()]
    run(clf, texts, 1, packed=False)  # warm-up, not timed: every candidate set compiled once
    plan = [("unbatched", 1, False), ("packed_one", 1, True)]
    plan += [(f"batched_{b}", b, True) for b in args.batch]
    modes: dict[str, dict[str, Any]] = {
        name: {"seconds": [0.0] * args.rounds, "forward_calls": 0} for name, _, _ in plan
    }
    tops: dict[str, list[Any]] = {name: [] for name, _, _ in plan}
    chunk = max(args.batch)
    loads: list[float] = []  # the 1-minute load average at the end of each round
    for r in range(args.rounds):
        for c, s in enumerate(range(0, len(texts), chunk)):
            # every mode on the same chunk back to back, in alternating order: the other
            # jobs' load moves all modes alike
            for name, b, packed in plan[:: 1 if (r + c) % 2 == 0 else -1]:
                secs, calls, top = run(clf, texts[s : s + chunk], b, packed=packed)
                modes[name]["seconds"][r] += secs
                if r == 0:
                    modes[name]["forward_calls"] += calls
                    tops[name] += top
        loads.append(round(os.getloadavg()[0], 2))
        print(
            f"round {r} (load {loads[-1]}): "
            + ", ".join(f"{k} {m['seconds'][r] / len(texts):.2f}" for k, m in modes.items())
            + " s/text",
            flush=True,
        )
    for m in modes.values():
        m["seconds"] = [round(x, 2) for x in m["seconds"]]
    for name, m in modes.items():
        if name != "unbatched":  # against one text per call: the same top-5?
            pairs = list(zip(tops["unbatched"], tops[name], strict=True))
            m["top5_labels_identical"] = sum(
                [v for v, _ in u] == [v for v, _ in b] for u, b in pairs
            )
            m["top5_max_abs_score_difference"] = round(
                max(abs(x[1] - y[1]) for u, b in pairs for x, y in zip(u, b, strict=True)), 6
            )
    for m in modes.values():
        m["seconds_per_text"] = round(statistics.median(m["seconds"]) / len(texts), 3)
        m["forward_calls_per_text"] = round(m["forward_calls"] / len(texts), 3)
    res = {
        "what": "exact scores of all k candidates (top-5 kept), unbatched vs batched token trees",
        "model": MODEL,
        "dtype": args.dtype,
        "source": args.source,
        "n_texts": len(texts),
        "k": ref["k"],
        "batch": args.batch,
        "rounds": args.rounds,
        "modes": modes,
        "loadavg_1min_after_each_round": loads,
        "speedup": {
            name: round(modes["unbatched"]["seconds_per_text"] / m["seconds_per_text"], 3)
            for name, m in modes.items()
            if name != "unbatched"
        },
        "prompt_tokens_per_text": round(statistics.mean(r["prompt_tokens"] for r in rows), 1),
        "tree_nodes_per_text": round(statistics.mean(r["tree_nodes"] for r in rows), 1),
        "machine": machine_meta(
            ROOT,
            {k: v for k, v in vars(args).items() if k != "out"},
            loadavg_before=load0,
            loadavg_after=[round(x, 2) for x in os.getloadavg()],
        ),
    }
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=1))


if __name__ == "__main__":
    main()
