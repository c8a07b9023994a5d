"""Full Proposition 1 sweep: trierouter's masks vs XGrammar's, 1,000 random paths per setting.

For every shipped tokenizer family, K in (1, 10, 1,000, 10,000) and both endings (end ids, a
closing-quote terminator), walks random accepted paths (random tokenizations, not only the
canonical one) and compares the packed bitmasks at every step, the end step included. Writes
``benchmarks/results/equivalence_sweep.json``; exits non-zero on any difference.

    python benchmarks/equivalence_sweep.py [--paths 1000] [--families qwen2,gpt2] [--ks 1,10]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import xgrammar

from trierouter import SHIPPED, TokenIndex, compile_choices, shipped_vocabulary
from trierouter.data.synthetic import mixed_values
from trierouter.testing.oracle import (
    compare_with_xgrammar,
    ebnf_alternation,
    xgrammar_tokenizer_info,
)

RESULTS = Path(__file__).parent / "results" / "equivalence_sweep.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", type=int, default=1000)
    parser.add_argument("--families", default=",".join(f for f in SHIPPED if f != "cl100k"))
    parser.add_argument("--ks", default="1,10,1000,10000")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = []
    failures = 0
    print(
        f"{'family':<12}{'vocab':>9}{'K':>7} {'ending':<11}{'paths':>7}{'steps':>8}"
        f"{'non-canon':>10}{'ok':>5}{'sec':>7}"
    )
    for family in args.families.split(","):
        vocab = shipped_vocabulary(family)
        index = TokenIndex.get(vocab)
        compiler = xgrammar.GrammarCompiler(xgrammar_tokenizer_info(vocab), cache_enabled=False)
        for k in [int(x) for x in args.ks.split(",")]:
            for terminator in (None, '"'):
                t0 = time.perf_counter()
                values = mixed_values(k, seed=k + len(family))
                if terminator:
                    values = ['"' + v.replace("\\", "\\\\").replace('"', '\\"') for v in values]
                cs = compile_choices(values, index, terminator=terminator)
                compiled = compiler.compile_grammar(ebnf_alternation(values, terminator))
                row: dict[str, object] = {
                    "family": family,
                    "vocab_size": len(vocab),
                    "k": k,
                    "ending": "terminator" if terminator else "end ids",
                }
                try:
                    rep = compare_with_xgrammar(cs, vocab, compiled, n_paths=args.paths, seed=k)
                    row.update(
                        identical=True,
                        paths=rep.paths,
                        steps=rep.steps,
                        end_steps=rep.end_steps,
                        non_canonical_paths=rep.non_canonical_paths,
                    )
                except AssertionError as exc:
                    failures += 1
                    row.update(identical=False, error=str(exc))
                row["seconds"] = round(time.perf_counter() - t0, 2)
                rows.append(row)
                print(
                    f"{family:<12}{len(vocab):>9,}{k:>7,} {row['ending']!s:<11}"
                    f"{row.get('paths', 0)!s:>7}{row.get('steps', 0)!s:>8}"
                    f"{row.get('non_canonical_paths', 0)!s:>10}"
                    f"{'yes' if row['identical'] else 'NO':>5}{row['seconds']!s:>7}",
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {"python": platform.python_version(), "cpu": platform.processor()},
                "xgrammar": importlib.metadata.version("xgrammar"),
                "paths_per_setting": args.paths,
                "settings": len(rows),
                "all_identical": failures == 0,
                "total_steps": sum(int(str(r.get("steps", 0))) for r in rows),
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"\n{len(rows) - failures}/{len(rows)} settings identical -> {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
