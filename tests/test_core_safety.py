"""The compiled core's entry points against hostile ids and objects: every id they index with is
checked (a clear ``ValueError`` / ``IndexError`` naming the id and its bound), objects made
without ``__init__`` refuse every use, arrays changed after the core checked them never make it
write outside the caller's buffers, and a served ``.trt`` file rewritten in place (truncated,
overwritten with another set) leaves the set in use serving exactly what it validated.

The oracles: a fresh compile of the same values (masks, steps), and guard rows around every
buffer the core writes (never touched)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trierouter.errors import CorruptFileError
from trierouter.registry import core as _backend
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.router.vllm.named import load_named_sets

from .conftest import toy_vocabulary

C = _backend.native_core()
VALUES = ["get", "get_user", "get_user_by_id", "gel", "S72.001A", "S72.002A", "café", "東京", "ab"]
OTHER = ["ba", "user", "S7", "a\x00b", "zz", "東"]
ARRAYS = ("row_ptr", "tokens", "children", "far_pos", "far_child", "ends")
NEG_INF32 = 0xFF800000


def _core_args(cs: ChoiceSet) -> list[Any]:
    """Writable copies of a full set's serving arrays, as ``Core`` takes them."""
    return [np.array(cs._arrays[k]) for k in ARRAYS] + [cs.width]


def _guarded(rows: int, cols: int, dtype: Any, fill: int) -> tuple[np.ndarray, np.ndarray]:
    """A buffer of ``rows`` rows with a guard row before and after: (whole, inner view)."""
    whole = np.full((rows + 2, cols), fill, dtype=dtype)
    return whole, whole[1:-1]


def _guards_intact(whole: np.ndarray, fill: int) -> bool:
    return bool((whole[0] == fill).all() and (whole[-1] == fill).all())


@pytest.fixture(scope="module")
def index() -> TokenIndex:
    return TokenIndex.build(toy_vocabulary())


@pytest.fixture(scope="module")
def cs(index: TokenIndex) -> ChoiceSet:
    return compile_choices(VALUES, index, backend="native")


# -- objects made without __init__ ------------------------------------------------------------
def _core_calls(core: Any, words: int) -> list[Callable[[], object]]:
    st = np.zeros(2, np.int64)
    bm = np.zeros((2, words), np.int32)
    logits = np.zeros((2, 32 * words), np.float32).view(np.uint32)
    return [
        lambda: core.advance(0, 0),
        lambda: core.mask(0),
        lambda: core.is_terminal(0),
        lambda: core.fill(0, bm),
        lambda: core.advance_batch(st, st),
        lambda: core.fill_batch(st, bm, None),
        lambda: core.apply_sparse(st, logits, None, NEG_INF32, 4),
        lambda: core.copy_sparse(st, None, logits, None, NEG_INF32, 4),
        lambda: core.END,
        lambda: core.DEAD,
    ]


def test_uninitialised_core_refuses_every_call() -> None:
    core = C.Core.__new__(C.Core)
    for call in _core_calls(core, 4):
        with pytest.raises(RuntimeError, match="not initialised"):
            call()
    with pytest.raises(RuntimeError, match="not initialised"):
        C.MatcherBase()._init_core(core, None, None, 0, 1, 2, -1)


def test_failed_init_leaves_core_unusable_and_init_runs_once(cs: ChoiceSet) -> None:
    args = _core_args(cs)
    core = C.Core.__new__(C.Core)
    bad = list(args)
    bad[1] = bad[1].copy()
    bad[1][0] = -1
    with pytest.raises(ValueError, match=r"tokens\[0\] = -1 out of range 0\.\."):
        core.__init__(*bad)
    for call in _core_calls(core, cs.bitmask_words):
        with pytest.raises(RuntimeError, match="not initialised"):
            call()
    core.__init__(*args)  # a failed __init__ may be retried
    assert core.END == cs.END
    with pytest.raises(RuntimeError, match="already initialised"):
        core.__init__(*args)
    assert core.mask(0).tolist() == cs.mask(0).tolist()


