"""Compile time, per-step cost, batch cost and memory: trierouter beside four peers.

Question: for K tool names (10 .. 100,000; trierouter also 1,000,000) on a real 151K-token
vocabulary (Qwen2), what does
each engine pay to compile the set, to serve one decoding step (accept the sampled token and
produce the next mask), to serve a batch of 256 requests, and how much memory does the compiled
set hold? Peers, on the same tokenizer and the same sets: XGrammar, LLGuidance, outlines-core and
a GENRE-style token trie (the paper's baseline). A second tokenizer can join the run
(``--vocabs qwen2,o200k``: o200k, 200K tokens, at K <= ``--second-max-k``).

Method:

* every (vocabulary, engine, K) case runs in its own subprocess; each phase (setup, compile,
  measure) has ``--timeout`` seconds, a stall is recorded as ``{"status": "timeout"}`` and an
  exception as ``{"status": "error"}``; an engine that timed out at some K is not run at larger K;
* above ``--peer-max-k`` (100,000) only trierouter's compiled core runs, both layouts (``{"status":
  "skipped"}`` for the others): XGrammar alone takes about 100 s at 100,000, and the numpy
  reference would hold gigabytes; the 1,000,000 case shows whether the compile stays linear;
* tokenizer-level preprocessing (trierouter ``TokenIndex.build``, XGrammar ``TokenizerInfo`` +
  ``GrammarCompiler``, LLGuidance ``LLTokenizer``, outlines-core ``Vocabulary``, the GENRE
  encoder) is timed apart from compiling the set;
* decoding paths are the canonical tokenizations (the real tokenizer's encoder) of values drawn
  at random; a step is accept/advance + fill the next packed bitmask row (XGrammar layout); the
  first (root) mask is timed apart; medians over all steps of all paths;
* batch: 256 rows each walking its own queue of values (a row whose value is complete starts the
  next at the root); trierouter uses ``advance_batch`` + ``fill_bitmask_batch``, peers a loop
  over their matchers and, where they have one, their batch API;
* compile to first mask: the compile, then the first packed mask (lazy engines build there;
  trierouter also builds its serving tables, ``ChoiceSet.prepare()``, as a server does);
* memory: what a server holds, the same unit for every engine: the RSS growth of the
  subprocess from before the compile to after the first mask (``rss_served_mb``); what the
  engine reports (``ChoiceSet.nbytes``, XGrammar ``memory_size_bytes``) is kept beside it;
* correctness guard: before timing, the first paths are walked step by step and every peer mask
  (end ids aside) is compared with trierouter's: equal for the FSM engines, a subset for the
  GENRE trie; mismatches are recorded, not raised.

Run ``python benchmarks/compile_and_step.py`` (about 15 minutes on 2 cores); ``--quick`` for a
smoke run. Writes ``benchmarks/results/compile_and_step.json``; plot it with
``benchmarks/plot_compile_and_step.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peers import (
    ENGINES,
    Engine,
    LLGuidanceLatest,
    TrieRouter,
    canonical_encoder,
    latest_llguidance_path,
    peer_versions,
)

from trierouter.data.synthetic import tool_names
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices, compile_threads
from trierouter.registry.vocabulary import Vocabulary

RESULTS = Path(__file__).resolve().parent / "results"
OUT_JSON = RESULTS / "compile_and_step.json"

DEFAULT_KS = (10, 100, 1_000, 5_000, 10_000, 50_000, 100_000, 1_000_000)
PEER_MAX_K = 100_000  # above it only the compiled core runs (see the module docstring)
DEFAULT_VOCABS = ("qwen2",)
MODEL_WIDTH = {"qwen2": 151_936}  # logits width of the model, wider than the tokenizer
BATCH = 256
GUARD_PATHS = 5
SEED = 0

Bitmask = npt.NDArray[np.int32]


# -- shared helpers -------------------------------------------------------------------------------


def load_vocab(name: str) -> Vocabulary:
    """A shipped tokenizer by name, at the model's logits width where that is wider."""
    from trierouter.registry.shipped import shipped_vocabulary

    return shipped_vocabulary(name, width=MODEL_WIDTH.get(name))


def rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def popcount_rows(bitmask: Bitmask, width: int, drop: Sequence[int] = ()) -> list[int]:
    """Allowed tokens per row, counting only ids < ``width`` and not in ``drop``."""
    bits = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little")[:, :width].copy()
    if len(drop):
        bits[:, list(drop)] = 0
    return [int(x) for x in bits.sum(axis=1)]


