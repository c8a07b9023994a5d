"""Run an atheris target for a bounded time, then measure line coverage of its corpus.

    python fuzz/run_fuzz.py --seconds 600            # writes benchmarks/results/fuzz.json
    python fuzz/run_fuzz.py --target tools           # benchmarks/results/fuzz_tools.json
    python fuzz/run_fuzz.py --target tools --asan --corpus DIR   # ... fuzz_tools_asan.json

Targets: ``compile`` (``fuzz_compile.py``: vocabularies, value sets, decoding) and ``tools``
(``fuzz_tools.py``: tool schemas, their automata and masks). ``--asan``: the compiled core must
be the sanitizer build (``make ext-debug``; refused otherwise), the ASan runtime is preloaded and
an UndefinedBehaviorSanitizer report stops the run (a finding). gcc's ASan runtime takes the
coverage callbacks that atheris registers, so an ``--asan`` run gets no coverage feedback: it
needs the corpus of a release run (``--corpus DIR``; refused without one), replays every input
of it once and then mutates those inputs, kept as they are (``-keep_seed=1``: without coverage
libFuzzer would otherwise drop them all and mutate a single empty input; every seed chosen as
often, lengths up to the largest seed's from the start). Both run with ``-rss_limit_mb=4096``
(ASan's allocator keeps freed memory; libFuzzer's default is 2 GB).

Step 1: libFuzzer (through atheris) for ``--seconds`` with a corpus folder; its last status line
gives the executions and the edge coverage (``cov``) and features (``ft``) of the instrumented
``trierouter`` code. Step 2: every corpus input is replayed once under coverage.py (if
installed) for line coverage of the modules the target exercises.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {
    "compile": (
        "fuzz_compile.py",
        [
            "trierouter/registry/trie.py",
            "trierouter/registry/index.py",
            "trierouter/registry/arrays.py",
            "trierouter/registry/_hashmap.py",
            "trierouter/registry/vocabulary.py",
        ],
    ),
    "tools": (
        "fuzz_tools.py",
        [
            f"trierouter/registry/slots/{m}.py"
            for m in ("dispatch", "formats", "fragment", "masks", "nfa", "normalize", "objects")
        ]
        + ["trierouter/registry/slots/ranges.py", "trierouter/registry/slots/regex.py"],
    ),
}


def _sanitized() -> tuple[str, bool]:
    """The compiled core's file and whether it was built with AddressSanitizer."""
    so = next((ROOT / "trierouter" / "registry").glob("_core.*.so"), None)
    if so is None:
        return "", False
    return so.name, b"__asan_init" in so.read_bytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--target", choices=sorted(TARGETS), default="compile")
    parser.add_argument("--asan", action="store_true", help="run the sanitizer build of the core")
    parser.add_argument("--out", type=Path, help="default: results/fuzz[_tools][_asan].json")
    parser.add_argument(
        "--corpus", type=Path, help="corpus folder to start from and grow (default: a new one)"
    )
    args = parser.parse_args(argv)
    script, modules = TARGETS[args.target]
    target = ROOT / "fuzz" / script
    name = "fuzz" + ("" if args.target == "compile" else f"_{args.target}")
    name += "_asan" if args.asan else ""
    out_path = args.out or ROOT / "benchmarks" / "results" / f"{name}.json"
    core_file, sanitized = _sanitized()
    if args.asan and not sanitized:
        what = core_file or "the compiled core"
        parser.error(f"--asan: {what} is a release build; run `make ext-debug` first")
    work = Path(tempfile.mkdtemp(prefix="trierouter-fuzz-"))
    corpus = (args.corpus or work / "corpus").resolve()
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = len(list(corpus.iterdir()))
    flags: list[str] = []
    if args.asan:
        if not seeds:
            parser.error(
                "--asan: give --corpus DIR, the corpus of a release run (it cannot grow one)"
            )
        longest = max(p.stat().st_size for p in corpus.iterdir())
        flags = ["-keep_seed=1", "-cross_over_uniform_dist=1", "-len_control=0",
                 f"-max_len={max(longest, 64)}"]  # fmt: skip
    stats = work / "stats.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if args.asan:
        # libstdc++ with it: ASan's __cxa_throw interceptor needs the real one loaded when it
        # starts (python is not linked with it), or the core's first C++ exception aborts
        libs = [
            subprocess.run(
                ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
            ).stdout.strip()
            for name in ("libasan.so", "libstdc++.so")
        ]
        env["LD_PRELOAD"] = " ".join(libs)
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
        env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    proc = subprocess.run(
        [sys.executable, str(target), f"-max_total_time={args.seconds}", f"-stats={stats}",
         "-print_final_stats=1", "-rss_limit_mb=4096", *flags, str(corpus)],
        capture_output=True, text=True, env=env, cwd=work, check=False,
    )  # fmt: skip
    log = proc.stderr
    status = [ln for ln in log.splitlines() if re.match(r"#\d+\s", ln)]
    last = status[-1] if status else ""
    grab = {k: re.search(rf"{k}: (\d+)", last) for k in ("cov", "ft", "corp")}
    final_runs = re.search(r"stat::number_of_executed_units: (\d+)", log)
    inited = re.search(r"#(\d+)\s+INITED", log)
    result = {
        "target": f"fuzz/{script}",
        "seconds": args.seconds,
        "core": core_file,
        "sanitizers": "address,undefined" if sanitized else None,
        # gcc's ASan runtime, preloaded, takes the coverage callbacks atheris registers with
        # libFuzzer: under --asan the inputs are the seed corpus and blind mutations of it
        "coverage_feedback": not args.asan,
        "seed_inputs": seeds,
        "libfuzzer_flags": flags,
        # every seed runs once before the first mutation (libFuzzer's INITED line)
        "replayed_before_mutating": int(inited.group(1)) if inited else None,
        "exit_code": proc.returncode,
        "finding": proc.returncode != 0,
        "executions": int(final_runs.group(1)) if final_runs else None,
        "libfuzzer_edges_cov": int(grab["cov"].group(1)) if grab["cov"] else None,
        "libfuzzer_features_ft": int(grab["ft"].group(1)) if grab["ft"] else None,
        "corpus_inputs": len(list(corpus.iterdir())),
        "last_status": last,
        "harness": json.loads(stats.read_text()) if stats.exists() else None,
    }
    if proc.returncode != 0:
        result["log_tail"] = log[-4000:]
    try:
        import coverage  # noqa: F401

        data = work / ".coverage"
        subprocess.run(
            [sys.executable, "-m", "coverage", "run", f"--data-file={data}",
             "--include=" + ",".join(str(ROOT / m) for m in modules),
             str(target), "--replay", str(corpus)],
            capture_output=True, text=True, env=env, cwd=work, check=True,
        )  # fmt: skip
        rep = subprocess.run(
            [sys.executable, "-m", "coverage", "json", f"--data-file={data}", "-o", "-"],
            capture_output=True, text=True, env=env, cwd=work, check=True,
        )  # fmt: skip
        cov = json.loads(rep.stdout)
        result["line_coverage_of_corpus"] = {
            "total_percent": round(cov["totals"]["percent_covered"], 1),
            "files": {
                str(Path(f).relative_to(ROOT)): round(v["summary"]["percent_covered"], 1)
                for f, v in cov["files"].items()
            },
        }
    except ImportError:
        result["line_coverage_of_corpus"] = "coverage.py not installed"
    except subprocess.CalledProcessError as exc:
        result["line_coverage_of_corpus"] = f"failed: {exc.stderr[-500:]}"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
