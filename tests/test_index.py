"""TokenIndex: the vectorized backward walk against pyahocorasick; the memory and disk caches."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from trierouter.data.synthetic import mixed_values
from trierouter.errors import CorruptFileError, VocabularyMismatchError
from trierouter.registry.arrays import build_trie, pack_strings
from trierouter.registry.index import TokenIndex
from trierouter.registry.vocabulary import Vocabulary
from trierouter.testing.oracle import ahocorasick_pairs

from .conftest import toy_vocabulary


def _walk_pairs(index: TokenIndex, strings: list[bytes]) -> set[tuple[bytes, int, bytes]]:
    strings = sorted(set(strings))
    buf, starts, lengths = pack_strings(strings)
    trie = build_trie(buf, starts, lengths)
    # path of every node, rebuilt from parents and bytes
    paths: list[bytes] = [b""] * trie.size
    for node in range(1, trie.size):
        paths[node] = paths[int(trie.parent[node])] + bytes([int(trie.byte[node])])
    for s, end in zip(strings, trie.ends.tolist(), strict=True):
        assert paths[end] == s
    pairs = index.trie_pairs(trie)
    out = {
        (paths[n], t, paths[m])
        for n, t, m in zip(
            pairs.node.tolist(), pairs.token.tolist(), pairs.child.tolist(), strict=True
        )
    }
    assert len(out) == len(pairs.node), "each (node, token) pair must be produced exactly once"
    return out


@pytest.mark.parametrize("k", [1, 50, 2000])
def test_backward_walk_equals_ahocorasick_on_qwen2(qwen2_index: TokenIndex, k: int) -> None:
    strings = [v.encode() for v in mixed_values(k, seed=k)]
    strings += [b"", b"\x00\x00x", "東京都".encode()]
    assert _walk_pairs(qwen2_index, strings) == ahocorasick_pairs(
        qwen2_index.vocabulary, sorted(set(strings))
    )


def test_backward_walk_equals_ahocorasick_on_toy() -> None:
    vocab = toy_vocabulary()
    index = TokenIndex.build(vocab)
    strings = [b"get_user_by_id", b"get", b"a\x00\x00a", "é東京".encode(), b'S72.001A",']
    assert _walk_pairs(index, strings) == ahocorasick_pairs(vocab, sorted(set(strings)))


def test_memory_cache_returns_same_object(qwen2: Vocabulary) -> None:
    assert TokenIndex.get(qwen2) is TokenIndex.get(qwen2)


def test_disk_cache_roundtrip_and_rebuild_on_corruption(tmp_path: Path) -> None:
    vocab = toy_vocabulary([b"xyz"])
    built = TokenIndex.get(vocab, cache_dir=tmp_path, backend="numpy")
    files = list(tmp_path.glob("token-index-*.trt"))
    assert len(files) == 1
    TokenIndex._memory.clear()
    loaded = TokenIndex.get(vocab, cache_dir=tmp_path, backend="numpy")
    assert loaded is not built and loaded.source == str(files[0])
    strings = [b"xyz_get", b"get_user"]
    assert _walk_pairs(loaded, strings) == _walk_pairs(built, strings)
    # flip one payload byte: detected, rebuilt, rewritten
    data = bytearray(files[0].read_bytes())
    data[-5] ^= 0xFF
    files[0].write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="checksum"):
        TokenIndex.load(files[0], vocab)
    TokenIndex._memory.clear()
    rebuilt = TokenIndex.get(vocab, cache_dir=tmp_path, backend="numpy")
    assert rebuilt.source == "built"
    assert TokenIndex.load(files[0], vocab, backend="numpy").nbytes == rebuilt.nbytes
    # truncated and foreign files
    files[0].write_bytes(bytes(data[:100]))
    with pytest.raises(CorruptFileError):
        TokenIndex.load(files[0], vocab)
    files[0].write_bytes(b"not a cache file at all")
    with pytest.raises(CorruptFileError, match="magic"):
        TokenIndex.load(files[0], vocab)
    TokenIndex._memory.clear()
    assert TokenIndex.get(vocab, cache_dir=tmp_path, backend="numpy").source == "built"


def test_native_index_uses_no_disk_cache(tmp_path: Path) -> None:
    vocab = toy_vocabulary([b"native"])
    TokenIndex._memory.pop(vocab.hash, None)
    index = TokenIndex.get(vocab, cache_dir=tmp_path, backend="native")
    assert index.source == "built" and index.native_trie.n_nodes > 1
    assert not list(tmp_path.iterdir())


def test_cache_of_another_vocabulary_is_refused(tmp_path: Path) -> None:
    a = toy_vocabulary([b"one"])
    b = toy_vocabulary([b"two"])
    path = tmp_path / "index.trt"
    TokenIndex.build(a).save(path)
    with pytest.raises(VocabularyMismatchError, match="built for vocabulary"):
        TokenIndex.load(path, b)


def test_unwritable_cache_still_builds(tmp_path: Path) -> None:
    vocab = toy_vocabulary([b"ro"])
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    try:
        TokenIndex._memory.pop(vocab.hash, None)
        index = TokenIndex.get(vocab, cache_dir=ro, backend="numpy")
        assert index.source == "built"
    finally:
        os.chmod(ro, 0o700)


def test_single_byte_table(qwen2_index: TokenIndex) -> None:
    # byte-level BPE: every byte has a token
    assert np.all(qwen2_index.can_spell_bytes())


def _tables(trie: object) -> dict[str, np.ndarray]:
    """The native token trie's arrays, decoded (info: clo, chi, fail, d1row, olo, ohi, dict)."""
    raw = trie.tables()  # type: ignore[attr-defined]
    out = {
        k: np.frombuffer(raw[k], dtype=np.int32) for k in raw if k not in ("child_label", "single")
    }
    out["child_label"] = np.frombuffer(raw["child_label"], dtype=np.uint8)
    out["single"] = np.frombuffer(raw["single"], dtype=np.uint8)
    out["info"] = out["info"].reshape(-1, 8)
    out["outs"] = out["outs"].reshape(-1, 2)
    return out


