"""Section "bfcl" of benchmarks/shortlist.py: tool shortlists on BFCL v4 questions.

Registry: every distinct function of BFCL's single-turn categories, pooled (first doc kept per
name), indexed under ``name: description``. Queries: the user turn of each question; gold: the
function(s) its ground truth calls. Four differently phrased sources: ``curated`` (simple_python
+ multiple, written by BFCL's authors; the second half held out), ``live`` (live_simple +
live_multiple: questions contributed by users), ``parallel`` (parallel + parallel_multiple:
several calls asked at once; any gold counts) and ``other_languages`` (simple_java +
simple_javascript). ``Shortlist.build`` gets the first half of ``curated`` as examples (its
only tuning data); no other source is seen before testing. Data from the pinned wheel
``bfcl-eval==2026.3.23`` (downloaded, hash-checked, read as JSON, never installed).
"""

from __future__ import annotations

import json
import random
import statistics
import time
from typing import Any

import numpy as np

from trierouter.data.pypi import PinnedWheel, fetch_wheel, read_member
from trierouter.shortlist import BM25Index, Embedder, EmbeddingIndex, Shortlist
from trierouter.shortlist.hybrid import fuse

BFCL = PinnedWheel(
    "bfcl-eval",
    "2026.3.23",
    "bfcl_eval-2026.3.23-py3-none-any.whl",
    "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
)
SOURCES = {
    "curated": ("simple_python", "multiple"),
    "live": ("live_simple", "live_multiple"),
    "parallel": ("parallel", "parallel_multiple"),
    "other_languages": ("simple_java", "simple_javascript"),
}
ALL = (
    "simple_python", "multiple", "parallel", "parallel_multiple", "simple_java",
    "simple_javascript", "live_simple", "live_multiple", "live_parallel",
    "live_parallel_multiple", "irrelevance", "live_irrelevance", "live_relevance",
)  # fmt: skip
KS = (1, 10, 100)


def _lines(wheel: Any, member: str) -> list[dict[str, Any]]:
    text = read_member(wheel, member).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def recall(rankings: list[np.ndarray], gold: list[set[int]]) -> dict[str, float]:
    out = {}
    for k in KS:
        hits = [bool(set(r[:k].tolist()) & g) for r, g in zip(rankings, gold, strict=True)]
        out[f"R@{k}"] = round(float(np.mean(hits)), 4)
    return out


def bench_bfcl() -> dict[str, Any]:
    wheel = fetch_wheel(BFCL)
    docs: dict[str, str] = {}
    questions: dict[str, list[tuple[str, set[str]]]] = {}
    for cat in ALL:
        rows = _lines(wheel, f"bfcl_eval/data/BFCL_v4_{cat}.json")
        for r in rows:
            for f in r["function"]:
                docs.setdefault(f["name"], f"{f['name']}: {f.get('description', '')}")
        if "relevance" in cat:
            continue
        answers = {
            a["id"]: a["ground_truth"]
            for a in _lines(wheel, f"bfcl_eval/data/possible_answer/BFCL_v4_{cat}.json")
        }
        qs = []
        for r in rows:
            user = [m["content"] for m in r["question"][0] if m.get("role") == "user"]
            gold = {name for call in answers[r["id"]] for name in call}
            if user and gold:
                qs.append((user[-1], gold))
        questions[cat] = qs
    names = sorted(docs)
    pos = {n: i for i, n in enumerate(names)}
    texts = [docs[n] for n in names]
    curated = [q for c in SOURCES["curated"] for q in questions[c]]
    random.Random(0).shuffle(curated)
    half = len(curated) // 2
    train, test_curated = curated[:half], curated[half:]
    srcs = {"curated": test_curated}
    for s, cats in SOURCES.items():
        if s != "curated":
            srcs[s] = [q for c in cats for q in questions[c]]
    gold = {s: [{pos[n] for n in g if n in pos} for _, g in qs] for s, qs in srcs.items()}
    queries = {s: [q for q, _ in qs] for s, qs in srcs.items()}
    res: dict[str, Any] = {
        "functions": len(names),
        "examples_indexed": len(train),
        "sources": {
            s: {"queries": len(q), "categories": list(SOURCES[s])} for s, q in queries.items()
        },
    }
    emb = Embedder()
    ex = [(q, sorted(g)) for q, g in train]
    ex_vals = [n for _, g in ex for n in g[:4]]
    ex_texts = [q for q, g in ex for _ in g[:4]]
    ranks: dict[str, dict[str, list[np.ndarray]]] = {}
    b = BM25Index.build(names, texts)
    bx = BM25Index.build(names + ex_vals, texts + ex_texts)
    e = EmbeddingIndex.build(names, texts, embedder=emb, kind="flat")
    exi = EmbeddingIndex.build(names + ex_vals, texts + ex_texts, embedder=emb, kind="flat")
    t0 = time.perf_counter()
    sl = Shortlist.build(names, descriptions=texts, examples=ex, embedder=emb, progress=False)
    res["shortlist_build_seconds"] = round(time.perf_counter() - t0, 1)
    res["shortlist_fusion"] = sl.fusion.name
    res["shortlist_cv"] = sl.report.get("cv")
    for s, qs in queries.items():
        ranks.setdefault("bm25", {})[s] = b.search_ids(qs, 200)
        ranks.setdefault("bm25+examples", {})[s] = bx.search_ids(qs, 200)
        ranks.setdefault("minilm", {})[s] = e.search_ids(qs, 200)
        ranks.setdefault("minilm+examples", {})[s] = exi.search_ids(qs, 200)
        ranks.setdefault("rrf_equal+examples", {})[s] = [
            fuse([x, y], 200, weights=[1.0, 1.0], c=60.0)
            for x, y in zip(ranks["bm25+examples"][s], ranks["minilm+examples"][s], strict=True)
        ]
        ranks.setdefault("shortlist", {})[s] = sl.search_ids(qs, 200)
    table: dict[str, Any] = {}
    for m, by in ranks.items():
        row = {s: recall(by[s], gold[s]) for s in queries}
        row["mean"] = {
            f"R@{k}": round(statistics.mean(row[s][f"R@{k}"] for s in queries), 4) for k in KS
        }
        table[m] = row
        print(f"bfcl {m:22s}", "  ".join(f"{s}:{row[s]['R@10']:.3f}" for s in [*queries, "mean"]))
    res["recall"] = table
    return res