def row_ids(row: Bitmask, width: int, drop: Sequence[int] = ()) -> set[int]:
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:width]
    return set(np.flatnonzero(bits).tolist()) - set(drop)


def canonical_paths(vocab: Vocabulary, values: Sequence[str], n: int, seed: int) -> list[list[int]]:
    """Canonical token ids of ``n`` values drawn at random (without replacement while it can)."""
    rng = random.Random(seed)
    pool = list(values)
    picks = rng.sample(pool, n) if n <= len(pool) else [rng.choice(pool) for _ in range(n)]
    encode = canonical_encoder(vocab).encode_ordinary
    return [list(encode(v)) for v in picks]


def stats_us(samples_ns: Sequence[int]) -> dict[str, float]:
    a = np.asarray(samples_ns, dtype=np.float64) / 1e3
    return {
        "median_us": float(np.median(a)),
        "p10_us": float(np.percentile(a, 10)),
        "p90_us": float(np.percentile(a, 90)),
        "mean_us": float(a.mean()),
        "n": len(a),
    }


# -- worker: one (vocabulary, engine, K) case -----------------------------------------------------


class Partial:
    """The case's result so far, rewritten atomically after each phase for the parent to poll."""

    def __init__(self, path: Path, base: dict[str, Any]) -> None:
        self.path = path
        self.data = dict(base)

    def phase(self, name: str) -> None:
        self.data["phase"] = name
        self.data["phase_started"] = time.time()
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, default=_jsonable))
        os.replace(tmp, self.path)


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    return str(x)


def guard(eng: Engine, ref: ChoiceSet, vocab: Vocabulary, paths: list[list[int]]) -> dict[str, Any]:
    """Walk ``paths``: the peer's mask equals trierouter's (a subset, for the GENRE trie)."""
    width = vocab.width
    ends = list(vocab.end_ids)
    words = (width + 31) // 32
    ours = np.zeros((1, words), dtype=np.int32)
    theirs = np.zeros((1, words), dtype=np.int32)
    subset = eng.guard_relation == "subset"
    out: dict[str, Any] = {"relation": eng.guard_relation, "steps_checked": 0, "steps_equal": 0}
    mismatches: list[dict[str, Any]] = []
    for p, path in enumerate(paths):
        h = eng.start()
        s = ref.root
        for i in range(len(path) + 1):
            ref.fill_next_token_bitmask(s, ours, 0)
            eng.fill(h, theirs, 0)
            a = row_ids(ours[0], width, ends)
            b = row_ids(theirs[0], width, ends)
            if p == 0 and i == 0:
                out["root_count_trierouter"] = len(a)
                out["root_count_peer"] = len(b)
            ok = b <= a if subset else a == b
            out["steps_checked"] += 1
            out["steps_equal"] += a == b
            if not ok:
                mismatches.append(
                    {
                        "path": p,
                        "step": i,
                        "trierouter_count": len(a),
                        "peer_count": len(b),
                        "only_trierouter": sorted(a - b)[:5],
                        "only_peer": sorted(b - a)[:5],
                    }
                )
            if i < len(path):
                s = ref.advance(s, path[i])
                try:
                    h = eng.accept(h, path[i])
                except Exception as exc:
                    mismatches.append(
                        {
                            "path": p,
                            "step": i,
                            "peer_refused": path[i],
                            "error": f"{type(exc).__name__}: {exc}"[:300],
                        }
                    )
                    break
        if s == ref.DEAD or not ref.is_terminal(s):
            mismatches.append({"path": p, "error": "trierouter did not accept the canonical path"})
    out["mismatches"] = mismatches[:20]
    out["n_mismatches"] = len(mismatches)
    out["ok"] = not mismatches
    return out


