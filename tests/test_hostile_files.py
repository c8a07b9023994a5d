"""Untrusted saved files: every file kind corrupted byte by byte, truncated, crafted with a valid
checksum (an attacker recomputes it), or foreign, is refused with ``CorruptFileError`` (or loads
unchanged where the byte is unused padding); nothing is unpickled; the disk cache rebuilds."""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trierouter.errors import (
    CorruptFileError,
    IndexMismatchError,
    UnreachableValueError,
    VocabularyMismatchError,
)
from trierouter.registry.index import TokenIndex
from trierouter.registry.store import MAGIC, load_arrays, save_arrays
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary

from .conftest import toy_vocabulary

REFUSED = (CorruptFileError, VocabularyMismatchError, IndexMismatchError)
VALUES = ["get", "get_user", "ge", "", "café", "東京", "a\x00b", "S72.001A"]


def _header_len(data: bytes) -> int:
    n = int.from_bytes(data[8:16], "little")
    return 16 + n + (-(16 + n)) % 64


def _positions(data: bytes, payload_samples: int, seed: int = 0) -> list[int]:
    """Every header byte, and a sample of payload bytes (checksummed: any change is caught)."""
    head = _header_len(data)
    rng = random.Random(seed)
    tail = sorted(rng.sample(range(head, len(data)), min(payload_samples, len(data) - head)))
    return list(range(head)) + tail


