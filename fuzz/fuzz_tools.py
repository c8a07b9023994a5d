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

import atheris
from _harness import Stats, run

with atheris.instrument_imports(include=["trierouter"]):
    from trierouter.testing.fuzz_tools import check_tool_case, tool_case

STATS = Stats()


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    out = check_tool_case(tool_case(fdp.ConsumeIntInRange))
    STATS.add(
        out.result, states=out.states, with_exits=int(out.exits > 0), valid_walks=out.walks_valid
    )


if __name__ == "__main__":
    # -rss_limit_mb: libFuzzer's default (2 GB) was reached by a 200-run ASan run whose inputs
    # each stay under 600 MB replayed alone (ASan's allocator keeps freed memory)
    run(
        test_one_input,
        STATS,
        ["-timeout=60", "-len_control=0", "-max_len=4096", "-rss_limit_mb=4096"],
    )
