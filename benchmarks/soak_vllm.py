"""Soak: a real ``vllm serve`` (CPU, the tiny model) under a concurrent client, memory sampled.

The OpenAI-compatible server is started the way ``tests/test_vllm.py`` starts it, with
trierouter's logits processor and named sets from ``$TRIEROUTER_SETS``, on loopback. An asyncio
``httpx`` client keeps ``--concurrency`` requests in flight (64) until ``--requests`` (5,000) have
been sent or ``--time-limit`` has passed, mixing (weights in ``MIX``):

- ``free``: unconstrained completions;
- ``named``: one of several named sets (1,000 and 10,000 tool names, four colours);
- ``inline``: ``trierouter_choices`` lists, some repeated (inline-cache hits), some fresh
  (compiled per request, evicted by the LRU);
- ``plan``: a named set behind a forced prefix, or think-then-answer (free text until
  ``</think>``, at most 4 tokens, then the value);
- ``tool_call``: a real tool call (``trierouter_tools_inline``: 8 of 16 tools with enums, dates,
  bounded integers and length-bounded strings; ``required`` or one forced tool), checked with
  ``jsonschema`` against the tool's schema;
- ``bad``: malformed or over-limit arguments, each expected to fail with HTTP 400 and its error;
- ``cancel``: a streamed request dropped after its first chunk, or a request whose client
  timeout expires first (the server must carry on).

Checked: every constrained output is valid (a value of its set, behind its prefix), every bad
request is refused with its error, nothing else fails (no 5xx, no dropped connection), and the
server's resident memory (psutil RSS, sampled twice a second and at every 100 completions) is
reported against completed requests; flat after warm-up means its growth over the last 80% of the
run stays small. Writes ``results/soak.json`` and ``results/soak.png``.

    python benchmarks/soak_vllm.py                      # 5,000 requests (vLLM venv)
    python benchmarks/soak_vllm.py --requests 300 --out /tmp/soak.json --no-plot
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
CACHE = Path(__file__).resolve().parent.parent / ".cache"

from trierouter.data.synthetic import tool_names
from trierouter.testing.tiny_model import VLLM_CPU_ENV

TOOLS_1K = tool_names(1000)
TOOLS_10K = tool_names(10_000, seed=1)
COLORS = ["red", "green", "blue", "green_light"]
TOOL_PREFIX = '{"name": "'
MAX_INLINE = 2000  # the server's $TRIEROUTER_MAX_INLINE_VALUES in the soak (bad requests exceed it)
MIX = {"free": 18, "named": 24, "inline": 14, "plan": 10, "tool_call": 10, "bad": 12, "cancel": 12}
BAD = [  # (vllm_xargs, expected text in the 400 response)
    ({"trierouter_set": "nope"}, "unknown set"),
    ({"trierouter_choices": "a,b"}, "list of strings"),
    ({"trierouter_choices": ["a", 3]}, "expected str"),
    ({"trierouter_choices": []}, "empty"),
    # nested arguments are refused by the server's own request schema before trierouter sees them
    ({"trierouter_choices": [["nested", ["deeper"]]]}, "validation error"),
    ({"trierouter_set": {"nested": {"deeper": [1]}}}, "validation error"),
    ({"trierouter_sett": "colors"}, "unknown trierouter argument"),
    ({"trierouter_set": "colors", "trierouter_think": ""}, "delimiter"),
    ({"trierouter_choices": [f"v{i}" for i in range(MAX_INLINE + 1)]}, "MAX_INLINE_VALUES"),
    ({"trierouter_choices": ["x" * 5000]}, "MAX_VALUE_BYTES"),
    ({"trierouter_set": "colors", "trierouter_prefix": "p" * 5000}, "MAX_TEXT_BYTES"),
]


# -- the server ------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_sets(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tools1k.txt").write_text("\n".join(TOOLS_1K) + "\n", encoding="utf-8")
    (directory / "tools10k.txt").write_text("\n".join(TOOLS_10K) + "\n", encoding="utf-8")
    (directory / "colors.json").write_text(json.dumps(COLORS), encoding="utf-8")
    return directory


def start_server(
    model: Path, sets: Path, work: Path, max_num_seqs: int
) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = _free_port()
    log = work / "server.log"
    env = {
        **os.environ,
        **VLLM_CPU_ENV,
        "VLLM_CACHE_ROOT": str(work / "vllm-cache"),
        "TRIEROUTER_SETS": str(sets),
        "TRIEROUTER_MAX_INLINE_VALUES": str(MAX_INLINE),
    }
    try:  # `vllm serve`; vllm-cpu 0.32.0's CLI looks up the distribution "vllm" and fails
        importlib.metadata.version("vllm")
        launcher = [str(Path(sys.executable).with_name("vllm")), "serve", str(model)]
    except importlib.metadata.PackageNotFoundError:  # the same server, by its module
        launcher = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
        ]
    cmd = [
        *launcher,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", "float32",
        "--enforce-eager",
        "--max-model-len", "512",
        "--max-num-seqs", str(max_num_seqs),
        "--served-model-name", "tiny",
        "--logits-processors", "trierouter.router.vllm.processor:TrieRouterLogitsProcessor",
    ]  # fmt: skip
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {proc.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url, log
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError(f"vllm serve not healthy in 300 s:\n{_tail(log)}")
        time.sleep(1)


def _tail(log: Path, n: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


# -- memory ----------------------------------------------------------------------------------------
class RssSampler:
    """Resident memory of the server process (and any children) every ``period`` seconds."""

    def __init__(self, pid: int, period: float = 0.5) -> None:
        import psutil

        self._proc = psutil.Process(pid)
        self.period = period
        self.samples: list[tuple[float, int, float]] = []  # (seconds, completed, MB)
        self.by_process: list[dict[str, float]] = []  # MB per process name, per sample
        self.completed = 0
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss_mb(self) -> tuple[float, dict[str, float]]:
        """Total RSS of the server and its children, and per process (API server, engine)."""
        import psutil

        parts: dict[str, float] = {}
        try:
            parts["api_server"] = self._proc.memory_info().rss / 2**20
            for c in self._proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    name = c.name() or str(c.pid)
                    parts[name] = parts.get(name, 0.0) + c.memory_info().rss / 2**20
        except psutil.Error:
            return float("nan"), parts
        return sum(parts.values()), parts

    def sample(self) -> None:
        total, parts = self.rss_mb()
        self.samples.append((time.monotonic() - self._t0, self.completed, total))
        self.by_process.append({k: round(v, 1) for k, v in parts.items()})

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def __enter__(self) -> RssSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


# -- requests --------------------------------------------------------------------------------------
@dataclass
class Tally:
    sent: Counter[str] = field(default_factory=Counter)
    ok: Counter[str] = field(default_factory=Counter)
    invalid: list[dict[str, Any]] = field(default_factory=list)
    bad_rejected: int = 0
    bad_wrong: list[dict[str, Any]] = field(default_factory=list)
    cancelled: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


def _inline_request(rng: random.Random) -> tuple[dict[str, Any], list[str], str]:
    if rng.random() < 0.6:  # one of 16 recurring lists: inline-cache hits
        seed = rng.randrange(16)
        values = random.Random(seed).sample(TOOLS_10K, 50 + 10 * seed)
    else:  # a fresh list: compiled for this request, then evicted by the LRU
        values = rng.sample(TOOLS_10K, rng.randrange(2, 400))
    return {"trierouter_choices": values}, values, ""


SOAK_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": f"{ns}.{verb}", "description": f"{verb} {ns}",
     "parameters": {"type": "object", "properties": {
         "id": {"type": "string", "maxLength": 12},
         "state": {"enum": ["open", "closed", "all"]},
         "since": {"type": "string", "format": "date"},
         "limit": {"type": "integer", "minimum": 1, "maximum": 100},
         "dry_run": {"type": "boolean"}},
         "required": ["id"] if verb != "list" else []}}}
    for ns in ("github", "jira", "slack", "stripe") for verb in ("get", "list", "close", "sync")
]  # fmt: skip
"""Inline tool registries for the tool-call requests (16 tools, enums, dates, bounded ints)."""


def _tool_call_request(rng: random.Random) -> tuple[dict[str, Any], list[str], str]:
    """A real tool call: inline tools, ``required`` or one forced tool, a small budget."""
    tools = random.Random(rng.randrange(4)).sample(SOAK_TOOLS, 8)
    args: dict[str, Any] = {
        "trierouter_tools_inline": json.dumps(tools),
        "trierouter_tool_budget": 3,
    }
    if rng.random() < 0.3:
        args["trierouter_tool_choice"] = tools[0]["function"]["name"]
    return args, [json.dumps(t) for t in tools], "tool_call"


def _valid_call(text: str, tools: list[str]) -> bool:
    import jsonschema

    schemas = {d["function"]["name"]: d["function"]["parameters"] for d in map(json.loads, tools)}
    try:
        call = json.loads(text)
        jsonschema.validate(call["arguments"], schemas[call["name"]])
    except (ValueError, KeyError, TypeError, jsonschema.ValidationError):
        return False
    return set(call) == {"name", "arguments"}


def _named_request(rng: random.Random) -> tuple[dict[str, Any], list[str], str]:
    name, values = rng.choice([("tools1k", TOOLS_1K), ("tools10k", TOOLS_10K), ("colors", COLORS)])
    return {"trierouter_set": name}, values, ""


def _plan_request(rng: random.Random) -> tuple[dict[str, Any], list[str], str]:
    if rng.random() < 0.5:
        return {"trierouter_set": "colors", "trierouter_prefix": "Color: "}, COLORS, "Color: "
    args = {"trierouter_set": "tools1k", "trierouter_think": "</think>"}
    args["trierouter_think_max_tokens"] = 4
    return args, TOOLS_1K, "</think>"


def _valid(text: str, values: list[str], lead: str, kind: str) -> bool:
    if lead == "tool_call":
        return _valid_call(text, values)
    if lead == "</think>":  # free text, the delimiter, then the value
        _head, sep, value = text.partition("</think>")
        return bool(sep) and value in values
    return text.startswith(lead) and text[len(lead) :] in values


async def one_request(
    client: Any, i: int, kind: str, rng: random.Random, tally: Tally, max_tokens: int
) -> None:
    import httpx

    body: dict[str, Any] = {"model": "tiny", "prompt": f"Request {i}: pick a tool for task {i}."}
    body.update(temperature=1.0, seed=i, max_tokens=max_tokens)
    values: list[str] = []
    lead = ""
    expect = ""
    if kind == "free":
        body["max_tokens"] = 8
    elif kind == "bad":
        args, expect = BAD[i % len(BAD)]
        body["vllm_xargs"] = args
    elif kind == "cancel":
        body["vllm_xargs"], values, lead = _named_request(rng)
    else:
        maker = {
            "named": _named_request,
            "inline": _inline_request,
            "plan": _plan_request,
            "tool_call": _tool_call_request,
        }[kind]
        body["vllm_xargs"], values, lead = maker(rng)
        if kind == "tool_call":
            body["max_tokens"] = max(max_tokens, 128)
    tally.sent[kind] += 1
    t0 = time.monotonic()
    try:
        if kind == "cancel":
            if i % 2:  # a streamed request dropped after its first chunk
                body["stream"] = True
                async with client.stream("POST", "/v1/completions", json=body) as r:
                    async for _ in r.aiter_bytes():
                        break
            else:  # the client gives up almost at once
                with contextlib.suppress(httpx.TimeoutException):
                    await client.post("/v1/completions", json=body, timeout=0.05)
            tally.cancelled += 1
            return
        r = await client.post("/v1/completions", json=body)
    except (httpx.HTTPError, OSError) as exc:
        tally.errors.append({"i": i, "kind": kind, "error": f"{type(exc).__name__}: {exc}"[:300]})
        return
    tally.latencies.append(time.monotonic() - t0)
    if kind == "bad":
        msg = r.text
        if r.status_code == 400 and expect in msg:
            tally.bad_rejected += 1
        else:
            tally.bad_wrong.append(
                {"i": i, "status": r.status_code, "expect": expect, "got": msg[:300]}
            )
        return
    if r.status_code != 200:
        tally.errors.append({"i": i, "kind": kind, "status": r.status_code, "body": r.text[:300]})
        return
    choice = r.json()["choices"][0]
    if kind != "free" and not _valid(choice["text"], values, lead, kind):
        tally.invalid.append(
            {"i": i, "kind": kind, "text": choice["text"][:200], "finish": choice["finish_reason"]}
        )
        return
    tally.ok[kind] += 1


async def drive(
    url: str,
    n: int,
    concurrency: int,
    time_limit: float,
    sampler: RssSampler,
    max_tokens: int,
    mix: dict[str, int],
) -> tuple[Tally, float, int]:
    import httpx

    rng = random.Random(0)
    kinds = list(mix)
    weights = [mix[k] for k in kinds]
    plan = [rng.choices(kinds, weights)[0] for _ in range(n)]
    tally = Tally()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    deadline = time.monotonic() + time_limit
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(600.0, connect=30.0)
    done = 0

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as client:

        async def worker(w: int) -> None:
            nonlocal done
            wrng = random.Random(1000 + w)
            while time.monotonic() < deadline:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                await one_request(client, i, plan[i], wrng, tally, max_tokens)
                done += 1
                sampler.completed = done
                if done % 100 == 0:
                    sampler.sample()
                    print(
                        f"  {done:>6} done, server RSS {sampler.samples[-1][2]:.0f} MB", flush=True
                    )

        t0 = time.monotonic()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        wall = time.monotonic() - t0
    return tally, wall, done


def summarize_rss(samples: list[tuple[float, int, float]], total: int) -> dict[str, Any]:
    """RSS after warm-up (10% of the requests) against the end: growth and slope."""
    import numpy as np

    pts = [(c, mb) for _, c, mb in samples if mb == mb]
    warm = [mb for c, mb in pts if total * 0.1 <= c <= total * 0.2] or [pts[0][1]]
    end = [mb for c, mb in pts if c >= total * 0.9] or [pts[-1][1]]
    after = [(c, mb) for c, mb in pts if c >= total * 0.1]
    slope = 0.0
    if len({c for c, _ in after}) > 2:
        x = np.array([c for c, _ in after], float)
        y = np.array([mb for _, mb in after], float)
        slope = float(np.polyfit(x, y, 1)[0]) * 1000
    buckets: dict[int, list[float]] = {}
    for c, mb in pts:
        buckets.setdefault(min(c, total - 1) * 10 // max(total, 1), []).append(mb)
    mid = [mb for c, mb in pts if total * 0.45 <= c <= total * 0.55] or [pts[-1][1]]
    return {
        "median_mb_per_tenth_of_run": [
            round(float(np.median(buckets[k])), 1) for k in sorted(buckets)
        ],
        "growth_second_half_mb": round(float(np.median(end) - np.median(mid)), 1),
        "start_mb": round(pts[0][1], 1),
        "peak_mb": round(max(mb for _, mb in pts), 1),
        "after_warmup_mb": round(float(np.median(warm)), 1),
        "end_mb": round(float(np.median(end)), 1),
        "growth_after_warmup_mb": round(float(np.median(end) - np.median(warm)), 1),
        "slope_mb_per_1000_requests": round(slope, 2),
    }


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = report["rss_curve"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot([c for c, _ in curve], [mb for _, mb in curve], lw=1.2)
    ax.axvline(report["requests_done"] * 0.1, color="grey", ls=":", lw=1, label="end of warm-up")
    ax.set_xlabel("completed requests")
    ax.set_ylabel("server RSS (MB)")
    ax.set_title(
        f"vllm serve soak: {report['requests_done']:,} requests, {report['concurrency']} in flight"
    )
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(
    *,
    mix: dict[str, int] | None = None,
    requests: int,
    concurrency: int,
    time_limit: float,
    max_tokens: int = 48,
    max_num_seqs: int = 64,
    model_dir: Path | None = None,
) -> dict[str, Any]:
    from trierouter.testing.tiny_model import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="trierouter-soak-"))
    model = build_tiny_model(model_dir or CACHE / "tiny-qwen2")
    sets = write_sets(work / "sets")
    t0 = time.monotonic()
    proc, url, log = start_server(model, sets, work, max_num_seqs)
    startup = time.monotonic() - t0
    print(f"server up in {startup:.0f} s at {url} (pid {proc.pid}); log {log}", flush=True)
    try:
        with RssSampler(proc.pid) as sampler:
            tally, wall, done = asyncio.run(
                drive(url, requests, concurrency, time_limit, sampler, max_tokens, mix or MIX)
            )
        alive = proc.poll() is None
        served_log = _tail(log, 10**9)  # before shutdown (which logs the engine's exit)
    finally:
        stop_server(proc)
    server_errors = [ln for ln in served_log.splitlines() if "Traceback" in ln]
    curve: list[tuple[int, float]] = []
    for _, c, mb in sampler.samples:  # one point per completed count (the last sample wins)
        if curve and curve[-1][0] == c:
            curve[-1] = (c, round(mb, 1))
        else:
            curve.append((c, round(mb, 1)))
    lat = sorted(tally.latencies)
    report: dict[str, Any] = {
        "requests_planned": requests,
        "requests_done": done,
        "concurrency": concurrency,
        "mix": mix or MIX,
        "max_num_seqs": max_num_seqs,
        "max_tokens": max_tokens,
        "wall_seconds": round(wall, 1),
        "startup_seconds": round(startup, 1),
        "requests_per_second": round(done / wall, 2) if wall else 0.0,
        "latency_p50_s": round(lat[len(lat) // 2], 3) if lat else None,
        "latency_p99_s": round(lat[int(len(lat) * 0.99)], 3) if lat else None,
        "sent": dict(tally.sent),
        "valid": dict(tally.ok),
        "invalid": tally.invalid[:20],
        "n_invalid": len(tally.invalid),
        "bad_rejected": tally.bad_rejected,
        "bad_wrong": tally.bad_wrong[:20],
        "cancelled": tally.cancelled,
        "errors": tally.errors[:20],
        "n_errors": len(tally.errors),
        "server_alive_at_end": alive,
        "server_tracebacks": len(server_errors),
        "rss": summarize_rss(sampler.samples, max(done, 1)),
        "rss_curve": curve,
        "rss_by_process_first_last": [sampler.by_process[0], sampler.by_process[-1]],
        "note": "tool_call requests are tool-call-SHAPED placeholders (tool names behind "
        '\'{"name": "\' via trierouter_prefix), to be replaced by real tool-call decoding',
    }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--time-limit", type=float, default=3 * 3600, help="seconds of sending")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--plot-only", type=Path, help="redraw the PNG of a results JSON")
    parser.add_argument(
        "--mix",
        default="",
        help="request kinds and weights, e.g. free=1 (a baseline without "
        "trierouter); default: every kind (MIX)",
    )
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(json.loads(args.plot_only.read_text()), args.plot_only.with_suffix(".png"))
        return 0
    mix = dict(MIX)
    if args.mix:
        mix = {k: int(v) for k, v in (item.split("=") for item in args.mix.split(","))}
    report = run(
        mix=mix,
        requests=args.requests,
        concurrency=args.concurrency,
        time_limit=args.time_limit,
        max_tokens=args.max_tokens,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    if not args.no_plot:
        try:
            plot(report, args.out.with_suffix(".png"))
        except ImportError:  # the vLLM environment may lack matplotlib
            print(f"no matplotlib here: python {__file__} --plot-only {args.out}")
    summary = {k: v for k, v in report.items() if k not in ("rss_curve",)}
    print(json.dumps(summary, indent=1))
    ok = (
        report["n_invalid"] == 0
        and report["n_errors"] == 0
        and not report["bad_wrong"]
        and report["server_alive_at_end"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
