"""√K grouped routing against the flat search at 100,000 tools (BFCL questions, the real model).

    flock /tmp/heavy.lock python benchmarks/grouped_routing.py --split dev --n 60 --min-prefix 1,159
    python benchmarks/grouped_routing.py --choose
    flock /tmp/heavy.lock python benchmarks/grouped_routing.py --split test --n 200 --resume

Pool: :mod:`benchmarks.tool_search`'s rule (:data:`POOL_RULE`), its first 100,000 tools.
Groups: :class:`trierouter.shortlist.tool_groups.ToolGroups` (OpenAPI operations by API, BFCL
functions by dotted prefix, the rest by k-means over the shipped MiniLM's embeddings of their
``tool_text``; ≈√K groups). Questions: a fixed seeded sample (``--seed``) of the split (dev:
``live_simple`` + ``live_multiple``; test: ``simple_python`` + ``multiple``); the query is the
server's (:func:`~trierouter.router.vllm.server.conversation_query`); gold: the functions its
ground truth calls (any counts).

Arms, all over the same pool and sample in one run:
- ``flat``: BM25 over ``tool_text`` (:class:`~trierouter.shortlist.tool_text.ToolIndex`, the
  server's default), its top 16;
- ``grouped_gG_tT``: :class:`~trierouter.router.grouped_tools.GroupedRouter` with
  ``keep_groups=G``, ``keep_tools=T`` (``1``: the search's own choice, no model), the model
  Qwen2.5-Coder-0.5B-Instruct (CPU, canonical-path scores, one tree per step).
Per arm: right tool @1, recall@5/16 of the tools reached (the grouped arms reach only the
chosen group's), group accuracy (the chosen group holds a gold tool) and the gold group's
presence among the candidates, ms per question of the search and of the model apart, forward
calls. Each run is a section of ``benchmarks/results/grouped_routing.json`` (``dev_prefix1``,
``dev_prefix159``: the dev choices; ``test``), whose plan (sample, pool rule, grouping, arms,
choice rule) is written before any outcome. ``--part i/n`` runs the i-th of n slices of the
sample and merges into its section; ``--resume`` skips the questions already answered (a run
cut short by its time limit is continued).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _provenance import arm_run, finish_run
from bfcl_offline import pools
from tool_search import DEV, POOL_RULE, TEST, questions, texts_of

OUT = ROOT / "benchmarks" / "results" / "grouped_routing.json"
CACHE = ROOT / ".cache" / "grouped_routing"
SIZE = 100_000
MODEL = Path.home() / ".cache" / "trierouter" / "models" / "qwen2.5-coder-0.5b-instruct"
RERUN = (
    "python benchmarks/grouped_routing.py --split dev --n 60 --min-prefix 1,159; "
    "python benchmarks/grouped_routing.py --choose; "
    "python benchmarks/grouped_routing.py --split test --n 200 --resume (repeated until "
    "every question is answered; each under flock /tmp/heavy.lock and 15 min on 2 cores)"
)
DEV_ARMS = "g1_t1,g8_t1,g8_t8,g1_t8"


def parse_arm(arm: str) -> tuple[int, int, float, float]:
    """``gG_tT``, ``gG_tT_wW`` or ``gG_tT_wW_vV``: keep_groups G, keep_tools T, the combine
    weight W of step 1 (default 0) and V of step 2 (default W)."""
    g, t, *rest = arm.split("_")
    w = float(rest[0][1:]) if rest else 0.0
    v = float(rest[1][1:]) if len(rest) > 1 else w
    return int(g[1:]), int(t[1:]), w, v


def sample(split: str, n: int, seed: int) -> list[tuple[str, str, set[str], list[Any]]]:
    qs = questions(TEST if split == "test" else DEV)
    if n >= len(qs):
        return qs
    return sorted(random.Random(seed).sample(qs, n), key=lambda q: q[0])


def build(
    all_own: list[Any], min_prefix: int, index: Any = None
) -> tuple[Any, Any, dict[str, str], dict[str, Any]]:
    """The pool's ToolIndex, ToolGroups, descriptions and build facts."""
    from trierouter.shortlist import BM25Index, Embedder
    from trierouter.shortlist.tool_groups import ToolGroups, tool_namespace
    from trierouter.shortlist.tool_text import ToolIndex

    t0 = time.perf_counter()
    pool = pools([SIZE], all_own)[:SIZE]
    _, tt = texts_of(pool)
    names = [t["function"]["name"] for t in pool]
    descs = {t["function"]["name"]: t["function"].get("description") or "" for t in pool}
    if index is None:
        index = ToolIndex(BM25Index.build(names, tt))
        index.search("warm up", 1)
    t1 = time.perf_counter()
    heads = Counter(p[0] for n in names if ":" not in n and (p := tool_namespace(n)))
    bare = [
        i
        for i, n in enumerate(names)
        if not (p := tool_namespace(n)) or (":" not in n and heads[p[0]] < min_prefix)
    ]
    CACHE.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256("\n".join(tt[i] for i in bare).encode()).hexdigest()[:16]
    key = CACHE / f"bare_{len(bare)}_{digest}.npy"
    if key.is_file():
        vecs = np.load(key)
    else:
        vecs = Embedder().encode([tt[i] for i in bare])
        np.save(key, vecs)
    t2 = time.perf_counter()
    groups = ToolGroups.build(names, vectors=vecs, texts=tt, min_prefix=min_prefix)
    facts = {
        "tools": len(names),
        "groups": len(groups),
        "group_sizes": [
            int(min(map(len, (g.members for g in groups.groups)))),
            int(max(map(len, (g.members for g in groups.groups)))),
        ],
        "learned_groups": sum(g.learned for g in groups.groups),
        "tools_without_namespace": len(bare),
        "min_prefix": min_prefix,
        "index_build_s": round(t1 - t0, 1),
        "embed_s": round(t2 - t1, 1),
        "groups_build_s": round(time.perf_counter() - t2, 1),
    }
    return index, groups, descs, facts


