"""Does the classifier classify? A real model over ICD-10-CM, against the retriever alone.

    OMP_NUM_THREADS=1 python benchmarks/classify.py [--sources inclusion,lay,abbrev] [--n 15]
        [--seed 0] [--k 20] [--top-n 5] [--threads 1] [--embedding]

Labels: the 74,731 billable ICD-10-CM codes with their descriptions. Queries: the held-out
query sources of ``benchmarks/_icd_sources.py`` (never indexed; the shortlist is built from the
descriptions and the *training* half of the inclusion terms only). Per source, ``--n`` texts are
drawn with ``random.Random(seed)`` from that source's seeded sample before anything is run.
Model: Qwen2.5-Coder-0.5B-Instruct (``trierouter.models.load_model``), transformers, float32,
``--threads`` torch threads, ``Classifier(policy="shortlist", k=K)`` with the default prompt
(the K candidates listed as ``code: description``).

Arms, per source (a hit: the answer is one of the query's gold codes):

* ``retriever_top1``: the shortlist's first candidate (no model).
* ``recall_at_k``: the gold is among the K candidates: the bound on every model arm.
* ``greedy``: greedy constrained decoding over the K candidates (``max_expansions=1``: the
  best token at every step, completed from the prompt's KV cache).
* ``exact``: the top-1 of the exact best-first search for the top ``--top-n`` labels (the
  classifier's ``label``; ``exact_complete`` counts texts whose search was not cut short).
* ``shuffled``: the same K candidates listed in the prompt in a seeded random order (a
  retriever wrapper, same model), exact top-1 only (``top_n=1``): does the model read the
  list, or answer with whatever is listed first? ``shuffled_is_first_listed`` says.

Seconds per text are wall time of ``Classifier.classify`` for one text (prompt rendering,
shortlist query, trie compile of the K candidates, prefill and search), per arm; ``expansions``
are the trie paths whose next-token distribution was computed (rows of forward calls; the
prefill counts one). Excluded: model loading, building the shortlist (reported once as
``build_seconds``), and the retriever-only arms' own time. By default the shortlist is BM25
over descriptions + training synonyms (``Shortlist.build(use_embedding=False)``, fusion chosen
by cross-validation on the synonyms), because embedding the whole set does not fit a short
single-thread run; ``--embedding`` builds the default BM25 + MiniLM shortlist instead.

``{greedy,exact,shuffled}_is_retriever_top1``: how often the model's label is simply the
retriever's first candidate (listed first in the prompt for greedy and exact).

Writes ``benchmarks/results/classify.json`` after every source (a partial run keeps what it
measured) and prints a table; ``--resummarise`` recomputes the agreement figures of ``--out``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _icd_sources import SEED as SPLIT_SEED
from _icd_sources import icd_data

from trierouter.classify import Classifier
from trierouter.models import load_model
from trierouter.shortlist import Shortlist

ARMS = ("retriever_top1", "greedy", "exact", "shuffled")
RESULTS = ROOT / "benchmarks" / "results"
MODEL = "qwen2.5-coder-0.5b-instruct"


def log(*a: Any) -> None:
    print(*a, flush=True)


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


class Shuffled:
    """A retriever whose top ``k`` are the wrapped one's, in a seeded order per query."""

    def __init__(self, inner: Shortlist, seed: int) -> None:
        self.inner = inner
        self.seed = seed

    @property
    def values(self) -> list[str]:
        return self.inner.values

    def search_ids(self, queries: Sequence[str], k: int = 64) -> list[Any]:
        out = []
        for q, ids in zip(queries, self.inner.search_ids(queries, k), strict=True):
            order = list(range(len(ids)))
            random.Random(f"{self.seed}:{q}").shuffle(order)
            out.append(ids[order])
        return out

    def search(self, query: str, k: int = 64) -> list[str]:
        return [self.values[i] for i in self.search_ids([query], k)[0]]


def run_arm(clf: Classifier, text: str, top_n: int, max_expansions: int) -> tuple[Any, float]:
    clf.max_expansions = max_expansions
    t0 = time.perf_counter()
    [p] = clf.classify([text], top_n=top_n)
    return p, time.perf_counter() - t0