def time_single(
    eng: Engine,
    step: Callable[[Any, int, Bitmask], Any],
    paths: list[list[int]],
    words: int,
    budget_s: float,
) -> dict[str, Any]:
    """Median per-step cost over ``paths`` (the first path is a warm-up) and the root fill."""
    bm = np.zeros((1, words), dtype=np.int32)
    steps: list[int] = []
    roots: list[int] = []
    refused: list[str] = []
    ns = time.perf_counter_ns
    t_end = time.perf_counter() + budget_s
    gc.disable()
    try:
        for p, path in enumerate(paths):
            h = eng.start()
            t0 = ns()
            eng.fill(h, bm, 0)
            t1 = ns()
            local = []
            try:
                for tok in path:
                    a = ns()
                    h = step(h, tok, bm)
                    local.append(ns() - a)
            except Exception as exc:  # a peer refusing a valid path: counted, path dropped
                refused.append(f"path {p}: {type(exc).__name__}: {exc}"[:300])
                continue
            if p:
                roots.append(t1 - t0)
                steps.extend(local)
            if p >= 3 and time.perf_counter() > t_end:
                break
    finally:
        gc.enable()
    out: dict[str, Any] = {
        "step": stats_us(steps),
        "root_fill": stats_us(roots),
        "paths": len(roots),
    }
    if refused:
        out["refused_paths"] = len(refused)
        out["refused_examples"] = refused[:5]
    return out


def time_ids(
    step_ids: Callable[[Any, int], tuple[Any, Any]],
    start: Callable[[], Any],
    paths: list[list[int]],
    budget_s: float,
) -> dict[str, Any]:
    """Per-step cost of advance + the allowed ids (no packing), for engines that have them."""
    steps: list[int] = []
    ns = time.perf_counter_ns
    t_end = time.perf_counter() + budget_s
    gc.disable()
    try:
        for p, path in enumerate(paths):
            h = start()
            local = []
            for tok in path:
                a = ns()
                h, _ = step_ids(h, tok)
                local.append(ns() - a)
            if p:
                steps.extend(local)
            if p >= 3 and time.perf_counter() > t_end:
                break
    finally:
        gc.enable()
    return stats_us(steps)


