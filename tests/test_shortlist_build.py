"""Shortlist.build, the ONNX backends and the ICD-10-CM query sources, with real components.

Oracles: the torch model (sentence-transformers) for the ONNX graphs, exact inner products in
numpy for the embedding side, BM25Index itself plus a hand computation of reciprocal-rank
fusion for the fused ranking, and facts read off the source packages by hand for the query
sources. The shipped MiniLM is exported to ONNX once per session (into the test cache).
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")
pytest.importorskip("onnxruntime")
pytest.importorskip("sentence_transformers")
pytest.importorskip("simple_icd_10_cm")

from trierouter import TokenIndex
from trierouter.data.icd10cm import icd10cm_codes, icd10cm_description
from trierouter.data.icd10cm_queries import icd10cm_inclusion_terms, icd10cm_queries
from trierouter.shortlist import (
    BM25Index,
    Embedder,
    EmbeddingIndex,
    IndexMismatchError,
    Shortlist,
    route_set,
)
from trierouter.shortlist._common import best_per_owner

TEXTS = [
    "acute bronchitis with chronic obstructive pulmonary disease",
    "heart attack",
    "Nondisp commnt fx shaft of r fibula, 7thN",
    "COPD",
    "Type 2 diabetes mellitus with diabetic nephropathy",
    "x",
]


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return Embedder(backend="torch", cache_dir=False).encode(TEXTS)


def test_onnx_float32_is_the_torch_model(torch_vectors: np.ndarray) -> None:
    onnx = Embedder(backend="onnx", cache_dir=False)
    batch = onnx.encode(TEXTS)  # padded batch
    single = np.concatenate([onnx.encode([t]) for t in TEXTS])  # unpadded
    assert (batch * torch_vectors).sum(1).min() > 0.9999
    assert (single * torch_vectors).sum(1).min() > 0.9999
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)


def test_onnx_int8_is_close_to_torch(torch_vectors: np.ndarray) -> None:
    int8 = Embedder(cache_dir=False)
    assert int8.backend == "onnx-int8"  # the default with onnxruntime installed
    cos = (int8.encode(TEXTS) * torch_vectors).sum(1)
    assert cos.min() > 0.95 and cos.mean() > 0.98, cos
    # the served graph is MiniLM's BERT with its layers fused (one int8 attention op per layer)
    import onnx

    from trierouter.shortlist.onnx import OnnxEncoder

    enc = next(v for v in vars(int8).values() if isinstance(v, OnnxEncoder))
    ops = [n.op_type for n in onnx.load(str(enc.path)).graph.node]
    assert ops.count("QAttention") == 6 and "SkipLayerNormalization" in ops, sorted(set(ops))


def test_batches_on_threads_keep_text_order(torch_vectors: np.ndarray) -> None:
    """Texts are batched by token count and batches run on two threads: each vector still
    lands in its text's row (the torch model's vector of that text, not a neighbour's), and
    the result does not depend on the thread count (the same batches, bit for bit)."""
    texts = [*TEXTS, *(f"{t} {i}" for i, t in enumerate(TEXTS))]  # 12 texts, 4 batches of 3
    rows = []
    for threads in (1, 2):
        e = Embedder(backend="onnx", cache_dir=False, threads=threads)
        e.onnx.batch_size = 3
        rows.append(e.encode(texts))
    np.testing.assert_array_equal(rows[0], rows[1])
    cos = (rows[1][: len(TEXTS)] * torch_vectors).sum(1)
    assert cos.min() > 0.9999, cos


def test_backends_have_their_own_fingerprint_and_cache(tmp_path: Path) -> None:
    fps = {b: Embedder(backend=b, cache_dir=tmp_path).fingerprint for b in ("torch", "onnx")}
    assert len(set(fps.values())) == 2
    e = Embedder(backend="onnx", cache_dir=tmp_path)
    first = e.encode(TEXTS[:2])
    assert any((tmp_path / e.fingerprint[:16]).glob("shard-*.npz"))
    again = Embedder(backend="onnx", cache_dir=tmp_path).encode(TEXTS[:2])
    np.testing.assert_array_equal(first, again)
    with pytest.raises(ValueError, match="backend"):
        Embedder(backend="tensorrt")  # type: ignore[arg-type]


def test_default_cache_folder_is_under_the_trierouter_cache() -> None:
    import os

    e = Embedder()
    assert e.cache_dir == Path(os.environ["TRIEROUTER_CACHE_DIR"]) / "embeddings"
    assert Embedder(cache_dir=False).cache_dir is None


def test_hnsw_switch_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(0)
    v = rng.standard_normal((60, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    vals = [f"v{i}" for i in range(60)]
    with caplog.at_level(logging.INFO, logger="trierouter.shortlist.faiss_index"):
        idx = EmbeddingIndex.build(vals, embedder=Embedder(cache_dir=False), vectors=v,
                                   exact_limit=50)  # fmt: skip
    assert idx.index_kind == "hnsw"
    assert "HNSW" in caplog.text and "exact_limit=50" in caplog.text
    flat = EmbeddingIndex.build(vals[:40], embedder=Embedder(cache_dir=False), vectors=v[:40],
                                exact_limit=50)  # fmt: skip
    assert flat.index_kind == "flat"


# -- Shortlist.build ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def icd_set() -> tuple[list[str], list[str], dict[str, list[str]]]:
    codes = icd10cm_codes(400, seed=5)
    have = set(codes)
    syn: dict[str, list[str]] = {}
    for term, gold in icd10cm_inclusion_terms().items():
        for c in sorted(gold & have)[:2]:
            syn.setdefault(c, []).append(term)
    return codes, [icd10cm_description(c) for c in codes], syn


@pytest.fixture(scope="module")
def built(icd_set: tuple[list[str], list[str], dict[str, list[str]]]) -> Shortlist:
    codes, descs, syn = icd_set
    return Shortlist.build(
        codes, descriptions=descs, synonyms=syn, embedder=Embedder(cache_dir=False),
        cv_queries=120, progress=False,
    )  # fmt: skip


def test_build_indexes_descriptions_and_synonyms(
    built: Shortlist, icd_set: tuple[list[str], list[str], dict[str, list[str]]]
) -> None:
    codes, _, syn = icd_set
    assert built.values == codes
    n_syn = sum(len(v) for v in syn.values())
    assert built.report["rows"] == len(codes) + n_syn
    assert built.bm25.n_rows == len(codes) + n_syn
    assert built.embedding is not None and built.embedding.n_rows == len(codes) + n_syn
    assert built.report["embedding_index"] == "flat"  # small: exact


def test_cross_validation_never_picks_below_a_single_method(built: Shortlist) -> None:
    cv = built.report["cv"]
    cands = cv["candidates"]
    assert cv["queries"]["synonyms"] == 120 and 100 <= cv["queries"]["terse"] <= 120
    assert built.fusion.name == cv["chosen"]

    def obj(r: dict[str, float]) -> float:
        return (r["R@1"] + r["R@10"] + r["R@100"]) / 3

    for c in cands.values():  # the objective: both query styles count equally
        assert c["objective"] == pytest.approx((obj(c["synonyms"]) + obj(c["terse"])) / 2, abs=1e-3)
    chosen = cands[cv["chosen"]]["objective"]
    singles = [n for n in cands if n.startswith(("bm25", "embedding"))]
    assert "embedding" in singles and any(n.startswith("bm25") for n in singles)
    assert any(n.startswith("adaptive") for n in cands) and any(n.startswith("rrf") for n in cands)
    assert all(chosen >= c["objective"] for c in cands.values())


def test_terse_rewrites_are_seeded_and_shorter() -> None:
    from trierouter.shortlist.fusion import terse, terse_queries

    text = "Nondisplaced comminuted fracture of shaft of right fibula, initial encounter"
    a, b = terse(text, random.Random(3)), terse(text, random.Random(3))
    assert a == b and len(a) < len(text)
    for word in a.split():  # every word is a prefix or a vowel-less form of a source word
        src = [w.strip(",") for w in text.split()]
        assert any(w.startswith(word) or w[0] + "".join(c for c in w[1:] if c not in "aeiou")
                   == word for w in src), word  # fmt: skip
    qs, owners = terse_queries(["Asthma", "Chronic kidney disease, stage 3"] * 5, 10, 0)
    assert all(q.lower() != "asthma" for q in qs) and len(qs) == len(owners) <= 10


def test_search_is_the_fusion_of_bm25_and_exact_embedding_search(
    built: Shortlist, icd_set: tuple[list[str], list[str], dict[str, list[str]]]
) -> None:
    """Oracle: BM25 ranking from its own index, embedding ranking by numpy inner products over
    every row (best row per value), fused by hand: sum of weight / (c + rank)."""
    from trierouter.shortlist import Fusion

    codes, _, syn = icd_set
    assert built.embedding is not None
    f = Fusion(bm25=1.0, embedding=2.0, c=20.0, ngram_weight=built.fusion.ngram_weight)
    sl = Shortlist(built.bm25, built.embedding, f)
    owner = np.array([*range(len(codes)), *(codes.index(c) for c, ts in syn.items() for _ in ts)])
    # the indexed vectors themselves: int8 activations are quantized per batch, so a text's
    # vector depends slightly on the batch it was embedded in
    vecs = built.embedding._index.reconstruct_n(0, built.embedding.n_rows)
    for q in ["heart attack", "fracture of the femur", "asthma"]:
        qv = built.embedding.embedder.encode([q])[0]
        s = vecs @ qv
        order = np.lexsort((np.arange(len(s)), -s))
        _, e_sc = best_per_owner(order.astype(np.int64), s[order].astype(np.float32), owner, 200)
        # the index's ranking: the same scores position by position (equal scores, as when one
        # synonym is indexed under two codes, may come in either order)
        idx_ids = built.embedding.search_ids([q], 200)[0]
        best = {i: float(s[owner == i].max()) for i in idx_ids.tolist()}
        np.testing.assert_allclose([best[i] for i in idx_ids.tolist()], e_sc, rtol=0, atol=1e-6)
        b_ids = built.bm25.search_ids([q], 200, ngram_weight=f.ngram_weight)[0]
        score: dict[int, float] = {}
        for w, ranking in ((1.0, b_ids), (2.0, idx_ids)):
            for r, i in enumerate(ranking.tolist(), 1):
                score[i] = score.get(i, 0.0) + w / (20.0 + r)
        expect = sorted(score, key=lambda i: (-score[i], i))[:10]
        got = sl.search_ids([q], 10)[0].tolist()
        assert got == expect, q


def test_adaptive_score_fusion_by_hand(
    built: Shortlist, icd_set: tuple[list[str], list[str], dict[str, list[str]]]
) -> None:
    """Oracle: every value's best-row BM25 score and exact cosine (numpy over all rows), the
    union of both top-200 lists, the embedding's share from the sigmoid written out."""
    import math

    from trierouter.shortlist import Fusion
    from trierouter.shortlist.bm25 import analyze

    codes, _, syn = icd_set
    assert built.embedding is not None
    f = Fusion(1.0, 1.0, ngram_weight=1.0, method="score", steep=15.0, midpoint=0.7,
               length_weight=0.5, short_query=4.0)  # fmt: skip
    sl = Shortlist(built.bm25, built.embedding, f)
    owner = [*range(len(codes)), *(codes.index(c) for c, ts in syn.items() for _ in ts)]
    vecs = built.embedding._index.reconstruct_n(0, built.embedding.n_rows)
    for q in ["heart attack", "Nondisp fx of femur", "asthma", "chr kidney dis"]:
        rows_b = built.bm25.scores(q, ngram_weight=1.0)
        rows_e = vecs @ built.embedding.embedder.encode([q])[0]
        b: dict[int, float] = {}
        e: dict[int, float] = {}
        for r, o in enumerate(owner):
            b[o] = max(b.get(o, 0.0), float(rows_b[r]))
            e[o] = max(e.get(o, -2.0), float(rows_e[r]))
        top_b = sorted((o for o in b if b[o] > 0), key=lambda o: (-b[o], o))[:200]
        top_e = sorted(e, key=lambda o: (-e[o], o))[:200]
        cand = set(top_b) | set(top_e)
        best_b = max(b[o] for o in cand)
        words = len(analyze(q, ngram=0)[0])
        x = 15.0 * (max(e[o] for o in cand) - 0.7) + 0.5 * (4.0 - words)
        a = 1.0 / (1.0 + math.exp(-x))
        score = {o: (1 - a) * b[o] / best_b + a * e[o] for o in cand}
        expect = sorted(cand, key=lambda o: (-score[o], o))[:10]
        got = sl.search_ids([q], 10)[0].tolist()
        assert got[:3] == expect[:3], q
        assert len(set(got) ^ set(expect)) <= 2, q  # float32 vectors vs float64 sums


