"""BM25 over words and character n-grams (numpy), saved and loaded as checked arrays."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import CorruptFileError
from trierouter.registry.core import native_core
from trierouter.registry.store import load_arrays, save_arrays
from trierouter.registry.validate import Checker, meta_float, meta_int
from trierouter.shortlist._common import (
    IndexMismatchError,
    ValueOwners,
    as_texts,
    best_per_owner,
    check_k,
    values_hash,
)

__all__ = ["BM25Index", "analyze"]


F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

_KIND = "trierouter.BM25Index"
_FORMAT = 1
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+|[^\W\d_]+")
_STOP = frozenset(
    "a an and are as at be by for from in into is it of on or the to with without "
    "due other others than this that".split()
)


def _stem(w: str) -> str:
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 5 and w.endswith("ing"):
        return w[:-3]
    if len(w) > 4 and w.endswith("ed") and not w.endswith("eed"):
        return w[:-2] if not w.endswith("ied") else w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def _grams(w: str, ngram: int) -> list[str]:
    s = f"#{w}#"
    if len(s) <= ngram:
        return [s]
    return [s[i : i + ngram] for i in range(len(s) - ngram + 1)]


def analyze(text: str, *, ngram: int = 4) -> tuple[list[str], list[str]]:
    """The word features and character n-gram features of ``text`` (``ngram=0``: none)."""
    raw = [m.lower() for m in _WORD.findall(text)]
    words = [_stem(w) for w in raw if w not in _STOP and (len(w) > 1 or w.isdigit())]
    grams: list[str] = []
    if ngram:
        for w in raw:
            if w not in _STOP:
                grams.extend(_grams(w, ngram))
    return words, grams


class _Field:
    """Postings of one field as raw counts, and BM25 weights derived from them lazily."""

    def __init__(self) -> None:
        self.terms: dict[str, int] = {}
        self.term_chunks: list[I32] = []
        self.doc_chunks: list[I64] = []
        self.tf_chunks: list[F32] = []
        self.lengths = np.zeros(0, np.float32)
        self.ptr: I64 | None = None
        self.docs = np.zeros(0, np.int64)
        self.weights = np.zeros(0, np.float32)

    def add_ids(self, ids: Sequence[int], lengths: Sequence[int], first_doc: int) -> None:
        """Append documents given as flat feature ids with one length per document."""
        n = np.asarray(lengths, np.int64)
        doc = np.repeat(np.arange(first_doc, first_doc + len(n), dtype=np.int64), n)
        key = (doc << 32) | np.asarray(ids, np.int64)
        uniq, tf = np.unique(key, return_counts=True)
        self.term_chunks.append((uniq & 0xFFFFFFFF).astype(np.int32))
        self.doc_chunks.append(uniq >> 32)
        self.tf_chunks.append(tf.astype(np.float32))
        self.lengths = np.concatenate([self.lengths, n.astype(np.float32)])
        self.ptr = None

    def coo(self) -> tuple[I32, I64, F32]:
        if len(self.term_chunks) != 1:
            self.term_chunks = [np.concatenate(self.term_chunks or [np.zeros(0, np.int32)])]
            self.doc_chunks = [np.concatenate(self.doc_chunks or [np.zeros(0, np.int64)])]
            self.tf_chunks = [np.concatenate(self.tf_chunks or [np.zeros(0, np.float32)])]
        return self.term_chunks[0], self.doc_chunks[0], self.tf_chunks[0]

    def finalize(self, k1: float, b: float) -> None:
        if self.ptr is not None:
            return
        terms, docs, tfs = self.coo()
        order = np.argsort(terms, kind="stable")
        n_terms = len(self.terms)
        df = np.bincount(terms, minlength=n_terms).astype(np.float64)
        ptr = np.zeros(n_terms + 1, np.int64)
        ptr[1:] = np.cumsum(df).astype(np.int64)
        n = max(len(self.lengths), 1)
        avgdl = float(self.lengths.mean()) if len(self.lengths) else 1.0
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        d = docs[order]
        tf = tfs[order].astype(np.float64)
        norm = k1 * (1.0 - b + b * self.lengths[d] / max(avgdl, 1e-9))
        self.weights = (idf[terms[order]] * tf * (k1 + 1.0) / (tf + norm)).astype(np.float32)
        self.docs = d
        self.ptr = ptr

    def term_counts(self, features: Sequence[str]) -> tuple[I64, I64]:
        """The known features' term ids, ascending, and how often each occurs."""
        ids = [t for t in (self.terms.get(f) for f in features) if t is not None]
        if not ids:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        uniq, counts = np.unique(np.array(ids, np.int64), return_counts=True)
        return uniq, counts

    def postings(self, features: Sequence[str], weight: float) -> tuple[I64, F64]:
        """The rows and weighted BM25 weights of ``features``' postings (a feature that
        occurs ``c`` times counts ``c`` times), concatenated: one gather, whatever the
        number of features."""
        assert self.ptr is not None
        uniq, counts = self.term_counts(features)
        if not len(uniq):
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        first = self.ptr[uniq]
        sizes = self.ptr[uniq + 1] - first
        ends = np.cumsum(sizes)
        at = np.repeat(first - (ends - sizes), sizes) + np.arange(int(ends[-1]), dtype=np.int64)
        w = self.weights[at] * np.repeat(counts * weight, sizes)
        return self.docs[at], w

    def score(self, features: Sequence[str], n_rows: int, out: F64, weight: float) -> None:
        d, w = self.postings(features, weight)
        if len(d):
            out += np.bincount(d, weights=w, minlength=n_rows)


