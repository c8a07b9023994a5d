"""Embeddings on disk, one folder per model fingerprint, keyed by the SHA-256 of each text."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]

logger = logging.getLogger(__name__)

__all__ = ["EmbeddingCache"]


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
