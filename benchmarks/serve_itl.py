"""Inter-token latency of running requests while new inline tool sets arrive: trierouter vs vLLM.

The question (issue 36): a new 1,000-tool inline set must not stall the requests already
decoding. Two servers on loopback, one after the other, both vLLM 0.32 (CPU) with the tiny
random-weight model (Qwen2 tokenizer), the default multiprocessing engine core and the same chat
template without a tools section (prompt length does not grow with the tool count), as in
``serve_ttft.py``:

- **trierouter**: ``trierouter serve`` (inline tools constrained by trierouter's logits
  processor);
- **vllm**: ``vllm serve --tool-call-parser hermes --enable-auto-tool-choice`` (vLLM turns
  ``tool_choice="required"`` into a JSON schema over the request's tools and compiles it with
  its structured-outputs backend, XGrammar).

Design, fixed before any run. Per server, after a warm-up (a short decode wave and one arrival
with a set of its own), ``--rounds`` times, alternating:

- ``quiet``: ``--requests`` (32) concurrent streaming chat completions, no tools, temperature 0,
  ``max_tokens=--max-tokens`` with ``ignore_eos`` (each runs its full length). Every streamed
  chunk with content is time-stamped on arrival; the inter-token latency (ITL) is the gap
  between consecutive content chunks of one request (the time to the first chunk excluded).
- ``arrivals``: the same requests, and meanwhile one sender posts new ``--tools``-tool inline
  sets with ``tool_choice="required"`` and ``max_tokens=--arrival-max-tokens``, **one after
  the other** (the next when the previous answered: at most one new set in flight, so the
  load adapts to each server's own latency instead of piling up), from the moment every
  decoding request has its first chunk until the last one ends. Each arrival is a fresh
  sample of ``--tools`` tools from a pool of ``--pool`` real OpenAPI operations (seeded per
  arrival, the same sequence on both servers): a new content hash, nothing cached. The
  arrival in flight when decoding ends is awaited (the next phase starts clean) but not
  counted as completed.

Reported per server and phase: ITL p50 / p99 / max (ms) over all gaps of all requests and
rounds (percentiles by linear interpolation), arrivals completed within the decode window and
their latency, the share of the window with an arrival in flight; ``added`` = arrivals minus
quiet, for p50 and p99. Beside these client-side times, each phase records the engine's own
ITL histogram (``vllm:inter_token_latency_seconds`` from ``/metrics``, token timestamps taken in
the engine core, so free of the client's and the API process's scheduling; finer buckets set by
``--custom-histogram-buckets``, the same on both servers; the arrivals' own few tokens
included) and its p50 / p99 interpolated within buckets as Prometheus does. Target (issue
36): p99 added <= 50 ms. ``enough_arrivals`` says whether every arrivals round completed at
least 3. Chunks and tokens are counted per request (``continuous_usage_stats``): a chunk can
carry several tokens (vLLM's API process merges a request's pending tokens into one chunk when
it falls behind, and sends none for text that is still an incomplete UTF-8 sequence), so a
client gap is the time between deliveries, what a reader of the stream sees; the engine's
histogram is per token (a stalled step delays one token of each running request, under 1% of
a phase's tokens: its p99 can miss a stall that its buckets over 1 s show). The client moves
its tool pool out of the garbage collector's reach (``gc.freeze``) and collects before each
phase: in a first run a full collection over the pool paused it for seconds, seen as an 11 s
gap in a quiet phase the engine ran smoothly.

Every request has ``--timeout`` seconds; a server that fails to start is recorded with its log's
tail and the other still runs. Writes ``results/serve_itl.json`` (and ``.png``); the JSON is
written after each server.

    python benchmarks/serve_itl.py                                   # the full run
    python benchmarks/serve_itl.py --requests 4 --tools 100 --max-tokens 32 --out /tmp/s.json
    python benchmarks/serve_itl.py --servers trierouter
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _provenance import arm_run, finish_run
from serve_ttft import QUESTIONS, TEMPLATE, _vllm, load_tools

from trierouter.testing.serve import serve, tiny_tool_model

SERVERS = ("trierouter", "vllm")
MIN_ARRIVALS = 3
"""An arrivals round that completes fewer than this many new sets measures too little."""


def percentile(xs: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``xs`` by linear interpolation between order
    statistics (numpy's default method)."""
    if not xs:
        raise ValueError("percentile of no values")
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def gaps_ms(streams: list[list[float]]) -> list[float]:
    """Gaps between consecutive chunk times of each stream (seconds in, milliseconds out)."""
    return [1000.0 * (b - a) for t in streams for a, b in pairwise(t)]


