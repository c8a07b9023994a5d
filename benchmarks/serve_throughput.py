"""What constrained tool calls cost a serving engine: `trierouter serve` against vLLM's server.

    python benchmarks/serve_throughput.py                          # 20+20 questions, c = 1, 8, 32
    python benchmarks/serve_throughput.py --n 2 --concurrency 1,2 --rounds 1 --out /tmp/st.json
    python benchmarks/plot_serve_throughput.py                     # redraw the PNG from the JSON

Model: Qwen2.5-Coder-0.5B-Instruct (``trierouter.models``: PyPI bytes, pinned SHA-256, float32
in vLLM on the CPU), temperature 0. Questions: ``--n`` per category of BFCL v4 ``simple_python``
and ``multiple``, each with its own tools (BFCL docs converted by
``trierouter.registry.bfcl_schema``), drawn with a fixed seed before any outcome is seen
(``benchmarks/bfcl_offline.py``'s ``sample``, as ``bfcl_serve.py``). Every request is a plain
``client.chat.completions.create(messages=..., tools=..., max_tokens=...)`` from the unmodified
``openai`` client. Arms, one invocation, one commit (each arm's record in ``runs``:
``benchmarks/_provenance.py``):

- ``tr_auto``: ``trierouter serve``, ``tool_choice`` not set (``auto``: free text, a call
  constrained once the model opens one);
- ``tr_required``: ``trierouter serve``, ``tool_choice="required"``;
- ``vllm_required``: ``python -m vllm.entrypoints.openai.api_server --enable-auto-tool-choice
  --tool-call-parser hermes`` (no trierouter), ``tool_choice="required"``: vLLM's own
  structured outputs (XGrammar);
- ``vllm_free``: the same server, ``tool_choice`` not set: free text, read by the hermes parser
  (nothing constrains the decoding: the free-text baseline).

The two servers run one after the other with the same flags (``--max-num-seqs`` the largest
concurrency), each warmed by one request with a tool outside the sample, then by a first pass
of every question once per arm at the largest concurrency (``warm_pass``: each question's
tool set met for the first time, its compile included; ``--no-warm`` skips it, and the first
timed batch pays it instead). On each server, for
every round and concurrency, its arms take turns (the order reversed on odd rounds), each
sending every question once with ``c`` requests in flight. Per batch: output tokens (the
server's ``usage.completion_tokens``) over the batch's wall time (output tokens/s), requests/s,
each request's latency (p50 and p99, interpolated; with few requests p99 is close to the
slowest), requests with a call in ``tool_calls``, requests whose calls all validate against
their tools (``jsonschema`` with its format checker: schema-valid), correct by BFCL's official
checker, answers cut at ``max_tokens``, HTTP errors. ``summary`` gives per arm and concurrency
the median over rounds with the range; ``ratios`` trierouter's and vLLM's constrained
throughput over vLLM's free text; ``target`` whether ``tr_required`` reaches 95% of
``vllm_free`` at every concurrency (issue 47), and whether the run can tell: with one round, or
rounds whose spread straddles 95%, the verdict is ``undecided`` (use ``--rounds 3``). Writes
``benchmarks/results/serve_throughput.json`` (every answer in ``serve_throughput_texts.json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _provenance import arm_run, finish_run

MODEL = "qwen2.5-coder-0.5b-instruct"
CATEGORIES = ("simple_python", "multiple")
ARMS: dict[str, tuple[str, str | None]] = {
    "tr_auto": ("tr", None),
    "tr_required": ("tr", "required"),
    "vllm_required": ("vllm", "required"),
    "vllm_free": ("vllm", None),
}
"""Arm -> (server, ``tool_choice``; ``None``: not set, the OpenAI default ``auto``)."""
BASELINE = "vllm_free"
TARGET = ("tr_required", 0.95)
"""Issue 47: trierouter's constrained calls at >= 95% of free-text throughput, every concurrency."""
OUT = ROOT / "benchmarks" / "results" / "serve_throughput.json"
WARM_TOOL = {
    "type": "function",
    "function": {
        "name": "warm_up",
        "description": "Say hello.",
        "parameters": {"type": "object", "properties": {"who": {"type": "string"}}},
    },
}
"""The warm-up request's tool: outside every BFCL sample, so no question's set is precompiled."""


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between order statistics
    (numpy's default method)."""
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def batch_stats(answers: Sequence[dict[str, Any]], wall: float) -> dict[str, Any]:
    """One batch's figures from its answers (``s``, ``tokens``, ``finish``, ``valid``,
    ``correct``, ``called``, or ``error``) and its wall time."""
    ok = [a for a in answers if "error" not in a]
    tokens = sum(int(a.get("tokens") or 0) for a in ok)
    secs = [float(a["s"]) for a in answers]
    return {
        "n": len(answers),
        "errors": len(answers) - len(ok),
        "output_tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 3) if wall > 0 else None,
        "requests_per_s": round(len(answers) / wall, 4) if wall > 0 else None,
        "latency_p50_s": round(percentile(secs, 50), 3),
        "latency_p99_s": round(percentile(secs, 99), 3),
        "called": sum(bool(a.get("calls")) for a in ok),
        "schema_valid": sum(bool(a.get("calls")) and bool(a.get("valid")) for a in ok),
        "correct": sum(bool(a.get("correct")) for a in ok),
        "cut_at_max_tokens": sum(a.get("finish") == "length" for a in ok),
    }


def summarize(batches: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one arm at one concurrency: medians, with the range of the throughput."""
    tps = [b["tokens_per_s"] for b in batches if b["tokens_per_s"] is not None]
    out: dict[str, Any] = {"rounds": len(batches)}
    if tps:
        out |= {
            "tokens_per_s": round(statistics.median(tps), 3),
            "tokens_per_s_min": min(tps),
            "tokens_per_s_max": max(tps),
        }
    for key in ("latency_p50_s", "latency_p99_s", "requests_per_s"):
        out[key] = round(statistics.median(b[key] for b in batches), 3)
    for key in ("n", "errors", "called", "schema_valid", "correct", "cut_at_max_tokens"):
        out[key] = sum(b[key] for b in batches)
    return out


def ratios(summary: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float | None]]:
    """Each arm's throughput over :data:`BASELINE`'s, per concurrency."""
    base = summary.get(BASELINE, {})
    out: dict[str, dict[str, float | None]] = {}
    for arm, per in summary.items():
        if arm == BASELINE:
            continue
        out[arm] = {}
        for c, s in per.items():
            b = base.get(c, {}).get("tokens_per_s")
            t = s.get("tokens_per_s")
            out[arm][c] = round(t / b, 4) if t is not None and b else None
    return out


def target(summary: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Whether :data:`TARGET` is met, and whether the run can tell: at each concurrency the
    ratio of medians, and its bounds from the rounds' ranges (lowest over highest, highest over
    lowest). A concurrency is decided only with two rounds or more and both bounds on one side
    of the share; otherwise the verdict is ``undecided`` (the noise is wider than the margin)."""
    arm, share = TARGET
    per: dict[str, Any] = {}
    for c, t in summary.get(arm, {}).items():
        b = summary.get(BASELINE, {}).get(c, {})
        if "tokens_per_s" not in t or not b.get("tokens_per_s"):
            per[c] = {"decided": False, "why": "not measured"}
            continue
        lo = t["tokens_per_s_min"] / b["tokens_per_s_max"]
        hi = t["tokens_per_s_max"] / b["tokens_per_s_min"]
        rounds = min(t["rounds"], b["rounds"])
        decided = rounds >= 2 and (lo >= share or hi < share)
        why = (
            ""
            if decided
            else "one round: no spread measured"
            if rounds < 2
            else "the rounds' spread straddles the share"
        )
        per[c] = {
            "ratio": round(t["tokens_per_s"] / b["tokens_per_s"], 4),
            "ratio_low": round(lo, 4),
            "ratio_high": round(hi, 4),
            "rounds": rounds,
            "decided": decided,
            "met": decided and lo >= share,
            **({"why": why} if why else {}),
        }
    if per and all(x["decided"] for x in per.values()):
        verdict = "met" if all(x["met"] for x in per.values()) else "not met"
    else:
        verdict = "undecided"
    return {"arm": arm, "of": BASELINE, "share": share, "verdict": verdict, "by_concurrency": per}


def run_batch(ask: Callable[[Any], dict[str, Any]], entries: Sequence[Any], c: int) -> Any:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(c) as pool:
        answers = list(pool.map(ask, entries))
    return answers, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=20, help="questions per category")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--categories", default=",".join(CATEGORIES))
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--rounds", type=int, default=3, help="repeats of every batch (spread)")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument(
        "--no-warm",
        dest="warm",
        action="store_false",
        help="skip the untimed first pass (every question once per arm, at the largest "
        "concurrency) that compiles each question's tool set before the timed batches",
    )
    p.add_argument("--kv-gib", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE of each server")
    p.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each server")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"--arms: unknown {unknown}; known: {', '.join(ARMS)}")
    conc = [int(c) for c in args.concurrency.split(",") if c]

    import openai
    from bfcl_offline import judge_row, sample, tools_of
    from bfcl_serve import ask as ask_one
    from bfcl_serve import write_result
    from serve_ttft import _vllm

    from trierouter.data.bfcl_eval import BFCL_WHEEL, load_judge
    from trierouter.models import MODELS, load_model
    from trierouter.testing.serve import serve

    model = Path(load_model(MODEL))
    judge = load_judge()
    cats = [c for c in args.categories.split(",") if c]
    entries = [e for c in cats for e in sample(c, args.n, args.seed)]
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    tmp = Path(tempfile.mkdtemp(prefix="serve-throughput-"))
    env = {
        "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"),
        "OMP_NUM_THREADS": str(args.threads),
        "VLLM_CPU_KVCACHE_SPACE": str(args.kv_gib),
    }
    server_args = ["--max-model-len", "4096", "--max-num-seqs", str(max(conc))]
    result: dict[str, Any] = {
        "benchmark": "serve_throughput",
        "model": MODEL,
        "model_sha256": MODELS[MODEL].sha256,
        "judge": f"bfcl_eval ast_checker from {BFCL_WHEEL.requirement}",
        "questions": {c: [e.id for e in entries if e.category == c] for c in cats},
        "settings": settings,
        "server_args": server_args,
        "server_env": {k: v for k, v in env.items() if k != "VLLM_CACHE_ROOT"},
        "client": "openai " + openai.__version__,
        "runs": {},
        "batches": {},
    }
    texts: dict[str, Any] = {}

    def asker(client: Any, arm: str) -> Callable[[Any], dict[str, Any]]:
        required = ARMS[arm][1] == "required"

        def one(e: Any) -> dict[str, Any]:
            a = ask_one(client, e, required=required, max_tokens=args.max_tokens)
            if "error" not in a:
                a |= judge_row(judge, e, a["calls"], tools_of(e), text_allowed=not required)
            return a

        return one

    servers: dict[str, Callable[[], Any]] = {
        "tr": lambda: serve(model, log=tmp / "tr.log", env=env, args=server_args, timeout=900),
        "vllm": lambda: _vllm(
            model,
            tmp / "vllm.log",
            env,
            [*server_args, "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
        ),
    }
    for key, start in servers.items():
        mine = [a for a in arms if ARMS[a][0] == key]
        if not mine:
            continue
        t0 = time.perf_counter()
        with start() as url:
            result.setdefault("server_start_s", {})[key] = round(time.perf_counter() - t0, 1)
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=900)
            client.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "Say hello to Ada."}],
                tools=[WARM_TOOL],  # type: ignore[list-item]
                max_tokens=16,
                temperature=0.0,
            )
            records = {a: arm_run(settings) for a in mine}
            for arm in mine if args.warm else []:  # first use of every set, not timed below
                answers, wall = run_batch(asker(client, arm), entries, max(conc))
                result.setdefault("warm_pass", {})[arm] = batch_stats(answers, wall)
            for r in range(args.rounds):
                for c in conc:
                    for arm in mine if r % 2 == 0 else mine[::-1]:
                        load = [round(x, 2) for x in os.getloadavg()]
                        answers, wall = run_batch(asker(client, arm), entries, c)
                        stats = batch_stats(answers, wall) | {"round": r, "loadavg_start": load}
                        result["batches"].setdefault(arm, {}).setdefault(str(c), []).append(stats)
                        for e, a in zip(entries, answers, strict=True):
                            texts[f"{e.id}:{arm}:c{c}:r{r}"] = a
                        print(
                            f"{arm:14s} c={c:<3d} round {r}: {stats['tokens_per_s']} tok/s, "
                            f"p50 {stats['latency_p50_s']} s, p99 {stats['latency_p99_s']} s, "
                            f"valid {stats['schema_valid']}/{stats['n']}",
                            flush=True,
                        )
                        write_result(args.out, result, texts)
            for a in mine:
                result["runs"][a] = finish_run(records[a])
    result["summary"] = {
        arm: {c: summarize(b) for c, b in per.items()} for arm, per in result["batches"].items()
    }
    result["ratios"] = ratios(result["summary"])
    result["target"] = target(result["summary"])
    write_result(args.out, result, texts)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