def test_uninitialised_token_trie_refused_by_every_taker(index: TokenIndex) -> None:
    trie = C.TokenTrie.__new__(C.TokenTrie)
    assert trie.nbytes > 0 and isinstance(trie.tables(), dict)
    table = np.full((1, 1), -1, np.int32)
    cls = np.zeros(256, np.int32)
    states = np.zeros(1, np.int64)
    calls: list[Callable[[], object]] = [
        lambda: C.compile(["a"], trie, b"", (1,), True),
        lambda: C.spelled_count(trie, bytes(32), 10),
        lambda: C.dfa_masks(table, cls, states, trie),
        lambda: C.dfa_masks(table, cls, states, index.native_trie, 0, trie, b"\x01"),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="TokenTrie is not initialised"):
            call()
    with pytest.raises(RuntimeError, match="already built"):
        index.native_trie.__init__((b"a",), b"\x01")


def test_compact_core_over_uninitialised_trie_refused(index: TokenIndex) -> None:
    from trierouter.registry.compact import compact_spec

    cs = compile_choices(VALUES * 1, index, layout="compact", backend="native")
    spec = list(compact_spec(cs._arrays, index, None, cs.end_ids, True))
    spec[7] = C.TokenTrie.__new__(C.TokenTrie)
    arrays = [cs._arrays[k] for k in ARRAYS]
    with pytest.raises(RuntimeError, match="TokenTrie is not initialised"):
        C.Core(*arrays, cs.width, tuple(spec))


# -- ids the core indexes with ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "at", "value", "message"),
    [
        ("tokens", 0, -1, r"tokens\[0\] = -1 out of range 0\.\."),
        ("tokens", -1, -(2**31), r"tokens\[\d+\] = -2147483648 out of range"),
        ("tokens", 2, None, r"tokens\[2\] = \d+ out of range 0\.\.\d+"),  # = width
        ("row_ptr", 1, -5, r"row_ptr\[1\] = -5 out of range"),
        ("row_ptr", -1, 10**6, r"row_ptr\[\d+\] = 1000000 out of range"),
        ("ends", 0, -2, r"ends\[0\] = -2 out of range"),
        ("ends", -1, 10**6, r"ends\[\d+\] = 1000000 out of range"),
    ],
)
def test_set_arrays_with_ids_out_of_range_refused(
    cs: ChoiceSet, name: str, at: int, value: int | None, message: str
) -> None:
    args = _core_args(cs)
    arr = args[ARRAYS.index(name)]
    arr[at] = cs.width if value is None else value
    with pytest.raises(ValueError, match=message):
        C.Core(*args)


def test_far_children_out_of_range_refused(cs: ChoiceSet) -> None:
    args = _core_args(cs)
    n_pairs = len(args[1])
    for far_pos, far_child, message in [
        ([-1], [0], r"far_pos\[0\] = -1"),
        ([n_pairs], [0], rf"far_pos\[0\] = {n_pairs}"),
        ([3, 3], [0, 0], r"far_pos\[1\] = 3"),  # not ascending
        ([0], [cs.DEAD + 1], rf"far_child\[0\] = {cs.DEAD + 1}"),
        ([0], [-7], r"far_child\[0\] = -7"),
    ]:
        args[3], args[4] = np.array(far_pos, np.int32), np.array(far_child, np.int32)
        with pytest.raises(ValueError, match=message):
            C.Core(*args)
    args[3], args[4] = np.array([0], np.int32), np.array([], np.int32)
    with pytest.raises(ValueError, match="far_child"):
        C.Core(*args)
    with pytest.raises(ValueError, match="width"):
        C.Core(*_core_args(cs)[:-1], -1)


def test_compact_layout_refuses_arrays_out_of_range(cs: ChoiceSet, index: TokenIndex) -> None:
    """compact_layout walks a full set's arrays with the GIL released: each is checked first."""
    names = (*ARRAYS[:5], "value_bytes", "value_offsets")

    def run(**changed: tuple[int, int]) -> object:
        arrays = {k: np.array(cs._arrays[k]) for k in names}
        for name, (at, value) in changed.items():
            arrays[name][at] = value
        args = [arrays[k] for k in names]
        return C.compact_layout(*args, b"", 8, index.native_trie, cs.end_ids)

    assert isinstance(run(), dict)  # the arrays as compiled: a layout
    for name, at, value, message in [
        ("row_ptr", 1, -4, r"row_ptr\[1\] = -4 out of range"),
        ("row_ptr", -1, 10**6, r"row_ptr\[\d+\] = 1000000 out of range"),
        ("tokens", 0, -1, r"tokens\[0\] = -1 out of range"),
        ("value_offsets", 1, -1, r"value_offsets\[1\] = -1 out of range"),
        ("value_offsets", -1, 10**9, r"value_offsets\[\d+\] = 1000000000 out of range"),
    ]:
        with pytest.raises(ValueError, match=message):
            run(**{name: (at, value)})


