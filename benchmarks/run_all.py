"""Rerun every result the README and docs cite, one after another, then the report.

    python benchmarks/run_all.py --list          # what would run, with the time each took here
    python benchmarks/run_all.py                 # all of it (many hours on 2 cores)
    python benchmarks/run_all.py --only bfcl_serve.json,classify.json

The commands are ``report.py``'s ``RERUN`` table (the one docs/benchmarks.md prints), run in the
repository root with this Python for ``python``; each writes its ``benchmarks/results/*.json``.
A command that fails is reported and the others go on; the exit status counts the failures.
``benchmarks/report.py`` runs last and rewrites the generated blocks.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import RERUN


def _shell(command: str) -> str:
    """``command`` with each ``python`` word run by this interpreter."""
    py = shlex.quote(sys.executable)
    return " ".join(py if w == "python" else w for w in command.split(" "))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="print the plan and stop")
    ap.add_argument("--only", default="", help="result files to rerun, comma-separated")
    args = ap.parse_args(argv)
    only = {n for n in args.only.split(",") if n}
    unknown = only - {name for name, _, _ in RERUN}
    if unknown:
        known = ", ".join(name for name, _, _ in RERUN)
        raise SystemExit(f"--only: no rerun command for {sorted(unknown)}; known: {known}")
    plan = [(n, c, t) for n, c, t in RERUN if not only or n in only]
    failed: list[str] = []
    for i, (name, command, took) in enumerate(plan, 1):
        print(f"[{i}/{len(plan)}] {name}: {command}  ({took or 'time not recorded'})", flush=True)
        if args.list:
            continue
        t0 = time.perf_counter()
        rc = subprocess.run(["bash", "-c", _shell(command)], cwd=ROOT, env=os.environ).returncode
        print(
            f"[{i}/{len(plan)}] {name}: exit {rc} after {(time.perf_counter() - t0) / 60:.1f} min"
        )
        if rc:
            failed.append(name)
    if not args.list:
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "report.py")], cwd=ROOT, check=True
        )
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return len(failed)


if __name__ == "__main__":
    raise SystemExit(main())