def time_matcher(eng: TrieRouter, paths: list[list[int]], budget_s: float) -> dict[str, Any]:
    """The public per-request API, as a server calls it: ``Matcher.accept_token`` then
    ``allowed_token_ids()`` (the next mask, a view of the sorted ids). Per path, the time of the
    whole walk divided by its tokens (no timer call inside the loop); median over paths."""
    from trierouter.router.matcher import Matcher

    assert eng.cs is not None
    m = Matcher(eng.cs)
    per_step: list[int] = []
    t_end = time.perf_counter() + budget_s
    gc.disable()
    try:
        for rep in range(50):
            for p in paths:
                m.reset()
                accept, ids = m.accept_token, m.allowed_token_ids
                a = time.perf_counter_ns()
                for tok in p:
                    accept(tok)
                    ids()
                b = time.perf_counter_ns()
                if rep:
                    per_step.append((b - a) // max(len(p), 1))
            if rep and time.perf_counter() > t_end:
                break
    finally:
        gc.enable()
    return stats_us(per_step)


def accepted_values(
    eng: Engine, vocab: Vocabulary, values: Sequence[str], n: int, seed: int
) -> tuple[list[str], int]:
    """Up to ``n`` values whose canonical path the engine accepts, and how many it refused."""
    rng = random.Random(seed + 2)
    pool = list(values) if len(values) <= n else rng.sample(list(values), n)
    encode = canonical_encoder(vocab).encode_ordinary
    ok: list[str] = []
    for v in pool:
        h = eng.start()
        try:
            for t in encode(v):
                h = eng.accept(h, t)
        except Exception:
            continue
        ok.append(v)
    return ok, len(pool) - len(ok)


def batch_plan(
    vocab: Vocabulary, values: Sequence[str], steps: int, seed: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Tokens (steps, BATCH) and resets (value complete after this token) for 256 rows."""
    rng = random.Random(seed + 1)
    encode = canonical_encoder(vocab).encode_ordinary
    cache: dict[str, list[int]] = {}
    toks = np.zeros((steps, BATCH), dtype=np.int64)
    resets = np.zeros((steps, BATCH), dtype=bool)
    for r in range(BATCH):
        seq: list[int] = []
        ends: list[int] = []
        while len(seq) < steps:
            v = rng.choice(values)
            ids = cache.get(v) or cache.setdefault(v, list(encode(v)))
            seq.extend(ids)
            ends.append(len(seq) - 1)
        toks[:, r] = seq[:steps]
        for e in ends:
            if e < steps:
                resets[e, r] = True
    return toks, resets


def time_batch(
    run: Callable[[int], Any], steps: int, budget_s: float, min_steps: int = 3
) -> dict[str, Any]:
    """Median over batch steps ``run(j)`` (the first one is dropped as a warm-up)."""
    samples: list[int] = []
    t_end = time.perf_counter() + budget_s
    gc.disable()
    try:
        for j in range(steps):
            a = time.perf_counter_ns()
            run(j)
            samples.append(time.perf_counter_ns() - a)
            if j >= min_steps and time.perf_counter() > t_end:
                break
    finally:
        gc.enable()
    return stats_us(samples[1:] if len(samples) > 2 else samples)


def measure_batches(
    eng: Engine,
    toks: npt.NDArray[np.int64],
    resets: npt.NDArray[np.bool_],
    words: int,
    budget_s: float,
) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": BATCH}
    bm = np.zeros((BATCH, words), dtype=np.int32)
    nbytes = bm.nbytes
    out["bitmask_bytes"] = nbytes
    toks_l = toks.tolist()
    resets_l = resets.tolist()
    steps = len(toks)

    def looped(kind: str) -> Callable[[int], Any]:
        hs = [eng.start() for _ in range(BATCH)]
        for i, h in enumerate(hs):
            eng.fill(h, bm, i)
        fn = eng.batch_step if kind == "loop" else eng.batch_step_native

        def run(j: int) -> None:
            fn(hs, toks_l[j], resets_l[j], bm)

        return run

    if isinstance(eng, TrieRouter):
        assert eng.cs is not None
        cs = eng.cs
        state = {"s": np.zeros(BATCH, dtype=np.int64)}
        cs.fill_bitmask_batch(state["s"], bm)
        adv: list[int] = []
        rst: list[int] = []
        fil: list[int] = []

        def vec(j: int) -> None:
            a = time.perf_counter_ns()
            nxt = cs.advance_batch(state["s"], toks[j])
            b = time.perf_counter_ns()
            nxt[resets[j]] = 0  # the benchmark's requests ending: not the API's work
            c = time.perf_counter_ns()
            cs.fill_bitmask_batch(nxt, bm)
            d = time.perf_counter_ns()
            adv.append(b - a)
            rst.append(c - b)
            fil.append(d - c)
            state["s"] = nxt

        out["vectorized"] = time_batch(vec, steps, budget_s)
        out["vectorized_advance"] = stats_us(adv[1:])
        out["vectorized_reset"] = stats_us(rst[1:])
        out["vectorized_fill"] = stats_us(fil[1:])
        fill_s = out["vectorized_fill"]["median_us"] / 1e6
        out["fill_gbps"] = nbytes / fill_s / 1e9 if fill_s > 0 else None
        out["best"] = "vectorized"
        if cs.backend == "native":  # this machine's bandwidth for the same write: memset of bm
            from trierouter.registry.core import native_core

            reps = 20
            best = min(native_core().memset_bandwidth(bm, reps) for _ in range(5)) / reps
            out["memset_gbps"] = nbytes / best / 1e9
            if out["fill_gbps"]:
                out["fill_fraction_of_memset"] = out["fill_gbps"] / out["memset_gbps"]
            bm.fill(0)
            big = np.ones(32 << 20, dtype=np.int32)  # 128 MB: past every cache, DRAM bandwidth
            out["dram_memset_gbps"] = (
                big.nbytes / min(native_core().memset_bandwidth(big, 1) for _ in range(3)) / 1e9
            )
            del big
            if out["fill_gbps"]:
                out["fill_fraction_of_dram"] = out["fill_gbps"] / out["dram_memset_gbps"]
    native = eng.has_native_batch and not isinstance(eng, TrieRouter)
    kinds = ["loop", "native"] if native else ["loop"]
    for kind in kinds:
        try:
            out[kind] = time_batch(looped(kind), steps, budget_s)
        except Exception as exc:  # e.g. a peer refusing a valid token mid-batch
            out[f"{kind}_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if "best" not in out:
        done = [k for k in kinds if k in out]
        if not done:
            raise RuntimeError(f"batch: {out.get('loop_error')}")
        out["best"] = min(done, key=lambda k: out[k]["median_us"])
    best_s = out[out["best"]]["median_us"] / 1e6
    out["best_median_us"] = out[out["best"]]["median_us"]
    out["effective_gbps"] = nbytes / best_s / 1e9 if best_s > 0 else None
    return out


def worker(args: argparse.Namespace) -> int:
    base = {"engine": args.engine, "vocab": args.vocab, "k": args.k, "status": "running"}
    part = Partial(Path(args.out), base)
    res = part.data
    try:
        part.phase("setup")
        t = time.perf_counter()
        vocab = load_vocab(args.vocab)
        res["vocab_load_s"] = time.perf_counter() - t
        res["width"] = vocab.width
        values = tool_names(args.k, seed=SEED)
        res["value_bytes_mean"] = float(np.mean([len(v.encode()) for v in values]))
        eng = ENGINES[args.engine]()
        res["grammar_form"] = eng.grammar_form
        gc.collect()
        r0 = rss_bytes()
        t, c = time.perf_counter(), time.process_time()
        eng.prepare(vocab)
        res["tokenizer_prep_s"] = time.perf_counter() - t
        res["tokenizer_prep_cpu_s"] = time.process_time() - c
        gc.collect()
        r1 = rss_bytes()
        res["tokenizer_prep_rss_mb"] = (r1 - r0) / 1e6

        part.phase("compile")
        t, c = time.perf_counter(), time.process_time()
        eng.compile(values)
        res["compile_ms"] = (time.perf_counter() - t) * 1e3
        res["compile_cpu_ms"] = (time.process_time() - c) * 1e3
        gc.collect()
        r2 = rss_bytes()
        res["rss_compile_mb"] = (r2 - r1) / 1e6
        rep = eng.reported_bytes()
        res["reported_mb"] = rep / 1e6 if rep is not None else None
        if res["compile_ms"] < 2_000:  # again, warm: what every later set pays (best of 3)
            warm, warm_cpu = [], []
            for _ in range(3):
                t, c = time.perf_counter(), time.process_time()
                eng.compile(values)
                warm.append((time.perf_counter() - t) * 1e3)
                warm_cpu.append((time.process_time() - c) * 1e3)
            res["compile_warm_ms"] = min(warm)
            res["compile_warm_cpu_ms"] = min(warm_cpu)
        if isinstance(eng, TrieRouter) and eng.cs is not None:
            res["compile_threads"] = compile_threads() if eng.backend == "native" else 1
            res["n_nodes"] = eng.cs.n_nodes
            res["n_pairs"] = eng.cs.n_pairs

        part.phase("measure")
        words = (vocab.width + 31) // 32
        bm = np.zeros((1, words), dtype=np.int32)
        h = eng.start()
        t = time.perf_counter()
        eng.fill(h, bm, 0)  # the first mask: lazy engines (and lazy caches) pay here
        if isinstance(eng, TrieRouter) and eng.cs is not None:
            eng.cs.prepare()  # the serving tables (packed rows, batch keys) a server holds
        res["first_mask_ms"] = (time.perf_counter() - t) * 1e3
        res["compile_plus_first_mask_ms"] = res["compile_ms"] + res["first_mask_ms"]
        gc.collect()
        res["rss_served_mb"] = (rss_bytes() - r1) / 1e6  # compiled + ready to serve

        paths = canonical_paths(vocab, values, args.paths, SEED)
        res["path_tokens_mean"] = float(np.mean([len(p) for p in paths]))
        # the guard's reference: the engine's own set where it is the full layout (checked
        # against XGrammar by the tests), else a full set compiled apart
        ref = eng.cs if isinstance(eng, TrieRouter) and eng.cs.layout == "full" else None
        if ref is None:
            ref = compile_choices(values, TokenIndex.get(vocab))
        res["guard"] = guard(eng, ref, vocab, paths[:GUARD_PATHS])
        del ref
        part.write()

        if isinstance(eng, TrieRouter):
            step, step_ids = eng.make_steppers()
        else:
            step = eng.step
        single = time_single(eng, step, paths, words, args.budget)
        res["step"] = single["step"]
        res["root_fill"] = single["root_fill"]
        res["paths_timed"] = single["paths"]
        if "refused_paths" in single:
            res["refused_paths"] = single["refused_paths"]
            res["refused_examples"] = single["refused_examples"]
        if isinstance(eng, TrieRouter):
            res["step_ids"] = time_ids(step_ids, eng.start, paths, args.budget)
            res["step_matcher"] = time_matcher(eng, paths, args.budget)
        elif eng.has_ids_view:
            res["step_ids"] = time_ids(eng.step_ids, eng.start, paths, args.budget)
        part.write()

        # a peer that refuses some valid paths (outlines-core at K >= 1,000) would stop the
        # batch mid-way: the batch walks only values the engine accepts; the refusals are counted
        plan_values, refused = accepted_values(eng, vocab, values, 600, SEED)
        res["batch_values_refused"] = refused
        res["batch_values_checked"] = len(plan_values) + refused
        toks, resets = batch_plan(vocab, plan_values, args.batch_steps, SEED)
        res["batch"] = measure_batches(eng, toks, resets, words, args.budget)
        gc.collect()
        res["rss_after_measure_mb"] = (rss_bytes() - r1) / 1e6
        res["notes"] = eng.notes
        res["status"] = "ok"
    except Exception as exc:
        res["status"] = "error"
        res["message"] = f"{type(exc).__name__}: {exc}"[:2000]
        res["traceback"] = traceback.format_exc()[-3000:]
    res["phase"] = "done"
    part.write()
    return 0


# -- parent: run the grid -------------------------------------------------------------------------


def run_case(vocab: str, engine: str, k: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cas-") as d:
        out = Path(d) / "case.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "--engine",
            engine,
            "--vocab",
            vocab,
            "--k",
            str(k),
            "--out",
            str(out),
            "--budget",
            str(args.budget),
            "--paths",
            str(args.paths),
            "--batch-steps",
            str(args.batch_steps),
        ]
        log = Path(d) / "log.txt"
        t0 = time.time()
        env = dict(os.environ)
        if engine == LLGuidanceLatest.name:  # its own llguidance first on the path
            env["PYTHONPATH"] = os.pathsep.join(
                [str(latest_llguidance_path()), *filter(None, [env.get("PYTHONPATH")])]
            )
        with open(log, "wb") as lf:
            proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env)
            timed_out = None
            while proc.poll() is None:
                time.sleep(0.2)
                data = _read(out)
                started = data.get("phase_started", t0)
                if time.time() - started > args.timeout:
                    timed_out = data.get("phase", "setup")
                    proc.kill()
                    proc.wait()
                    break
        data = _read(out) or {"engine": engine, "vocab": vocab, "k": k}
        data["wall_s"] = time.time() - t0
        if timed_out is not None:
            data["status"] = "timeout"
            data["timed_out_phase"] = timed_out
            data["timeout_s"] = args.timeout
        elif data.get("status") not in ("ok", "error"):
            data["status"] = "error"
            tail = log.read_bytes()[-1500:].decode("utf-8", "replace")
            data["message"] = f"worker exited with code {proc.returncode}: {tail}"
        data.pop("phase_started", None)
        return data


def _read(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


HEADER = (
    f"{'vocab':<6} {'K':>7} {'engine':<13} {'status':<8} {'prep s':>6} {'compile ms':>11} "
    f"{'1st mask ms':>11} {'step µs':>9} {'mean µs':>9} {'ids µs':>7} {'b256 µs':>10} {'GB/s':>6} "
    f"{'mem MB':>8} {'rssΔ MB':>8} guard"
)


def row_text(r: dict[str, Any]) -> str:
    st = r.get("status", "?")
    g = r.get("guard") or {}
    guard_s = "-" if not g else ("ok" if g.get("ok") else f"{g.get('n_mismatches')} bad")
    if g:
        guard_s += f" root {g.get('root_count_peer')}/{g.get('root_count_trierouter')}"
    b = r.get("batch") or {}
    return (
        f"{r['vocab']:<6} {r['k']:>7} {r['engine']:<13} {st:<8} "
        f"{_fmt(r.get('tokenizer_prep_s'), '6.2f')} {_fmt(r.get('compile_ms'), '11.1f')} "
        f"{_fmt(r.get('first_mask_ms'), '11.3f')} "
        f"{_fmt((r.get('step') or {}).get('median_us'), '9.1f')} "
        f"{_fmt((r.get('step') or {}).get('mean_us'), '9.1f')} "
        f"{_fmt((r.get('step_ids') or {}).get('median_us'), '7.2f')} "
        f"{_fmt(b.get('best_median_us'), '10.0f')} "
        f"{_fmt(b.get('fill_gbps') or b.get('effective_gbps'), '6.2f')} "
        f"{_fmt(r.get('reported_mb'), '8.2f')} {_fmt(r.get('rss_compile_mb'), '8.1f')} {guard_s}"
        + (f"  [{r.get('timed_out_phase')}]" if st == "timeout" else "")
        + (f"  {str(r.get('message'))[:90]}" if st == "error" else "")
    )


def ratios(results: list[dict[str, Any]]) -> dict[str, Any]:
    """peer / trierouter at every (vocab, K): > 1 means trierouter is that many times cheaper."""
    ours = {
        (r["vocab"], r["k"]): r
        for r in results
        if r["engine"] == "trierouter" and r.get("status") == "ok"
    }
    out: dict[str, Any] = {}
    for r in results:
        if r["engine"] == "trierouter" or r.get("status") != "ok":
            continue
        base = ours.get((r["vocab"], r["k"]))
        if base is None:
            continue

        def q(a: Any, b: Any) -> float | None:
            return float(a) / float(b) if a is not None and b else None

        peer_mem = r.get("reported_mb")
        out.setdefault(r["vocab"], {}).setdefault(str(r["k"]), {})[r["engine"]] = {
            "compile": q(r.get("compile_ms"), base.get("compile_ms")),
            "compile_cpu": q(r.get("compile_cpu_ms"), base.get("compile_cpu_ms")),
            "compile_plus_first_mask": q(
                r.get("compile_plus_first_mask_ms"), base.get("compile_plus_first_mask_ms")
            ),
            "step": q(r["step"]["median_us"], base["step"]["median_us"]),
            "step_mean": q(r["step"]["mean_us"], base["step"]["mean_us"]),
            "step_p90": q(r["step"]["p90_us"], base["step"]["p90_us"]),
            "root_fill": q(r["root_fill"]["median_us"], base["root_fill"]["median_us"]),
            "batch256": q(r["batch"]["best_median_us"], base["batch"]["best_median_us"]),
            "batch256_loop_vs_loop": q(
                r["batch"]["loop"]["median_us"], base["batch"]["loop"]["median_us"]
            ),
            "memory_reported": q(peer_mem, base.get("reported_mb")),
            "memory_rss": q(
                max(r.get("rss_compile_mb") or 0, 0.01), max(base.get("rss_compile_mb") or 0, 0.01)
            ),
        }
    return out


def machine_info() -> dict[str, Any]:
    import psutil

    cpu = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gb": psutil.virtual_memory().total / 1e9,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": peer_versions(),
        "loadavg_start": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument(
        "--ks",
        type=lambda s: [int(x) for x in s.split(",")],
        default=None,
        help="comma-separated set sizes (default: 10 .. 100,000)",
    )
    ap.add_argument(
        "--engines",
        type=lambda s: s.split(","),
        default=list(ENGINES),
        help=f"comma-separated, from {', '.join(ENGINES)}",
    )
    ap.add_argument(
        "--vocabs",
        type=lambda s: s.split(","),
        default=list(DEFAULT_VOCABS),
        help="shipped tokenizers; the first gets every K, others K <= --second-max-k",
    )
    ap.add_argument("--second-max-k", type=int, default=10_000)
    ap.add_argument(
        "--peer-max-k",
        type=int,
        default=PEER_MAX_K,
        help="above this K only trierouter (compiled core) runs; the other engines are skipped",
    )
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per phase of a case")
    ap.add_argument("--quick", action="store_true", help="K <= 1,000, first vocabulary only")
    ap.add_argument(
        "--budget",
        type=float,
        default=2.0,
        help="seconds of timing per measurement (at least a few paths/steps)",
    )
    ap.add_argument("--paths", type=int, default=400, help="values walked for single steps")
    ap.add_argument("--batch-steps", type=int, default=40)
    ap.add_argument("--out", default=str(OUT_JSON))
    # worker mode (internal)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    ap.add_argument("--vocab", help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)

    unknown = [e for e in args.engines if e not in ENGINES]
    if unknown:
        ap.error(f"--engines: unknown {unknown}; expected from {list(ENGINES)}")
    engines = [e for e in ENGINES if e in args.engines]  # trierouter first
    ks = sorted(args.ks or DEFAULT_KS)
    vocabs = list(args.vocabs)
    if args.quick:
        ks = [k for k in ks if k <= 1_000]
        vocabs = vocabs[:1]
        args.budget = min(args.budget, 1.5)
        args.paths = min(args.paths, 100)
        args.batch_steps = min(args.batch_steps, 12)

    doc: dict[str, Any] = {
        "benchmark": "compile_and_step",
        "machine": machine_info(),
        "config": {
            "ks": ks,
            "engines": engines,
            "vocabs": vocabs,
            "second_max_k": args.second_max_k,
            "peer_max_k": args.peer_max_k,
            "timeout_s_per_phase": args.timeout,
            "budget_s": args.budget,
            "paths": args.paths,
            "batch_rows": BATCH,
            "batch_steps": args.batch_steps,
            "seed": SEED,
            "values": "trierouter.data.tool_names(K, seed=0)",
            "step": "accept/advance + fill the next packed bitmask row; median over steps",
            "ids_step": "advance + allowed ids without packing (trierouter mask view, GENRE keys)",
            "matcher_step": "trierouter step_matcher: Matcher.accept_token + allowed_token_ids, "
            "per path walk time / tokens, median over paths (no timer inside the loop)",
            "batch": "256 rows; trierouter advance_batch + fill_bitmask_batch; peers: loop over "
            "matchers and, where they have one, their batch API (native); a step's time "
            "includes resetting finished rows to the root (the benchmark's requests ending)",
            "batch_parts": "trierouter batch.vectorized_advance: advance_batch alone (public API, "
            "median over steps); batch.vectorized_reset: the benchmark's reset of finished rows "
            "(numpy boolean indexing, not the API's work); batch.vectorized_fill: "
            "fill_bitmask_batch alone",
            "memory": "reported_mb: ChoiceSet.nbytes / CompiledGrammar.memory_size_bytes; "
            "rss_compile_mb: RSS growth across compile in a fresh subprocess",
            "cpu": "compile_cpu_ms / compile_warm_cpu_ms / tokenizer_prep_cpu_s: process CPU "
            "time of the same work (the 2-core machine is shared; wall time includes waiting)",
            "bandwidth": "batch.memset_gbps: memset of the same 256-row bitmask buffer (best "
            "of 5x20; it stays in cache); batch.fill_fraction_of_memset: fill_bitmask_batch's "
            "rate (median step) over it; batch.dram_memset_gbps: memset of 128 MB (main "
            "memory, best of 3); batch.fill_fraction_of_dram: the fill's rate over it",
        },
        "results": [],
    }
    results: list[dict[str, Any]] = doc["results"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(HEADER, flush=True)
    t_start = time.time()
    for vi, vocab in enumerate(vocabs):
        stopped: dict[str, int] = {}
        for k in ks:
            if vi > 0 and k > args.second_max_k:
                continue
            for engine in engines:
                if k > args.peer_max_k and engine not in ("trierouter", "trierouter-compact"):
                    r: dict[str, Any] = {
                        "engine": engine,
                        "vocab": vocab,
                        "k": k,
                        "status": "skipped",
                        "message": f"above --peer-max-k={args.peer_max_k}",
                    }
                elif engine in stopped:
                    r = {
                        "engine": engine,
                        "vocab": vocab,
                        "k": k,
                        "status": "skipped",
                        "message": f"timed out at K={stopped[engine]}",
                    }
                else:
                    r = run_case(vocab, engine, k, args)
                    if r["status"] == "timeout":
                        stopped[engine] = k
                results.append(r)
                print(row_text(r), flush=True)
                doc["ratios"] = ratios(results)
                doc["machine"]["wall_s"] = time.time() - t_start
                out.write_text(json.dumps(doc, indent=1, default=_jsonable))
    doc["machine"]["loadavg_end"] = list(os.getloadavg())
    doc["ratios"] = ratios(results)
    out.write_text(json.dumps(doc, indent=1, default=_jsonable))
    print(f"\nwrote {out} ({time.time() - t_start:.0f} s)")
    print_ratios(doc["ratios"])
    return 0


def print_ratios(rat: dict[str, Any]) -> None:
    print("\npeer / trierouter (x times trierouter's cost):")
    print(
        f"{'vocab':<6} {'K':>7} {'peer':<13} {'compile':>9} {'step med':>9} {'step mean':>9} "
        f"{'b256':>8} {'mem':>8}"
    )
    for vocab, by_k in rat.items():
        for k, by_peer in by_k.items():
            for peer, q in by_peer.items():
                mem = q.get("memory_reported") or q.get("memory_rss")
                print(
                    f"{vocab:<6} {k:>7} {peer:<13} {_fmt(q['compile'], '9.1f')} "
                    f"{_fmt(q['step'], '9.1f')} {_fmt(q['step_mean'], '9.1f')} "
                    f"{_fmt(q['batch256'], '8.1f')} {_fmt(mem, '8.1f')}"
                )


if __name__ == "__main__":
    sys.exit(main())