def test_caller_rows_out_of_range_raise(cs: ChoiceSet) -> None:
    core = cs._core
    words = cs.bitmask_words
    st = np.array([0, 1], np.int64)
    bm = np.zeros((2, words), np.int32)
    logits = np.zeros((2, 32 * words), np.float32)
    raw = logits.view(np.uint32)
    for bad in (2, -3, 10**12, -(2**62)):
        with pytest.raises(IndexError, match="out of range"):
            core.fill(0, bm, index=bad)
        rows = np.array([0, bad], np.int64)
        with pytest.raises(IndexError, match=rf"rows\[1\] = {bad} out of range for 2"):
            core.fill_batch(st, bm, rows)
        with pytest.raises(IndexError, match=rf"rows\[1\] = {bad} out of range for 2"):
            core.apply_sparse(st, raw, rows, NEG_INF32, 4)
        with pytest.raises(IndexError, match=rf"rows\[1\] = {bad} out of range for 2"):
            core.copy_sparse(st, None, raw, rows, NEG_INF32, 4)
        with pytest.raises(IndexError):
            cs.apply_mask_inplace(st, logits, rows)
    assert (bm == 0).all() and (logits == 0).all()  # nothing written by a refused call


def test_token_spans_out_of_range_refused() -> None:
    """dfa_list_masks and walk_counts index a byte buffer by each token's offsets: a token id
    or span outside the buffer is a ValueError naming the argument, never a read outside."""
    core = _backend.native_core()
    table = np.zeros((1, 256), np.int32)  # one state looping on every byte
    byte_class = np.arange(256, dtype=np.int32)
    states = np.zeros(1, np.int64)
    buf = np.frombuffer(b"abcdef", np.uint8)
    off = np.array([0, 2, 4, 6], np.int64)
    good = np.array([0, 2], np.int32)
    ptr, ids = core.dfa_list_masks(table, byte_class, states, good, buf, off)
    assert ptr.tolist() == [0, 2] and ids.tolist() == [0, 2]
    fin, _ = core.walk_counts(table, states, 0, good, buf, off)
    assert fin.tolist() == [0, 0]
    bad_offsets = np.array([0, 2, 9, 6], np.int64)  # token 1 ends past the buffer
    for cand, offsets in [(np.array([3], np.int32), off), (np.array([-1], np.int32), off),
                          (np.array([1], np.int32), bad_offsets)]:  # fmt: skip
        with pytest.raises(ValueError, match="cand / offsets: out of range"):
            core.dfa_list_masks(table, byte_class, states, cand, buf, offsets)
        with pytest.raises(ValueError, match="ids / offsets: out of range"):
            core.walk_counts(table, states, 0, cand, buf, offsets)


def test_states_out_of_range_serve_as_dead(cs: ChoiceSet) -> None:
    """A state is not an index the caller owns: one out of range is DEAD (nothing allowed),
    in every entry point; ``mask`` names it."""
    words = cs.bitmask_words
    bad = np.array([-1, -(2**62), cs.DEAD + 1, 2**62], np.int64)
    dead = np.full(len(bad), cs.DEAD, np.int64)
    toks = np.zeros(len(bad), np.int64)
    assert cs._core.advance_batch(bad, toks).tolist() == dead.tolist()
    assert [cs.advance(int(s), 0) for s in bad] == dead.tolist()
    for s in bad.tolist():
        with pytest.raises(ValueError, match=rf"state={s}: not a state of this set"):
            cs.mask(s)
    got = np.full((len(bad), words), -1, np.int32)
    want = np.full((len(bad), words), -1, np.int32)
    cs.fill_bitmask_batch(bad, got)
    cs.fill_bitmask_batch(dead, want)
    assert (got == want).all()
    lg = np.ones((len(bad), 32 * words), np.float32)
    lw = lg.copy()
    cs.apply_mask_inplace(bad, lg)
    cs.apply_mask_inplace(dead, lw)
    assert np.array_equal(lg, lw)