def test_shortlists_sharing_one_bm25_index_keep_their_own_ngram_weight(
    icd_set: tuple[list[str], list[str], dict[str, list[str]]],
) -> None:
    """Oracle: a BM25 index built afresh with each weight. Two shortlists over one shared index
    with other n-gram weights rank as their own fresh index does, whichever was made last."""
    from trierouter.shortlist import Fusion

    codes, descs, syn = icd_set
    texts = [*descs, *(t for ts in syn.values() for t in ts)]
    values = [*codes, *(c for c, ts in syn.items() for _ in ts)]
    shared = BM25Index.build(values, texts, ngram_weight=0.5)
    light = Shortlist(shared, None, Fusion(1.0, 0.0, ngram_weight=0.25))
    heavy = Shortlist(shared, None, Fusion(1.0, 0.0, ngram_weight=1.0))
    fresh = {w: BM25Index.build(values, texts, ngram_weight=w) for w in (0.25, 1.0)}
    queries = ["chr kidney dis", "heart attack", "fx femur", "asthmatic bronchitis"]
    moved = 0
    for q in queries:
        a, b = fresh[0.25].search(q, 20), fresh[1.0].search(q, 20)
        moved += a != b
        assert light.search(q, 20) == a and heavy.search(q, 20) == b, q
        assert shared.search(q, 20) == BM25Index.build(values, texts).search(q, 20), q
    assert moved, "the two weights rank these queries alike: the test would not see a mix-up"