def score_row(ranking: list[str], gold: set[str]) -> dict[str, bool]:
    return {
        "right@1": bool(ranking[:1] and ranking[0] in gold),
        "r@5": bool(set(ranking[:5]) & gold),
        "r@16": bool(set(ranking[:16]) & gold),
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {}
    keys = [k for k in rows[0] if isinstance(rows[0][k], bool)]
    out: dict[str, Any] = {"n": len(rows)}
    out |= {k: round(float(np.mean([r[k] for r in rows])), 4) for k in keys}
    for k in ("search_ms", "model_ms", "forward_calls"):
        if k in rows[0]:
            out[k] = round(float(np.mean([r[k] for r in rows])), 2)
    return out


WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, float("inf"))  # inf: the search's order


def _pick(cands: list[list[Any]], w: float) -> str:
    """The candidate (``[name, search, model]``, in search order) maximising
    ``model - w * log(1 + rank)``; ties: the search's order (as the router)."""
    if w == float("inf"):
        return str(cands[0][0])
    return str(max(enumerate(cands), key=lambda jc: (jc[1][2] - w * np.log1p(jc[0]), -jc[0]))[1][0])


def choose(doc: dict[str, Any]) -> dict[str, Any]:
    """The dev choices, from the dev sections' recorded scores alone: per grouping and combine
    weight, group accuracy of step 1 (the ``g8`` candidates) and right tool of step 2 given
    the group (the ``t8`` candidates of the search's top group, arm ``g1_t8``)."""
    out: dict[str, Any] = {"weights": list(WEIGHTS), "by_section": {}}
    devs = {n: s for n, s in doc.get("sections", {}).items() if n.startswith("dev")}
    common = set.intersection(*(set(s.get("per_question", {})) for s in devs.values()))
    out["questions_compared"] = len(common)  # the questions every dev section answered
    for name, sec in devs.items():
        rows = [r for q, r in sec.get("per_question", {}).items() if q in common]
        got: dict[str, Any] = {"n": len(rows), "summary": sec.get("summary", {})}
        g_acc = {str(w): _accuracy(rows, "g8_t1", "groups", "gold_groups", w) for w in WEIGHTS}
        t_acc = {str(w): _accuracy(rows, "g1_t8", "tools", "gold", w) for w in WEIGHTS}
        got["group_accuracy_by_weight"] = g_acc
        got["tool_right_in_search_top_group_by_weight"] = t_acc
        out["by_section"][name] = got
    return out


def _accuracy(rows: list[dict[str, Any]], arm: str, cands: str, gold: str, w: float) -> float:
    """The share of ``rows`` whose pick among ``arm``'s recorded ``cands`` at weight ``w`` is
    in ``gold``; a row with one candidate counts as the arm recorded it."""
    right = "group_right" if cands == "groups" else "right@1"
    ok = [
        _pick(r[arm][cands], w) in r[gold] if len(r[arm][cands]) > 1 else r[arm][right]
        for r in rows
    ]
    return round(float(np.mean(ok)), 4)


