"""BFCL through a live server and the unmodified ``openai`` client: what an agent receives.

    python benchmarks/bfcl_serve.py --n 50          # ~40 min here (2 cores, two server starts)

Model: Qwen2.5-Coder-0.5B-Instruct (``trierouter.models``: PyPI bytes, pinned SHA-256, float32
in vLLM on the CPU), temperature 0, the tools of each question (BFCL docs converted by
``trierouter.registry.bfcl_schema``). Sample: ``--n`` questions per category drawn with a
fixed seed before any outcome is seen (``benchmarks/bfcl_offline.py``'s ``sample``). Four arms,
each question sent as a plain ``client.chat.completions.create(messages=..., tools=...)``:

- ``tr_auto``: ``trierouter serve``, ``tool_choice`` not set (the OpenAI default, ``auto``);
- ``tr_required``: ``trierouter serve``, ``tool_choice="required"``;
- ``vllm_auto``: ``vllm serve --enable-auto-tool-choice --tool-call-parser hermes`` (Qwen2.5's
  own parser), ``tool_choice`` not set;
- ``vllm_required``: the same server, ``tool_choice="required"`` (vLLM's structured outputs).

Per arm and category: requests whose ``message.tool_calls`` is not empty (``called``), correct
by BFCL's official ``ast_checker`` (from the pinned ``bfcl-eval`` wheel) judged on
``message.tool_calls`` only, schema-valid (every call validates against its tool with
``jsonschema`` and its format checker), ``called_lenient`` (a call in ``tool_calls`` or, as a
reader who parses the text would find it, the first JSON call object in ``content``),
``called_attempt`` (also a call begun in ``content``, ``{"name": ..., "arguments":``, that does
not parse: cut at ``max_tokens`` or closed wrongly; ``--rescore`` recounts it from the committed
answers), HTTP errors, and seconds per request (each request's own wall time; 8 requests in
flight). The two servers run one after the other; each server's two arms run interleaved by
question through one pool (q1 in one arm, q1 in the other, q2, ...), one run record for both.
On irrelevance, ``vllm_auto``'s ``called_lenient`` and ``called_attempt`` are the free
model read leniently: the rate ``tr_auto`` must not exceed. Writes
``benchmarks/results/bfcl_serve.json`` (+ ``_texts.json``); ``--arms tr_auto --keep`` reruns
one arm and keeps the others; ``runs`` holds each arm's own record (``benchmarks/_provenance.py``:
commit, date, load average at its start and end, settings), and the report names each arm's run
in the table when they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _provenance import arm_run, arm_runs, finish_run, is_mixed, run_label
from bfcl_offline import call_started, judge_row, lenient_calls, sample, tools_of

MODEL = "qwen2.5-coder-0.5b-instruct"
CATEGORIES = ("simple_python", "multiple", "irrelevance")
ARMS = ("tr_auto", "tr_required", "vllm_auto", "vllm_required")
OUT = ROOT / "benchmarks" / "results" / "bfcl_serve.json"
SERVER_ARGS = ["--max-model-len", "4096", "--max-num-seqs", "8"]


def _calls(message: Any) -> list[dict[str, Any]] | None:
    """``message.tool_calls`` as ``[{"name", "arguments"}]``; ``None`` if one is not JSON."""
    out = []
    for tc in message.tool_calls or []:
        try:
            args = json.loads(tc.function.arguments or "{}")
        except ValueError:
            return None
        out.append({"name": tc.function.name, "arguments": args})
    return out


def ask(client: Any, entry: Any, *, required: bool, max_tokens: int) -> dict[str, Any]:
    """One request; the answer's calls, content and timing (or the HTTP error)."""
    import openai

    kw: dict[str, Any] = {"tool_choice": "required"} if required else {}
    t0 = time.perf_counter()
    try:
        r = client.chat.completions.create(
            model="tiny", messages=entry.messages, tools=tools_of(entry), temperature=0.0,
            max_tokens=max_tokens, **kw,
        )  # fmt: skip
    except openai.APIStatusError as exc:
        return {"error": f"{exc.status_code}: {str(exc)[:300]}", "s": time.perf_counter() - t0}
    msg = r.choices[0].message
    return {
        "s": time.perf_counter() - t0,
        "calls": _calls(msg),
        "content": msg.content,
        "finish": r.choices[0].finish_reason,
        "tokens": r.usage.completion_tokens if r.usage else None,
    }