# -- arrays changed after the core checked them -------------------------------------------------
def test_arrays_changed_after_the_check_never_write_outside(cs: ChoiceSet) -> None:
    """A Core reads its arrays where they lie (a mapped file's pages): ids changed after its check
    (here written into the very arrays it holds) may give wrong masks, never a write outside
    the caller's row or a read outside the arrays."""
    args = _core_args(cs)
    core = C.Core(*args)
    row_ptr, tokens = args[0], args[1]
    n_states = cs.DEAD + 1
    words = cs.bitmask_words
    width = 32 * words
    states = np.arange(n_states, dtype=np.int64)
    tokens[:] = np.where(np.arange(len(tokens)) % 2 == 0, -1, -(2**31))
    tokens[-1] = 2**31 - 1
    row_ptr[1] = -(2**31)
    row_ptr[2] = 2**31 - 1
    bm_whole, bm = _guarded(n_states, words, np.int32, 0x5A5A5A5A)
    core.fill_batch(states, bm, None)
    for s in range(n_states):
        core.fill(s, bm, index=s)
    assert _guards_intact(bm_whole, 0x5A5A5A5A)
    lg_whole, lg = _guarded(n_states, width, np.uint32, 0x3F800000)
    core.apply_sparse(states, lg, None, NEG_INF32, 4)
    core.copy_sparse(states, None, lg, None, NEG_INF32, 4)
    src = np.zeros_like(lg)
    core.copy_sparse(states, src, lg, None, NEG_INF32, 4)
    assert _guards_intact(lg_whole, 0x3F800000)
    h_whole, h = _guarded(n_states, width, np.uint16, 0x3C00)
    core.apply_sparse(states, h, None, 0xFC00, 2)
    assert _guards_intact(h_whole, 0x3C00)
    toks = np.array([-1, 0, 2**31 - 1, -(2**31)], np.int64)
    nxt = core.advance_batch(np.repeat(states, len(toks)), np.tile(toks, n_states))
    assert ((nxt >= 0) & (nxt <= 2**31)).all()
    for s in range(n_states):
        ids = core.mask(s)
        assert len(ids) <= len(tokens)


def test_rows_changed_while_the_gil_is_released(cs: ChoiceSet) -> None:
    """fill_batch / apply_sparse write the rows they checked: a thread that changes the rows
    array while the core runs without the GIL cannot redirect a write."""
    words = cs.bitmask_words
    n = 4000
    states = np.resize(np.arange(cs.DEAD + 1, dtype=np.int64), n)
    rows = np.arange(n, dtype=np.int64) % 8
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            rows[:] = 10**9
            rows[:] = np.arange(n) % 8

    whole, bm = _guarded(8, words, np.int32, 0x11111111)
    lg_whole, lg = _guarded(8, 32 * words, np.uint32, 0x22222222)
    t = threading.Thread(target=flip)
    t.start()
    refused = ran = 0
    deadline = time.monotonic() + 30
    try:  # until both calls ran several times (the thread's timing decides which are refused)
        while time.monotonic() < deadline:
            for call in (
                lambda: cs._core.fill_batch(states, bm, rows),
                lambda: cs._core.apply_sparse(states, lg, rows, NEG_INF32, 4),
            ):
                try:
                    call()
                    ran += 1
                except IndexError:  # caught by the check (the rows were changed before it)
                    refused += 1
                    time.sleep(0)  # a refusal keeps the GIL: let the thread change the rows
            if ran >= 20 and refused >= 1:
                break
    finally:
        stop.set()
        t.join()
    assert _guards_intact(whole, 0x11111111) and _guards_intact(lg_whole, 0x22222222)
    assert ran >= 1, refused  # some calls ran (with the rows they checked)