def chosen(dev_choice: dict[str, Any]) -> dict[str, Any]:
    """The test run's grouping and arms by :data:`CHOICE_RULE` from ``dev_choice``."""
    secs = dev_choice["by_section"]

    def best(scores: dict[str, float]) -> tuple[float, float]:  # (accuracy, weight)
        return max(((v, -float(w)) for w, v in scores.items()), key=lambda x: x)

    name = max(
        sorted(secs),
        key=lambda n: (best(secs[n]["group_accuracy_by_weight"])[0], n == "dev_prefix1"),
    )
    w1 = -best(secs[name]["group_accuracy_by_weight"])[1]
    w2 = -best(secs[name]["tool_right_in_search_top_group_by_weight"])[1]
    tuned = f"g1_t8_v{w2:g}" if w1 == float("inf") else f"g8_t8_w{w1:g}_v{w2:g}"
    arms = list(dict.fromkeys(["g1_t1", "g8_t1_w0", tuned]))
    return {"min_prefix": int(name.removeprefix("dev_prefix")), "arms": arms, "section": name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=("dev", "test"), default="test")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arms", default=None, help=f"grouped arms (dev default: {DEV_ARMS})")
    ap.add_argument("--part", default="0/1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-prefix", default=None, help="one or several, e.g. 1,159")
    ap.add_argument("--choose", action="store_true", help="write the dev choices (no model)")
    ap.add_argument("--section", default=None, help="default: test, or dev_prefix<min-prefix>")
    ap.add_argument("--resume", action="store_true", help="skip questions already answered")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.choose:
        path = Path(args.out or OUT)
        doc = json.loads(path.read_text())
        doc["dev_choice"] = choose(doc) | {"rule": CHOICE_RULE}
        doc["dev_choice"]["chosen"] = chosen(doc["dev_choice"])
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(json.dumps(doc["dev_choice"], indent=1))
        return
    import torch

    from trierouter.router.label_scorer import TransformersScorer

    torch.set_num_threads(args.threads)
    out_path = Path(args.out or OUT)
    if args.split == "test" and not (args.arms and args.min_prefix):  # the dev choice
        pick = json.loads(out_path.read_text())["dev_choice"]["chosen"]
        args.arms = args.arms or ",".join(pick["arms"])
        args.min_prefix = args.min_prefix or str(pick["min_prefix"])
    arms = (args.arms or DEV_ARMS).split(",")
    qs = sample(args.split, args.n, args.seed)
    all_own = [t for s in (TEST, DEV) for q in questions(s) for t in q[3]]
    prefixes = [int(x) for x in (args.min_prefix or str(MIN_PREFIX)).split(",")]
    scorer = TransformersScorer(MODEL)
    index = None
    for min_prefix in prefixes:
        index, groups, descs, facts = build(all_own, min_prefix, index)
        name = args.section or (f"dev_prefix{min_prefix}" if args.split == "dev" else "test")
        run_section(args, out_path, name, qs, arms, scorer, index, groups, descs, facts)