def itl_summary(gaps: list[float]) -> dict[str, Any]:
    if not gaps:
        return {"n_gaps": 0, "p50_ms": None, "p99_ms": None, "max_ms": None, "mean_ms": None}
    return {
        "n_gaps": len(gaps),
        "p50_ms": percentile(gaps, 50),
        "p99_ms": percentile(gaps, 99),
        "max_ms": max(gaps),
        "mean_ms": sum(gaps) / len(gaps),
    }


BUCKETS_S = [
    *(0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075, 0.1, 0.125, 0.15),
    *(0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 60.0),
]
"""The servers' own ITL histogram (``--custom-histogram-buckets``), finer than vLLM's default."""
METRIC = "vllm:inter_token_latency_seconds_bucket{"


def parse_buckets(text: str) -> dict[float, float]:
    """Cumulative counts by upper bound of vLLM's ITL histogram in a ``/metrics`` page."""
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(METRIC):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            out[bound] = out.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def histogram_quantile(cum: dict[float, float], q: float) -> float | None:
    """Prometheus's ``histogram_quantile``: the ``q`` (0-1) quantile of cumulative ``cum``,
    linear within its bucket; in the ``+Inf`` bucket, the last finite bound."""
    bounds = sorted(cum)
    if not bounds or cum[bounds[-1]] <= 0:
        return None
    rank, lo, below = q * cum[bounds[-1]], 0.0, 0.0
    for b in bounds:
        if cum[b] >= rank:
            if b == float("inf"):
                return lo
            return lo + (b - lo) * (rank - below) / max(cum[b] - below, 1e-12)
        lo, below = b, cum[b]
    return lo


async def server_buckets(c: httpx.AsyncClient) -> dict[float, float]:
    try:
        r = await c.get("/metrics")
        return parse_buckets(r.text) if r.status_code == 200 else {}
    except httpx.HTTPError:
        return {}


def server_itl(cum: dict[float, float]) -> dict[str, Any]:
    """The engine's own ITL (token timestamps taken in the engine core, arrivals' tokens
    included) over a phase: count, p50 and p99 in ms from the histogram."""
    p50, p99 = histogram_quantile(cum, 0.5), histogram_quantile(cum, 0.99)
    return {
        "n_tokens": cum.get(float("inf"), 0.0),
        "p50_ms": None if p50 is None else 1000 * p50,
        "p99_ms": None if p99 is None else 1000 * p99,
        "cumulative": {str(k): v for k, v in sorted(cum.items())},
    }


def chat(q: str, max_tokens: int, **kw: Any) -> dict[str, Any]:
    b: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": q}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    b.update(kw)
    return b


async def decode(
    c: httpx.AsyncClient, body: dict[str, Any], first: asyncio.Event
) -> dict[str, Any]:
    """One streamed completion: the arrival time of each chunk carrying content."""
    times: list[float] = []
    out: dict[str, Any] = {"ok": False, "status": None, "error": None, "times": times,
                           "tokens": None}  # fmt: skip
    try:
        async with c.stream("POST", "/v1/chat/completions", json=body) as r:
            out["status"] = r.status_code
            if r.status_code != 200:
                out["error"] = (await r.aread()).decode(errors="replace")[:300]
                return out
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    break
                now = time.perf_counter()
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    out["error"] = json.dumps(chunk["error"])[:300]
                    return out
                if chunk.get("usage"):
                    out["tokens"] = chunk["usage"].get("completion_tokens")
                choices = chunk.get("choices") or [{}]
                if choices[0].get("delta", {}).get("content"):
                    times.append(now)
                    first.set()
        out["ok"] = True
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out


async def post(c: httpx.AsyncClient, body: bytes) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        r = await c.post("/v1/chat/completions", content=body, headers=JSON)
        ok = r.status_code == 200
        err = None if ok else r.text[:300]
        res: dict[str, Any] = {"ok": ok, "status": r.status_code, "error": err}
    except httpx.HTTPError as e:
        res = {"ok": False, "status": None, "error": f"{type(e).__name__}: {e}"[:300]}
    return {**res, "start": t0, "end": time.perf_counter(), "s": time.perf_counter() - t0}