def _read(answer: dict[str, Any]) -> tuple[bool, bool]:
    """(``called_lenient``, ``called_attempt``) of one answer: a call in ``tool_calls`` or the
    first JSON call parsed from ``content``; or, also, the head of a call in ``content`` that
    does not parse (cut at ``max_tokens`` or closed wrongly)."""
    text = answer.get("content") or ""
    lenient = bool(answer.get("calls") or lenient_calls(text))
    return lenient, lenient or call_started(text)


def rescore(out: Path) -> None:
    """Recompute ``called_attempt`` of every arm and category from the committed answers
    (``_texts.json``) without asking again; the rescoring is recorded in ``rescored``."""
    result = json.loads(out.read_text())
    texts = json.loads(out.with_name(out.stem + "_texts.json").read_text())
    counts: dict[tuple[str, str], int] = {}
    for key, answer in texts.items():
        qid, arm = key.rsplit(":", 1)
        cat = qid.rsplit("_", 1)[0]
        if "error" not in answer:
            counts[arm, cat] = counts.get((arm, cat), 0) + _read(answer)[1]
    for arm, rows in result["arms"].items():
        for cat, agg in rows.items():
            agg["called_attempt"] = counts.get((arm, cat), 0)
    result["rescored"] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "what": "called_attempt added from the committed answers; nothing asked again",
    }
    out.write_text(json.dumps(result, indent=1) + "\n")


