"""Build time and per-call overhead of the compiled core's bindings: nanobind against the
hand-written CPython API build they replaced, both loaded in one process.

Question: did binding the core with nanobind (csrc/bindings/) make a step, a batch fill or a
compile slower, or the build longer?

Method:

* build: both trees are exported (``git archive``) into a temporary directory, the old one at
  ``--old-ref`` (the last commit with the CPython API bindings), the new one at ``--new-ref``,
  and each is built from scratch (``setup.py build_ext --inplace``, one compiler process at a
  time, as ``pip install`` runs it); wall time and the compilers' CPU time (user + sys);
* overhead: the old extension is loaded from its build under another module name (importlib),
  beside this checkout's (the new one, imported as ``trierouter.registry._core``); one set of
  ``--k`` tool names compiled on Qwen2 (151,936 ids), and each module's ``Core`` made over the
  same arrays; every measure runs for both modules in each of ``--rounds`` rounds, the order
  alternating between rounds, and is reported as the median over rounds (ns per call) and the
  ratio new / old (median, min and max over rounds: its spread);
* measures: ``Core.advance`` (a step), ``MatcherBase.accept_token`` + ``reset`` (a matcher
  step), ``Core.fill`` of one bitmask row, ``advance_batch`` and ``fill_batch`` of 256 rows
  (the batch fill the vLLM logits processor calls) and of 8 rows, and ``compile`` of 1,000 and
  10,000 tool names (each module with its own ``TokenTrie``). Per-call times include the Python
  loop that makes the calls (the same loop for both modules).

Run ``python benchmarks/bindings_overhead.py`` (about 5 minutes on 2 cores, most of it the two
builds; ``--no-build`` with ``--old-so`` reuses an old build). Writes
``benchmarks/results/bindings_overhead.json``. Speed is not asserted by any test.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from _provenance import arm_run, finish_run

ROOT = Path(__file__).resolve().parent.parent
OUT_JSON = ROOT / "benchmarks" / "results" / "bindings_overhead.json"
OLD_REF = "207c195"  # main before the nanobind bindings (csrc/bindings/ on the CPython API)
QWEN2_WIDTH = 151_936


def clean_build(ref: str, where: Path) -> dict[str, float]:
    """``ref`` exported into ``where`` and its extension built from scratch: seconds (wall) and
    the compilers' CPU seconds."""
    where.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", ref], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=where,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def load_extension(path: Path) -> ModuleType:
    """The extension at ``path`` as a module of its own (its init function is ``PyInit__core``)."""
    spec = importlib.util.spec_from_file_location("bindings_old._core", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def per_call_ns(fn: Callable[[], int], reps: int) -> float:
    """The best of ``reps`` runs of ``fn`` (which makes its calls and returns how many), in ns
    per call."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        n = fn()
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def walk_paths(core: Any, n_paths: int, seed: int) -> list[tuple[int, int]]:
    """(state, token) steps of random walks from the root to a complete value."""
    rng = random.Random(seed)
    steps: list[tuple[int, int]] = []
    for _ in range(n_paths):
        s = 0
        while s != core.END:
            allowed = core.mask(s).tolist()
            t = rng.choice(allowed)
            steps.append((s, t))
            s = core.advance(s, t)
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-ref", default=OLD_REF)
    ap.add_argument("--new-ref", default="HEAD")
    ap.add_argument("--old-so", type=Path, help="an old build to load (with --no-build)")
    ap.add_argument("--no-build", action="store_true", help="skip the two clean builds")
    ap.add_argument("--k", type=int, default=10_000, help="values of the stepped set")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=OUT_JSON)
    args = ap.parse_args()

    from trierouter.data.synthetic import tool_names
    from trierouter.registry import _core as new
    from trierouter.registry.core import native_core
    from trierouter.registry.index import TokenIndex
    from trierouter.registry.shipped import shipped_vocabulary
    from trierouter.registry.trie import compile_choices

    assert native_core() is new  # this checkout's build, its sources' hash checked
    settings = vars(args) | {"out": str(args.out), "old_so": args.old_so and str(args.old_so)}
    result: dict[str, Any] = {"runs": {}, "settings": settings}
    result["runs"]["all"] = arm_run({"old_ref": args.old_ref, "new_ref": args.new_ref, "k": args.k})
    tmp = Path(tempfile.mkdtemp(prefix="bindings_overhead_"))
    try:
        if not args.no_build:
            result["build"] = {
                "old": clean_build(args.old_ref, tmp / "old"),
                "new": clean_build(args.new_ref, tmp / "new"),
            }
            (old_so,) = (tmp / "old" / "trierouter" / "registry").glob("_core*.so")
        else:
            assert args.old_so is not None, "--no-build needs --old-so"
            old_so = args.old_so
        old = load_extension(old_so)

        vocab = shipped_vocabulary("qwen2", width=QWEN2_WIDTH)
        index = TokenIndex.get(vocab)
        matchable = np.ascontiguousarray(vocab.matchable, dtype=np.uint8)
        tries = {"old": old.TokenTrie(vocab.tokens, matchable), "new": index.native_trie}
        mods = {"old": old, "new": new}
        cs = compile_choices(tool_names(args.k), index, backend="native")
        arrays = [cs.row_ptr, cs.tokens, cs.children, cs._far_pos, cs._far_child, cs.ends]
        cores = {name: mods[name].Core(*arrays, cs.width) for name in mods}
        matchers = {}
        for name, mod in mods.items():
            m = mod.MatcherBase()
            m._init_core(cores[name], None, None, 0, cs.END, cs.DEAD, -1)
            matchers[name] = m
        steps = walk_paths(cores["new"], 200, seed=0)
        words = cs.bitmask_words
        rng = np.random.default_rng(0)
        step_states = np.array([s for s, _ in steps], np.int64)
        batch = {n: step_states[rng.integers(0, len(steps), n)] for n in (8, 256)}
        batch_tok = {n: np.array([t for _, t in steps], np.int64)[: len(batch[n])] for n in batch}
        masks = {n: np.zeros((n, words), np.int32) for n in batch}
        rows = {n: np.arange(n, dtype=np.int64) for n in batch}
        assert all(cores["old"].advance(s, t) == cores["new"].advance(s, t) for s, t in steps)
        values_k = {k: tool_names(k, seed=1) for k in (1_000, 10_000)}
        end_ids = vocab.end_ids

        def measures(name: str) -> dict[str, float]:
            core, m, mod, trie = cores[name], matchers[name], mods[name], tries[name]
            adv = core.advance
            accept, reset = m.accept_token, m.reset
            row = np.zeros((1, words), np.int32)

            def advance_loop() -> int:
                for s, t in steps:
                    adv(s, t)
                return len(steps)

            def matcher_loop() -> int:
                n = 0
                reset()
                for s, t in steps:
                    if s == 0:
                        reset()
                    accept(t)
                    n += 1
                return n

            def fill_loop() -> int:
                fill = core.fill
                for s, _ in steps[:400]:
                    fill(s, row, 0)
                return min(400, len(steps))

            out: dict[str, float] = {
                "advance": per_call_ns(advance_loop, 5),
                "matcher_accept_token": per_call_ns(matcher_loop, 5),
                "fill_one_row": per_call_ns(fill_loop, 5),
            }
            for n in batch:
                st, tk, bm, rw = batch[n], batch_tok[n], masks[n], rows[n]
                nxt = np.empty(n, np.int64)

                def fill_batch(st: Any = st, bm: Any = bm, rw: Any = rw) -> int:
                    for _ in range(20):
                        core.fill_batch(st, bm, rw)
                    return 20

                def advance_batch(st: Any = st, tk: Any = tk, nxt: Any = nxt) -> int:
                    for _ in range(200):
                        core.advance_batch(st, tk, nxt)
                    return 200

                out[f"fill_batch_{n}"] = per_call_ns(fill_batch, 5)
                out[f"advance_batch_{n}"] = per_call_ns(advance_batch, 5)
            for k, values in values_k.items():

                def compile_once(values: Any = values) -> int:
                    mod.compile(values, trie, b"", end_ids, True, 0, 1, 2048)
                    return 1

                out[f"compile_{k}"] = per_call_ns(compile_once, 3)
            return out

        result["runs"]["all"]["settings"]["steps"] = len(steps)
        per_round: list[dict[str, dict[str, float]]] = []
        for r in range(args.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            per_round.append({name: measures(name) for name in order})
            print(
                f"round {r + 1}/{args.rounds}: "
                + ", ".join(
                    f"{key} {per_round[-1]['new'][key] / per_round[-1]['old'][key]:.3f}"
                    for key in per_round[-1]["new"]
                ),
                flush=True,
            )
        summary: dict[str, Any] = {}
        for key in per_round[0]["new"]:
            ratios = [rd["new"][key] / rd["old"][key] for rd in per_round]
            summary[key] = {
                "old_ns": round(statistics.median(rd["old"][key] for rd in per_round), 1),
                "new_ns": round(statistics.median(rd["new"][key] for rd in per_round), 1),
                "ratio_new_over_old": {
                    "median": round(statistics.median(ratios), 3),
                    "min": round(min(ratios), 3),
                    "max": round(max(ratios), 3),
                },
            }
        result["overhead"] = summary
        result["rounds"] = per_round
        result["runs"]["all"] = finish_run(result["runs"]["all"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"build": result.get("build"), "overhead": result["overhead"]}, indent=1))


if __name__ == "__main__":
    main()
