"""Coverage-guided fuzz target (atheris / libFuzzer) for compile and decode.

Each input is decoded by atheris's ``FuzzedDataProvider`` into a random vocabulary (byte-fallback
pieces, empty and duplicate tokens, special and end ids, possibly invalid), a random value set
(empty strings, prefixes of each other, lone surrogates, control characters, values up to 10 KB),
a terminator and token sequences, and checked by :func:`trierouter.testing.fuzz.check_case`:
a correct result against the byte-level reference, or the documented error. Any other exception
is a finding (libFuzzer stops and writes the crashing input).

    python fuzz/fuzz_compile.py -runs=20000 -stats=fuzz/stats.json [corpus_dir]
    python fuzz/fuzz_compile.py -max_total_time=600 -stats=... corpus_dir
    python -m coverage run --source=trierouter fuzz/fuzz_compile.py --replay corpus_dir

The cases run through the compiled core (the default backend), and each compiled set is compared
with the numpy reference bit for bit. For memory errors inside the core, build it with the
sanitizers first and preload the ASan runtime::

    make ext-debug        # TRIEROUTER_DEBUG_BUILD=1: -fsanitize=address,undefined
    LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \
        python fuzz/fuzz_compile.py -runs=20000
    make ext              # back to the release build

``-stats=PATH`` (ours, not libFuzzer's) writes the executions and outcome counts as JSON every
100 executions; ``--replay DIR`` runs every input in ``DIR`` once without atheris' engine (for
line coverage with coverage.py). Bounded by libFuzzer's ``-runs`` / ``-max_total_time`` and by
``-timeout`` per input (default here: 20 s).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["trierouter"]):
    from trierouter.testing.fuzz import Case, check_case

_STATS: Path | None = None
_COUNTS: Counter[str] = Counter()
_T0 = time.monotonic()
_STEPS = 0

_CHARS = ["a", "b", "\x00", '"', "é", "東", "\n", "\x7f", "ab", "\U0001f600", "\udcff"]


def _value(fdp: atheris.FuzzedDataProvider) -> str:
    kind = fdp.ConsumeIntInRange(0, 5)
    if kind == 0:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 8))
    if kind == 1:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 4))  # surrogates possible
    if kind == 2:  # a long value (up to 10 KB) of a repeated piece
        piece = _CHARS[fdp.ConsumeIntInRange(0, len(_CHARS) - 2)]
        return piece * fdp.ConsumeIntInRange(1, 10_240 // len(piece.encode()))
    if kind == 3:  # control characters
        return "".join(
            chr(fdp.ConsumeIntInRange(0, 0x1F)) for _ in range(fdp.ConsumeIntInRange(0, 6))
        )
    return "".join(
        _CHARS[fdp.ConsumeIntInRange(0, len(_CHARS) - 1)]
        for _ in range(fdp.ConsumeIntInRange(0, 6))
    )


def case_from_bytes(data: bytes) -> Case:
    fdp = atheris.FuzzedDataProvider(data)
    tokens = [bytes([b]) for b in range(256)] if fdp.ConsumeBool() else []
    tokens += [
        fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 4)) for _ in range(fdp.ConsumeIntInRange(0, 24))
    ]
    if tokens and fdp.ConsumeBool():
        tokens.append(tokens[fdp.ConsumeIntInRange(0, len(tokens) - 1)])  # duplicate bytes
    ends: list[int] = []
    if fdp.ConsumeIntInRange(0, 9):
        ends = [len(tokens)]
        tokens.append(b"<eos>")
    else:  # anything, possibly out of range
        ends = [
            fdp.ConsumeIntInRange(-2, len(tokens) + 2) for _ in range(fdp.ConsumeIntInRange(0, 2))
        ]
    special = [
        fdp.ConsumeIntInRange(0, max(len(tokens) - 1, 0))
        for _ in range(fdp.ConsumeIntInRange(0, 2))
    ]
    values = [_value(fdp) for _ in range(1 - fdp.ConsumeBool() + fdp.ConsumeIntInRange(0, 7))]
    if values and fdp.ConsumeBool():  # prefixes of each other
        v = values[fdp.ConsumeIntInRange(0, len(values) - 1)]
        values += [v[: len(v) // 2], v + "a"]
    terminator = [None, '"', '",', "a"][fdp.ConsumeIntInRange(0, 3)]
    walks = [
        [fdp.ConsumeIntInRange(-(2**40), 2**40) for _ in range(fdp.ConsumeIntInRange(0, 16))]
        for _ in range(fdp.ConsumeIntInRange(1, 3))
    ]
    return Case(tokens, ends, special, fdp.ConsumeIntInRange(0, 40), values, terminator, walks)


def test_one_input(data: bytes) -> None:
    global _STEPS
    out = check_case(case_from_bytes(data))
    _COUNTS[out.result] += 1
    _STEPS += out.steps
    n = sum(_COUNTS.values())
    if _STATS is not None and (n % 100 == 0 or n < 10):
        _write_stats()


def _write_stats() -> None:
    assert _STATS is not None
    _STATS.write_text(
        json.dumps(
            {
                "executions": sum(_COUNTS.values()),
                "outcomes": dict(_COUNTS),
                "decode_steps": _STEPS,
                "seconds": round(time.monotonic() - _T0, 1),
            },
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
        print(f"replayed {sum(_COUNTS.values())} inputs: {dict(_COUNTS)}")
        return
    if not any(a.startswith("-timeout=") for a in argv):
        argv.append("-timeout=20")
    if not any(a.startswith("-len_control=") for a in argv):
        argv.append("-len_control=0")  # long inputs from the start: a case needs many bytes
    if not any(a.startswith("-max_len=") for a in argv):
        argv.append("-max_len=2048")
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