def bench_source(
    clf: Classifier,
    shuffled_clf: Classifier,
    name: str,
    texts: list[str],
    gold: list[frozenset[str]],
    args: Any,
) -> dict[str, Any]:
    rows = []
    for i, (text, g) in enumerate(zip(texts, gold, strict=True)):
        cands = clf.candidates(text)
        greedy, t_greedy = run_arm(clf, text, 1, 1)
        exact, t_exact = run_arm(clf, text, args.top_n, args.max_expansions)
        shuf, t_shuf = run_arm(shuffled_clf, text, 1, args.max_expansions)
        listed = shuffled_clf.candidates(text)
        row = {
            "text": text,
            "gold": sorted(g),
            "retriever_top1": cands[0] if cands else None,
            "in_shortlist": bool(set(cands[: args.k]) & g),
            "greedy": greedy.label,
            "greedy_seconds": round(t_greedy, 3),
            "greedy_expansions": greedy.expansions,
            "exact": exact.label,
            "exact_complete": exact.exact,
            "exact_top": [[s.label, round(s.logprob, 3)] for s in exact.scores],
            "exact_seconds": round(t_exact, 3),
            "exact_expansions": exact.expansions,
            "shuffled": shuf.label,
            "shuffled_first_listed": listed[0] if listed else None,
            "shuffled_seconds": round(t_shuf, 3),
            "shuffled_expansions": shuf.expansions,
        }
        rows.append(row)
        hit = "".join("+" if row[a] in g else "-" for a in ARMS)
        log(
            f"  [{name} {i + 1}/{len(texts)}] R/G/E/S {hit} in@{args.k} {int(row['in_shortlist'])}"
            f"  greedy {t_greedy:.1f}s  exact {t_exact:.1f}s ({exact.expansions} exp)"
            f"  shuffled {t_shuf:.1f}s"
            f"  {text[:50]!r}"
        )
    n = len(rows)

    def acc(key: str) -> float:
        return round(sum(r[key] in set(r_g) for r, r_g in zip(rows, gold, strict=True)) / n, 4)

    def mean(key: str) -> float:
        return round(sum(r[key] for r in rows) / n, 3)

    return {
        "n": n,
        "retriever_top1": acc("retriever_top1"),
        f"recall_at_{args.k}": round(sum(r["in_shortlist"] for r in rows) / n, 4),
        "greedy": acc("greedy"),
        "exact": acc("exact"),
        "shuffled": acc("shuffled"),
        "exact_complete": sum(r["exact_complete"] for r in rows),
        "greedy_seconds_per_text": mean("greedy_seconds"),
        "exact_seconds_per_text": mean("exact_seconds"),
        "greedy_expansions_per_text": mean("greedy_expansions"),
        "exact_expansions_per_text": mean("exact_expansions"),
        "shuffled_seconds_per_text": mean("shuffled_seconds"),
        "shuffled_expansions_per_text": mean("shuffled_expansions"),
        **agreement(rows),
        "rows": rows,
    }


def agreement(rows: list[dict[str, Any]]) -> dict[str, float]:
    """How often each model arm's label is the retriever's first candidate (the first listed)."""
    n = len(rows)
    arms = [a for a in ARMS[1:] if a in rows[0]]
    out = {
        f"{a}_is_retriever_top1": round(sum(r[a] == r["retriever_top1"] for r in rows) / n, 4)
        for a in arms
    }
    if "shuffled" in arms:
        first = sum(r["shuffled"] == r["shuffled_first_listed"] for r in rows)
        out["shuffled_is_first_listed"] = round(first / n, 4)
    return out


def get(r: dict[str, Any], key: str, digits: int = 2) -> str:
    return f"{r[key]:.{digits}f}" if key in r else "-"