JSON = {"content-type": "application/json"}


def tool_set(pool: list[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    return random.Random(seed).sample(pool, n)


def arrival_bodies(
    pool: list[dict[str, Any]], args: argparse.Namespace, seeds: list[int]
) -> list[tuple[int, bytes]]:
    """The arrivals' requests, one per seed, encoded before the phase (encoding 1,000 tools in
    the client's loop would delay its reading of the streams)."""
    out = []
    for k, seed in enumerate(seeds):
        b = chat(QUESTIONS[k % len(QUESTIONS)], args.arrival_max_tokens,
                 tools=tool_set(pool, args.tools, seed), tool_choice="required")  # fmt: skip
        out.append((seed, json.dumps(b).encode()))
    return out


async def phase(
    url: str, args: argparse.Namespace, sets: list[tuple[int, bytes]] | None
) -> dict[str, Any]:
    """One wave of ``args.requests`` streamed decodes; with ``sets`` (seed, encoded request),
    new sets arrive meanwhile, one after the other, in order."""
    timeout = httpx.Timeout(args.timeout)
    limits = httpx.Limits(max_connections=args.requests + 8)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as c:
        firsts = [asyncio.Event() for _ in range(args.requests)]
        bodies = [
            chat(
                QUESTIONS[i % len(QUESTIONS)],
                args.max_tokens,
                stream=True,
                ignore_eos=True,
                stream_options={"include_usage": True, "continuous_usage_stats": True},
            )
            for i in range(args.requests)
        ]
        before = await server_buckets(c)
        t0 = time.perf_counter()
        tasks = [
            asyncio.create_task(asyncio.wait_for(decode(c, b, f), args.timeout))
            for b, f in zip(bodies, firsts, strict=True)
        ]
        arrivals: list[dict[str, Any]] = []

        async def sender() -> None:
            assert sets is not None
            # start once every decoding request has its first chunk (or has ended)
            while not all(f.is_set() or t.done() for f, t in zip(firsts, tasks, strict=True)):
                await asyncio.sleep(0.005)
            for seed, b in sets:
                if all(t.done() for t in tasks):
                    break
                arrivals.append({"seed": seed, **await post(c, b)})

        send = asyncio.create_task(sender()) if sets is not None else None
        done = await asyncio.gather(*tasks, return_exceptions=True)
        t_end = time.perf_counter()
        if send is not None:
            await send
        after = await server_buckets(c)
    streams: list[dict[str, Any]] = []
    for d in done:
        if isinstance(d, BaseException):
            streams.append({"ok": False, "status": None, "error": repr(d)[:300], "times": []})
        else:
            streams.append(d)
    ended = [s["times"][-1] for s in streams if s["times"]]
    window_end = max(ended) if ended else t_end
    gaps = gaps_ms([s["times"] for s in streams])
    in_window = [a for a in arrivals if a["ok"] and a["end"] <= window_end]
    covered = sum(max(0.0, min(a["end"], window_end) - a["start"]) for a in arrivals)
    return {
        "gaps_ms": gaps,
        "itl": itl_summary(gaps),
        "server_buckets": {b: n - before.get(b, 0.0) for b, n in after.items()},
        "requests_ok": sum(s["ok"] for s in streams),
        "request_errors": [s["error"] for s in streams if not s["ok"]][:5],
        "chunks_per_request": [len(s["times"]) for s in streams],
        "tokens_per_request": [s.get("tokens") for s in streams],
        "decode_window_s": window_end - t0,
        "load_average_at_end": os.getloadavg()[0],
        "arrivals": [{k: v for k, v in a.items() if k not in ("start", "end")} for a in arrivals],
        "arrivals_completed": len(in_window),
        "arrivals_exhausted": sets is not None and len(arrivals) == len(sets),
        "arrival_share_of_window": covered / (window_end - t0) if arrivals else 0.0,
    }


def measure(url: str, name: str, args: argparse.Namespace, pool: list[dict[str, Any]]) -> Any:
    """Warm-up, then ``args.rounds`` x (quiet, arrivals); gaps pooled per phase."""
    warm = argparse.Namespace(**{**vars(args), "max_tokens": 8})
    asyncio.run(phase(url, warm, None))
    with httpx.Client(base_url=url, timeout=args.timeout) as c:
        t0 = time.perf_counter()
        w = c.post("/v1/chat/completions", content=arrival_bodies(pool, args, [1])[0][1],
                   headers=JSON)  # fmt: skip
        print(f"  {name} warm-up arrival: {w.status_code} in {time.perf_counter() - t0:.2f}s "
              f"{'' if w.status_code == 200 else w.text[:300]}")  # fmt: skip
    rounds: dict[str, list[dict[str, Any]]] = {"quiet": [], "arrivals": []}
    for r in range(args.rounds):
        for ph in ("quiet", "arrivals"):
            seeds = [1000 * (r + 1) + k for k in range(args.max_arrivals)]
            sets = arrival_bodies(pool, args, seeds) if ph == "arrivals" else None
            gc.collect()
            res = asyncio.run(phase(url, args, sets))
            rounds[ph].append(res)
            s, e = res["itl"], server_itl(res["server_buckets"])
            print(f"  {name} round {r} {ph}: client p50 {_ms(s['p50_ms'])} p99 "
                  f"{_ms(s['p99_ms'])}, engine p50 {_ms(e['p50_ms'])} p99 {_ms(e['p99_ms'])}, "
                  f"{res['requests_ok']}/{args.requests} ok, {res['arrivals_completed']} "
                  f"arrivals in {res['decode_window_s']:.1f}s, load {os.getloadavg()[0]:.1f}",
                  flush=True)  # fmt: skip
    out: dict[str, Any] = {}
    for ph, runs in rounds.items():
        hists = [run.pop("server_buckets") for run in runs]
        bounds = {b for h in hists for b in h}
        lat = [a["s"] for run in runs for a in run["arrivals"] if a["ok"]]
        out[ph] = {
            **itl_summary([g for run in runs for g in run.pop("gaps_ms")]),
            "server_itl": server_itl({b: sum(h.get(b, 0.0) for h in hists) for b in bounds}),
            "arrivals_completed": sum(run["arrivals_completed"] for run in runs),
            "arrival_latency_p50_s": percentile(lat, 50) if lat else None,
            "arrival_latency_max_s": max(lat) if lat else None,
            "rounds": runs,
        }
    q, a = out["quiet"], out["arrivals"]
    if q["p50_ms"] is not None and a["p50_ms"] is not None:
        out["added_p50_ms"] = a["p50_ms"] - q["p50_ms"]
        out["added_p99_ms"] = a["p99_ms"] - q["p99_ms"]
    out["enough_arrivals"] = all(run["arrivals_completed"] >= MIN_ARRIVALS for run in a["rounds"])
    return out


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} ms"


def _git(*cmd: str) -> str:
    done = subprocess.run(["git", *cmd], cwd=HERE.parent, capture_output=True, text=True)
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default=",".join(SERVERS), help="comma-separated subset")
    ap.add_argument("--requests", type=int, default=32, help="concurrent decoding requests")
    ap.add_argument("--max-tokens", type=int, default=1024, help="tokens each decodes")
    ap.add_argument("--tools", type=int, default=1000, help="tools per arriving inline set")
    ap.add_argument("--arrival-max-tokens", type=int, default=8)
    ap.add_argument("--max-arrivals", type=int, default=40, help="new sets per round at most")
    ap.add_argument("--pool", type=int, default=100_000, help="tools the sets are drawn from")
    ap.add_argument("--rounds", type=int, default=2, help="quiet/arrivals pairs per server")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "serve_itl.json")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--replot", action="store_true", help="only plot --out's JSON again")
    args = ap.parse_args(argv)
    if args.replot:
        plot(json.loads(args.out.read_text(encoding="utf-8")), args.out.with_suffix(".png"))
        return 0
    servers = [s for s in args.servers.split(",") if s]
    if unknown := set(servers) - set(SERVERS):
        ap.error(f"unknown servers {sorted(unknown)} (known: {', '.join(SERVERS)})")
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    t_start = time.perf_counter()
    pool = load_tools(args.pool)
    gc.collect()
    gc.freeze()  # a full collection over the pool's millions of objects stalls the client
    result: dict[str, Any] = {
        "question": "added inter-token latency of running requests while new inline tool "
        "sets arrive (issue 36; target p99 added <= 50 ms)",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "code_commit": _git("log", "-1", "--format=%h", "--", "trierouter", "csrc"),
        "worktree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "min_arrivals_per_round": MIN_ARRIVALS,
        "machine": {
            "cpus": os.cpu_count(),
            "nice": os.nice(0),
            "host": "shared with other jobs",
            "load_average_at_start": os.getloadavg(),
        },
        "servers": {},
    }

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = tiny_tool_model(root / "model")
        (root / "template.jinja").write_text(TEMPLATE, encoding="utf-8")
        common = ["--max-model-len", "4096", "--max-num-seqs", str(args.requests + 8),
                  "--chat-template", str(root / "template.jinja"), "--custom-histogram-buckets",
                  json.dumps({"inter_token_latency": BUCKETS_S})]  # fmt: skip
        env = {
            "VLLM_CACHE_ROOT": str(root / "cache"),
            "TRIEROUTER_TOOL_FORMAT": "hermes",
            "TRIEROUTER_MAX_INLINE_TOOLS": str(max(4096, args.tools)),
            "TRIEROUTER_MAX_BODY_BYTES": str(256 << 20),
        }
        for name in servers:
            t1 = time.perf_counter()
            run = arm_run(result["parameters"])
            try:
                if name == "trierouter":
                    ctx = serve(model, log=root / "trierouter.log", env=env, args=common)
                else:
                    vllm_args = [*common, "--tool-call-parser", "hermes",
                                 "--enable-auto-tool-choice"]  # fmt: skip
                    ctx = _vllm(model, root / "vllm.log", env, vllm_args)
                with ctx as url:
                    start = time.perf_counter() - t1
                    print(f"{name} serve up in {start:.0f}s", flush=True)
                    res = measure(url, name, args, pool)
                    res["server_start_s"] = start
            except Exception as e:  # a server that did not start or died: its log's tail
                import traceback

                traceback.print_exc()
                res = {"error": f"{name} failed: {type(e).__name__}: {str(e)[-3000:]}"}
            result["servers"][name] = res
            result.setdefault("runs", {})[name] = finish_run(run)
            save()
    result["machine"]["load_average_at_end"] = os.getloadavg()
    result["wall_s"] = time.perf_counter() - t_start
    save()
    print(json.dumps({n: {k: v for k, v in s.items() if k.startswith(("added", "enough"))}
                      for n, s in result["servers"].items()}, indent=1))  # fmt: skip
    if not args.no_plot:
        plot(result, args.out.with_suffix(".png"))
    return 0 if all("error" not in s for s in result["servers"].values()) else 1


