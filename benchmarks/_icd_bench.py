"""Section 1 of benchmarks/shortlist.py: every method on every ICD-10-CM query source.

Index: the 74,731 billable codes under their descriptions, and (``+syn``) also under the
training half of the inclusion terms (synonyms). Queries: five sources (see
``trierouter.data.icd10cm_queries``), at most 2,000 each (seeded); the held-out inclusion terms
are never indexed. Methods, all in the same run: BM25; MiniLM (onnx-int8, the default
backend); their equal-weight reciprocal-rank fusion (the old default, c=60); ``Shortlist.build``
(the default: fusion chosen by cross-validation on the training synonyms, leave-one-out, and
on terse rewrites of the descriptions; no source's queries are seen), the same indexes under two
fixed fusions (the previous default, RRF with embedding weight 2, and a fixed score share); and,
unless ``--no-fine-tune``, the same with MiniLM fine-tuned on training-term pairs. Recall rows
use exact search; the default's rows are its real ``search`` (HNSW side at this size, as
built). Latency: one query at a time, one thread, 40 queries per source, wall and thread CPU
time (the machine is shared: CPU time is what one idle core would take; the load average is
recorded).
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _icd_sources import fine_tune_pairs, icd_data

from trierouter.shortlist import BM25Index, Embedder, fine_tune_embedder
from trierouter.shortlist.builder import Shortlist
from trierouter.shortlist.finetune import fine_tune_info
from trierouter.shortlist.fusion import Fusion
from trierouter.shortlist.hybrid import fuse

DEPTH = 200
KS = (1, 10, 100)
FIXED = {  # the previous default (fixed RRF) and a fixed score share, on the default's indexes
    "rrf(bm25=1, emb=2, c=5)": Fusion(1.0, 2.0, c=5.0, ngram_weight=0.25),
    "score(emb share 0.7)": Fusion(0.3, 0.7, ngram_weight=1.0, method="score"),
}


def log(*a: Any) -> None:
    print(*a, flush=True)


def recall(rankings: Sequence[np.ndarray], gold: Sequence[set[int]]) -> dict[str, float]:
    out = {}
    for k in KS:
        hits = [bool(set(r[:k].tolist()) & g) for r, g in zip(rankings, gold, strict=True)]
        out[f"R@{k}"] = round(float(np.mean(hits)), 4)
    return out


def flat_ranks(vectors: np.ndarray, owner: np.ndarray, queries: np.ndarray) -> list[np.ndarray]:
    """Exact inner-product ranking of owners (best row per owner), in batches."""
    import faiss

    from trierouter.shortlist._common import best_per_owner

    faiss.omp_set_num_threads(2)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    fetch = 2 * DEPTH + 16
    out = []
    for s in range(0, len(queries), 512):
        sc, rows = index.search(queries[s : s + 512], fetch)
        for j in range(len(rows)):
            ids, _ = best_per_owner(rows[j].astype(np.int64), sc[j], owner, DEPTH)
            out.append(ids)
    return out


def lat_stats(xs: Sequence[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1e3
    return {
        "median_ms": round(float(np.median(a)), 3),
        "p90_ms": round(float(np.percentile(a, 90)), 3),
    }


def timed_each(fn: Callable[[str], Any], queries: Sequence[str]) -> dict[str, Any]:
    wall, cpu = [], []
    for q in queries[:3]:
        fn(q)
    for q in queries:
        t0, c0 = time.perf_counter(), time.thread_time()
        fn(q)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
    return {"wall": lat_stats(wall), "cpu": lat_stats(cpu)}


def tuned_embedder(data: Any, cache: Path, epochs: int = 1, n_pairs: int = 6000) -> Embedder:
    """MiniLM fine-tuned on pairs from the training terms only (cached on disk)."""
    import random

    pairs = fine_tune_pairs(data)
    pairs = sorted(random.Random(0).sample(pairs, min(n_pairs, len(pairs))))
    out = cache / "models" / f"minilm-icd10cm-train-s0-e{epochs}"
    info = fine_tune_info(out)
    if info is None or info.get("pairs") != len(pairs):
        log(f"fine-tuning MiniLM on {len(pairs)} pairs, {epochs} epoch(s) -> {out}")
        return fine_tune_embedder(pairs, out, epochs=epochs, batch_size=64, lr=5e-5, threads=2)
    return Embedder(out)


def bench_icd_sources(quick: bool, cache: Path, fine_tune: bool = True) -> dict[str, Any]:
    import torch

    data = icd_data(300 if quick else 2000)
    codes, descs = data.codes, data.descs
    pos = {c: i for i, c in enumerate(codes)}
    srcs = data.sources
    gold = {s: [{pos[c] for c in g} for g in q.gold] for s, q in srcs.items()}
    res: dict[str, Any] = {
        "codes": len(codes),
        "synonym_rows": sum(len(v) for v in data.synonyms.values()),
        "training_terms": len(data.train_terms),
        "sources": {
            s: {"queries": len(q), "origin": q.origin, "example": q.queries[len(q) // 2]}
            for s, q in srcs.items()
        },
    }
    log("ICD-10-CM:", {s: len(q) for s, q in srcs.items()}, "syn rows", res["synonym_rows"])
    syn_vals = [c for c, ts in data.synonyms.items() for _ in ts]
    syn_texts = [t for ts in data.synonyms.values() for t in ts]
    owner_desc = np.arange(len(codes), dtype=np.int64)
    owner_syn = np.concatenate([owner_desc, np.array([pos[c] for c in syn_vals], np.int64)])

    # BM25 (shared)
    t0 = time.perf_counter()
    b_desc = BM25Index.build(codes, descs)
    b_syn = BM25Index.build(codes + syn_vals, descs + syn_texts)
    res["bm25_build_seconds"] = round(time.perf_counter() - t0, 1)
    ranks: dict[str, dict[str, list[np.ndarray]]] = {}
    for s, q in srcs.items():
        ranks.setdefault("bm25", {})[s] = b_desc.search_ids(q.queries, DEPTH)
        ranks.setdefault("bm25+syn", {})[s] = b_syn.search_ids(q.queries, DEPTH)
    log("bm25 done")

    names = ["minilm", "minilm_tuned"] if fine_tune else ["minilm"]
    shortlists: dict[str, Shortlist] = {}
    for name in names:
        if name == "minilm":
            emb = Embedder()
        else:
            torch.set_num_threads(2)
            t0 = time.perf_counter()
            wait = float(os.environ.get("BENCH_WAIT_FOR_FINETUNE", "0"))
            marker = cache / "models" / "minilm-icd10cm-train-s0-e1" / "trierouter_fine_tune.json"
            while wait > 0 and not marker.exists():  # a fine-tune started beforehand
                time.sleep(10)
                wait -= 10
            emb = tuned_embedder(data, cache)
            res["fine_tune"] = {
                **(fine_tune_info(emb.path) or {}),
                "wall_seconds": round(time.perf_counter() - t0, 1),
            }
        t0 = time.perf_counter()
        vd = emb.encode(descs, progress=True)
        vs = emb.encode(syn_texts, progress=True)
        qv = {s: emb.encode(q.queries) for s, q in srcs.items()}
        res[f"{name}_embed_seconds"] = round(time.perf_counter() - t0, 1)
        for s in srcs:
            ranks.setdefault(name, {})[s] = flat_ranks(vd, owner_desc, qv[s])
            ranks.setdefault(name + "+syn", {})[s] = flat_ranks(
                np.concatenate([vd, vs]), owner_syn, qv[s]
            )
        for s in srcs:  # the old default: equal-weight RRF, c = 60
            ranks.setdefault(f"rrf_equal({name})+syn", {})[s] = [
                fuse([a, b], DEPTH, weights=[1.0, 1.0], c=60.0)
                for a, b in zip(ranks["bm25+syn"][s], ranks[name + "+syn"][s], strict=True)
            ]
        del vd, vs
        gc.collect()
        log(f"[{name}] Shortlist.build ...")
        t0 = time.perf_counter()
        sl = Shortlist.build(codes, descriptions=descs, synonyms=data.synonyms, embedder=emb)
        res[f"shortlist({name})_build"] = {k: v for k, v in sl.report.items() if k != "cv"} | {
            "wall_seconds": round(time.perf_counter() - t0, 1)
        }
        res[f"shortlist({name})_cv"] = sl.report.get("cv")
        shortlists[name] = sl
        key = "shortlist" if name == "minilm" else f"shortlist({name})"
        for s, q in srcs.items():
            ranks.setdefault(key, {})[s] = sl.search_ids(q.queries, DEPTH)
        if name == "minilm":  # the same indexes under two fixed fusions, for comparison
            for label, fixed in FIXED.items():
                other = Shortlist(sl.bm25, sl.embedding, fixed)
                for s, q in srcs.items():
                    ranks.setdefault(label, {})[s] = other.search_ids(q.queries, DEPTH)
        log(f"[{name}] chosen {sl.fusion.name}, index {sl.report.get('embedding_index')}")

    table: dict[str, dict[str, Any]] = {}
    for m, by_src in ranks.items():
        row = {s: recall(by_src[s], gold[s]) for s in srcs}
        row["mean"] = {
            f"R@{k}": round(statistics.mean(row[s][f"R@{k}"] for s in srcs), 4) for k in KS
        }
        table[m] = row
        log(f"{m:32s}", "  ".join(f"{s}:{row[s]['R@10']:.3f}" for s in [*srcs, "mean"]))
    res["recall"] = table

    # the default against the best single method, per source (R@1, R@10, R@100)
    singles = [m for m in table if m in ("bm25+syn", "minilm+syn")]
    check: dict[str, Any] = {}
    for s in [*srcs, "mean"]:
        best_single = {f"R@{k}": max(table[m][s][f"R@{k}"] for m in singles) for k in KS}
        gap = {k: round(table["shortlist"][s][k] - v, 4) for k, v in best_single.items()}
        check[s] = {"best_single": best_single, "default_minus_best_single": gap}
    res["default_vs_best_single"] = check

    # latency: one query at a time, one thread
    sl = shortlists["minilm"]
    assert sl.embedding is not None
    sl.embedding.embedder = Embedder()  # the default: queries are never cached
    sample = {s: q.queries[:: max(1, len(q) // 40)][:40] for s, q in srcs.items()}
    res["latency"] = time_queries(sl, b_syn, sample)

    # agreement of the int8 and fp32 ONNX graphs with the torch model (cosine), on a sample
    rng = np.random.default_rng(0)
    texts = [descs[i] for i in rng.choice(len(descs), 500, replace=False)]
    texts += [q for qs in sample.values() for q in qs]
    ref = Embedder(backend="torch", cache_dir=False).encode(texts)
    agree = {}
    for backend in ("onnx", "onnx-int8"):
        v = Embedder(backend=backend, cache_dir=False).encode(texts)
        cos = (v * ref).sum(1)
        agree[backend] = {
            "texts": len(texts),
            "cos_min": round(float(cos.min()), 4),
            "cos_mean": round(float(cos.mean()), 4),
            "cos_p01": round(float(np.percentile(cos, 1)), 4),
        }
    res["agreement_with_torch"] = agree
    log("agreement", agree)

    # embedding descriptions from scratch, 2 threads (no cache): 10,000 of them, scaled
    res["embed_all_descriptions"] = embed_all(
        [descs[i] for i in rng.choice(len(descs), 10_000, replace=False)], len(descs)
    )
    log("embed all", res["embed_all_descriptions"])
    return res


def embed_all(texts: list[str], total: int) -> dict[str, Any]:
    """Embedding ``texts`` from scratch with the default embedder (int8, 2 threads, no cache),
    wall and CPU seconds, scaled to ``total`` texts when ``texts`` is a sample."""
    load = [round(x, 2) for x in os.getloadavg()]
    t0, c0 = time.perf_counter(), time.process_time()
    Embedder(cache_dir=False).encode(texts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    scale = total / len(texts)
    return {
        "texts_timed": len(texts),
        "backend": "onnx-int8",
        "threads": 2,
        "loadavg_before": load,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "all_74731_wall_seconds_scaled": round(wall * scale, 1),
        "all_74731_cpu_seconds_per_core_scaled": round(cpu * scale / 2, 1),
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


def bench_icd_latency(cache: Path) -> dict[str, Any]:
    """Single-query latency of the default ``Shortlist.build`` on ICD-10-CM alone (the same
    training synonyms, sources and sample as :func:`bench_icd_sources`), for a run on a quiet
    machine: the full section also fine-tunes and embeds for an hour beside it. The built
    shortlist is saved under ``<cache>/shortlist-icd10cm`` and reused."""
    data = icd_data(2000)
    path = cache / "shortlist-icd10cm"
    if (path / "shortlist.json").is_file():
        sl = Shortlist.load(path, values=data.codes)
    else:
        sl = Shortlist.build(data.codes, descriptions=data.descs, synonyms=data.synonyms)
        sl.save(path)
    assert sl.embedding is not None
    sample = {s: q.queries[:: max(1, len(q) // 40)][:40] for s, q in data.sources.items()}
    res = time_queries(sl, sl.bm25, sample)
    res["fusion"] = sl.fusion.name
    # every description embedded from scratch, the whole set (the target: 2 minutes)
    res["embed_all_descriptions"] = embed_all(data.descs, len(data.descs))
    log("embed all", res["embed_all_descriptions"])
    return res


def bench_icd_depth(cache: Path) -> dict[str, Any]:
    """Recall of the saved default shortlist (:func:`bench_icd_latency`) on every query of
    every source, its embedding side at half depth (the default since 2026-12) and at full
    depth (each query's top ``depth`` values, as before): what halving the HNSW search costs."""
    data = icd_data(2000)
    path = cache / "shortlist-icd10cm"
    sl = Shortlist.load(path, values=data.codes)
    emb = sl.embedding
    assert emb is not None
    ids = {c: i for i, c in enumerate(sl.values)}
    res: dict[str, Any] = {"depth": sl.depth, "half_depth": sl.embedding_depth(100)}
    for s, q in data.sources.items():
        gold = [{ids[c] for c in g if c in ids} for g in q.gold]
        row = {"queries": len(q), "half": recall(sl.search_ids(q.queries, 100), gold)}
        # the rule before: the embedding's top max(k, depth), as BM25's
        sl.embedding_depth = lambda k: max(k, sl.depth)  # type: ignore[method-assign]
        try:
            row["full"] = recall(sl.search_ids(q.queries, 100), gold)
        finally:
            del sl.embedding_depth
        res[s] = row
        log("depth", s, row)
    return res


def time_queries(sl: Shortlist, bm25: BM25Index, sample: dict[str, list[str]]) -> dict[str, Any]:
    """Per source, each part of a query and the whole, one query at a time on one thread:
    BM25 top 100, the int8 encode, the embedding search given the encoded query, the
    embedding's and the shortlist's whole search; then, for every source, the torch encode (a
    reference, timed after the rest so that none of the shortlist's timings follows it)."""
    import faiss
    import torch

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    emb = sl.embedding
    assert emb is not None
    live = emb.embedder
    torch_emb = Embedder(backend="torch", cache_dir=False)
    res: dict[str, Any] = {"loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    e_depth = sl.embedding_depth(100)  # the embedding side of a top-100 shortlist query
    res["hnsw_depth"] = e_depth
    for s, qs in sample.items():
        vecs = {q: live.encode_queries([q]) for q in qs}
        res[s] = {
            "bm25+syn": timed_each(lambda q: bm25.search_ids([q], 100), qs),
            "minilm_encode(onnx-int8)": timed_each(lambda q: live.encode_queries([q]), qs),
            f"faiss_{emb.index_kind}_search": timed_each(
                lambda q, vecs=vecs: emb.search_vectors(vecs[q], e_depth, complete=False), qs
            ),
            "minilm+syn(total)": timed_each(lambda q: emb.search_ids([q], 100), qs),
            "shortlist(total)": timed_each(lambda q: sl.search_ids([q], 100), qs),
        }
        log("latency", s, {k: v["cpu"]["median_ms"] for k, v in res[s].items()})
    for s, qs in sample.items():  # the torch reference last: it runs nothing in between
        res[s]["minilm_encode(torch)"] = timed_each(lambda q: torch_emb.encode_queries([q]), qs)
    res["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    res["index_kind"] = emb.index_kind
    res["rows"] = emb.n_rows
    return res