def _corrupt_each_byte(
    path: Path, load: Callable[[Path], Any], same: Callable[[Any], bool], tmp: Path
) -> dict[str, int]:
    """Flip each chosen byte (xor 0xFF, and set to a digit) and truncate at many lengths."""
    data = path.read_bytes()
    counts = {"refused": 0, "unchanged": 0, "truncated": 0}
    bad = tmp / ("bad" + path.suffix)
    for i in _positions(data, 400):
        for b in {data[i] ^ 0xFF, ord("9") if data[i] != ord("9") else ord("1")}:
            bad.write_bytes(data[:i] + bytes([b]) + data[i + 1 :])
            try:
                obj = load(bad)
            except REFUSED:
                counts["refused"] += 1
                continue
            # the byte was not used (header padding): the file loads as it was saved
            assert same(obj), f"byte {i} -> {b:#x} loaded something different"
            counts["unchanged"] += 1
    for n in sorted({0, 1, 7, 8, 15, 16, 17, *range(0, len(data), max(1, len(data) // 97))}):
        if n == len(data):
            continue
        bad.write_bytes(data[:n])
        with pytest.raises(CorruptFileError):
            load(bad)
        counts["truncated"] += 1
    bad.write_bytes(data + b"\0")  # one byte too many
    with pytest.raises(CorruptFileError):
        load(bad)
    assert counts["refused"] > 0
    return counts


# -- fixtures -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_vocab() -> Vocabulary:
    return toy_vocabulary()


@pytest.fixture(scope="module")
def small_index(small_vocab: Vocabulary) -> TokenIndex:
    return TokenIndex.build(small_vocab)


@pytest.fixture(scope="module")
def choice_file(tmp_path_factory: pytest.TempPathFactory, small_index: TokenIndex) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "set.trt"
    compile_choices(VALUES, small_index, terminator='"').save(path)
    return path


def _same_set(cs: ChoiceSet, ref: ChoiceSet) -> bool:
    return all(np.array_equal(cs._arrays[k], ref._arrays[k]) for k in ref._arrays) and (
        cs.terminator == ref.terminator and cs.end_ids == ref.end_ids
    )


# -- byte-by-byte corruption of every file kind -------------------------------------------------
def test_choice_set_corrupted_byte_by_byte(
    choice_file: Path, small_vocab: Vocabulary, tmp_path: Path
) -> None:
    ref = ChoiceSet.load(choice_file, small_vocab, mmap=False)
    counts = _corrupt_each_byte(
        choice_file,
        lambda p: ChoiceSet.load(p, small_vocab, mmap=False),
        lambda cs: _same_set(cs, ref),
        tmp_path,
    )
    assert counts["refused"] > 1000


def test_token_index_corrupted_byte_by_byte(
    small_vocab: Vocabulary, small_index: TokenIndex, tmp_path: Path
) -> None:
    path = tmp_path / "index.trt"
    small_index.save(path)
    counts = _corrupt_each_byte(
        path,
        lambda p: TokenIndex.load(p, small_vocab),
        lambda ix: all(np.array_equal(ix._arrays[k], small_index._arrays[k]) for k in ix._arrays),
        tmp_path,
    )
    assert counts["refused"] > 500


def test_bm25_index_corrupted_byte_by_byte(tmp_path: Path) -> None:
    from trierouter.shortlist import BM25Index

    values = [f"tool_{i}" for i in range(30)]
    texts = [f"do thing number {i} with the {['red', 'blue'][i % 2]} widget" for i in range(30)]
    idx = BM25Index.build(values, texts)
    path = tmp_path / "bm25.trt"
    idx.save(path)
    _corrupt_each_byte(
        path,
        lambda p: BM25Index.load(p),
        lambda ix: (
            ix.values == values and ix.search("blue widget 7", 5) == idx.search("blue widget 7", 5)
        ),
        tmp_path,
    )


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_embedding_index_corrupted_byte_by_byte(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("faiss", reason="faiss-cpu is not installed (trierouter[shortlist])")
    from trierouter.shortlist import Embedder, EmbeddingIndex

    embedder = Embedder()
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((40, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    values = [f"v{i}" for i in range(40)]
    idx = EmbeddingIndex.build(values, embedder=embedder, vectors=vecs, kind=kind)  # type: ignore[arg-type]
    path = tmp_path / "emb.trt"
    idx.save(path)
    q = vecs[:3]
    want = [r[0].tolist() for r in idx.search_vectors(q, 5)]
    _corrupt_each_byte(
        path,
        lambda p: EmbeddingIndex.load(p, embedder=embedder),
        lambda ix: [r[0].tolist() for r in ix.search_vectors(q, 5)] == want,
        tmp_path,
    )


# -- crafted files with a valid checksum --------------------------------------------------------
def _rewrite(path: Path, out: Path, kind: str, edit: Callable[[dict[str, Any]], None]) -> Path:
    """Load the arrays, let ``edit`` change them, save with a freshly computed checksum."""
    arrays, meta = load_arrays(path, kind, mmap=False)
    arrays = {k: np.array(v) for k, v in arrays.items()}
    edit(arrays)
    save_arrays(out, kind, arrays, meta)
    return out


def _set(name: str, fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[dict[str, Any]], None]:
    def edit(a: dict[str, Any]) -> None:
        a[name] = fn(a[name])

    return edit


def _poke(i: int, v: int) -> Callable[[np.ndarray], np.ndarray]:
    def fn(x: np.ndarray) -> np.ndarray:
        x = x.copy()
        x[i] = v
        return x

    return fn


CRAFTED_SETS = {
    "token id past the width": _set("tokens", _poke(0, 10**6)),
    "negative token id": _set("tokens", _poke(-1, -5)),
    "row_ptr decreasing": _set("row_ptr", _poke(2, 0)),
    "row_ptr past the tokens": _set("row_ptr", _poke(-1, 10**6)),
    # a step from 2**25 + 33 to -2**31 + 18 wraps to a positive int32 difference
    "row_ptr jumping out and back (int32 wrap)": _set(
        "row_ptr", lambda r: _poke(3, -(2**31) + 18)(_poke(2, 2**25 + 33)(r))
    ),
    "tokens unsorted in a row": _set("tokens", lambda t: t[::-1].copy()),
    "child past the last state": _set("children", _poke(0, 0xFFF0)),
    "far_pos not the far children": _set("far_pos", lambda f: np.array([0], np.int32)),
    "ends out of range": _set("ends", _poke(-1, 10**6)),
    "ends unsorted": _set("ends", lambda e: e[::-1].copy()),
    "value offsets decreasing": _set("value_offsets", _poke(1, 10**6)),
    "value bytes not UTF-8": _set("value_bytes", lambda b: np.full_like(b, 0xFF)),
    "row_ptr as float": _set("row_ptr", lambda r: r.astype(np.float32)),
    "tokens as int64": _set("tokens", lambda t: t.astype(np.int64)),
    "missing array": lambda a: a.pop("far_child"),
    "extra array": lambda a: a.update(extra=np.zeros(3, np.int32)),
    "row_ptr too short": _set("row_ptr", lambda r: r[:2].copy()),
    "2-d tokens": _set("tokens", lambda t: t.reshape(1, -1).copy()),
}


@pytest.mark.parametrize("case", sorted(CRAFTED_SETS))
def test_crafted_choice_set_refused(
    case: str, choice_file: Path, small_vocab: Vocabulary, tmp_path: Path
) -> None:
    out = _rewrite(choice_file, tmp_path / "x.trt", "trierouter.ChoiceSet", CRAFTED_SETS[case])
    with pytest.raises(CorruptFileError, match=r"x\.trt"):
        ChoiceSet.load(out, small_vocab)


def _raw_header_file(path: Path, header: dict[str, Any], payload: bytes = b"") -> Path:
    raw = json.dumps(header).encode()
    head = MAGIC + len(raw).to_bytes(8, "little") + raw
    head += b"\0" * ((-len(head)) % 64)
    path.write_bytes(head + payload)
    return path


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "row_ptr", "dtype": "|O", "shape": [2], "offset": 0},
        {"name": "row_ptr", "dtype": ">i4", "shape": [2], "offset": 0},
        {"name": "row_ptr", "dtype": "|V8", "shape": [1], "offset": 0},
        {"name": "row_ptr", "dtype": "<i4", "shape": [-1], "offset": 0},
        {"name": "row_ptr", "dtype": "<i4", "shape": [2**40], "offset": 0},
        {"name": "row_ptr", "dtype": "<i4", "shape": [2], "offset": 8},
        {"name": "row_ptr", "dtype": "<i4", "shape": [2], "offset": -64},
        {"name": "row_ptr", "dtype": "<i4", "shape": "2", "offset": 0},
        {"name": "row_ptr", "dtype": "<i4", "shape": [1, 1, 1, 1, 1, 1], "offset": 0},
        {"name": "row_ptr", "dtype": [["a", "<i4"]], "shape": [2], "offset": 0},
        {"name": 5, "dtype": "<i4", "shape": [2], "offset": 0},
    ],
)
def test_crafted_array_table_refused(entry: dict[str, Any], tmp_path: Path) -> None:
    import hashlib

    payload = b"\0" * 64
    header = {
        "kind": "trierouter.ChoiceSet",
        "meta": {},
        "arrays": [entry],
        "payload": 64,
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    path = _raw_header_file(tmp_path / "t.trt", header, payload)
    with pytest.raises(CorruptFileError):
        load_arrays(path, "trierouter.ChoiceSet")


@pytest.mark.parametrize(
    "header",
    [
        [],
        {"kind": "trierouter.ChoiceSet"},
        {"kind": "trierouter.ChoiceSet", "meta": [], "arrays": [], "payload": 0, "sha256": ""},
        {"kind": "trierouter.ChoiceSet", "meta": {}, "arrays": [], "payload": -1, "sha256": ""},
        {"kind": "trierouter.ChoiceSet", "meta": {}, "arrays": [], "payload": True, "sha256": ""},
        {"kind": "trierouter.TokenIndex", "meta": {}, "arrays": [], "payload": 0, "sha256": ""},
    ],
)
def test_malformed_header_refused(header: Any, tmp_path: Path) -> None:
    path = _raw_header_file(tmp_path / "h.trt", header)
    with pytest.raises(CorruptFileError):
        load_arrays(path, "trierouter.ChoiceSet")


def test_pickle_and_foreign_files_refused(
    small_vocab: Vocabulary, small_index: TokenIndex, tmp_path: Path
) -> None:
    """A pickle (which would run code if unpickled), an .npz and a text file are all refused."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {marker}",))

    for name, data in [
        ("evil.pkl", pickle.dumps(Evil())),
        ("empty", b""),
        ("text", b"get_user\nget_weather\n"),
        ("magic-only", MAGIC),
    ]:
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(CorruptFileError):
            ChoiceSet.load(p, small_vocab)
        with pytest.raises(CorruptFileError):
            TokenIndex.load(p, small_vocab)
    npz = tmp_path / "a.npz"
    np.savez(npz, row_ptr=np.zeros(3))
    with pytest.raises(CorruptFileError):
        ChoiceSet.load(npz, small_vocab)
    assert not marker.exists()


def test_set_of_one_kind_is_refused_as_another(choice_file: Path, small_vocab: Vocabulary) -> None:
    with pytest.raises(CorruptFileError, match=r"expected 'trierouter\.TokenIndex'"):
        TokenIndex.load(choice_file, small_vocab)


# -- random crafted arrays: refused, or served without a crash --------------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_crafted_set_refused_or_safe(
    data: st.DataObject, choice_file: Path, small_vocab: Vocabulary
) -> None:
    arrays, meta = load_arrays(choice_file, "trierouter.ChoiceSet", mmap=False)
    arrays = {k: np.array(v) for k, v in arrays.items()}
    for _ in range(data.draw(st.integers(1, 4))):
        name = data.draw(st.sampled_from(sorted(arrays)))
        a = arrays[name]
        if not len(a):
            continue
        raw = a.view(np.uint8).copy()
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
        arrays[name] = raw.view(a.dtype)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r.trt"
        save_arrays(p, "trierouter.ChoiceSet", arrays, meta)
        try:
            cs = ChoiceSet.load(p, small_vocab, mmap=False)
        except CorruptFileError:
            return
    # accepted: every serving call stays in bounds and returns states
    rng = random.Random(0)
    bitmask = np.zeros((2, cs.bitmask_words), np.int32)
    states = [cs.root]
    for _ in range(40):
        s = states[-1]
        ids = cs.mask(s)
        tok = int(ids[rng.randrange(len(ids))]) if len(ids) else rng.randrange(cs.width)
        cs.fill_next_token_bitmask(s, bitmask, 0)
        nxt = cs.advance(s, tok)
        assert 0 <= nxt <= cs.DEAD
        assert int(cs.advance_batch([s], [tok])[0]) == nxt
        states.append(nxt)
    cs.fill_bitmask_batch(np.array(states[:2]), bitmask)
    _ = cs.values, [cs.value_at(s) for s in states], [cs.is_terminal(s) for s in states]


# -- the on-disk cache rebuilds -------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["garbage", "truncated", "crafted", "other-vocabulary"])
def test_token_index_cache_rebuilds(
    damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    vocab = toy_vocabulary([b"damage-" + damage.encode()])
    path = tmp_path / f"token-index-{vocab.hash[:32]}.trt"
    good = TokenIndex.build(vocab)
    good.save(path)
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"\x80\x04garbage" * 100)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "crafted":
        _rewrite(path, path, "trierouter.TokenIndex", _set("level1", lambda x: x + 10**6))
    else:
        TokenIndex.build(toy_vocabulary([b"another"])).save(path)
    TokenIndex._memory.pop(vocab.hash, None)
    with caplog.at_level(logging.WARNING, logger="trierouter.registry.index"):
        index = TokenIndex.get(vocab, cache_dir=tmp_path, backend="numpy")
    assert "rebuilding token index" in caplog.text
    assert index.source == "built"
    assert compile_choices(VALUES, index).n_pairs == compile_choices(VALUES, good).n_pairs
    TokenIndex._memory.pop(vocab.hash, None)
    again = TokenIndex.get(vocab, cache_dir=tmp_path, backend="numpy")  # the rewritten file is good
    assert again.source == str(path)


def test_embedding_cache_ignores_damaged_shards(tmp_path: Path) -> None:
    pytest.importorskip("faiss", reason="faiss-cpu is not installed (trierouter[shortlist])")
    from trierouter.shortlist.cache import EmbeddingCache

    cache = EmbeddingCache(tmp_path, "f" * 64, 4)
    cache.directory.mkdir(parents=True)
    (cache.directory / "shard-0.npz").write_bytes(b"PK\x03\x04 not a zip")
    (cache.directory / "shard-1.npz").write_bytes(pickle.dumps([1, 2, 3]))
    with zipfile.ZipFile(cache.directory / "shard-2.npz", "w") as z:
        z.writestr("keys.npy", pickle.dumps("x"))
    np.savez(
        cache.directory / "shard-3.npz",
        keys=np.array([object()], dtype=object),
        vectors=np.ones((1, 4), np.float32),
    )
    np.savez(cache.directory / "shard-4.npz", keys=np.zeros(16, np.uint8), vectors=np.ones((1, 4)))
    vecs, missing = cache.lookup(["a", "b"])
    assert missing == [0, 1] and not vecs.any()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_crafted_index_refused_or_safe(
    data: st.DataObject, small_vocab: Vocabulary, small_index: TokenIndex
) -> None:
    """Random bytes of the index arrays changed, checksum recomputed: refused, or an index that
    compiles without crashing or hanging (what it answers is then the crafted file's business)."""
    import tempfile

    arrays = {k: np.array(v) for k, v in small_index._arrays.items()}
    for _ in range(data.draw(st.integers(1, 4))):
        name = data.draw(st.sampled_from(sorted(arrays)))
        raw = arrays[name].view(np.uint8).copy()
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
        arrays[name] = raw.view(arrays[name].dtype)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "i.trt"
        save_arrays(
            p, "trierouter.TokenIndex", arrays, {"format": 1, "vocabulary": small_vocab.hash}
        )
        try:
            index = TokenIndex.load(p, small_vocab)
        except CorruptFileError:
            return
    try:
        cs = compile_choices(VALUES, index, terminator='"')
    except UnreachableValueError:
        return
    state = cs.root
    for _ in range(20):
        m = cs.mask(state)
        if not len(m):
            break
        state = cs.advance(state, int(m[-1]))