def run_section(
    args: Any,
    out_path: Path,
    name: str,
    qs: list[tuple[str, str, set[str], list[Any]]],
    arms: list[str],
    scorer: Any,
    index: Any,
    groups: Any,
    descs: dict[str, str],
    facts: dict[str, Any],
) -> None:
    """One section: the plan first, then every question of this part, written every 10."""
    from trierouter.router.grouped_tools import GroupChoice, GroupedRouter

    part, parts = (int(x) for x in args.part.split("/"))
    mine = qs[part::parts]
    doc: dict[str, Any] = json.loads(out_path.read_text()) if out_path.is_file() else {}
    doc |= {"benchmark": "grouped_routing", "rerun": RERUN}
    result: dict[str, Any] = doc.setdefault("sections", {}).setdefault(name, {})
    plan = {
        "split": args.split,
        "categories": list(TEST if args.split == "test" else DEV),
        "sample": f"{len(qs)} questions, random.Random({args.seed}).sample of the split",
        "question_ids": [q[0] for q in qs],
        "pool_rule": POOL_RULE,
        "pool_size": SIZE,
        "arms": ["flat", *arms],
        "arm_names": "gG_tT_wW_vV: keep_groups G, keep_tools T, combine weights W (step 1, "
        "default 0) and V (step 2, default W); inf: the search's order",
        "choice": CHOICE_NOTE if args.split == "test" else "dev: choices are made from it",
        "model": MODEL.name,
        "grouping": facts,
    }
    if result.get("plan", {}).get("question_ids") not in (None, plan["question_ids"]):
        raise SystemExit(f"{out_path} section {name!r} holds another sample; rename it first")
    result["plan"] = plan
    out_path.write_text(json.dumps(doc, indent=1) + "\n")  # the plan before any outcome
    specs = {a: parse_arm(a) for a in arms}
    routers = {  # combine 0: the model's scores; each arm's weight re-picks from them
        (g, t): GroupedRouter(
            groups, index, scorer, descriptions=descs, keep_groups=g, keep_tools=t
        )
        for g, t, _, _ in specs.values()
    }
    label_id = {grp.label: i for i, grp in enumerate(groups.groups)}
    known = set(groups.names)
    per_q: dict[str, dict[str, Any]] = result.setdefault("per_question", {})
    if args.resume:  # the questions a run cut short by its time limit left
        mine = [q for q in mine if q[0] not in per_q]
    runs = result.setdefault("runs", {})
    run = arm_run({"split": args.split, "part": args.part, "arms": arms, "threads": args.threads})
    run_key = f"part {args.part}" + (f" resumed at {len(per_q)}" if args.resume and per_q else "")
    for j, (qid, query, gold, _) in enumerate(mine):
        t0 = time.perf_counter()
        found = index.search(query, 16)
        row: dict[str, Any] = {
            "flat": score_row([n for n, _ in found], gold)
            | {"search_ms": (time.perf_counter() - t0) * 1000, "model_ms": 0.0, "forward_calls": 0}
        }
        gold_groups = {groups.group_of(g) for g in gold if g in known}
        step1: dict[int, Any] = {}
        step2: dict[tuple[int, int], Any] = {}
        for a, (g, t, w, v) in specs.items():
            if g not in step1:
                step1[g] = routers[(g, t)].choose_group(query)
            choice = step1[g]
            if choice.group >= 0 and choice.route.groups[0].model is not None:
                label = _pick(_cands(choice.route.groups), w)
                route1 = copy.deepcopy(choice.route)
                route1.group = label
                choice = GroupChoice(query, choice.scores, label_id[label], route1)
            if (choice.group, t) not in step2:
                step2[(choice.group, t)] = (routers[(g, t)].choose_tool(choice), choice.route)
            done, first = step2[(choice.group, t)]
            route = copy.deepcopy(done)
            route.groups, route.group = choice.route.groups, choice.route.group
            # this arm's cost: its own step 1, then the tool step (computed once, maybe after
            # another arm's step 1)
            own = choice.route
            route.forward_calls = own.forward_calls + done.forward_calls - first.forward_calls
            route.model_ms = own.model_ms + done.model_ms - first.model_ms
            route.search_ms = own.search_ms + done.search_ms - first.search_ms
            if len(route.tools) > 1 and route.tools[0].model is not None:
                tool = _pick(_cands(route.tools), v)
                order = sorted(
                    range(len(route.tools)),
                    key=lambda k: (
                        (-(route.tools[k].model - v * np.log1p(k)), k)
                        if v != float("inf")
                        else (0.0, k)
                    ),
                )
                head = [route.tools[k].name for k in order]
                assert head[0] == tool
                route.ranking = head + route.ranking[len(head) :]
                route.tool = tool
            row[a] = score_row(route.ranking, gold) | {
                "group_right": bool(choice.group in gold_groups),
                "gold_group_listed": bool(
                    {c.name for c in route.groups} & {groups.groups[g].label for g in gold_groups}
                ),
                "search_ms": route.search_ms,
                "model_ms": route.model_ms,
                "forward_calls": route.forward_calls,
                "group": route.group,
                "tool": route.tool,
                "groups": _cands(route.groups),
                "tools": _cands(route.tools),
            }
        row["gold"] = sorted(gold)
        row["gold_groups"] = sorted(groups.groups[g].label for g in gold_groups)
        per_q[qid] = row
        if (j + 1) % 10 == 0 or j + 1 == len(mine):
            runs[run_key] = finish_run(run)
            result["summary"] = {
                a: summary([per_q[q[0]][a] for q in qs if q[0] in per_q and a in per_q[q[0]]])
                for a in ["flat", *arms]
            }
            out_path.write_text(json.dumps(doc, indent=1) + "\n")
            print(name, j + 1, len(mine), json.dumps(result["summary"]), flush=True)
    print("wrote", out_path)


def _cands(cands: Any) -> list[list[Any]]:
    """Candidates as ``[name, search score, model score]`` (rounded; JSON-ready)."""
    return [
        [c.name, round(c.search, 3), None if c.model is None else round(c.model, 4)] for c in cands
    ]


CHOICE_RULE = (
    "fixed before the dev rows were read: the grouping (min_prefix 1 or 159) and step 1's "
    "combine weight with the best dev group accuracy of the g8 candidates; step 2's weight "
    "with the best dev right tool among the t8 candidates of the search's top group; ties: "
    "the smaller weight, then min_prefix 1. Test arms: flat, g1_t1 (groups and tools by the "
    "search alone), g8_t1_w0 (the model alone picks the group) and the tuned arm (g8_t8 with "
    "both weights, or g1_t8 with step 2's when step 1's is inf)"
)
CHOICE_NOTE = "the arms and grouping of dev_choice.chosen, by dev_choice.rule"
MIN_PREFIX = 1

if __name__ == "__main__":
    main()
