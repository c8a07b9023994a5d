"""One call to a tuned shortlist: ``Shortlist.build(values, descriptions=..., synonyms=...)``.

    shortlist = Shortlist.build(codes, descriptions=descs, synonyms=terms_by_code)
    shortlist.search("heart attack", k=10)          # ranked values
    shortlist.save("icd.shortlist"); Shortlist.load("icd.shortlist")

Each value is indexed under its description and every synonym or example text (a value scores
its best text), by BM25 (words and character n-grams) and by the embedding model (default: the
shipped MiniLM, int8 in onnxruntime). How the two are combined (:mod:`.fusion`: fixed-weight
reciprocal-rank fusion, a fixed score share, or a share adapted per query to the embedding's
confidence and the query's length) is chosen by cross-validation on the set's own texts, never
on anything else (:mod:`.crossval`): up to ``cv_queries`` synonyms/examples, leave-one-out, and
as many terse rewrites of descriptions, by the mean of R@1, R@10 and R@100 over both styles.
The single methods are candidates too, so the default is never below its better member on that
objective. :attr:`Shortlist.report` keeps every candidate's scores.

Without synonyms or examples there is nothing to validate on: the fusion falls back to
``DEFAULT_FUSION`` (what the validation chose on ICD-10-CM) and the report says so. The whole
job (embedding, cross-validation, indexing) shows one progress bar with its ETA.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import CorruptFileError
from trierouter.shortlist._common import (
    IndexMismatchError,
    check_k,
    top_positive,
    values_hash,
)
from trierouter.shortlist.bm25 import BM25Index, analyze
from trierouter.shortlist.crossval import CvQueries, choose_fusion
from trierouter.shortlist.embedder import Embedder, optional_module
from trierouter.shortlist.faiss_index import EXACT_LIMIT, EmbeddingIndex, IndexKind
from trierouter.shortlist.fusion import DEFAULT_FUSION, Fusion, terse_queries
from trierouter.shortlist.hybrid import fuse

__all__ = ["DEFAULT_FUSION", "Fusion", "Shortlist"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
logger = logging.getLogger(__name__)

_FORMAT = 1
_META = "shortlist.json"
_DEPTH = 200
_KS = (1, 10, 100)


class _Job:
    """One progress bar over the whole build, in work units (≈ one text embedded)."""

    def __init__(self, total: float, enabled: bool) -> None:
        self.bar: Any = None
        if enabled:
            tqdm = optional_module("tqdm.auto", "tqdm").tqdm
            self.bar = tqdm(total=round(total), desc="shortlist", unit="u", smoothing=0.05)

    def step(self, units: float, what: str | None = None) -> None:
        if self.bar is not None:
            if what:
                self.bar.set_postfix_str(what, refresh=False)
            self.bar.update(round(units))

    def note(self, text: str) -> None:
        logger.info("%s", text)
        if self.bar is not None:
            self.bar.write(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.n = self.bar.total
            self.bar.refresh()
            self.bar.close()


@contextmanager
def _job(total: float, enabled: bool) -> Iterator[_Job]:
    job = _Job(total, enabled)
    try:
        yield job
    finally:
        job.close()


class Shortlist:
    """A tuned BM25 + embedding shortlist over a fixed set of values (see the module doc).

    Build with :meth:`build`; satisfies the ``Retriever`` protocol (``values``, ``search``,
    ``search_ids``), so :func:`~trierouter.shortlist.route_set`, the ``Classifier`` and the
    tool router take it as their retriever.
    """

    def __init__(
        self,
        bm25: BM25Index,
        embedding: EmbeddingIndex | None,
        fusion: Fusion,
        *,
        report: dict[str, Any] | None = None,
        depth: int = _DEPTH,
    ) -> None:
        if fusion.embedding and embedding is None:
            raise ValueError(f"fusion {fusion.name} uses the embedding, but no index was given")
        if embedding is not None and embedding.values != bm25.values:
            raise ValueError("the BM25 and embedding indexes hold other values")
        self.bm25 = bm25
        self.embedding = embedding
        self.fusion = fusion
        self.depth = depth
        self.report: dict[str, Any] = report or {}

    def __repr__(self) -> str:
        kind = self.embedding.index_kind if self.embedding is not None else "none"
        return f"Shortlist({len(self)} values, {self.fusion.name}, embedding index {kind})"

    @property
    def values(self) -> list[str]:
        """The values; a value's id is its position."""
        return self.bm25.values

    def __len__(self) -> int:
        return len(self.bm25)

    # -- building ---------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        values: Sequence[str],
        *,
        descriptions: Sequence[str] | Mapping[str, str] | None = None,
        synonyms: Mapping[str, Sequence[str]] | None = None,
        examples: Sequence[tuple[str, str | Sequence[str]]] | None = None,
        embedder: Embedder | None = None,
        use_embedding: bool = True,
        cv_queries: int = 2000,
        rows_per_example: int = 4,
        kind: IndexKind = "auto",
        exact_limit: int = EXACT_LIMIT,
        seed: int = 0,
        progress: bool = True,
    ) -> Shortlist:
        """Index ``values`` and choose the fusion by cross-validation (module docstring).

        ``descriptions``: one text per value (a list in value order or a ``{value: text}``
        dict; default: the values). ``synonyms``: ``{value: [other phrasings]}``.
        ``examples``: ``(query, gold value or values)`` pairs, indexed under their first
        ``rows_per_example`` gold values. Both are indexed and both are what the fusion is
        validated on (up to ``cv_queries`` of them, leave-one-out). ``use_embedding=False``
        builds BM25 only (no model). ``kind``/``exact_limit``: the embedding index (exact up
        to ``exact_limit`` rows, HNSW beyond, logged).
        """
        t_start = time.perf_counter()
        vals, descs = _values_and_descriptions(values, descriptions)
        ids = {v: i for i, v in enumerate(vals)}
        row_text: list[str] = list(descs)
        row_owner: list[int] = list(range(len(vals)))
        cv_items: dict[str, set[int]] = {}
        for v, texts in (synonyms or {}).items():
            if v not in ids:
                raise ValueError(f"synonyms names {v!r:.80}, which is not one of the values")
            if isinstance(texts, str):
                raise TypeError(f"synonyms[{v!r:.40}] must be a list of texts, got a str")
            for t in texts:
                row_text.append(str(t))
                row_owner.append(ids[v])
                cv_items.setdefault(str(t), set()).add(ids[v])
        for i, ex in enumerate(examples or []):
            if not isinstance(ex, tuple | list) or len(ex) != 2:
                raise TypeError(f"examples[{i}] = {ex!r:.80} is not a (query, gold) pair")
            text, gold = ex
            golds = [gold] if isinstance(gold, str) else list(gold)
            missing_ = [g for g in golds if g not in ids]
            if missing_ or not golds:
                raise ValueError(
                    f"examples[{i}] gold {missing_ or gold!r:.80} is not among the values"
                )
            for g in golds[:rows_per_example]:
                row_text.append(str(text))
                row_owner.append(ids[g])
            cv_items.setdefault(str(text), set()).update(ids[g] for g in golds)
        uniq = list(dict.fromkeys(row_text))
        n_cv = min(cv_queries, len(cv_items))
        emb = None
        if use_embedding:
            emb = embedder or Embedder()
        # work units: one text embedded ≈ 1; a BM25 row ≈ 0.05; a CV query (2 styles) ≈ 6 + 6 + 1
        todo_embed = 0
        if emb is not None:
            todo_embed = len(uniq)
            if emb.cache_dir is not None:
                from trierouter.shortlist.cache import EmbeddingCache

                cache = EmbeddingCache(emb.cache_dir, emb.fingerprint, emb.dim)
                todo_embed = len(cache.lookup(uniq)[1])
        total = todo_embed + 0.05 * len(row_text) + 13 * n_cv + 0.2 * len(row_text)
        report: dict[str, Any] = {
            "values": len(vals),
            "rows": len(row_text),
            "synonym_or_example_texts": len(cv_items),
            "cv_queries": n_cv,
            "embedder": repr(emb) if emb is not None else None,
        }
        with _job(total, progress) as job:
            # 1. embeddings of every distinct text (cached on disk by the embedder)
            vectors: F32 | None = None
            if emb is not None:
                t0 = time.perf_counter()
                vecs = np.zeros((len(uniq), emb.dim), np.float32)
                block = 2048
                for s in range(0, len(uniq), block):
                    part = uniq[s : s + block]
                    vecs[s : s + block] = emb.encode(part)
                    job.step(todo_embed * len(part) / len(uniq), "embedding")
                where = {t_: i for i, t_ in enumerate(uniq)}
                vectors = vecs[[where[t_] for t_ in row_text]]
                report["embed_seconds"] = round(time.perf_counter() - t0, 2)
                report["embedded_new_texts"] = todo_embed
            # 2. BM25 over every row
            t0 = time.perf_counter()
            bm25 = BM25Index.build([vals[o] for o in row_owner], row_text)
            report["bm25_build_seconds"] = round(time.perf_counter() - t0, 2)
            job.step(0.05 * len(row_text), "bm25")
            # 3. cross-validation on the synonyms / examples and terse descriptions
            if n_cv:
                styles = _cv_styles(vals, descs, row_text, cv_items, n_cv, seed, emb, vectors)
                fusion, cv = choose_fusion(bm25, vectors, len(vals), styles, job.step)
                report["cv"] = cv
                report["fusion_source"] = (
                    f"cross-validated on {n_cv} synonyms/examples and "
                    f"{len(styles[-1].texts)} terse descriptions"
                )
            else:
                fusion = DEFAULT_FUSION if emb is not None else Fusion(1.0, 0.0)
                report["fusion_source"] = "default (no synonyms or examples to validate on)"
                job.note(
                    "Shortlist.build: no synonyms or examples, so the fusion is not validated: "
                    f"using the default {fusion.name}"
                )
            if emb is None and fusion.embedding:
                fusion = Fusion(1.0, 0.0, ngram_weight=fusion.ngram_weight)
            if not fusion.extra_rows and len(row_text) > len(vals):
                job.note(
                    "Shortlist.build: cross-validation found the synonym/example rows hurt; "
                    "indexing the descriptions only"
                )
                row_text, row_owner = row_text[: len(vals)], row_owner[: len(vals)]
                bm25 = BM25Index.build(vals, row_text)
                if vectors is not None:
                    vectors = vectors[: len(vals)]
                report["rows"] = len(row_text)
            # 4. the embedding index (only when the chosen fusion uses it)
            index = None
            if emb is not None and vectors is not None:
                t0 = time.perf_counter()
                index = EmbeddingIndex(emb, kind=kind, exact_limit=exact_limit)
                index.add([vals[o] for o in row_owner], row_text, vectors=vectors)
                report["embedding_index"] = index.index_kind
                report["embedding_index_seconds"] = round(time.perf_counter() - t0, 2)
                if index.index_kind == "hnsw":
                    job.note(
                        f"Shortlist.build: {index.n_rows} rows > exact_limit={exact_limit}: "
                        "the embedding side searches an HNSW graph (approximate); "
                        "kind='flat' keeps it exact"
                    )
            job.step(0.2 * len(row_text), "index")
        bm25.ngram_weight = fusion.ngram_weight  # its own index: bm25.search agrees with it
        report["fusion"] = asdict(fusion)
        report["fusion_name"] = fusion.name
        report["build_seconds"] = round(time.perf_counter() - t_start, 2)
        return cls(bm25, index, fusion, report=report)

    # -- searching --------------------------------------------------------------------------------
    def search(self, query: str, k: int = 64) -> list[str]:
        """The ``k`` best values for ``query``, best first."""
        vals = self.values
        return [vals[i] for i in self.search_ids([query], k)[0]]

    def search_ids(self, queries: Sequence[str], k: int = 64) -> list[I64]:
        """Value ids of the best ``k`` values per query, best first."""
        check_k(k)
        if isinstance(queries, str):
            raise TypeError("queries must be a sequence of str; use search() for one query")
        if not len(queries):
            return []
        f = self.fusion
        depth = max(k, self.depth)
        if f.method == "score" and f.bm25 and f.embedding:
            assert self.embedding is not None
            qv = self.embedding.embedder.encode_queries(list(queries))
            return [self._score_search(q, v, k, depth) for q, v in zip(queries, qv, strict=True)]
        b = self.bm25.search_ids(queries, depth, ngram_weight=f.ngram_weight) if f.bm25 else None
        e = None
        if f.embedding:
            assert self.embedding is not None
            e = self.embedding.search_ids(queries, depth)
        if b is None:
            assert e is not None
            return [r[:k] for r in e]
        if e is None:
            return [r[:k] for r in b]
        return [
            fuse([bb, ee], k, weights=[f.bm25, f.embedding], c=f.c)
            for bb, ee in zip(b, e, strict=True)
        ]

    def embedding_depth(self, k: int) -> int:
        """How many values the ``"score"`` rule takes from the embedding for a top-``k``
        query: ``max(k, depth // 2)`` (BM25 gives ``max(k, depth)``; every candidate is then
        scored by both methods). Half depth halves the HNSW search; on every query of
        ICD-10-CM's five query sources R@1 / R@10 / R@100 moved by at most 0.0015
        (``benchmarks/shortlist.py --sections depth``)."""
        return max(k, self.depth // 2)

    def _score_search(self, query: str, vector: F32, k: int, depth: int) -> I64:
        """The ``"score"`` rule: BM25's top ``depth`` values and the embedding's top
        :meth:`embedding_depth`, each candidate scored by both methods."""
        assert self.embedding is not None
        b_all = self.bm25.value_scores(query, ngram_weight=self.fusion.ngram_weight)
        hit = top_positive(b_all, depth)
        # one search: every candidate of the union is rescored by both methods below
        e_depth = self.embedding_depth(k)
        [(e_ids, e_cos)] = self.embedding.search_vectors(vector[None, :], e_depth, complete=False)
        cand = np.union1d(hit, e_ids)
        cos = np.empty(len(cand), np.float64)
        at = np.searchsorted(cand, e_ids)
        cos[at] = e_cos
        rest = np.ones(len(cand), bool)
        rest[at] = False
        if rest.any():
            cos[rest] = self.embedding.value_similarities(vector, cand[rest])
        top_cos = float(cos.max()) if len(cos) else 0.0
        words = len(analyze(query, ngram=0)[0])
        s = self.fusion.combine(b_all[cand], cos, top_cosine=top_cos, words=words)
        out: I64 = cand[np.lexsort((cand, -s))[:k]]
        return out

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the shortlist (both indexes, the fusion and the report) to folder ``path``."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.bm25.save(out / "bm25.trt")
        if self.embedding is not None:
            self.embedding.save(out / "embedding.trt")
        meta = {
            "format": _FORMAT,
            "kind": "trierouter.Shortlist",
            "values_sha256": values_hash(self.values),
            "fusion": asdict(self.fusion),
            "depth": self.depth,
            "embedding": self.embedding is not None,
            "report": self.report,
        }
        tmp = out / f".{_META}.tmp{os.getpid()}"
        tmp.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, out / _META)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        embedder: Embedder | None = None,
        values: Sequence[str] | None = None,
    ) -> Shortlist:
        """Read a shortlist written by :meth:`save`; refused (``IndexMismatchError``) with
        another embedding model or, if ``values`` is given, other values."""
        folder = Path(path)
        try:
            meta = json.loads((folder / _META).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CorruptFileError(f"{folder}: no readable {_META} ({exc})") from exc
        if not isinstance(meta, dict) or meta.get("kind") != "trierouter.Shortlist":
            raise CorruptFileError(f"{folder}/{_META}: not a trierouter Shortlist")
        if meta.get("format") != _FORMAT:
            raise CorruptFileError(f"{folder}: format {meta.get('format')}, expected {_FORMAT}")
        if values is not None and values_hash(values) != meta.get("values_sha256"):
            raise IndexMismatchError(
                f"{folder}: built over other values than the {len(values)} given; rebuild it"
            )
        try:
            raw = dict(meta["fusion"])
            known = {fl.name for fl in fields(Fusion)}
            fusion = Fusion(**{key: raw[key] for key in known if key in raw})
            depth = int(meta["depth"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptFileError(f"{folder}/{_META}: bad fusion or depth ({exc})") from exc
        bm25 = BM25Index.load(folder / "bm25.trt")
        emb = None
        if meta.get("embedding"):
            emb = EmbeddingIndex.load(folder / "embedding.trt", embedder=embedder)
        if values_hash(bm25.values) != meta.get("values_sha256"):
            raise CorruptFileError(f"{folder}: the BM25 index holds other values than recorded")
        report = meta.get("report") if isinstance(meta.get("report"), dict) else {}
        return cls(bm25, emb, fusion, report=report, depth=depth)


def _values_and_descriptions(
    values: Sequence[str], descriptions: Sequence[str] | Mapping[str, str] | None
) -> tuple[list[str], list[str]]:
    if isinstance(values, str):
        raise TypeError("values must be a sequence of str, got a single str; wrap it in a list")
    vals = list(dict.fromkeys(values))
    for i, v in enumerate(vals):
        if not isinstance(v, str):
            raise TypeError(f"values[{i}] = {v!r:.60} is {type(v).__name__}, expected str")
    if not vals:
        raise ValueError("values is empty: nothing to shortlist")
    if descriptions is None:
        return vals, list(vals)
    if isinstance(descriptions, Mapping):
        return vals, [str(descriptions.get(v, v)) for v in vals]
    if isinstance(descriptions, str) or len(descriptions) != len(values):
        raise ValueError(
            f"descriptions must have one text per value ({len(values)} values); "
            "or pass a {value: description} dict"
        )
    first: dict[str, str] = {}
    for v, d in zip(values, descriptions, strict=True):
        first.setdefault(v, str(d))
    return vals, [first[v] for v in vals]


def _cv_styles(
    vals: list[str],
    descs: list[str],
    row_text: list[str],
    items: dict[str, set[int]],
    n: int,
    seed: int,
    emb: Embedder | None,
    vectors: F32 | None,
) -> list[CvQueries]:
    """The two query styles cross-validation scores (:mod:`.crossval`)."""
    texts = sorted(random.Random(seed).sample(sorted(items), n))
    rows_of: dict[str, list[int]] = {}
    for row, text in enumerate(row_text):
        rows_of.setdefault(text, []).append(row)
    syn = CvQueries(
        "synonyms",
        texts,
        [frozenset(items[t]) for t in texts],
        vectors[[rows_of[t][0] for t in texts]] if vectors is not None else None,
        [np.asarray(rows_of[t], np.int64) for t in texts],
    )
    t_q, t_owner = terse_queries(descs, n, seed)
    t_vec = emb.encode(t_q) if emb is not None and t_q else None
    none = np.zeros(0, np.int64)
    short = CvQueries("terse", t_q, [frozenset([o]) for o in t_owner], t_vec, [none] * len(t_q))
    return [syn, short]
