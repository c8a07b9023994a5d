"""Concurrency: threads sharing one index, processes sharing one on-disk cache folder.

Results must equal a single-threaded run; a cache file is never seen half written; the token
index of a vocabulary is built once per process (threads wait for it) and once across processes
sharing a cache folder (the others wait on its lock file, then load what it wrote).
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trierouter.data.synthetic import tool_names
from trierouter.errors import CorruptFileError
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary

from .conftest import toy_vocabulary


def _digest(cs: ChoiceSet) -> str:
    h = hashlib.sha256()
    for name in sorted(cs._arrays):
        h.update(name.encode())
        h.update(np.ascontiguousarray(cs._arrays[name]).tobytes())
    return h.hexdigest()


def _marked_vocabulary(mark: str) -> Vocabulary:
    """A toy vocabulary no other test uses (its own hash, so its own cache file)."""
    return toy_vocabulary([b"concurrency-" + mark.encode()])


SETS = [tool_names(300, seed=s) for s in range(4)] + [[*tool_names(50, seed=9), "", "a"]]


def test_threads_compile_same_and_different_sets(qwen2_index: TokenIndex) -> None:
    """8 threads, 80 compiles of 5 sets (each set by many threads at once) against one index."""
    want = [_digest(compile_choices(v, qwen2_index)) for v in SETS]
    jobs = [i % len(SETS) for i in range(80)]
    barrier = threading.Barrier(8)

    def work(i: int) -> tuple[int, str, int]:
        if i < 8:
            barrier.wait()  # the first eight start together
        cs = compile_choices(SETS[i], qwen2_index)
        # serve a little too: steps on a shared set from many threads
        state = cs.root
        for _ in range(5):
            m = cs.mask(state)
            if not len(m):
                break
            state = cs.advance(state, int(m[0]))
        return i, _digest(cs), state

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(work, jobs))
    assert [d for _, d, _ in got] == [want[i] for i in jobs]


def test_threads_share_one_index_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vocab = _marked_vocabulary("threads")
    TokenIndex._memory.pop(vocab.hash, None)
    builds = []
    real_build = TokenIndex.build.__func__  # type: ignore[attr-defined]

    def counting_build(cls: type[TokenIndex], v: Vocabulary, **kw: Any) -> TokenIndex:
        builds.append(threading.get_ident())
        return real_build(cls, v, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(TokenIndex, "build", classmethod(counting_build))
    barrier = threading.Barrier(8)

    def get(_: int) -> TokenIndex:
        barrier.wait()
        return TokenIndex.get(vocab, cache_dir=tmp_path)

    with ThreadPoolExecutor(8) as pool:
        indexes = list(pool.map(get, range(8)))
    assert len(builds) == 1
    assert all(ix is indexes[0] for ix in indexes)
    TokenIndex._memory.pop(vocab.hash, None)


# -- processes ------------------------------------------------------------------------------------
def _proc_get_and_compile(args: tuple[str, str, Any]) -> tuple[str, str]:
    cache, mark, barrier = args
    vocab = _marked_vocabulary(mark)
    barrier.wait()
    # the disk cache holds the numpy backend's tables (the native index is rebuilt, not read)
    index = TokenIndex.get(vocab, cache_dir=cache, backend="numpy")
    return index.source, _digest(compile_choices(SETS[4], index))


def test_processes_share_one_cache_folder(tmp_path: Path) -> None:
    """4 processes ask for the same uncached index at once: one builds, three load its file;
    every process compiles the same set as this one."""
    ctx = mp.get_context("spawn")
    mark = "processes"
    with ctx.Manager() as manager:
        barrier = manager.Barrier(4)
        with ctx.Pool(4) as pool:
            got = pool.map(_proc_get_and_compile, [(str(tmp_path), mark, barrier)] * 4)
    sources = [s for s, _ in got]
    assert sources.count("built") == 1, sources
    want = _digest(compile_choices(SETS[4], TokenIndex.build(_marked_vocabulary(mark))))
    assert {d for _, d in got} == {want}
    files = sorted(p.name for p in tmp_path.iterdir())
    assert [f for f in files if f.endswith(".trt")] == [
        f"token-index-{_marked_vocabulary(mark).hash[:32]}.trt"
    ]
    assert not [f for f in files if f.endswith(".tmp")], files


def _proc_writer(args: tuple[str, int]) -> int:
    path, rounds = args
    vocab = toy_vocabulary()
    index = TokenIndex.build(vocab)
    sets = [compile_choices(SETS[i % len(SETS)][:40], index) for i in range(2)]
    for i in range(rounds):
        sets[i % 2].save(path)
    return rounds


def _proc_reader(args: tuple[str, int]) -> tuple[int, int, list[str]]:
    path, rounds = args
    vocab = toy_vocabulary()
    index = TokenIndex.build(vocab)
    want = {_digest(compile_choices(SETS[i % len(SETS)][:40], index)) for i in range(2)}
    ok = torn = 0
    errors: list[str] = []
    for _ in range(rounds):
        try:
            cs = ChoiceSet.load(path, vocab, mmap=False)
        except CorruptFileError as exc:  # would be a torn file: never expected
            torn += 1
            errors.append(str(exc))
            continue
        if _digest(cs) in want:
            ok += 1
        else:
            errors.append("loaded a set that was never written")
    return ok, torn, errors[:3]


def test_atomic_writes_never_torn(tmp_path: Path) -> None:
    """Two writers keep replacing one file while two readers keep loading it: every load is
    one of the two sets, whole."""
    path = tmp_path / "shared.trt"
    vocab = toy_vocabulary()
    compile_choices(SETS[0][:40], TokenIndex.build(vocab)).save(path)
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        writers = pool.map_async(_proc_writer, [(str(path), 150)] * 2)
        readers = pool.map_async(_proc_reader, [(str(path), 300)] * 2)
        results = readers.get(timeout=600)
        assert writers.get(timeout=600) == [150, 150]
    for ok, torn, errors in results:
        assert torn == 0 and not errors and ok == 300, errors
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]