def test_save_load_keeps_weights_and_results(built: Shortlist, tmp_path: Path) -> None:
    built.save(tmp_path / "sl")
    back = Shortlist.load(tmp_path / "sl", embedder=built.embedding.embedder if built.embedding
                          else None)  # fmt: skip
    assert back.fusion == built.fusion and back.report["cv"]["chosen"] == built.fusion.name
    for q in ["heart attack", "COPD", "burn of left hand"]:
        assert back.search(q, 20) == built.search(q, 20)
    with pytest.raises(IndexMismatchError):
        Shortlist.load(tmp_path / "sl", values=list(reversed(built.values)))


def test_route_set_takes_a_shortlist_and_keeps_its_ranking(
    built: Shortlist, qwen2_index: TokenIndex
) -> None:
    routed = route_set(built.values, qwen2_index, policy="shortlist", retriever=built, k=8)
    q = "acute bronchitis"
    assert routed.shortlist(q) == built.search(q, 8)
    cs = routed.choices_for(q)
    assert len(cs) == 8


def test_classifier_takes_a_shortlist_and_keeps_its_ranking(
    built: Shortlist, tmp_path: Path
) -> None:
    transformers = pytest.importorskip("transformers")
    from trierouter import Classifier
    from trierouter.testing.tiny_model import build_tiny_model

    d = build_tiny_model(tmp_path / "qwen2")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(d)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(d))
    clf = Classifier(
        built.values, model=(model, tok), policy="shortlist", retriever=built, k=6, top_n=2
    )
    text = "Displaced fracture of the neck of the left femur"
    assert clf.candidates(text) == built.search(text, 6)
    [p] = clf.classify([text])
    assert p.label in built.search(text, 6)


