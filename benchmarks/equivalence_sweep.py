"""Full Proposition 1 sweep on the compiled core: trierouter's masks vs XGrammar's.

For every shipped tokenizer family, K in (1, 10, 1,000, 10,000) and both endings (end ids, a
closing-quote terminator), compiles the set on the native core in both layouts (``full``,
``compact``) with compile threads 1 and 2, walks random accepted paths (random tokenizations, not
only the canonical one) and compares every variant's packed bitmask with XGrammar's at every
step, the end step included. XGrammar's vocabulary comes from each family's own decoder
(:mod:`trierouter.testing.decoders`), never from trierouter's token bytes. Writes
``benchmarks/results/equivalence_sweep.json`` with the commit it ran on; exits non-zero on any
difference. About 15 min on a shared 2-core host (``nice -n 10``).

    python benchmarks/equivalence_sweep.py [--paths 1000] [--families qwen2,gpt2] [--ks 1,10]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import xgrammar

from trierouter import SHIPPED, TokenIndex, compile_choices, shipped_vocabulary
from trierouter.data.synthetic import mixed_values
from trierouter.registry.trie import SPLIT_MIN
from trierouter.testing.decoders import DECODERS, independent_tokenizer_info
from trierouter.testing.oracle import compare_with_xgrammar, ebnf_alternation

RESULTS = Path(__file__).parent / "results" / "equivalence_sweep.json"
ROOT = Path(__file__).resolve().parent.parent


def _commit() -> str:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "trierouter", "csrc")
    return git("rev-parse", "--short", "HEAD") + ("-dirty" if dirty else "")


def _setting(
    family: str,
    vocab: Any,
    index: TokenIndex,
    compiler: Any,
    k: int,
    terminator: str | None,
    variants: list[tuple[str, int]],
    paths: int,
) -> dict[str, object]:
    t0 = time.perf_counter()
    values = mixed_values(k, seed=k + len(family))
    if terminator:  # a JSON string: opening quote in the value, closing quote as terminator
        values = ['"' + v.replace("\\", "\\\\").replace('"', '\\"') for v in values]
    sets = [
        compile_choices(
            values, index, terminator=terminator, backend="native", layout=lay, threads=t
        )
        for lay, t in variants
    ]
    compiled = compiler.compile_grammar(ebnf_alternation(values, terminator))
    row: dict[str, object] = {
        "family": family,
        "vocab_size": len(vocab),
        "k": k,
        "ending": "terminator" if terminator else "end ids",
        "layouts": [cs.layout for cs in sets],
        "threads_split": k >= 2 * SPLIT_MIN,
    }
    try:
        rep = compare_with_xgrammar(sets[0], vocab, compiled, n_paths=paths, seed=k, also=sets[1:])
        row.update(
            identical=True,
            paths=rep.paths,
            steps=rep.steps,
            masks=rep.masks,
            end_steps=rep.end_steps,
            non_canonical_paths=rep.non_canonical_paths,
        )
    except AssertionError as exc:
        row.update(identical=False, error=str(exc))
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", type=int, default=1000)
    parser.add_argument("--families", default=",".join(SHIPPED))
    parser.add_argument("--ks", default="1,10,1000,10000")
    parser.add_argument("--layouts", default="full,compact")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    variants = [(lay, int(t)) for lay in args.layouts.split(",") for t in args.threads.split(",")]
    commit, start, load0 = _commit(), time.perf_counter(), os.getloadavg()
    rows: list[dict[str, object]] = []
    print(
        f"{'family':<12}{'vocab':>9}{'K':>7} {'ending':<11}{'paths':>7}{'steps':>8}"
        f"{'masks':>8}{'non-canon':>10}{'ok':>5}{'sec':>7}"
    )
    for family in args.families.split(","):
        vocab = shipped_vocabulary(family)
        index = TokenIndex.get(vocab, backend="native")
        info = independent_tokenizer_info(family, vocab)
        compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        for k in [int(x) for x in args.ks.split(",")]:
            for terminator in (None, '"'):
                row = _setting(family, vocab, index, compiler, k, terminator, variants, args.paths)
                rows.append(row)
                print(
                    f"{family:<12}{len(vocab):>9,}{k:>7,} {row['ending']!s:<11}"
                    f"{row.get('paths', 0)!s:>7}{row.get('steps', 0)!s:>8}"
                    f"{row.get('masks', 0)!s:>8}{row.get('non_canonical_paths', 0)!s:>10}"
                    f"{'yes' if row['identical'] else 'NO':>5}{row['seconds']!s:>7}",
                    flush=True,
                )
    failures = sum(not r["identical"] for r in rows)
    out = {
        "commit": commit,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "host": "shared with other jobs, run under nice -n 10",
            "loadavg_start": [round(x, 2) for x in load0],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "wall_s": round(time.perf_counter() - start, 1),
        },
        "xgrammar": importlib.metadata.version("xgrammar"),
        "backend": "native",
        "variants": [f"{lay}, threads={t}" for lay, t in variants],
        "xgrammar_vocabulary": {f: DECODERS[f] for f in args.families.split(",")},
        "paths_per_setting": args.paths,
        "settings": len(rows),
        "all_identical": failures == 0,
        "total_steps": sum(int(str(r.get("steps", 0))) for r in rows),
        "total_masks": sum(int(str(r.get("masks", 0))) for r in rows),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"\n{len(rows) - failures}/{len(rows)} settings identical -> {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