class BM25Index(ValueOwners):
    """BM25 over words and character n-grams; top-k values per query (best text per value)."""

    def __init__(
        self, *, ngram: int = 4, ngram_weight: float = 0.5, k1: float = 1.2, b: float = 0.75
    ) -> None:
        if ngram < 0 or ngram == 1:
            raise ValueError(f"ngram={ngram}: 0 (words only) or a length >= 2")
        super().__init__()
        self.ngram = ngram
        self.ngram_weight = ngram_weight
        self.k1 = k1
        self.b = b
        self._fields = (_Field(), _Field())

    @classmethod
    def build(
        cls,
        values: Sequence[str],
        texts: Sequence[str] | None = None,
        *,
        progress: bool = False,
        ngram: int = 4,
        ngram_weight: float = 0.5,
        k1: float = 1.2,
        b: float = 0.75,
    ) -> BM25Index:
        """Index ``values`` under ``texts`` (default: the values themselves)."""
        idx = cls(ngram=ngram, ngram_weight=ngram_weight, k1=k1, b=b)
        idx.add(values, texts, progress=progress)
        return idx

    @property
    def nbytes(self) -> int:
        """Memory of the postings and weights (the term dictionaries not counted)."""
        total = self._owner.nbytes
        for f in self._fields:
            terms, docs, tfs = f.coo()
            total += terms.nbytes + docs.nbytes + tfs.nbytes + f.lengths.nbytes
            total += f.docs.nbytes + f.weights.nbytes
        return total

    def __repr__(self) -> str:
        return (
            f"BM25Index({len(self)} values, {self.n_rows} rows, "
            f"{len(self._fields[0].terms)} words, {len(self._fields[1].terms)} {self.ngram}-grams)"
        )

    def add(
        self, values: Sequence[str], texts: Sequence[str] | None = None, *, progress: bool = False
    ) -> None:
        """Index ``texts[i]`` for ``values[i]``: new values get new ids, known values an extra
        text. Existing postings are kept; only the new texts are analysed."""
        texts_ = as_texts(values, texts, "BM25Index.add")
        owners = self._value_ids(values)
        step = 50_000
        starts: Iterable[int] = range(0, len(texts_), step)
        if progress and len(texts_) > step:
            tqdm = importlib.import_module("tqdm.auto").tqdm
            starts = tqdm(starts, desc="bm25", unit_scale=step)
        words, grams = self._fields
        memo: dict[str, tuple[list[int], list[int]]] = {}
        for s in starts:
            w_ids: list[int] = []
            g_ids: list[int] = []
            w_len: list[int] = []
            g_len: list[int] = []
            for text in texts_[s : s + step]:
                nw, ng = len(w_ids), len(g_ids)
                for raw in _WORD.findall(text):
                    ids = memo.get(raw)
                    if ids is None:
                        ids = memo[raw] = self._word_ids(raw)
                    w_ids += ids[0]
                    g_ids += ids[1]
                w_len.append(len(w_ids) - nw)
                g_len.append(len(g_ids) - ng)
            first = self.n_rows + s
            words.add_ids(w_ids, w_len, first)
            grams.add_ids(g_ids, g_len, first)
        self._owner = np.concatenate([self._owner, owners])

    def _word_ids(self, raw: str) -> tuple[list[int], list[int]]:
        w = raw.lower()
        if w in _STOP:
            return [], []
        words, grams = self._fields
        wid: list[int] = []
        if len(w) > 1 or w.isdigit():
            wid.append(words.terms.setdefault(_stem(w), len(words.terms)))
        gid: list[int] = []
        if self.ngram:
            gid = [grams.terms.setdefault(g, len(grams.terms)) for g in _grams(w, self.ngram)]
        return wid, gid

    def scores(self, query: str, *, ngram_weight: float | None = None) -> F64:
        """BM25 score of every indexed text (row) for ``query``: the word field's score plus
        ``ngram_weight`` (default: the index's own :attr:`ngram_weight`) times the n-gram
        field's. The weight is an argument, not state, so indexes shared by several
        shortlists of other weights score each query with the weight its caller passes."""
        weight = self.ngram_weight if ngram_weight is None else ngram_weight
        for f in self._fields:
            f.finalize(self.k1, self.b)
        words, grams = analyze(query, ngram=self.ngram)
        core = native_core()  # (trierouter.testing.kernels.bm25_scores: the numpy reference)
        out = np.zeros(self.n_rows, np.float64)
        fields = [(self._fields[0], words, 1.0)]
        if self.ngram and weight:
            fields.append((self._fields[1], grams, weight))
        for field, feats, wt in fields:
            terms, counts = field.term_counts(feats)
            if len(terms):
                assert field.ptr is not None
                coefs = counts * wt
                core.bm25_accumulate(field.ptr, field.docs, field.weights, terms, coefs, out)
        return out

    def value_scores(self, query: str, *, ngram_weight: float | None = None) -> F64:
        """BM25 score of every value for ``query`` (its best row), indexed by value id."""
        return self.best_per_value(self.scores(query, ngram_weight=ngram_weight))

    def field_scores(self, query: str) -> tuple[F64, F64]:
        """Per row, the word field's and the n-gram field's BM25 scores (unweighted), so a
        caller can try several ``ngram_weight`` values from one scoring."""
        for f in self._fields:
            f.finalize(self.k1, self.b)
        words, grams = analyze(query, ngram=self.ngram)
        w = np.zeros(self.n_rows, np.float64)
        g = np.zeros(self.n_rows, np.float64)
        self._fields[0].score(words, self.n_rows, w, 1.0)
        if self.ngram:
            self._fields[1].score(grams, self.n_rows, g, 1.0)
        return w, g

    def search(self, query: str, k: int = 64) -> list[str]:
        """Up to ``k`` values that share features with ``query``, best first."""
        return [self._values[i] for i in self.search_ids([query], k)[0]]

    def search_ids(
        self, queries: Sequence[str], k: int = 64, *, ngram_weight: float | None = None
    ) -> list[I64]:
        """Value ids of the (up to) ``k`` best values per query; values scoring 0 are left out.
        ``ngram_weight`` as in :meth:`scores`."""
        check_k(k)
        if isinstance(queries, str):
            raise TypeError("queries must be a sequence of str; use search() for one query")
        return [self._top(self.scores(q, ngram_weight=ngram_weight), k) for q in queries]

    def search_scored(self, query: str, k: int = 64) -> tuple[I64, F64]:
        """:meth:`search_ids` of one query and each value's score (its best row's), from one
        scoring of the query."""
        check_k(k)
        s = self.scores(query)
        ids = self._top(s, k)
        return ids, self.best_per_value(s)[ids]

    def _top(self, s: F64, k: int) -> I64:
        """The (up to) ``k`` best value ids for row scores ``s``; values scoring 0 left out."""
        hit = np.flatnonzero(s > 0)
        fetch = min(len(hit), k if self.n_rows == len(self._values) else 4 * k + 16)
        while True:
            top = hit[np.argpartition(-s[hit], fetch - 1)[:fetch]] if fetch else hit[:0]
            top = top[np.lexsort((top, -s[top]))]
            ids, _ = best_per_owner(top, s[top].astype(np.float32), self._owner, k)
            if len(ids) >= k or fetch >= len(hit):
                return ids
            fetch = min(len(hit), fetch * 4)

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the counts, values and parameters to one file (atomically)."""
        arrays: dict[str, npt.NDArray[Any]] = {"owner": self._owner}
        arrays.update(_pack("value", self._values))
        for name, f in zip(("word", "gram"), self._fields, strict=True):
            terms, docs, tfs = f.coo()
            arrays.update(_pack(f"{name}_term", list(f.terms)))
            arrays[f"{name}_t"] = terms
            arrays[f"{name}_d"] = docs
            arrays[f"{name}_tf"] = tfs
            arrays[f"{name}_len"] = f.lengths
        meta = {
            "format": _FORMAT,
            "values_sha256": values_hash(self._values),
            "ngram": self.ngram,
            "ngram_weight": self.ngram_weight,
            "k1": self.k1,
            "b": self.b,
        }
        save_arrays(path, _KIND, arrays, meta)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, values: Sequence[str] | None = None
    ) -> BM25Index:
        """Read an index written by :meth:`save`; refused when ``values`` (if given) differ."""
        arrays, meta = load_arrays(path, _KIND, mmap=False, verify=True)
        if meta.get("format") != _FORMAT:
            raise CorruptFileError(f"{path}: format {meta.get('format')}, expected {_FORMAT}")
        if values is not None and values_hash(values) != meta.get("values_sha256"):
            raise IndexMismatchError(
                f"{path}: built over other values than the {len(values)} given "
                "(values hash differs); rebuild or extend the index with add()"
            )
        c = Checker(path, arrays)
        c.names(
            {"owner", "value_bytes", "value_offsets"}
            | {f"{f}_{a}" for f in ("word", "gram") for a in ("term_bytes", "term_offsets")}
            | {f"{f}_{a}" for f in ("word", "gram") for a in ("t", "d", "tf", "len")}
        )
        idx = cls(
            ngram=meta_int(path, meta, "ngram", 1, 64),
            ngram_weight=meta_float(path, meta, "ngram_weight"),
            k1=meta_float(path, meta, "k1"),
            b=meta_float(path, meta, "b"),
        )
        idx._values = c.strings("value", errors="surrogatepass")
        if values_hash(idx._values) != meta.get("values_sha256"):
            raise CorruptFileError(f"{path}: stored values do not match their hash")
        idx._ids = {v: i for i, v in enumerate(idx._values)}
        owner = c.array("owner", np.int64)
        c.within("owner", owner, 0, len(idx._values))
        idx._owner = np.array(owner, np.int64)
        n_rows = len(owner)
        for name, f in zip(("word", "gram"), idx._fields, strict=True):
            terms = c.strings(f"{name}_term", errors="surrogatepass")
            f.terms = {t: i for i, t in enumerate(terms)}
            if len(f.terms) != len(terms):
                raise c.fail(f"{name}_term repeats a term")
            t = c.array(f"{name}_t", np.int32)
            d = c.array(f"{name}_d", np.int64, size=len(t))
            tf = c.array(f"{name}_tf", np.float32, size=len(t))
            lengths = c.array(f"{name}_len", np.float32, size=n_rows)
            c.within(f"{name}_t", t, 0, len(terms))
            c.within(f"{name}_d", d, 0, n_rows)
            c.finite(f"{name}_tf", tf)
            c.finite(f"{name}_len", lengths)
            if (len(tf) and float(tf.min()) < 0) or (n_rows and float(lengths.min()) < 0):
                raise c.fail(f"{name}_tf or {name}_len holds negative counts")
            f.term_chunks = [np.array(t, np.int32)]
            f.doc_chunks = [np.array(d, np.int64)]
            f.tf_chunks = [np.array(tf, np.float32)]
            f.lengths = np.array(lengths, np.float32)
        return idx


def _pack(name: str, strings: Sequence[str]) -> dict[str, npt.NDArray[Any]]:
    encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return {
        f"{name}_bytes": np.frombuffer(b"".join(encoded), np.uint8),
        f"{name}_offsets": offsets,
    }


def _unpack(arrays: dict[str, npt.NDArray[Any]], name: str) -> list[str]:
    data = arrays[f"{name}_bytes"].tobytes()
    off = arrays[f"{name}_offsets"].tolist()
    return [data[off[i] : off[i + 1]].decode("utf-8", "surrogatepass") for i in range(len(off) - 1)]