def plot(result: dict[str, Any], path: Path) -> None:
    """Two panels, the client's chunk gaps and the engine's per-token ITL: p50 and p99, quiet
    and with arrivals, per server."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, s in result["servers"].items() if "error" not in s]
    bars = [("quiet", "p50_ms"), ("arrivals", "p50_ms"), ("quiet", "p99_ms"),
            ("arrivals", "p99_ms")]  # fmt: skip
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    width = 0.2
    for ax, where in zip(axes, ("client", "engine"), strict=True):
        for k, (ph, key) in enumerate(bars):
            vals = []
            for n in names:
                r = result["servers"][n][ph]
                vals.append((r if where == "client" else r["server_itl"])[key] or 0.0)
            xs = [i + (k - 1.5) * width for i in range(len(names))]
            ax.bar(xs, vals, width, label=f"{ph} {key[:3]}", color=f"C{k // 2}",
                   hatch="//" if ph == "arrivals" else "")  # fmt: skip
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names)
        ax.set_yscale("log")
        ax.axhline(50, color="grey", lw=0.8, ls=":")
        ax.set_title(f"{where}: " + ("gaps between streamed chunks" if where == "client"
                                     else "vLLM inter_token_latency histogram"))  # fmt: skip
    axes[0].set_ylabel("inter-token latency (ms)")
    axes[0].legend(fontsize=8)
    p = result["parameters"]
    fig.suptitle(f"{p['requests']} requests decoding {p['max_tokens']} tokens, new "
                 f"{p['tools']:,}-tool inline sets arriving (tiny model, CPU)")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