def test_examples_and_no_synonyms(
    icd_set: tuple[list[str], list[str], dict[str, list[str]]],
) -> None:
    codes, descs, _ = icd_set
    few = codes[:60]
    plain = Shortlist.build(few, descriptions=descs[:60], use_embedding=False, progress=False)
    assert plain.report["fusion_source"].startswith("default")
    assert plain.embedding is None and not plain.fusion.embedding
    ex = [(f"example for {c}", c) for c in few[:30]]
    with_ex = Shortlist.build(few, descriptions=descs[:60], examples=ex, use_embedding=False,
                              cv_queries=30, progress=False)  # fmt: skip
    assert with_ex.report["rows"] == 90 and with_ex.report["cv"]["queries"]["synonyms"] == 30
    with pytest.raises(ValueError, match="not among the values"):
        Shortlist.build(few, examples=[("q", "NOT-A-CODE")], use_embedding=False, progress=False)
    with pytest.raises(ValueError, match="not one of the values"):
        Shortlist.build(few, synonyms={"NOT-A-CODE": ["q"]}, use_embedding=False, progress=False)


# -- query sources --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "query", "code", "at_least"),
    [
        ("short", "Nondisp commnt fx shaft of r fibula, 7thN", "S82.454N", 40_000),
        ("xref", "acute bronchitis with chronic obstructive pulmonary disease", "J44.0", 3_000),
        ("lay", "Type 2 Diabetes", "E11.9", 140),
        ("abbrev", "COPD", "J44.9", 150),
    ],
)
def test_query_sources(source: str, query: str, code: str, at_least: int) -> None:
    qs = icd10cm_queries(source)
    valid = set(icd10cm_codes())
    assert len(qs) >= at_least
    assert all(g and g <= valid for g in qs.gold)
    assert code in qs.gold[qs.queries.index(query)]
    indexed = {icd10cm_description(c).lower() for c in valid}
    assert not indexed.intersection(q.lower() for q in qs.queries)