def table(res: dict[str, Any], k: int) -> str:
    head = (
        f"| source | n | retriever top-1 | recall@{k} | greedy | exact top-1 "
        "| shuffled | s/text greedy | s/text exact | s/text shuffled | expansions exact "
        "| exact = retriever top-1 | shuffled = first listed |"
    )
    lines = [head, "|" + " --- |" * 13]
    for s, r in res["sources"].items():
        lines.append(
            f"| {s} | {r['n']} | {r['retriever_top1']:.2f} | {r[f'recall_at_{k}']:.2f} "
            f"| {r['greedy']:.2f} | {r['exact']:.2f} | {get(r, 'shuffled')} "
            f"| {r['greedy_seconds_per_text']:.1f} | {r['exact_seconds_per_text']:.1f} "
            f"| {get(r, 'shuffled_seconds_per_text', 1)} | {r['exact_expansions_per_text']:.0f} "
            f"| {get(r, 'exact_is_retriever_top1')} | {get(r, 'shuffled_is_first_listed')} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sources", default="inclusion,lay,abbrev")
    ap.add_argument("--n", type=int, default=15, help="texts per source")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--top-n", type=int, default=5)
    ap.add_argument("--max-expansions", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--embedding", action="store_true", help="BM25 + MiniLM shortlist")
    ap.add_argument("--out", default=str(RESULTS / "classify.json"))
    ap.add_argument("--resummarise", action="store_true", help="recompute --out's agreement")
    args = ap.parse_args()
    if args.resummarise:
        res = json.loads(Path(args.out).read_text())
        for r in res["sources"].values():
            r.update(agreement(r["rows"]))
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
        log(table(res, res["k"]))
        return

    import torch

    torch.set_num_threads(args.threads)
    t_run = time.perf_counter()
    data = icd_data(2000)
    sample: dict[str, tuple[list[str], list[frozenset[str]]]] = {}
    for s in args.sources.split(","):
        q = data.sources[s]
        idx = sorted(random.Random(args.seed).sample(range(len(q)), min(args.n, len(q))))
        sample[s] = ([q.queries[i] for i in idx], [frozenset(q.gold[i]) for i in idx])
    log(f"sample: {', '.join(f'{s} {len(v[0])}' for s, v in sample.items())} (seed {args.seed})")

    t0 = time.perf_counter()
    sl = Shortlist.build(
        data.codes,
        descriptions=data.descs,
        synonyms=data.synonyms,
        use_embedding=args.embedding,
        progress=False,
    )
    build_s = time.perf_counter() - t0
    log(f"shortlist: {sl!r} in {build_s:.0f}s")
    t0 = time.perf_counter()
    import transformers

    folder = str(load_model(MODEL, progress=False))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    pair = (model, transformers.AutoTokenizer.from_pretrained(folder))
    common: dict[str, Any] = {"descriptions": data.descs, "model": pair, "policy": "shortlist"}
    clf = Classifier(data.codes, retriever=sl, k=args.k, top_n=args.top_n, **common)
    shuffled_clf = Classifier(data.codes, retriever=Shuffled(sl, args.seed), k=args.k, **common)
    log(f"classifier: {clf!r}, model loaded in {time.perf_counter() - t0:.0f}s")

    res: dict[str, Any] = {
        "machine": {
            "commit": commit(),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in os.getloadavg()],
        },
        "model": MODEL,
        "engine": "transformers (float32)",
        "labels": len(data.codes),
        "k": args.k,
        "top_n": args.top_n,
        "max_expansions": args.max_expansions,
        "seed": args.seed,
        "split_seed": SPLIT_SEED,
        "n_per_source": args.n,
        "shortlist": {"repr": repr(sl), "fusion": sl.fusion.name, "build_seconds": build_s},
        "excluded": "model loading, shortlist build, retriever-only arms' time",
        "sources": {},
    }
    out = Path(args.out)
    for s, (texts, gold) in sample.items():
        log(f"[{s}] {len(texts)} texts")
        res["sources"][s] = bench_source(clf, shuffled_clf, s, texts, gold, args)
        res["wall_seconds"] = round(time.perf_counter() - t_run, 1)
        res["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        out.write_text(json.dumps(res, indent=1) + "\n")
    log(table(res, args.k))
    log(f"wrote {out} ({res['wall_seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
