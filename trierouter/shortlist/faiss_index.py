"""Values indexed by the embeddings of their texts in a faiss index; top-k values per query.

Search is exact (``IndexFlatIP``) up to ``exact_limit`` rows (20,000: about 1.5 ms for one query
on one core at 384 dimensions) and an HNSW graph beyond, where an exact scan would take most of
a 5 ms query budget (6 ms at 81,000 rows). The switch is logged (``INFO`` on this module's
logger) and shown by :attr:`EmbeddingIndex.index_kind`; ``kind="flat"`` keeps it exact.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from trierouter.errors import CorruptFileError
from trierouter.registry.store import load_arrays, save_arrays
from trierouter.registry.validate import Checker, meta_int
from trierouter.shortlist._common import (
    THREADS_LOCK,
    IndexMismatchError,
    ValueOwners,
    as_texts,
    best_per_owner,
    check_k,
    values_hash,
)
from trierouter.shortlist.embedder import Embedder, optional_module

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

__all__ = ["EmbeddingIndex"]


IndexKind = Literal["auto", "flat", "hnsw"]


logger = logging.getLogger(__name__)
EXACT_LIMIT = 20_000
"""Rows up to which ``kind="auto"`` searches exactly."""
_KIND = "trierouter.EmbeddingIndex"
_FORMAT = 1


def _faiss() -> Any:
    return optional_module("faiss", "faiss-cpu")


@contextmanager
def _omp_threads(n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    faiss = _faiss()
    with THREADS_LOCK:  # the setting is process-wide: one toggling search at a time
        before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(n)
        try:
            yield
        finally:
            faiss.omp_set_num_threads(before)


class EmbeddingIndex(ValueOwners):
    """Values indexed by the embeddings of one or more texts each; top-k values per query.

    Build with :meth:`build`, extend with :meth:`add` (new values, or extra texts for existing
    ones) without re-embedding what is indexed, persist with :meth:`save` / :meth:`load`.
    """

    def __init__(
        self,
        embedder: Embedder,
        *,
        kind: IndexKind = "auto",
        exact_limit: int = EXACT_LIMIT,
        hnsw_m: int = 32,
        ef_search: int = 128,
        ef_construction: int = 80,
    ) -> None:
        if kind not in ("auto", "flat", "hnsw"):
            raise ValueError(f"kind={kind!r}; expected 'auto', 'flat' or 'hnsw'")
        super().__init__()
        self.embedder = embedder
        self.kind: IndexKind = kind
        self.exact_limit = exact_limit
        self.hnsw_m = hnsw_m
        self.ef_search = ef_search
        self.ef_construction = ef_construction
        self._dim: int | None = None
        self._index: Any = None
        self.adapter: F32 | None = None

    # -- building ---------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        values: Sequence[str],
        texts: Sequence[str] | None = None,
        *,
        embedder: Embedder | None = None,
        vectors: F32 | None = None,
        progress: bool = False,
        kind: IndexKind = "auto",
        exact_limit: int = EXACT_LIMIT,
    ) -> EmbeddingIndex:
        """Index ``values`` under ``texts`` (default: the values themselves).

        ``vectors`` skips embedding (rows must be the embedder's unit vectors of ``texts``).
        """
        idx = cls(embedder or Embedder(), kind=kind, exact_limit=exact_limit)
        idx.add(values, texts, vectors=vectors, progress=progress)
        return idx

    @property
    def index_kind(self) -> str:
        """``flat`` (exact) or ``hnsw``, as built now."""
        if self._index is None:
            return "empty"
        return "hnsw" if "HNSW" in type(self._index).__name__ else "flat"

    @property
    def nbytes(self) -> int:
        """Approximate memory: vectors (and graph) plus owners."""
        if self._index is None:
            return 0
        n, d = self.n_rows, self._dim or 0
        extra = n * self.hnsw_m * 2 * 4 if self.index_kind == "hnsw" else 0
        return n * d * 4 + extra + self._owner.nbytes

    def __repr__(self) -> str:
        return (
            f"EmbeddingIndex({len(self)} values, {self.n_rows} rows, {self.index_kind}, "
            f"{self.embedder.name})"
        )

    def _new_index(self, dim: int, hnsw: bool) -> Any:
        faiss = _faiss()
        if not hnsw:
            return faiss.IndexFlatIP(dim)
        index = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = self.ef_construction
        index.hnsw.efSearch = self.ef_search
        return index

    def _want_hnsw(self, n_rows: int) -> bool:
        if self.kind == "hnsw":
            return True
        if self.kind == "auto" and n_rows > self.exact_limit:
            logger.info(
                "EmbeddingIndex: %d rows > exact_limit=%d, so an HNSW graph (approximate: "
                "recall@100 against exact search about 0.98-0.99) instead of an exact scan; "
                "pass kind='flat' for exact search",
                n_rows,
                self.exact_limit,
            )
            return True
        return False

    def add(
        self,
        values: Sequence[str],
        texts: Sequence[str] | None = None,
        *,
        vectors: F32 | None = None,
        progress: bool = False,
    ) -> None:
        """Index ``texts[i]`` for ``values[i]``: a new value gets a new id, a known value an
        extra row (multi-vector). Nothing already indexed is re-embedded."""
        texts_ = as_texts(values, texts, "EmbeddingIndex.add")
        if vectors is None:
            vectors = self.embedder.encode(texts_, progress=progress)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts_):
            raise ValueError(
                f"vectors has shape {vectors.shape}, expected ({len(texts_)}, dim): "
                "one row per text"
            )
        if self._dim is not None and vectors.shape[1] != self._dim:
            raise ValueError(f"vectors have width {vectors.shape[1]}, the index {self._dim}")
        owners = self._value_ids(values)
        n_total = self.n_rows + len(owners)
        if self._index is None:
            self._dim = int(vectors.shape[1])
            self._index = self._new_index(self._dim, self._want_hnsw(n_total))
        elif self.index_kind == "flat" and self._want_hnsw(n_total):
            old = self._index.reconstruct_n(0, self.n_rows)
            self._index = self._new_index(int(self._dim or 0), True)
            self._add_rows(old, progress)
        self._add_rows(vectors, progress)
        self._owner = np.concatenate([self._owner, owners])

    def _add_rows(self, vectors: F32, progress: bool) -> None:
        if self.index_kind == "flat" or len(vectors) < 20_000 or not progress:
            self._index.add(vectors)
            return
        tqdm = optional_module("tqdm.auto", "tqdm").tqdm
        step = 10_000
        for s in tqdm(range(0, len(vectors), step), desc="hnsw", unit_scale=step):
            self._index.add(vectors[s : s + step])

    def fit_query_adapter(
        self, queries: F32, targets: Sequence[Sequence[int]], *, ridge: float = 3.0
    ) -> F32:
        """Learn a linear map applied to query vectors before search, from training pairs.

        ``queries[i]`` (unit vectors) should retrieve the values ``targets[i]`` (ids): the map
        ``W`` minimises ``|Q W - Y|² + ridge |W - I|²`` where ``Y[i]`` is the normalised mean
        of the targets' first rows (their primary texts). It adapts the query side to the
        domain without re-embedding anything indexed; ``ridge`` keeps it close to identity.
        Stored in :attr:`adapter` (and saved with the index); returns it.
        """
        if self._index is None or self._dim is None:
            raise ValueError("fit_query_adapter needs a built index")
        q = np.ascontiguousarray(queries, np.float64).reshape(len(targets), self._dim)
        first_row = np.full(len(self._values), -1, np.int64)
        rows = np.arange(self.n_rows)
        first_row[self._owner[::-1]] = rows[::-1]
        y = np.zeros_like(q)
        for i, ids in enumerate(targets):
            if not len(ids):
                raise ValueError(f"targets[{i}] is empty: each query needs at least one value")
            vecs = self._index.reconstruct_batch(first_row[np.asarray(ids, np.int64)])
            v = vecs.mean(axis=0)
            y[i] = v / max(float(np.linalg.norm(v)), 1e-12)
        eye = np.eye(self._dim)
        w = np.linalg.solve(q.T @ q + ridge * eye, q.T @ y + ridge * eye)
        self.adapter = np.ascontiguousarray(w, np.float32)
        return self.adapter

    # -- searching --------------------------------------------------------------------------------
    def search(self, query: str, k: int = 64) -> list[str]:
        """The ``k`` values whose texts are nearest to ``query``, best first."""
        return [self._values[i] for i in self.search_ids([query], k)[0]]

    def search_ids(self, queries: Sequence[str], k: int = 64) -> list[I64]:
        """Value ids of the best ``k`` values per query."""
        if isinstance(queries, str):
            raise TypeError("queries must be a sequence of str; use search() for one query")
        q = self.embedder.encode_queries(queries) if len(queries) else np.zeros((0, 1), np.float32)
        return [ids for ids, _ in self.search_vectors(q, k)]

    def search_vectors(
        self, queries: F32, k: int = 64, *, threads: int | None = None, complete: bool = True
    ) -> list[tuple[I64, F32]]:
        """(value ids, scores) of the best ``k`` values for each query vector.

        A single query runs on one OpenMP thread unless ``threads`` says otherwise: at this
        size threads cost more than they save. With several rows per value (synonyms,
        examples), the first search fetches ``2k + 16`` rows; ``complete`` (default) searches
        again, four times deeper each time, until ``k`` distinct values are found, while
        ``complete=False`` returns what the first search found (possibly fewer than ``k``):
        what a caller that rescores its candidates exactly wants, since a query whose best rows
        crowd into a few values (a code with dozens of synonyms) otherwise pays for searches
        of thousands of rows.
        """
        check_k(k)
        if self._index is None or not len(queries):
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(queries))]
        q = np.ascontiguousarray(queries, dtype=np.float32).reshape(len(queries), -1)
        if self.adapter is not None:
            q = q @ self.adapter
            q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        if threads is None and len(q) == 1:
            threads = 1
        k = min(k, len(self._values))
        multi = self.n_rows > len(self._values)
        fetch = min(self.n_rows, k if not multi else 2 * k + 16)
        results: list[tuple[I64, F32]] = [None] * len(q)  # type: ignore[list-item]
        todo = np.arange(len(q))
        with _omp_threads(threads):
            while len(todo):
                if self.index_kind == "hnsw":
                    self._index.hnsw.efSearch = max(self.ef_search, fetch)
                scores, rows = self._index.search(q[todo], fetch)
                again = []
                for j, i in enumerate(todo):
                    ids, sc = best_per_owner(rows[j].astype(np.int64), scores[j], self._owner, k)
                    if complete and len(ids) < k and fetch < self.n_rows:
                        again.append(i)
                    results[i] = (ids, sc)
                todo = np.array(again, np.int64)
                fetch = min(self.n_rows, fetch * 4)
        return results

    def value_similarities(self, query: F32, ids: I64) -> F32:
        """Exact cosine of one query vector to values ``ids`` (each value's best row), whatever
        the index kind: what an HNSW search did not return can still be scored."""
        if self._index is None or not len(ids):
            return np.zeros(len(ids), np.float32)
        q = np.ascontiguousarray(query, np.float32).reshape(-1)
        if self.adapter is not None:
            q = q @ self.adapter
            q /= max(float(np.linalg.norm(q)), 1e-12)
        rows, offsets = self.rows_of(np.asarray(ids, np.int64))
        vecs = self._index.reconstruct_batch(rows)
        out: F32 = np.maximum.reduceat(vecs @ q, offsets[:-1]).astype(np.float32)
        return out

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index, its values and the model identity to one file (atomically)."""
        faiss = _faiss()
        if self._index is None:
            raise ValueError("cannot save an empty index")
        blob = np.asarray(faiss.serialize_index(self._index), dtype=np.uint8)
        encoded = [v.encode("utf-8", "surrogatepass") for v in self._values]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        meta = {
            "format": _FORMAT,
            "model": self.embedder.name,
            "fingerprint": self.embedder.fingerprint,
            "values_sha256": values_hash(self._values),
            "kind": self.kind,
            "exact_limit": self.exact_limit,
            "hnsw_m": self.hnsw_m,
            "ef_search": self.ef_search,
            "ef_construction": self.ef_construction,
        }
        arrays: dict[str, npt.NDArray[Any]] = {
            "faiss": blob,
            "owner": self._owner,
            "value_bytes": np.frombuffer(b"".join(encoded), np.uint8),
            "value_offsets": offsets,
        }
        if self.adapter is not None:
            arrays["adapter"] = self.adapter
        save_arrays(path, _KIND, arrays, meta)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        embedder: Embedder | None = None,
        values: Sequence[str] | None = None,
    ) -> EmbeddingIndex:
        """Read an index written by :meth:`save`.

        Refused with :class:`IndexMismatchError` when ``embedder`` is not the model it was built
        with, or when ``values`` (if given) are not the indexed values in order.
        """
        _faiss()  # fail early when faiss is missing
        embedder = embedder or Embedder()
        arrays, meta = load_arrays(path, _KIND, mmap=False, verify=True)
        if meta.get("format") != _FORMAT:
            raise CorruptFileError(f"{path}: format {meta.get('format')}, expected {_FORMAT}")
        if meta.get("fingerprint") != embedder.fingerprint:
            raise IndexMismatchError(
                f"{path}: built with model {meta.get('model')!r} "
                f"({str(meta.get('fingerprint'))[:12]}), not {embedder.name!r} "
                f"({embedder.fingerprint[:12]}); rebuild the index with this model"
            )
        if values is not None and values_hash(values) != meta.get("values_sha256"):
            raise IndexMismatchError(
                f"{path}: built over other values than the {len(values)} given "
                "(values hash differs); rebuild or extend the index with add()"
            )
        kind = meta.get("kind")
        if kind not in ("auto", "flat", "hnsw"):
            raise CorruptFileError(f"{path}: metadata kind={kind!r:.40} is not an index kind")
        idx = cls(
            embedder,
            kind=kind,
            exact_limit=meta_int(path, meta, "exact_limit", 0, 2**62),
            hnsw_m=meta_int(path, meta, "hnsw_m", 2, 1024),
            ef_search=meta_int(path, meta, "ef_search", 1, 1 << 20),
            ef_construction=meta_int(path, meta, "ef_construction", 1, 1 << 20),
        )
        c = Checker(path, arrays)
        c.names({"faiss", "owner", "value_bytes", "value_offsets"}, frozenset({"adapter"}))
        idx._values = c.strings("value", errors="surrogatepass")
        if values_hash(idx._values) != meta.get("values_sha256"):
            raise CorruptFileError(f"{path}: stored values do not match their hash")
        idx._ids = {v: i for i, v in enumerate(idx._values)}
        owner = c.array("owner", np.int64)
        c.within("owner", owner, 0, len(idx._values))
        idx._owner = np.array(owner, np.int64)
        idx._index = _read_faiss(c, len(owner))
        idx._dim = int(idx._index.d)
        if "adapter" in arrays:
            adapter = c.array("adapter", np.float32, ndim=2)
            if adapter.shape != (idx._dim, idx._dim):
                raise c.fail(f"adapter is {adapter.shape}, expected ({idx._dim}, {idx._dim})")
            c.finite("adapter", adapter)
            idx.adapter = np.array(adapter, np.float32)
        return idx


# faiss's serialized index types that EmbeddingIndex writes: exact inner product, HNSW over it
_FAISS_FLAT_IP = b"IxFI"
_FAISS_HNSW_FLAT = b"IHNf"


def _read_faiss(c: Checker, n_rows: int) -> Any:
    """Deserialize the stored faiss index after checking its header, then its graph.

    Only the two index types this module writes are accepted. A flat index must be exactly the
    size its header declares (dimension, row count); an HNSW graph's levels, offsets and
    neighbour ids are checked after reading, before any search walks them.
    """
    faiss = _faiss()
    blob = c.array("faiss", np.uint8)
    raw = blob.tobytes()
    if len(raw) < 32 or raw[:4] not in (_FAISS_FLAT_IP, _FAISS_HNSW_FLAT):
        raise c.fail(f"faiss index type {raw[:4]!r} is not IndexFlatIP or IndexHNSWFlat")
    d = int.from_bytes(raw[4:8], "little", signed=True)
    ntotal = int.from_bytes(raw[8:16], "little", signed=True)
    if not 0 < d <= 65536 or ntotal != n_rows:
        raise c.fail(f"faiss header: dimension {d}, {ntotal} rows for {n_rows} owners")
    if raw[:4] == _FAISS_FLAT_IP:
        empty = len(faiss.serialize_index(faiss.IndexFlatIP(d)))
        if len(raw) != empty + ntotal * d * 4:
            raise c.fail(f"faiss flat index of {len(raw)} bytes, expected {empty + ntotal * d * 4}")
    try:
        index = faiss.deserialize_index(np.array(blob, np.uint8))
    except RuntimeError as exc:
        raise c.fail(f"faiss index unreadable ({str(exc).splitlines()[0][:200]})") from exc
    if int(index.d) != d or int(index.ntotal) != n_rows:
        raise c.fail("faiss index does not match its header")
    if raw[:4] == _FAISS_HNSW_FLAT:
        hnsw = faiss.downcast_index(index).hnsw
        levels = faiss.vector_to_array(hnsw.levels)
        offsets = faiss.vector_to_array(hnsw.offsets).astype(np.int64)
        neighbors = faiss.vector_to_array(hnsw.neighbors)
        if len(levels) != n_rows or len(offsets) != n_rows + 1:
            raise c.fail("faiss HNSW graph sizes do not match its rows")
        c.offsets("faiss HNSW offsets", offsets, len(neighbors))
        c.within("faiss HNSW levels", levels, 1, 64)
        c.within("faiss HNSW neighbors", neighbors, -1, n_rows)
        if n_rows and not 0 <= int(hnsw.entry_point) < n_rows:
            raise c.fail("faiss HNSW entry point out of range")
        if int(hnsw.max_level) >= 64 or (n_rows and int(hnsw.max_level) != int(levels.max()) - 1):
            raise c.fail("faiss HNSW max level does not match its levels")
        storage = faiss.downcast_index(index.storage)
        if int(storage.d) != d or int(storage.ntotal) != n_rows:
            raise c.fail("faiss HNSW storage does not match its header")
    return index
