"""TokenIndex: the per-tokenizer structure that finds every token occurring in a trie.

Two forms, one per backend (:mod:`trierouter.registry.core`): the native backend holds a forward
trie of the token bytes with Aho-Corasick links, built in C++ (``native_trie``); the numpy
reference holds the reversed-token tables described below (cached on disk). The form of the
default backend is built when the index is; the other one on first use.

For a trie node ``m``, the tokens ``t`` whose bytes are a suffix of ``path(m)`` are exactly the
pairs ``(n, t)`` with ``path(n) + bytes(t) == path(m)``: ``t`` is allowed at the ancestor ``n`` and
leads to ``m``. Walking backwards from every node at once, level by level, through a trie of the
*reversed* token bytes enumerates each distinct (node, token) pair exactly once — Aho-Corasick's
output sets, computed with whole-array operations. The index depends on the vocabulary only: it is
built once, cached in memory and on disk (keyed by the vocabulary hash), and shared by every set.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from trierouter import settings
from trierouter.errors import CorruptFileError, VocabularyMismatchError
from trierouter.registry._hashmap import HashMap
from trierouter.registry.arrays import Trie, TriePairs, build_trie, pack_strings, ranges
from trierouter.registry.backends import get_backend
from trierouter.registry.core import native_core
from trierouter.registry.store import load_arrays, save_arrays
from trierouter.registry.validate import Checker
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["TokenIndex", "default_cache_dir"]

_log = logging.getLogger(__name__)
_KIND = "trierouter.TokenIndex"
_FORMAT = 1

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


def default_cache_dir() -> Path:
    """``$TRIEROUTER_CACHE_DIR``, else ``$XDG_CACHE_HOME/trierouter``, else ``~/.cache/...``."""
    env = settings.CACHE_DIR.get()
    if env is not None:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "trierouter" if xdg else Path.home() / ".cache" / "trierouter"


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (``fcntl.flock``); a no-op where unavailable."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except (ImportError, OSError):
        yield
        return
    try:
        with suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class TokenIndex:
    """Reversed-token trie of a vocabulary, with O(1) child lookups for the backward walk."""

    _memory: ClassVar[OrderedDict[str, TokenIndex]] = OrderedDict()
    memory_size: ClassVar[int] = 4
    """Indexes kept in memory, least recently used dropped first (each holds ~10-60 MB)."""
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _building: ClassVar[dict[str, threading.Lock]] = {}

    def __init__(
        self,
        vocabulary: Vocabulary,
        arrays: dict[str, npt.NDArray[Any]] | None = None,
        *,
        backend: str | None = None,
    ) -> None:
        t0 = time.perf_counter()
        self.vocabulary = vocabulary
        impl = get_backend(backend)
        self.backend = impl.name
        self._form_lock = threading.Lock()
        self._arrays: dict[str, npt.NDArray[Any]] | None = None
        self._native: Any = None
        if arrays is not None:
            self._set_reverse(arrays)
        impl.warm_index(self)
        _ = vocabulary.hash, vocabulary.content_hash  # once here, not on the first compile
        self.build_seconds = time.perf_counter() - t0
        self.source = "built"

    def _set_reverse(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        self._level1: I32 = arrays["level1"]
        self._level2: I32 = arrays["level2"]
        self._deep = HashMap(arrays["deep_keys"], arrays["deep_values"])
        self._tok_ptr: I64 = arrays["tok_ptr"]
        self._tok_ids: I32 = arrays["tok_ids"]
        self._single: npt.NDArray[np.bool_] = arrays["single_byte"]
        counts = np.diff(self._tok_ptr)
        token_at = np.full(len(counts), -1, dtype=np.int64)
        one = counts == 1
        token_at[one] = self._tok_ids[self._tok_ptr[:-1][one]]
        token_at[counts > 1] = -2
        # per reversed-trie node: its token id if exactly one, -1 if none, -2 if several
        self._token_at = token_at
        self._arrays = arrays

    def reverse_tables(self) -> dict[str, npt.NDArray[Any]]:
        """The numpy reference's reversed-token tables (built here on first use)."""
        if self._arrays is None:
            with self._form_lock:
                if self._arrays is None:
                    self._set_reverse(self._build_reverse(self.vocabulary))
        assert self._arrays is not None
        return self._arrays

    @property
    def native_trie(self) -> Any:
        """The native backend's forward token trie (``_core.TokenTrie``; built on first use
        when the index was built for the numpy backend)."""
        if self._native is None:
            core = native_core()
            with self._form_lock:
                if self._native is None:
                    matchable = np.ascontiguousarray(self.vocabulary.matchable, dtype=np.uint8)
                    self._native = core.TokenTrie(self.vocabulary.tokens, matchable)
        return self._native

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def build(cls, vocabulary: Vocabulary, *, backend: str | None = None) -> TokenIndex:
        """Build the index from scratch (no cache), in the form ``backend`` uses (default:
        :func:`~trierouter.registry.core.default_backend`)."""
        return cls(vocabulary, backend=backend)

    @classmethod
    def _build_reverse(cls, vocabulary: Vocabulary) -> dict[str, npt.NDArray[Any]]:
        ids = np.flatnonzero(vocabulary.matchable)
        toks = vocabulary.tokens
        rev = [toks[i][::-1] for i in ids.tolist()]
        order = sorted(range(len(rev)), key=rev.__getitem__)
        rev_sorted = [rev[i] for i in order]
        ids_sorted = ids[np.asarray(order, dtype=np.int64)]
        # collapse tokens with identical bytes onto one string
        uniq: list[bytes] = []
        group = np.empty(len(rev_sorted), dtype=np.int64)
        last = None
        for i, s in enumerate(rev_sorted):
            if s != last:
                uniq.append(s)
                last = s
            group[i] = len(uniq) - 1
        buf, starts, lengths = pack_strings(uniq)
        trie = build_trie(buf, starts, lengths)
        end_of_token = trie.ends[group]
        counts = np.bincount(end_of_token, minlength=trie.size).astype(np.int64)
        tok_ptr = np.zeros(trie.size + 1, dtype=np.int64)
        np.cumsum(counts, out=tok_ptr[1:])
        tok_ids = ids_sorted[np.argsort(end_of_token, kind="stable")].astype(np.int32)
        arrays = cls._lookup_tables(trie)
        single = np.zeros(256, dtype=bool)
        single_nodes = np.flatnonzero((trie.depth == 1) & (counts > 0))
        single[trie.byte[single_nodes]] = True
        arrays.update(tok_ptr=tok_ptr, tok_ids=tok_ids, single_byte=single)
        return arrays

    @staticmethod
    def _lookup_tables(trie: Trie) -> dict[str, npt.NDArray[Any]]:
        level1 = np.full(256, -1, dtype=np.int32)
        level2 = np.full(65536, -1, dtype=np.int32)
        d1 = np.flatnonzero(trie.depth == 1)
        level1[trie.byte[d1]] = d1
        d2 = np.flatnonzero(trie.depth == 2)
        level2[(trie.byte[trie.parent[d2]].astype(np.int64) << 8) | trie.byte[d2]] = d2
        deep = np.flatnonzero(trie.depth >= 3)
        keys = (trie.parent[deep].astype(np.int64) << 8) | trie.byte[deep]
        table = HashMap.build(keys, deep.astype(np.int32))
        return {
            "level1": level1,
            "level2": level2,
            "deep_keys": table.keys,
            "deep_values": table.values,
        }

    @classmethod
    def get(
        cls,
        vocabulary: Vocabulary,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        disk_cache: bool = True,
        backend: str | None = None,
    ) -> TokenIndex:
        """The index of ``vocabulary``: from memory, else the disk cache, else built and cached.

        A cache file that is corrupt, foreign or for another vocabulary is rebuilt, never trusted.
        The disk cache holds the numpy backend's tables; the native backend's trie is built in
        C++ instead (faster than reading and verifying a cache file), so with
        ``backend="native"`` (the default) nothing is read from or written to disk.
        """
        impl = get_backend(backend)
        key = vocabulary.hash
        with cls._lock:
            hit = cls._memory.get(key)
            if hit is not None:
                cls._memory.move_to_end(key)
                return hit
            key_lock = cls._building.setdefault(key, threading.Lock())
        # one builder per vocabulary in this process; other threads wait for its result
        with key_lock:
            with cls._lock:
                hit = cls._memory.get(key)
            if hit is not None:
                return hit
            if impl.index_on_disk:
                index = cls._from_disk_or_build(vocabulary, cache_dir, disk_cache)
            else:
                index = cls.build(vocabulary, backend=impl.name)
            with cls._lock:
                index = cls._memory.setdefault(key, index)
                cls._building.pop(key, None)
                while len(cls._memory) > cls.memory_size:
                    cls._memory.popitem(last=False)
                return index

    @classmethod
    def _from_disk_or_build(
        cls,
        vocabulary: Vocabulary,
        cache_dir: str | os.PathLike[str] | None,
        disk_cache: bool,
    ) -> TokenIndex:
        path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        path = path / f"token-index-{vocabulary.hash[:32]}.trt"
        if not disk_cache:
            return cls.build(vocabulary, backend="numpy")
        index = cls._try_load(path, vocabulary)
        if index is not None:
            return index
        # one builder per vocabulary across processes sharing the cache folder: the others wait
        # on the lock file, then load what it wrote (a lock that cannot be taken is skipped)
        with _file_lock(path.with_name(path.name + ".lock")):
            index = cls._try_load(path, vocabulary)
            if index is not None:
                return index
            index = cls.build(vocabulary, backend="numpy")
            try:
                index.save(path)
            except OSError as exc:  # a read-only cache must not break compiling
                _log.warning("could not write token index cache %s: %s", path, exc)
        return index

    @classmethod
    def _try_load(cls, path: Path, vocabulary: Vocabulary) -> TokenIndex | None:
        if not path.exists():
            return None
        try:
            return cls.load(path, vocabulary, backend="numpy")
        except (CorruptFileError, VocabularyMismatchError) as exc:
            _log.warning("rebuilding token index: %s", exc)
            return None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index to ``path`` (atomically)."""
        meta = {"format": _FORMAT, "vocabulary": self.vocabulary.hash}
        save_arrays(path, _KIND, self.reverse_tables(), meta)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], vocabulary: Vocabulary, *, backend: str | None = None
    ) -> TokenIndex:
        """Read an index written by :meth:`save`; it must belong to ``vocabulary``."""
        t0 = time.perf_counter()
        arrays, meta = load_arrays(path, _KIND, mmap=False)
        if meta.get("format") != _FORMAT:
            raise CorruptFileError(f"{path}: index format {meta.get('format')}, expected {_FORMAT}")
        if meta.get("vocabulary") != vocabulary.hash:
            raise VocabularyMismatchError(
                f"{path}: index built for vocabulary {str(meta.get('vocabulary'))[:12]}, "
                f"not {vocabulary.hash[:12]}"
            )
        _check_arrays(Checker(path, arrays), vocabulary)
        index = cls(vocabulary, arrays, backend=backend)
        index.build_seconds = time.perf_counter() - t0
        index.source = str(path)
        return index

    @property
    def nbytes(self) -> int:
        """Bytes held by the index (the forms built so far)."""
        held = sum(a.nbytes for a in self._arrays.values()) if self._arrays is not None else 0
        return int(held + (self._native.nbytes if self._native is not None else 0))

    def can_spell_bytes(self) -> npt.NDArray[np.bool_]:
        """``out[b]``: some non-special token is exactly the single byte ``b``."""
        if self._arrays is None:
            return np.frombuffer(self.native_trie.single_byte, dtype=np.uint8).astype(bool)
        return self._single

    # -- the backward walk -----------------------------------------------------------------------
    def trie_pairs(self, trie: Trie, *, extra: TriePairs | None = None) -> TriePairs:
        """Every (node, token, child) of ``trie``: token bytes == path(child) minus path(node).

        ``extra`` pairs are appended to the result (saves a copy of the large arrays).
        """
        self.reverse_tables()
        parent = trie.parent.copy()
        parent[0] = 0
        byte = trie.byte.astype(np.int32)
        token_at = self._token_at
        m = np.arange(1, trie.size, dtype=np.int32)
        r = self._level1[byte[1:]]
        keep = np.flatnonzero(r >= 0)
        m, a, r = m[keep], m[keep], r[keep]
        out_n: list[npt.NDArray[np.integer[Any]]] = []
        out_t: list[npt.NDArray[np.integer[Any]]] = []
        out_m: list[npt.NDArray[np.integer[Any]]] = []
        level = 1
        while len(m):
            tok = token_at[r]
            up = parent[a]
            sel = np.flatnonzero(tok != -1)
            if len(sel):
                single = tok[sel] >= 0
                if single.all():
                    out_n.append(up[sel])
                    out_t.append(tok[sel])
                    out_m.append(m[sel])
                else:
                    many = sel[~single]
                    lo = self._tok_ptr[r[many]]
                    grp, pos = ranges(lo, self._tok_ptr[r[many] + 1] - lo)
                    sel = sel[single]
                    out_n += [up[sel], up[many][grp]]
                    out_t += [tok[sel], self._tok_ids[pos].astype(np.int64)]
                    out_m += [m[sel], m[many][grp]]
            # one level up: the next byte is the one on the edge into ``up`` (none at the root)
            b = byte[up]
            if level == 1:
                r = self._level2[(byte[m] << 8) | b]
            else:
                r = self._deep.get((r.astype(np.int64) << 8) | b)
            r[up == 0] = -1
            keep = np.flatnonzero(r >= 0)
            m, a, r = m[keep], up[keep], r[keep]
            level += 1
        if extra is not None:
            out_n.append(extra.node)
            out_t.append(extra.token)
            out_m.append(extra.child)
        if not out_n:
            empty = np.zeros(0, dtype=np.int64)
            return TriePairs(empty, empty, empty)
        return TriePairs(
            np.concatenate(out_n, dtype=np.int64),
            np.concatenate(out_t, dtype=np.int64),
            np.concatenate(out_m, dtype=np.int64),
        )


def _check_arrays(c: Checker, vocabulary: Vocabulary) -> None:
    """What the backward walk relies on, checked before a loaded index is used: lookup tables
    pointing at reversed-trie nodes, a hash table that has free slots (probing ends), token ids
    of matchable tokens in CSR rows."""
    c.names({"level1", "level2", "deep_keys", "deep_values", "tok_ptr", "tok_ids", "single_byte"})
    tok_ptr = c.array("tok_ptr", np.int64)
    n_rev = len(tok_ptr) - 1
    tok_ids = c.array("tok_ids", np.int32)
    c.offsets("tok_ptr", tok_ptr, len(tok_ids))
    c.within("tok_ids", tok_ids, 0, len(vocabulary))
    if len(tok_ids) and not bool(vocabulary.matchable[tok_ids].all()):
        raise c.fail("tok_ids names special or empty tokens")
    c.within("level1", c.array("level1", np.int32, size=256), -1, n_rev)
    c.within("level2", c.array("level2", np.int32, size=65536), -1, n_rev)
    keys = c.array("deep_keys", np.int64)
    values = c.array("deep_values", np.int32, size=len(keys))
    if len(keys) < 16 or len(keys) & (len(keys) - 1):
        raise c.fail(f"deep_keys has {len(keys)} slots, not a power of two >= 16")
    used = keys != -1
    if int(used.sum()) * 2 > len(keys) or (len(keys) and int(keys.min()) < -1):
        raise c.fail("deep_keys is more than half full or holds negative keys")
    c.within("deep_values", values[used], 0, n_rev)
    single = c.array("single_byte", np.bool_, size=256)
    if int(single.view(np.uint8).max()) > 1:
        raise c.fail("single_byte holds values other than 0 and 1")
