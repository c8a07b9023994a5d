"""Fast-forward: how many forward passes does appending forced tokens save?

Question: once the prefix a model has produced leaves only one possible continuation text (the
rest of a value whose prefix is unique in the set), trierouter can append that text's tokens
without sampling them and feed them to the model in the same forward call as the sampled token.
On real label sets, how many forward passes per output does that save, and is every output still
a member of the set?

Method: a tiny random-weight Llama (``trierouter.testing.tiny_model``, Qwen2 tokenizer, 151,872
logits) generates ``--n`` outputs per (set, decoding) with
``trierouter.router.transformers.generate``, once with ``fast_forward=False`` and once with
``fast_forward=True``, on the same prompts and seed.
Sets: 10,000 tool names (``tool_names(10_000)``) and the 74,731 billable ICD-10-CM codes.
Decoding: greedy and sampling at temperature 1.0. Counted per output: forward passes (model calls
whose logits chose a token of this output, the prefill included), tokens (forced ones and the end
id included) and forced tokens; outputs are checked for membership. A random-weight model spreads
its choices over many tokenizations, so sampled paths are longer than a trained model's; the
saving is a property of the set and the tokenizer more than of the model.

Run ``python benchmarks/fast_forward.py`` (a few minutes on 2 cores; ``--quick`` for a smoke run).
Writes ``benchmarks/results/fast_forward.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

OUT_JSON = Path(__file__).resolve().parent / "results" / "fast_forward.json"
WORDS = (
    "find call the right tool for this request about billing users repos shipments tickets "
    "datasets models prices teams releases"
).split()


def _prompts(kind: str, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    if kind == "icd10cm":
        from trierouter.data.icd10cm import icd10cm_codes, icd10cm_description

        codes = icd10cm_codes(n, seed=seed)
        return [f"Clinical note: {icd10cm_description(c)}.\nICD-10-CM code:" for c in codes]
    return [
        "User: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + "\nTool:"
        for _ in range(n)
    ]


def _summary(results: list[Any], members: set[str], seconds: float) -> dict[str, Any]:
    n = len(results)
    passes = sum(r.forward_passes for r in results)
    tokens = sum(len(r.token_ids) for r in results)
    forced = sum(r.forced_tokens for r in results)
    return {
        "outputs": n,
        "valid": sum(r.terminated and r.text in members for r in results),
        "forward_passes": passes,
        "tokens": tokens,
        "forced_tokens": forced,
        "forward_passes_per_output": passes / n,
        "tokens_per_output": tokens / n,
        "forced_tokens_per_output": forced / n,
        "seconds": seconds,
        "ms_per_output": 1e3 * seconds / n,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=400, help="outputs per (set, decoding, mode)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest here)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model-dir", default=None, help="tiny model folder (default: a temp dir)")
    ap.add_argument("--quick", action="store_true", help="--n 32")
    ap.add_argument("--out", default=str(OUT_JSON))
    args = ap.parse_args(argv)
    n = 32 if args.quick else args.n

    import numpy as np
    import torch
    import transformers

    from trierouter import TokenIndex, Vocabulary, __version__
    from trierouter.data.icd10cm import icd10cm_codes
    from trierouter.data.synthetic import tool_names
    from trierouter.router.plan import compile_plan
    from trierouter.router.transformers import generate
    from trierouter.testing.tiny_model import build_tiny_model

    torch.set_num_threads(args.threads)
    model_dir = Path(args.model_dir or Path(tempfile.gettempdir()) / "trierouter-tiny-qwen2")
    build_tiny_model(model_dir, tokenizer="qwen2", seed=0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    vocab = Vocabulary.from_tokenizer(tokenizer, width=model.config.vocab_size)
    index = TokenIndex.get(vocab)

    sets = {"tools-10k": tool_names(10_000), "icd10cm": icd10cm_codes()}
    cases: list[dict[str, Any]] = []
    for name, values in sets.items():
        t0 = time.perf_counter()
        plan = compile_plan(values, index)
        compile_s = time.perf_counter() - t0
        members = set(values)
        prompts = _prompts("icd10cm" if name == "icd10cm" else "tools", n, args.seed)
        limit = max(len(v.encode()) for v in values) + 1
        for decoding in ("greedy", "sample"):
            row: dict[str, Any] = {
                "set": name,
                "k": len(values),
                "compile_seconds": compile_s,
                "decoding": decoding,
            }
            for ff in (False, True):
                t0 = time.perf_counter()
                out = generate(
                    model,
                    tokenizer,
                    prompts,
                    plan,
                    max_new_tokens=limit,
                    do_sample=decoding == "sample",
                    temperature=1.0,
                    seed=args.seed,
                    fast_forward=ff,
                    batch_size=args.batch_size,
                )
                row["fast_forward" if ff else "plain"] = _summary(
                    out, members, time.perf_counter() - t0
                )
            plain, fast = row["plain"], row["fast_forward"]
            row["forward_passes_saved_pct"] = 100 * (
                1 - fast["forward_passes"] / plain["forward_passes"]
            )
            row["wall_saved_pct"] = 100 * (1 - fast["seconds"] / plain["seconds"])
            cases.append(row)
            _print_row(row, header=len(cases) == 1)

    data = {
        "benchmark": "fast_forward",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "torch_threads": args.threads,
        },
        "versions": {
            "trierouter": __version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
        },
        "model": {
            "kind": "tiny random-weight LlamaForCausalLM (trierouter.testing.tiny_model)",
            "tokenizer": "qwen2",
            "width": vocab.width,
        },
        "params": {"n": n, "batch_size": args.batch_size, "seed": args.seed, "temperature": 1.0},
        "cases": cases,
    }
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"\nwrote {out_path}")
    return 0 if all(c[m]["valid"] == c[m]["outputs"] for c in cases for m in _MODES) else 1


_MODES = ("plain", "fast_forward")


def _print_row(row: dict[str, Any], *, header: bool) -> None:
    if header:
        print(
            f"{'set':<10} {'K':>7} {'decoding':<7} | {'passes/out':>17} {'tokens/out':>15} "
            f"{'forced/out':>10} | {'passes saved':>12} {'wall saved':>10} | {'valid':>11}"
        )
        print("-" * 112)
    p, f = row["plain"], row["fast_forward"]
    print(
        f"{row['set']:<10} {row['k']:>7,} {row['decoding']:<7} | "
        f"{p['forward_passes_per_output']:>7.2f} -> {f['forward_passes_per_output']:>6.2f} "
        f"{p['tokens_per_output']:>6.2f} -> {f['tokens_per_output']:>5.2f} "
        f"{f['forced_tokens_per_output']:>10.2f} | {row['forward_passes_saved_pct']:>11.1f}% "
        f"{row['wall_saved_pct']:>9.1f}% | "
        f"{p['valid'] + f['valid']:>5}/{p['outputs'] + f['outputs']:<5}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
