"""Run the atheris target for a bounded time, then measure line coverage of its corpus.

    python fuzz/run_fuzz.py --seconds 600            # writes benchmarks/results/fuzz.json

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
TARGET = ROOT / "fuzz" / "fuzz_compile.py"
MODULES = [
    "trierouter/registry/trie.py",
    "trierouter/registry/index.py",
    "trierouter/registry/_arrays.py",
    "trierouter/registry/_hashmap.py",
    "trierouter/registry/vocabulary.py",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fuzz.json")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="trierouter-fuzz-"))
    corpus = work / "corpus"
    corpus.mkdir()
    stats = work / "stats.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(TARGET), f"-max_total_time={args.seconds}", f"-stats={stats}",
         "-print_final_stats=1", str(corpus)],
        capture_output=True, text=True, env=env, cwd=work, check=False,
    )  # fmt: skip
    log = proc.stderr
    status = [ln for ln in log.splitlines() if re.match(r"#\d+\s", ln)]
    last = status[-1] if status else ""
    grab = {k: re.search(rf"{k}: (\d+)", last) for k in ("cov", "ft", "corp")}
    final_runs = re.search(r"stat::number_of_executed_units: (\d+)", log)
    result = {
        "target": "fuzz/fuzz_compile.py",
        "seconds": args.seconds,
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
             "--include=" + ",".join(str(ROOT / m) for m in MODULES),
             str(TARGET), "--replay", str(corpus)],
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
