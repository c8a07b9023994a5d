"""The native compile in chunks, one per thread: the same arrays as one thread, bit for bit.

The oracle is the one-thread compile (itself checked against XGrammar, the numpy reference and
brute force by the other tests). Small ``split_min`` values make small sets split into many
chunks, so that chunk boundaries fall everywhere: inside long shared prefixes, after a value that
is a prefix of the next, next to the empty value, in compact layouts' walked subtrees, and where
rows are pruned.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from trierouter.data.synthetic import tool_names
from trierouter.registry.core import native_core
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import SPLIT_MIN, compile_choices, compile_threads
from trierouter.registry.vocabulary import Vocabulary


def _same(a: tuple[dict[str, np.ndarray], object], b: tuple[dict[str, np.ndarray], object]) -> None:
    assert a[1] == b[1]  # the unreachable values
    assert a[0].keys() == b[0].keys()
    for k in a[0]:
        assert np.array_equal(a[0][k], b[0][k]), k


def _sets(rng: random.Random, names: list[str]) -> list[list[str]]:
    out = []
    for _ in range(25):
        out.append(rng.sample(names, rng.randint(1, 300)))  # real names, unsorted
        out.append(  # many prefixes of one another, and the empty value
            ["".join(rng.choice("ab") for _ in range(rng.randint(0, 8))) for _ in range(200)]
        )
        out.append(["https://api.example.com/v1/" + rng.choice(names) for _ in range(250)])
        out.append(  # multi-byte characters
            ["".join(rng.choice("xyé中😀") for _ in range(rng.randint(0, 6))) for _ in range(120)]
        )
    return out


def test_chunks_compile_the_same_arrays(qwen2: Vocabulary, qwen2_index: TokenIndex) -> None:
    core, trie = native_core(), qwen2_index.native_trie
    rng = random.Random(7)
    names = tool_names(2_000, seed=3)
    for i, values in enumerate(_sets(rng, names)):
        term = rng.choice([b"", b'"', b"\n"])
        allow = rng.random() < 0.7
        max_keys = rng.choice([0, 0, 4, 64])  # > 0: the compact layout
        one = core.compile(values, trie, term, qwen2.end_ids, allow, max_keys, 1)
        for threads in (2, 3, 5):
            split_min = rng.randint(1, 40)
            got = core.compile(
                values, trie, term, qwen2.end_ids, allow, max_keys, threads, split_min
            )
            try:
                _same(one, got)
            except AssertionError as e:
                raise AssertionError(f"set {i}, threads={threads}, split_min={split_min}") from e


def test_chunks_where_rows_are_pruned() -> None:
    """No single-byte 'y': some rows lead nowhere and are pruned, and "yy..." values no token
    sequence spells are reported, in the same order."""
    tokens = [bytes([b]) for b in range(256) if b != ord("y")]
    tokens += [b"xy", b"xyz", b"zy", b"yq", b"<eos>"]
    vocab = Vocabulary(tokens, end_ids=[len(tokens) - 1], special_ids=[], width=len(tokens))
    trie = TokenIndex.build(vocab).native_trie
    core = native_core()
    rng = random.Random(2)
    for _ in range(40):
        values = [
            "".join(rng.choice("xyzqa") for _ in range(rng.randint(0, 6))) for _ in range(150)
        ]
        spelled = [v for v in values if "y" not in v.replace("xy", "").replace("zy", "")]
        for vals in (values, spelled or ["a"]):
            one = core.compile(vals, trie, b"", vocab.end_ids, True, 0, 1)
            got = core.compile(vals, trie, b"", vocab.end_ids, True, 0, 4, rng.randint(1, 20))
            _same(one, got)


def test_threads_through_compile_choices(qwen2_index: TokenIndex) -> None:
    values = tool_names(5 * SPLIT_MIN, seed=1)
    one = compile_choices(values, qwen2_index, threads=1)
    for layout in ("full", "compact"):
        a = compile_choices(values, qwen2_index, layout=layout, threads=1)
        b = compile_choices(values, qwen2_index, layout=layout, threads=4)
        assert a._arrays.keys() == b._arrays.keys()
        for k in a._arrays:
            assert np.array_equal(a._arrays[k], b._arrays[k]), (layout, k)
    assert compile_choices(values, qwen2_index).n_nodes == one.n_nodes
    assert compile_threads() >= 1
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="a positive int, or None"):
            compile_choices(values[:3], qwen2_index, threads=bad)  # type: ignore[arg-type]