# -- a served .trt rewritten in place -----------------------------------------------------------
_CHILD = r"""
import json, sys
import numpy as np
from pathlib import Path
from tests.conftest import toy_vocabulary
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import compile_choices
from trierouter.router.vllm.named import load_named_sets

config, values_file, layout = sys.argv[1:4]
index = TokenIndex.build(toy_vocabulary())
values = json.loads(Path(values_file).read_text())
served = load_named_sets(config, index)["labels"]
fresh = compile_choices(values, index, layout=layout)  # the oracle: the original values
n = fresh.n_nodes + 2
states = np.arange(n, dtype=np.int64)
words = fresh.bitmask_words

def round_():
    got = np.zeros((n, words), np.int32)
    want = np.zeros((n, words), np.int32)
    served.fill_bitmask_batch(states, got)
    fresh.fill_bitmask_batch(states, want)
    bad = int((got != want).any(axis=1).sum())
    lg = np.random.default_rng(0).standard_normal((n, 32 * words)).astype(np.float32)
    lw = lg.copy()
    served.apply_mask_inplace(states, lg)
    fresh.apply_mask_inplace(states, lw)
    bad += int((lg != lw).any(axis=1).sum())
    for s in range(n):
        ids = fresh.mask(s).tolist()
        bad += served.mask(s).tolist() != ids
        bad += any(served.advance(s, t) != fresh.advance(s, t) for t in ids + [0, 1, 300])
    bad += sorted(served.values) != sorted(values)
    return bad

print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "stop":
        break
    print("round", round_(), flush=True)
"""


def _rewrites(data: bytes, other: bytes) -> list[tuple[str, bytes]]:
    """The in-place rewrites: what ``cp``, an editor or a crash mid-copy leave in the file."""
    head = int.from_bytes(data[8:16], "little") + 16
    damaged = bytearray(data)
    damaged[head + 64 : head + 128] = b"\xff" * 64  # ids in the payload: negative
    return [
        ("truncated to half", data[: len(data) // 2]),
        ("truncated to nothing", b""),
        ("another set's bytes", other),
        ("payload ids overwritten", bytes(damaged)),
        ("the set, then garbage", data + b"\x00garbage" * 100),
        ("the set again", data),
    ]


def _drive(
    child: subprocess.Popen[str], served: Path, config: Path, index: TokenIndex, other: bytes
) -> dict[str, str]:
    """Rewrite ``served`` in place each way, and after each have the child serve one round:
    what it reports (``round 0``: no row differs from the oracle's)."""
    assert child.stdin is not None and child.stdout is not None
    results = {}
    try:
        assert child.stdout.readline().strip() == "ready"
        inode = served.stat().st_ino
        data = served.read_bytes()
        for what, content in _rewrites(data, other):
            with open(served, "r+b") as f:  # in place: the same inode, as `cp new served` does
                f.truncate(0)
                f.write(content)
            assert served.stat().st_ino == inode
            if content not in (data, other):  # a new load of the damaged file: refused
                with pytest.raises(ValueError, match="'labels'") as exc:
                    load_named_sets(str(config), index)
                assert isinstance(exc.value.__cause__, CorruptFileError)
                assert str(served) in str(exc.value)
            try:
                child.stdin.write("go\n")
                child.stdin.flush()
                results[what] = child.stdout.readline().strip() or f"died ({child.wait()})"
            except BrokenPipeError:
                results[what] = f"died ({child.wait()})"  # e.g. -7: SIGBUS on a mapped file
                return results
        child.stdin.write("stop\n")
        child.stdin.flush()
    finally:
        if child.poll() is None and len(results) < 6:
            child.kill()
    return results


@pytest.mark.parametrize("layout", ["full", "compact"])
def test_served_set_rewritten_in_place(tmp_path: Path, index: TokenIndex, layout: str) -> None:
    """A server process (``load_named_sets``, as the vLLM plugin loads ``$TRIEROUTER_SETS``)
    keeps serving a set while its file is rewritten in place (same inode) six ways: it never
    crashes and serves exactly what a fresh compile of the original values serves; a new load
    of the damaged file is refused with ``CorruptFileError`` naming the file."""
    served = tmp_path / "labels.trt"
    compile_choices(VALUES, index, layout=layout).save(served)
    other = tmp_path / "other.trt"
    compile_choices(OTHER, index, layout=layout).save(other)
    config = tmp_path / "sets.json"
    config.write_text(json.dumps({"labels": str(served)}))
    values = tmp_path / "values.json"
    values.write_text(json.dumps(VALUES))
    root = Path(__file__).resolve().parents[1]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    )
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(config), str(values), layout],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=root,
        env=env,
    ) as child:
        results = _drive(child, served, config, index, other.read_bytes())
        assert results == {what: "round 0" for what, _ in _rewrites(b"\0" * 64, b"")}, results
        assert child.wait(timeout=120) == 0, child.stderr.read() if child.stderr else ""