def run_arms(
    url: str, arms: list[str], data: dict[str, list[Any]], judge: Any, args: Any
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Every question of a category asked once per arm of one server, the arms interleaved by
    question (q1 arm a, q1 arm b, q2 arm a, ...) through one pool of ``--concurrency`` requests
    in flight, so the arms share the server's load and the hour alike."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=900)
    rows: dict[str, dict[str, Any]] = {arm: {} for arm in arms}
    texts: dict[str, Any] = {}
    for cat, entries in data.items():
        jobs = [(e, arm) for e in entries for arm in arms]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            answers = list(
                pool.map(
                    lambda job: ask(
                        client, job[0], required=job[1].endswith("required"),
                        max_tokens=args.max_tokens,
                    ),
                    jobs,
                )
            )  # fmt: skip
        wall = time.perf_counter() - t0
        for arm in arms:
            mine = [(e, a) for (e, job_arm), a in zip(jobs, answers, strict=True) if job_arm == arm]
            rows[arm][cat] = _aggregate(judge, arm, mine, texts, wall)
            agg = rows[arm][cat]
            line = " ".join(f"{k}={v}" for k, v in agg.items())
            print(f"{arm:14s} {cat:14s} {line}", flush=True)
    return rows, texts


def _aggregate(
    judge: Any, arm: str, answered: list[tuple[Any, Any]], texts: dict[str, Any], wall: float
) -> dict[str, Any]:
    """One arm's counts over one category's answers (``wall_s``: the interleaved batch's wall)."""
    required = arm.endswith("required")
    agg = {"n": len(answered), "called": 0, "correct": 0, "valid": 0, "called_lenient": 0}
    agg["called_attempt"] = 0
    agg["errors"] = 0
    secs = []
    for e, a in answered:
        texts[e.id + ":" + arm] = a
        secs.append(a["s"])
        if "error" in a:
            agg["errors"] += 1
            continue
        calls = a["calls"]
        row = judge_row(judge, e, calls, tools_of(e), text_allowed=not required)
        agg["called"] += bool(calls)
        agg["correct"] += row["correct"]
        agg["valid"] += row["valid"]
        lenient, attempt = _read(a)
        agg["called_lenient"] += lenient
        agg["called_attempt"] += attempt
    secs.sort()
    agg["s_per_request_median"] = round(secs[len(secs) // 2], 3)
    agg["s_per_request_mean"] = round(sum(secs) / len(secs), 3)
    agg["wall_s"] = round(wall, 1)
    return agg


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=50, help="questions per category")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--categories", default=",".join(CATEGORIES))
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--plot", action="store_true", help="only redraw the PNG from --out")
    p.add_argument(
        "--rescore", action="store_true",
        help="only recompute called_attempt in --out from its committed answers",
    )  # fmt: skip
    p.add_argument(
        "--keep", action="store_true",
        help="keep the arms of --out that --arms does not rerun (each with its own commit and "
        "date in 'runs'); the sample settings must match",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.rescore:
        rescore(args.out)
        return 0
    if args.plot:
        plot(json.loads(args.out.read_text()), args.out.with_suffix(".png"))
        return 0

    from serve_ttft import _vllm

    from trierouter.data.bfcl_eval import BFCL_WHEEL, load_judge
    from trierouter.models import load_model
    from trierouter.testing.serve import serve

    model = Path(load_model(MODEL))
    judge = load_judge()
    cats = [c for c in args.categories.split(",") if c]
    arms = [a for a in args.arms.split(",") if a]
    data = {c: sample(c, args.n, args.seed) for c in cats}
    tmp = Path(tempfile.mkdtemp(prefix="bfcl-serve-"))
    env = {"VLLM_CACHE_ROOT": str(tmp / "vllm-cache"), "OMP_NUM_THREADS": "2"}
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "plot", "rescore")}
    here = arm_run(settings)
    result: dict[str, Any] = {
        "commit": here["commit"],
        "date": here["date"],
        "model": MODEL,
        "judge": f"bfcl_eval ast_checker from {BFCL_WHEEL.requirement}",
        "n": args.n, "seed": args.seed, "max_tokens": args.max_tokens,
        "concurrency": args.concurrency, "temperature": 0.0,
        "client": "openai " + __import__("openai").__version__,
        "arms": {},
    }  # fmt: skip
    texts: dict[str, Any] = {}
    if args.keep and args.out.exists():
        old = json.loads(args.out.read_text())
        same = ("n", "seed", "max_tokens", "concurrency", "model", "judge")
        if any(old.get(k) != result[k] for k in same):
            raise SystemExit(f"--keep: {args.out} was run with other settings ({same})")
        old_texts = json.loads(args.out.with_name(args.out.stem + "_texts.json").read_text())
        for arm, rows in old["arms"].items():
            if arm not in arms:
                result["arms"][arm] = rows
                result.setdefault("runs", {})[arm] = old.get("runs", {}).get(
                    arm, {"commit": old["commit"], "date": old["date"]}
                )
                texts.update({k: v for k, v in old_texts.items() if k.endswith(":" + arm)})
    servers = {
        "tr": lambda: serve(model, log=tmp / "tr.log", env=env, args=SERVER_ARGS, timeout=900),
        "vllm": lambda: _vllm(
            model, tmp / "vllm.log", env,
            [*SERVER_ARGS, "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
        ),
    }  # fmt: skip
    for key, start in servers.items():
        mine = [a for a in arms if a.startswith(key + "_")]
        if not mine:
            continue
        t0 = time.perf_counter()
        with start() as url:
            print(f"{key} server up in {time.perf_counter() - t0:.0f} s", flush=True)
            run = arm_run(settings)
            rows, t = run_arms(url, mine, data, judge, args)
            done = finish_run(run)
            for arm in mine:  # the server's arms ran together: one run record each
                result.setdefault("runs", {})[arm] = dict(done, interleaved_with=mine)
                result["arms"][arm] = rows[arm]
            texts.update(t)
            write_result(args.out, result, texts)  # each server's arms as they finish
    plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")
    return 0


def plot(result: dict[str, Any], path: Path) -> None:
    """Correct answers and calls made per arm and category, from the result JSON."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a in ARMS if a in result["arms"]]
    cats = list(result["arms"][arms[0]])
    runs = arm_runs(result)
    # arms of different runs name their run under their label, as the report's table does
    ticks = [f"{a}\n{run_label(runs.get(a))}" for a in arms] if is_mixed(runs, arms) else arms
    fig, axes = plt.subplots(1, len(cats), figsize=(4 * len(cats), 3.6), sharey=True)
    for ax, cat in zip(axes, cats, strict=True):
        rows = [result["arms"][a][cat] for a in arms]
        x = range(len(arms))
        ax.bar([i - 0.2 for i in x], [r["correct"] for r in rows], 0.4, label="correct")
        ax.bar([i + 0.2 for i in x], [r["called"] for r in rows], 0.4, label="tool_calls made")
        ax.set_xticks(list(x), ticks, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{cat} (n={rows[0]['n']})", fontsize=9)
    axes[0].set_ylabel("answers")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"BFCL through the server, {result['model']}, openai client", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_result(out: Path, result: dict[str, Any], texts: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    texts_out = out.with_name(out.stem + "_texts.json")
    texts_out.write_text(json.dumps(texts, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
