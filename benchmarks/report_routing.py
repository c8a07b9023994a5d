"""Report blocks for routing at scale: the tool search's recall and the live-server arms.

Registered in ``report_blocks.BLOCKS``; each takes ``load`` and returns the block's lines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from _provenance import check_table

Load = Callable[[str], dict[str, Any] | None]

SEARCH_NAMES = {
    "bm25_name_desc": "BM25, name + description (the server's search before)",
    "bm25_tool_text": "BM25, tool_text (the server's default now)",
    "hybrid_name_desc": "Shortlist.build, name + description (BM25 + MiniLM)",
    "hybrid_tool_text": "Shortlist.build, tool_text (BM25 + MiniLM)",
}
SPLIT_NAMES = {
    "test": "BFCL simple_python + multiple",
    "dev": "BFCL live_simple + live_multiple, dev",
}


def _run_note(d: dict[str, Any]) -> str:
    m = d.get("machine", {})
    load = m.get("load_average_1min")
    where = f"{m.get('cpus', '?')} cores" + (f", load {load:.1f}" if load is not None else "")
    return f"commit {d.get('commit', '?')}, {d.get('date', '?')[:10]}, {where}"


def _run_cells(runs: dict[str, Any]) -> str:
    """Each run of a result file: its name, commit (``+dirty`` where the tree was) and date."""
    return "; ".join(
        f"{name}: {r.get('commit', '?')}{'+dirty' if r.get('dirty') else ''} ({r.get('date', '?')})"
        for name, r in sorted(runs.items())
    )


def tool_search(load: Load) -> list[str]:
    """Recall@k of each search over the same pools, per question set."""
    d = load("tool_search.json")
    if d is None:
        return []
    ks = [str(k) for k in d["ks"]]
    out = [
        "| questions | tools (K) | search | " + " | ".join(f"R@{k}" for k in ks)
        + " | ms / query |",
        "|---|---:|---|" + "---:|" * (len(ks) + 1),
    ]  # fmt: skip
    h = d.get("heldout")
    for method, rec in (h or {}).get("recall", {}).items():
        cells = [f"{rec[k]:.3f}" for k in ks]
        out.append(
            f"| LiveMCPBench, held out ({h['tasks']}) | {h['tools']:,} | "
            f"{SEARCH_NAMES.get(method, method)} | " + " | ".join(cells)
            + f" | {h['ms_per_query'][method]:.1f} |"
        )  # fmt: skip
    splits = [s for s in ("test", "dev") if s in d["questions"]]
    for split in splits:
        for size, row in d["by_size"].items():
            for method, rec in row["recall"].get(split, {}).items():
                cells = [f"{rec[k]:.3f}" for k in ks]
                ms = row["ms_per_query"][split][method]
                label = SPLIT_NAMES.get(split, split)
                out.append(
                    f"| {label} ({d['questions'][split]}) | {int(size):,} | "
                    f"{SEARCH_NAMES.get(method, method)} | " + " | ".join(cells) + f" | {ms:.1f} |"
                )
    return [
        *out,
        "",
        f"`benchmarks/tool_search.py` → `benchmarks/results/tool_search.json` ({_run_note(d)}). "
        f"BFCL pool: {d['pool_rule']}. LiveMCPBench ({(h or {}).get('source', '—')}: real MCP "
        "tools, user-written tasks): its own tools, never used to choose or tune anything. "
        f"Choice of the default: {d.get('default_chosen', '—')}. R@k: the share of questions "
        "with a gold tool among the search's first k; ms / query: one query at a time on this "
        "CPU, the index built.",
    ]


ARM_NAMES = {
    "own": "each question's own tools (inline)",
    "r10k": "registry of 10,000, default search",
    "r100k": "registry of 100,000, default search",
    "r10k_name_desc": "registry of 10,000, search before (name + description)",
    "r100k_name_desc": "registry of 100,000, search before (name + description)",
}


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def route_at_scale(load: Load) -> list[str]:
    """Accuracy through the live server as the registry grows: every arm of one run."""
    d = load("route_at_scale.json")
    if d is None:
        return []
    out = [
        "| arm | n | correct (BFCL checker) | right tool | right tool or its twin | gold has a "
        "twin | schema-valid calls | R@5 | R@16 | gold tool in the prompt | refused (context) "
        "| other errors | s / request (median) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    bfcl = {arm: a for arm, a in d["arms"].items() if arm != "mcp"}
    for arm, a in bfcl.items():
        rec = a.get("recall_at", {})
        out.append(
            f"| {ARM_NAMES.get(arm, arm)} | {a['n']} | {a['correct']} ({a['correct'] / a['n']:.0%})"
            f" | {a['right_tool']} | {a.get('right_tool_or_twin', '—')} | "
            f"{a.get('gold_has_twin', '—')} | {a['valid']} of {a['called']} | "
            f"{_pct(rec.get('5'))} | {_pct(rec.get('16'))} | {_pct(a.get('gold_in_prompt'))} | "
            f"{a['refused_context']} | {a['errors'] - a['refused_context']} | "
            f"{a['s_per_request_median']:.1f} |"
        )
    mcp = d["arms"].get("mcp")
    if mcp is not None:
        rec = mcp.get("recall_at", {})
        out += [
            "",
            "| arm (no tools sent, the registry named) | n | first call a gold "
            "tool | some call a gold tool | schema-valid calls | R@5 | R@16 | gold tool in the "
            "prompt | refused (context) | other errors | s / request (median) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| held out: LiveMCPBench, {d.get('mcp', {}).get('registry', 'its tools')} | "
            f"{mcp['n']} | "
            f"{mcp['right_tool']} ({mcp['right_tool'] / mcp['n']:.0%}) | {mcp['any_gold']} | "
            f"{mcp['valid']} of {mcp['called']} | {_pct(rec.get('5'))} | {_pct(rec.get('16'))} | "
            f"{_pct(mcp.get('gold_in_prompt'))} | {mcp['refused_context']} | "
            f"{mcp['errors'] - mcp['refused_context']} | {mcp['s_per_request_median']:.1f} |",
        ]
    labels = {arm: ARM_NAMES.get(arm, arm) for arm in d["arms"]}
    if mcp is not None:
        labels["mcp"] = "held out: LiveMCPBench"
    check_table("route_at_scale.json", out, labels, d.get("runs", {}))
    m = d["machine"]
    sc = d.get("scored")
    cut = (
        f"; stopped sending after {d['stop_after_min']:g} min as planned, so the questions scored "
        f"are the first {sc['bfcl_questions']} of {sc['bfcl_planned']} BFCL questions "
        f"({', '.join(f'{v} {k}' for k, v in sc['by_category'].items())}) and "
        f"{sc['mcp_tasks']} of {sc['mcp_planned']} LiveMCPBench tasks in the seeded order"
        if sc and d.get("stop_after_min")
        else ""
    )
    load = (
        f", load {m['load_average_1min_start']:.1f} at the start"
        if "load_average_1min_start" in m
        else ""
    )
    if d.get("stopped"):
        cut = (
            f"; {d['stopped']}: the questions scored are the first {sc['bfcl_questions']} of "
            f"{sc['bfcl_planned']} BFCL questions "
            f"({', '.join(f'{v} {k}' for k, v in sc['by_category'].items())}) and "
            f"{sc['mcp_tasks']} of {sc['mcp_planned']} LiveMCPBench tasks in the seeded order, "
            f"each with every arm answered ({sc['requests_lost_to_a_dead_server']} requests "
            f"in flight lost), scored from the run's answers at {d['summarized']['commit']}"
        )
    return [
        *out,
        "",
        f"`benchmarks/route_at_scale.py` → `benchmarks/results/route_at_scale.json`: every arm in "
        f"one run, interleaved by question (commit {d['commit']}, {d['date'][:10]}, "
        f"{m.get('cpus')} cores{load}); "
        f"{d['model']}, `trierouter serve` with {' '.join(d['server_args'])}, temperature 0, "
        f"`tool_choice` not sent, {d['concurrency']} requests in flight, {d['n_per_category']} "
        f"questions of each of {', '.join(d['categories'])} planned (seed {d['seed']}){cut}. "
        f"Pool: {d['pool_rule']}. Right tool: the called names are the gold names; its twin: a "
        "tool with the same last name segment up to case and punctuation (`math.gcd`, "
        "`number_theory.gcd`, `gcd`), which the question alone cannot tell apart (a secondary "
        "count; BFCL's checker stays the judge); gold has a twin: among the arm's tools. "
        "LiveMCPBench tasks are multi-step: the first call is what one request shows; no "
        "argument checker exists for them. R@k and gold in the prompt: from each answer's "
        "`trierouter_routing` field.",
    ]


def routing_headline(load: Load) -> list[str]:
    """README: how the choice of a tool holds as the registry grows (search, then the server)."""
    d = load("tool_search.json")
    if d is None:
        return []
    rows = {size: row["recall"]["test"] for size, row in d["by_size"].items()}
    big = max(rows, key=int)
    new, old = rows[big]["bm25_tool_text"], rows[big]["bm25_name_desc"]
    ms = d["by_size"][big]["ms_per_query"]["test"]["bm25_tool_text"]
    h = d.get("heldout", {}).get("recall", {})
    lines = [
        f"Routing at scale: out of {int(big):,} tools, the server's tool search puts the "
        f"question's tool among its first 16 in {new['16']:.1%} of {d['questions']['test']} "
        f"BFCL questions (first: {new['1']:.1%}; the search before: {old['16']:.1%} and "
        f"{old['1']:.1%}), in {ms:.1f} ms per query on 2 cores"
        + (
            f"; on held-out real MCP tools and user-written tasks (LiveMCPBench) a fitting tool "
            f"is among its first 5 for {h['bm25_tool_text']['5']:.1%} of tasks"
            if "bm25_tool_text" in h
            else ""
        )
        + " ([tool search](docs/serving.md#named-registries-100000-tools-and-tool-search))."
    ]
    r = load("route_at_scale.json")
    if r is not None:
        arms = r["arms"]
        parts = [
            f"{ARM_NAMES.get(a, a)} {v['correct']}/{v['n']}"
            for a, v in arms.items()
            if not a.endswith("_name_desc") and a != "mcp"
        ]
        if "mcp" in arms:
            v = arms["mcp"]
            parts.append(
                f"held-out LiveMCPBench tasks, a gold tool called first {v['right_tool']}/{v['n']}"
            )
        lines.append(
            "Through `trierouter serve` with the real Qwen2.5-Coder-0.5B (BFCL's checker, "
            f"`tool_choice` not sent, one run): {'; '.join(parts)} "
            "([routing at scale](docs/scale.md#routing-to-a-tool-out-of-100000))."
        )
    return lines


GROUPED_NAMES = {
    "flat": "flat: BM25 over tool_text, its first 16 (the server's default)",
    "g1_t1": "grouped: the search's best group, its best tool",
    "g8_t1_w0": "grouped: the model picks 1 of the search's 8 best groups",
}


def _grouped_arm(arm: str) -> str:
    if arm in GROUPED_NAMES:
        return GROUPED_NAMES[arm]
    g, t, *w = arm.split("_")
    weights = ", ".join(f"{x[0]} = {x[1:]}" for x in w)
    return f"grouped, tuned on dev: {g[1:]} groups then {t[1:]} tools scored ({weights})"


def grouped_routing(load: Load) -> list[str]:
    """√K grouped routing against the flat search at 100,000 tools (the test section)."""
    d = load("grouped_routing.json")
    sec = (d or {}).get("sections", {}).get("test")
    if d is None or not sec or not sec.get("summary"):
        return []
    plan, summ = sec["plan"], sec["summary"]
    out = [
        "| arm | right tool @1 | R@5 | R@16 | gold group chosen | gold group a candidate "
        "| search ms | model ms | forward calls |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in plan["arms"]:
        r = summ.get(arm)
        if not r:
            continue
        grp = (f"{r['group_right']:.3f} | {r['gold_group_listed']:.3f}"
               if "group_right" in r else "— | —")  # fmt: skip
        ms = r.get("model_ms_where_counted", r["model_ms"])
        calls = r.get("forward_calls_recounted", r["forward_calls"])
        out.append(
            f"| {_grouped_arm(arm)} | {r['right@1']:.3f} | {r['r@5']:.3f} | {r['r@16']:.3f} | "
            f"{grp} | {r['search_ms']:.1f} | {ms:.0f} | {calls:.2f} |"
        )
    cells = _run_cells(sec.get("runs", {}))
    n = min(r.get("n", 0) for r in summ.values())
    g = plan["grouping"]
    choice = d.get("dev_choice", {})
    return [
        *out,
        "",
        f"`benchmarks/grouped_routing.py` → `benchmarks/results/grouped_routing.json`, section "
        f"`test` ({n} of {len(plan['question_ids'])} sampled BFCL simple_python + multiple "
        f"questions; {plan['sample']}; runs {cells}). Pool: {plan['pool_size']:,} tools, "
        f"{plan['pool_rule']}. Groups: {g['groups']} (sizes {g['group_sizes'][0]}..."
        f"{g['group_sizes'][1]}, {g['learned_groups']} learned by k-means over MiniLM "
        f"embeddings; dotted prefixes shared by fewer than {g['min_prefix']} tools count as "
        f"none). Model: {plan['model']} on this CPU, canonical-path scores, one tree per step. "
        f"Chosen on the dev sample ({choice.get('questions_compared', '?')} live_simple + "
        f"live_multiple questions): {choice.get('rule', '—')}. Right tool @1: the chosen tool "
        "is a gold one; R@k: a gold tool among the first k reached (the grouped arms reach "
        "only the chosen group's); ms per question, search and model apart. "
        + sec.get("cost_note", ""),
    ]


RERANK_ARMS = {
    "search": "the search's first (BM25 over tool_text: today's default)",
    "model": "the model's name scores alone (w = 0)",
    "combined": "model + search rank (w calibrated on dev)",
}


def tool_rerank(load: Load) -> list[str]:
    """Exact name scores of the search's candidates, alone and combined with its rank."""
    d = load("tool_rerank.json")
    if d is None or "dev" not in d:
        return []
    plan = d["plan"]
    out = [
        "| split | prompt | n | tools (K) | search first | model alone | combined (w) "
        "| forward ms per question, median (test: both pools' calls) | prompt tokens per call |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, r in d["dev"].items():
        top1 = r["by_weight_top1_mrr"]
        out.append(
            f"| dev | {variant} | {r['n']} | {plan['dev']['pool']:,} | {r['search_top1']:.3f} | "
            f"{r['model_top1']:.3f} | {top1[str(r['w'])][0]:.3f} ({r['w']:g}) | "
            f"{r['forward_ms_median']:.0f} | {r['prompt_tokens_median']:.0f} |"
        )
    chosen = d.get("chosen", {})
    cost = d.get("cost", {})
    for size, t in d.get("test", {}).items():
        out.append(
            f"| test | {chosen.get('variant', '?')} | {t['n']} | {int(size):,} | "
            f"{t['search']['right_tool_at_1']:.3f} | {t['model']['right_tool_at_1']:.3f} | "
            f"{t['combined']['right_tool_at_1']:.3f} ({chosen.get('w', 0):g}) | "
            f"{cost.get('forward_ms', {}).get('median', 0):.0f} | "
            f"{cost.get('prompt_tokens', {}).get('median', 0):.0f} |"
        )
    runs = _run_cells(d.get("runs", {}))
    test_n = {t["n"] for t in d.get("test", {}).values()}
    return [
        *out,
        "",
        f"`benchmarks/tool_rerank.py` → `benchmarks/results/tool_rerank.json` (runs {runs}). "
        f"{plan['model']} on this CPU, {plan['k']} candidates from the search, each name "
        "scored on its canonical path constrained to the candidates, one forward call per "
        f"prompt. Dev: {plan['dev']['n']} seeded BFCL live_simple + live_multiple questions "
        "(each prompt scored the first n of one seeded order); the prompt and w were chosen "
        f"there by the plan's rule ({plan['rule']}). Test: "
        + (
            f"the first {min(test_n)} of the 600 simple_python + multiple questions in a "
            "seeded order (a random sample), scored once with that choice. "
            if test_n
            else "not scored yet. "
        )
        + "Values: right tool @1 (the first of the ranking is a gold tool). "
        + str(cost.get("note", "")),
    ]


BLOCKS: dict[str, Callable[[Load], list[str]]] = {
    "routing-headline": routing_headline,
    "route-at-scale": route_at_scale,
    "tool-search": tool_search,
    "grouped-routing": grouped_routing,
    "tool-rerank": tool_rerank,
}