@pytest.mark.parametrize("name", ["qwen2", "gpt2"])
def test_native_token_trie_equals_a_plain_construction(name: str) -> None:
    """Forward trie, Aho-Corasick links and flattened outputs of the C++ token trie against a
    construction from their definitions (dicts of byte strings), on real tokenizers: every node
    on a sample and every transition of the root and depth-1 rows."""
    from trierouter.registry.shipped import shipped_vocabulary

    vocab = shipped_vocabulary(name)
    t = _tables(TokenIndex.build(vocab, backend="native").native_trie)
    ptr, node, label = t["child_ptr"], t["child_node"], t["child_label"]
    n = len(ptr) - 1
    paths: list[bytes] = [b""] * n
    for u in range(n):  # preorder: a parent comes before its children
        for i in range(int(ptr[u]), int(ptr[u + 1])):
            paths[int(node[i])] = paths[u] + bytes([int(label[i])])
    assert sorted(node.tolist()) == list(range(1, n)) and sorted(paths) == paths  # preorder
    of = {p: i for i, p in enumerate(paths)}
    # nodes: exactly the prefixes of the matchable tokens; tokens listed at their node, ids sorted
    ids = np.flatnonzero(vocab.matchable).tolist()
    assert set(paths) == {vocab.tokens[i][:k] for i in ids for k in range(len(vocab.tokens[i]) + 1)}
    by_node: dict[int, list[int]] = {}
    for i in ids:
        by_node.setdefault(of[vocab.tokens[i]], []).append(i)
    tptr, tids = t["tok_ptr"], t["tok_ids"]
    assert {u: tids[tptr[u] : tptr[u + 1]].tolist() for u in range(n) if tptr[u + 1] > tptr[u]} == (
        by_node
    )
    has_tok = tptr[1:] > tptr[:-1]

    def state(s: bytes, first: int) -> int:  # the longest suffix s[k:], k >= first, in the trie
        return next(of[s[k:]] for k in range(first, len(s) + 1) if s[k:] in of)

    def dict_state(s: bytes) -> int:  # the longest proper non-empty suffix with tokens, or -1
        hits = (of[s[k:]] for k in range(1, len(s)) if s[k:] in of and has_tok[of[s[k:]]])
        return next(hits, -1)

    info, outs = t["info"], t["outs"]
    rng = np.random.default_rng(0)
    for u in [0, *rng.choice(n, size=3000, replace=False).tolist()]:
        p = paths[u]
        assert int(t["fail"][u]) == (state(p, 1) if u else 0)
        assert int(t["dict"][u]) == dict_state(p)
        assert int(t["depth"][u]) == len(p)
        want = [(len(p) - k, i) for k in range(len(p)) for i in by_node.get(of.get(p[k:], -1), [])]
        assert [tuple(o) for o in outs[info[u, 4] : info[u, 5]].tolist()] == want
        assert info[u, :4].tolist() == [ptr[u], ptr[u + 1], t["fail"][u], t["d1row"][u]]
        assert int(info[u, 6]) == int(t["dict"][u])
    goto1 = t["goto1"].reshape(-1, 256)
    for u in range(n):
        r = int(t["d1row"][u])
        if r < 0:
            assert len(paths[u]) > 1
            continue
        for b in range(256):
            assert int(goto1[r, b]) == state(paths[u] + bytes([b]), 0)
    assert [b for b in range(256) if t["single"][b]] == [
        b for b in range(256) if has_tok[of.get(bytes([b]), 0)] and bytes([b]) in of
    ]
