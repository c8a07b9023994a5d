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
sanitizers first and preload the ASan runtime (with libstdc++, which ASan's interceptor of C++
exceptions needs loaded before it)::

    make ext-debug        # TRIEROUTER_DEBUG_BUILD=1: -fsanitize=address,undefined
    LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" \
        ASAN_OPTIONS=detect_leaks=0 python fuzz/fuzz_compile.py -runs=20000
    make ext              # back to the release build

``-stats=PATH`` (ours, not libFuzzer's) writes the executions and outcome counts as JSON every
100 executions; ``--replay DIR`` runs every input in ``DIR`` once without atheris' engine (for
line coverage with coverage.py). Bounded by libFuzzer's ``-runs`` / ``-max_total_time`` and by
``-timeout`` per input (default here: 20 s).
"""

from __future__ import annotations

import atheris
from _harness import Stats, run

with atheris.instrument_imports(include=["trierouter"]):
    from trierouter.testing.fuzz import Case, check_case

STATS = Stats()

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
    out = check_case(case_from_bytes(data))
    STATS.add(out.result, decode_steps=out.steps)


if __name__ == "__main__":
    # -len_control=0: long inputs from the start (a case needs many bytes)
    run(test_one_input, STATS, ["-timeout=20", "-len_control=0", "-max_len=2048"])
