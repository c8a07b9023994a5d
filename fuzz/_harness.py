"""What the atheris targets share: outcome counts written as JSON, and their command line.

A target calls :func:`run` with its ``test_one_input`` and a :class:`Stats`; the command line is
libFuzzer's, plus two of ours: ``-stats=PATH`` (the counts as JSON every 100 executions) and
``--replay DIR`` (every input in ``DIR`` once, without atheris' engine: for coverage.py).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import atheris


class Stats:
    """Executions by outcome, and sums of per-execution numbers."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.counts: Counter[str] = Counter()
        self.sums: Counter[str] = Counter()
        self.t0 = time.monotonic()

    def add(self, outcome: str, **numbers: int) -> None:
        self.counts[outcome] += 1
        self.sums.update(numbers)
        n = sum(self.counts.values())
        if self.path is not None and (n % 100 == 0 or n < 10):
            self.write()

    def write(self) -> None:
        assert self.path is not None
        data = {"executions": sum(self.counts.values()), "outcomes": dict(self.counts)}
        data.update(self.sums)
        data["seconds"] = round(time.monotonic() - self.t0, 1)
        self.path.write_text(json.dumps(data, indent=1) + "\n")


def run(test_one_input: Callable[[bytes], None], stats: Stats, defaults: Sequence[str]) -> None:
    """Fuzz (libFuzzer flags from the command line, ``defaults`` where it has none) or replay."""
    argv = []
    replay: Path | None = None
    args = iter(sys.argv)
    for a in args:
        if a.startswith("-stats="):
            stats.path = Path(a.split("=", 1)[1])
        elif a == "--replay":
            replay = Path(next(args))
        else:
            argv.append(a)
    if replay is not None:
        for f in sorted(p for p in replay.iterdir() if p.is_file()):
            test_one_input(f.read_bytes())
        if stats.path is not None:
            stats.write()
        print(f"replayed {sum(stats.counts.values())} inputs: {dict(stats.counts)}")
        return
    for flag in defaults:
        if not any(a.startswith(flag.split("=")[0] + "=") for a in argv):
            argv.append(flag)
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()
