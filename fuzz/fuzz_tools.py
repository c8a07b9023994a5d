"""Coverage-guided fuzz target (atheris / libFuzzer) for the tool-argument automata.

Each input is decoded by atheris's ``FuzzedDataProvider`` into a tool's argument schema (random
regular expressions, formats, integer ranges, string lengths, enums and consts of awkward JSON,
nested objects, arrays, unions), a small vocabulary and a few random byte walks, and checked by
:func:`trierouter.testing.fuzz_tools.check_tool_case`: the compiled core's automaton and every
state's mask against the numpy / Python reference and brute force, and every accepted walk
against ``jsonschema`` with its format checker. Any exception is a finding (libFuzzer stops and
writes the input).

    python fuzz/fuzz_tools.py -runs=2000 -stats=stats.json [corpus_dir]
    python fuzz/run_fuzz.py --target tools --asan --seconds 600   # sanitizer build, see below

For memory errors inside the core, build it with the sanitizers first (``make ext-debug``) and
run through ``run_fuzz.py --asan`` (preloads the ASan runtime; UBSan reports are findings).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["trierouter"]):
    from trierouter.testing.fuzz_tools import check_tool_case, tool_case

_STATS: Path | None = None
_COUNTS: Counter[str] = Counter()
_T0 = time.monotonic()


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    out = check_tool_case(tool_case(fdp.ConsumeIntInRange))
    _COUNTS[out.result] += 1
    _COUNTS["states"] += out.states
    _COUNTS["with_exits"] += out.exits > 0
    _COUNTS["valid_walks"] += out.walks_valid
    n = _COUNTS["compiled"] + _COUNTS["refused"]
    if _STATS is not None and (n % 50 == 0 or n < 10):
        _write_stats()


def _write_stats() -> None:
    assert _STATS is not None
    counts = dict(_COUNTS)
    runs = counts.get("compiled", 0) + counts.get("refused", 0)
    _STATS.write_text(
        json.dumps(
            {"executions": runs, "outcomes": counts, "seconds": round(time.monotonic() - _T0, 1)},
            indent=1,
        )
        + "\n"
    )


def main() -> None:
    global _STATS
    argv = []
    replay: Path | None = None
    args = iter(sys.argv)
    for a in args:
        if a.startswith("-stats="):
            _STATS = Path(a.split("=", 1)[1])
        elif a == "--replay":
            replay = Path(next(args))
        else:
            argv.append(a)
    if replay is not None:
        for f in sorted(p for p in replay.iterdir() if p.is_file()):
            test_one_input(f.read_bytes())
        if _STATS is not None:
            _write_stats()
        print(f"replayed: {dict(_COUNTS)}")
        return
    # -rss_limit_mb: libFuzzer's default (2 GB) was reached by a 200-run ASan run whose inputs
    # each stay under 600 MB replayed alone (ASan's allocator keeps freed memory)
    for flag in ("-timeout=60", "-len_control=0", "-max_len=4096", "-rss_limit_mb=4096"):
        if not any(a.startswith(flag.split("=")[0] + "=") for a in argv):
            argv.append(flag)
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
