"""Tool search with requests the model writes per tool (doc2query), chosen on dev, then held out.

    python benchmarks/query_expansion.py --phase write   # the requests, cached (long on a CPU)
    python benchmarks/query_expansion.py --phase score   # dev, the choice, then held out

The plan (:data:`PLAN`) was written before any outcome was seen. Two pools of real tools:

- dev: BFCL v4 ``live_simple`` + ``live_multiple`` (user-contributed questions), the pool is
  every distinct function of those questions (first doc per name), every question scored;
- held out: LiveMCPBench (``trierouter.data.livemcpbench``, pinned wheel): its 526 MCP tools
  and 94 user-written tasks; never used to choose or tune anything.

For every tool of both pools Qwen2.5-Coder-0.5B-Instruct (the served model) writes 3 short
requests it answers (:class:`~trierouter.router.tool_requests.QuestionWriter`: greedy, its chat
template, :data:`~trierouter.router.tool_requests.PROMPT`), from the tool's text alone; cached
in ``.cache/query_expansion/`` (ignored). Arms, each a search over the same pool:

- ``bm25_tool_text``: the server's default (BM25 over ``tool_text``);
- ``bm25_expanded``: BM25 over ``tool_text`` followed by the written requests;
- ``hybrid_expanded``: ``Shortlist.build`` (BM25 + the shipped MiniLM, fused) over the same
  expanded texts.

Recall@k: the share of questions with a gold tool among the first k. The choice is made on dev
alone by :data:`PLAN`'s rule before the held-out set is scored; both are written with the
writing cost (seconds per tool, CPU threads). Writes ``benchmarks/results/query_expansion.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _provenance import arm_run, finish_run
from bfcl_offline import tools_of

MODEL = "qwen2.5-coder-0.5b-instruct"
DEV = ("live_simple", "live_multiple")
KS = (1, 5, 10, 16)
ARMS = ("bm25_tool_text", "bm25_expanded", "hybrid_expanded")
DEFAULT = "bm25_tool_text"
WRITER = {"n": 3, "max_new_tokens": 80, "batch_size": 8}
PLAN = {
    "dev": "BFCL v4 live_simple + live_multiple: every question with a ground truth; the pool "
    "is every distinct function of those questions (first doc per name)",
    "held_out": "LiveMCPBench (pinned wheel): its 526 tools, its 94 tasks; scored once, after "
    "the choice, never used to choose",
    "writer": f"{MODEL}, greedy, n={WRITER['n']} requests per tool, "
    f"max_new_tokens={WRITER['max_new_tokens']}, trierouter.router.tool_requests.PROMPT",
    "rule": "the arm with the best dev recall@5 (ties: recall@1, then the cheaper arm in "
    f"{list(ARMS)} order) is chosen if it beats {DEFAULT} on dev recall@5 by at least 0.02; "
    f"otherwise {DEFAULT} stays",
}
CACHE = ROOT / ".cache" / "query_expansion"
OUT = ROOT / "benchmarks" / "results" / "query_expansion.json"


def dev_set() -> tuple[list[dict[str, Any]], list[tuple[str, set[str]]]]:
    """The dev pool (every distinct function of the questions) and ``(query, gold names)``."""
    from trierouter.data.bfcl_eval import load_bfcl
    from trierouter.router.vllm.tool_search import conversation_query

    pool: dict[str, dict[str, Any]] = {}
    qs = []
    for cat in DEV:
        for e in load_bfcl(cat):
            for t in tools_of(e):
                pool.setdefault(t["function"]["name"], t)
            gold = {name for call in e.answer or [] for name in call}
            if gold:
                qs.append((conversation_query(e.messages), gold))
    return list(pool.values()), qs


def held_out_set() -> tuple[list[dict[str, Any]], list[tuple[str, set[str]]]]:
    from trierouter.data.livemcpbench import load_livemcpbench

    bench = load_livemcpbench()
    return bench.tools, [(t.query, set(t.gold)) for t in bench.tasks]


def writer() -> Any:
    import torch

    from trierouter.models import load_model
    from trierouter.router.tool_requests import QuestionWriter

    torch.set_num_threads(int(os.environ.get("QUERY_EXPANSION_THREADS", "2")))
    return QuestionWriter(load_model(MODEL), **WRITER)


def write(pools: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    w = writer()
    cost: dict[str, Any] = {"threads": int(os.environ.get("QUERY_EXPANSION_THREADS", "2"))}
    for name, tools in pools.items():
        before, t0 = w.generated, time.perf_counter()
        print(f"{name}: {len(tools)} tools", flush=True)
        w.write(tools, cache=CACHE / f"{name}.json")
        n = w.generated - before
        if n:
            cost[name] = {
                "tools_written": n,
                "s_per_tool": round((time.perf_counter() - t0) / n, 2),
            }
    return cost


def score(
    tools: list[dict[str, Any]], qs: list[tuple[str, set[str]]], requests: dict[str, list[str]],
    arms: list[str],
) -> dict[str, Any]:  # fmt: skip
    from trierouter.shortlist import Shortlist
    from trierouter.shortlist.tool_text import ToolIndex, expanded_text, tool_fields

    fields = [tool_fields(t) for t in tools]
    names = [n for n, _, _ in fields]
    out: dict[str, Any] = {"recall": {}, "ms_per_query": {},
                           "with_requests": sum(bool(requests.get(n)) for n in names)}  # fmt: skip
    for arm in arms:
        if arm == "bm25_tool_text":
            index: Any = ToolIndex.build(tools)
        elif arm == "bm25_expanded":
            index = ToolIndex.build(tools, expansions=requests)
        else:
            texts = [expanded_text(n, d, p, requests.get(n, ())) for n, d, p in fields]
            index = Shortlist.build(names, descriptions=texts, progress=False)
        index.search("warm up", 1)
        t0 = time.perf_counter()
        found = [[r[0] for r in index.search(q, max(KS))] for q, _ in qs]
        out["ms_per_query"][arm] = round((time.perf_counter() - t0) * 1000 / len(qs), 3)
        hits = [[bool(set(f[:k]) & g) for f, (_, g) in zip(found, qs, strict=True)] for k in KS]
        out["recall"][arm] = {
            str(k): round(sum(h) / len(qs), 4) for k, h in zip(KS, hits, strict=True)
        }
        print(arm, out["recall"][arm], flush=True)
    return out


def choose(dev: dict[str, Any]) -> str:
    r = dev["recall"]
    best = max(ARMS, key=lambda a: (r[a]["5"], r[a]["1"], -ARMS.index(a)))
    return best if r[best]["5"] >= r[DEFAULT]["5"] + 0.02 else DEFAULT


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", choices=("write", "score"), required=True)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    dev_tools, dev_qs = dev_set()
    ho_tools, ho_qs = held_out_set()
    pools = {"dev": dev_tools, "held_out": ho_tools}
    if args.phase == "write":
        run = arm_run({"phase": "write", **WRITER})
        cost = write(pools)
        finish_run(run)
        (CACHE / "write_cost.json").write_text(json.dumps({"run": run, **cost}, indent=1))
        return 0
    from trierouter.router.tool_requests import PROMPT

    w = writer()
    requests = {}
    for name, tools in pools.items():
        path = CACHE / f"{name}.json"
        if not path.is_file():
            raise SystemExit(f"{path} missing: run --phase write first")
        requests[name] = w.write(tools, cache=path, progress=False)
    if w.generated:
        raise SystemExit(f"{w.generated} tools had no cached requests: run --phase write first")
    run = arm_run({"phase": "score"})
    result: dict[str, Any] = {
        "benchmark": "query_expansion",
        "plan": PLAN,
        "prompt": PROMPT,
        "writer": {"model": MODEL, **WRITER},
        "pools": {
            "dev": {"tools": len(dev_tools), "questions": len(dev_qs)},
            "held_out": {"tools": len(ho_tools), "tasks": len(ho_qs)},
        },
        "ks": list(KS),
        "runs": {"score": run},
    }
    cost_file = CACHE / "write_cost.json"
    if cost_file.is_file():
        cost = json.loads(cost_file.read_text())
        result["runs"]["write"] = cost.pop("run")
        result["write_cost"] = cost
    result["dev"] = score(dev_tools, dev_qs, requests["dev"], list(ARMS))
    result["chosen"] = choose(result["dev"])
    print("chosen on dev:", result["chosen"], flush=True)
    result["held_out"] = score(ho_tools, ho_qs, requests["held_out"], list(ARMS))
    finish_run(run)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
