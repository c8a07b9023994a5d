"""Plots benchmarks/results/bfcl.json: accuracy per category and arm; accuracy vs registry size.

python benchmarks/plot_bfcl.py [--json benchmarks/results/bfcl.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from _provenance import arm_runs, category_run, check_table, is_mixed, run_cell, run_labels

ROOT = Path(__file__).resolve().parent.parent
LABELS = {
    "free": "free text + vLLM Hermes parser",
    "free_lenient": "free text, any JSON taken as the call",
    "xgrammar": "XGrammar (vLLM required schema)",
    "tr_required": "trierouter required",
    "tr_required_single": "trierouter required, one call (parallel_tool_calls=False)",
    "tr_required_json": "trierouter required, bare JSON (opt-in)",
    "tr_required_fence": "trierouter required, ```json fence (opt-in)",
    "tr_required_array": "trierouter required, json_array (compact)",
    "tr_required_array_lines": "trierouter required, json_array_lines",
    "tr_auto": "trierouter auto",
    "tr_auto_fence": "trierouter auto, ```json trigger (opt-in)",
    "tr_think": "trierouter think-then-answer",
}
SHORTLISTS = {"bm25": "BM25", "hybrid": "Shortlist.build hybrid"}


def categories(data: dict) -> list[str]:  # type: ignore[type-arg]
    """The categories, in run order (the per-arm dicts also hold wall_s / cpu_s numbers)."""
    out: list[str] = []
    for row in data["arms"].values():
        out += [c for c, v in row.items() if isinstance(v, dict) and c not in out]
    return out


def labels(data: dict) -> dict[str, str]:  # type: ignore[type-arg]
    """:data:`LABELS`, with the free arm's parser named for the run's format."""
    fmt = (data.get("settings") or [{}])[0].get("format", "hermes")
    out = dict(LABELS)
    if fmt != "hermes":
        out["free"] = f"free text + the {fmt} format's parser"
    return out


def table(data: dict) -> str:  # type: ignore[type-arg]
    """docs/benchmarks.md's results table (markdown) from the JSON."""
    names = labels(data)
    arms = [a for a in names if a in data["arms"]]
    cats = categories(data)
    runs = arm_runs(data)
    mixed = is_mixed(runs, arms)
    head = "| arm | " + " | ".join(cats) + " | tokens/call | s/call |" + (" run |" if mixed else "")
    lines = [head, "|" + " --- |" * (len(cats) + 3 + mixed)]
    for arm in arms:
        row = data["arms"][arm]
        cells = []
        for c in cats:
            s = row.get(c)
            if not s:
                cells.append("")
                continue
            inv = f", {s['invalid']} invalid" if s["invalid"] else ""
            cells.append(f"{s['correct']}/{s['n']}{inv}")
        stats = [row[c] for c in cats if c in row and isinstance(row[c], dict)]
        tok = sum(s["tokens_per_call"] * s["n"] for s in stats) / sum(s["n"] for s in stats)
        sec = sum(s["seconds_per_call"] * s["n"] for s in stats) / sum(s["n"] for s in stats)
        run = f" {run_cell(runs.get(arm))} |" if mixed else ""
        lines.append(f"| {names[arm]} | " + " | ".join(cells) + f" | {tok:.0f} | {sec:.1f} |" + run)
    check_table("bfcl.json", lines, {a: names[a] for a in arms}, runs)
    return "\n".join(lines)


def scale_table(data: dict, key: str = "scale") -> str:  # type: ignore[type-arg]
    """The accuracy-vs-registry-size table (``key``: ``scale``, or ``scale_distinct``:
    the pool without BFCL's near-duplicates of the evaluated functions)."""
    sc = data[key]
    native = [data["arms"]["tr_required"][c] for c in ("simple_python", "multiple")]
    nat_c, nat_n = sum(s["correct"] for s in native), sum(s["n"] for s in native)
    runs = arm_runs(data)
    # the native row is tr_required's simple_python and multiple; the others the scale run's
    rows = {"native": category_run(runs.get("tr_required"), "multiple"), key: runs.get(key)}
    if category_run(runs.get("tr_required"), "simple_python") != rows["native"]:
        rows["native"] = None  # two runs in one row: unknown
    mixed = is_mixed(rows, rows)
    native_label = "native (1-4 tools per question)"
    lines = [
        "| registry | shortlist | accuracy | recall@k (bounds it) | recall@1 / @5 / @10 / @20 |"
        " build |" + (" run |" if mixed else ""),
        "| --- | --- | --- | --- | --- | --- |" + (" --- |" if mixed else ""),
        f"| {native_label} | the question's own | {nat_c}/{nat_n} | - | - | - |"
        + (f" {run_cell(rows['native'])} |" if mixed else ""),
    ]
    first = len(lines)
    for size in sc["sizes"]:
        row = sc["by_size"].get(str(size))
        if not row:
            continue
        for run, r in row["runs"].items():
            m, k = run.split("@")
            rec = row["recall_at"][m]
            at = " / ".join(f"{rec[x]:.2f}" for x in ("1", "5", "10", "20") if x in rec)
            lines.append(
                f"| {size:,} tools | {SHORTLISTS[m]} top {k} | {r['correct']}/{r['n']} | "
                f"{rec[k]:.2f} | {at} | {row['build_s'][m]:.1f} s |"
                + (f" {run_cell(rows[key])} |" if mixed else "")
            )
    labels = {"native": native_label}
    if len(lines) > first:
        labels[key] = _cells(lines[first])[0]
    check_table(f"bfcl.json {key}", lines, labels, rows)
    return "\n".join(lines)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _scale_curves(ax: Any, data: dict, nat_acc: float) -> None:  # type: ignore[type-arg]
    """Accuracy and recall@k against the registry size, for the pool as BFCL ships it (dashed)
    and without its near-duplicates (solid)."""
    keys = [k for k in ("scale", "scale_distinct") if data.get(k)]
    sizes = sorted({int(s) for k in keys for s in data[k]["sizes"]})
    xs_of = {s: i + 1 for i, s in enumerate(sizes)}
    for ki, key in enumerate(keys):
        sc = data[key]
        style = "--" if key == "scale" and len(keys) > 1 else "-"
        tag = "with BFCL near-duplicates" if key == "scale" else "near-duplicates removed"
        for i, run in enumerate(sc["runs"]):
            m, k = run.split("@")
            xs, acc, rec = [0], [nat_acc], [100.0]
            for s in sorted(int(x) for x in sc["sizes"]):
                row = sc["by_size"].get(str(s), {})
                r = row.get("runs", {}).get(run)
                rr = row.get("recall_at", {}).get(m, {}).get(k)
                if r is None:
                    continue
                xs.append(xs_of[s])
                acc.append(100 * r["accuracy"])
                rec.append(100 * rr if rr is not None else float("nan"))
            color = f"C{i + 2 * ki}"
            ax.plot(xs, acc, "o" + style, color=color,
                    label=f"accuracy, {SHORTLISTS[m]} top {k} ({tag})")  # fmt: skip
            ax.plot(xs, rec, "s:", color=color, alpha=0.5, label=f"recall@{k} ({tag})")
    ax.set_xticks(range(len(sizes) + 1), ["native (1-4)"] + [f"K={s:,}" for s in sizes])


def transformers_table(data: dict) -> str:  # type: ignore[type-arg]
    """transformers vs vLLM on the same questions and prompts."""
    tf = data["transformers"]
    n = len(tf["questions"])
    lines = [
        f"| arm ({tf['category']}, {n} questions) | transformers | vLLM | same output text |",
        "| --- | --- | --- | --- |",
    ]
    for arm in ("tr_required", "free"):
        t = tf[arm]
        inv = f", {t['invalid']} invalid" if t["invalid"] else ""
        lines.append(
            f"| {LABELS[arm]} | {t['correct']}/{t['n']}{inv} | {t['vllm_correct']}/{n} | "
            f"{t['same_text_as_vllm']}/{n} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/bfcl.json"))
    ap.add_argument("--table", action="store_true", help="print the markdown table too")
    args = ap.parse_args()
    path = Path(args.json)
    data = json.loads(path.read_text())
    if args.table:
        print(table(data))
        for key in ("scale", "scale_distinct"):
            if data.get(key):
                print()
                print(scale_table(data, key))
        if data.get("transformers"):
            print()
            print(transformers_table(data))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = data.get("scale") or data.get("scale_distinct")
    fig, axes = plt.subplots(1, 2 if scale else 1, figsize=(15 if scale else 9, 5), squeeze=False)
    ax = axes[0][0]
    arms = [a for a in LABELS if a in data["arms"]]
    cats = categories(data)
    width = 0.8 / max(1, len(arms))
    names = labels(data)
    runs = arm_runs(data)
    if is_mixed(runs, arms):  # arms of different runs name their run, as the table does
        names = {a: f"{n} [{' + '.join(run_labels(runs.get(a)))}]" for a, n in names.items()}
    for i, arm in enumerate(arms):
        ys = [data["arms"][arm].get(c, {}).get("accuracy", 0.0) * 100 for c in cats]
        xs = [j + (i - (len(arms) - 1) / 2) * width for j in range(len(cats))]
        bars = ax.bar(xs, ys, width, label=names[arm])
        for b, c in zip(bars, cats, strict=True):
            inv = data["arms"][arm].get(c, {}).get("invalid", 0)
            if inv:
                ax.annotate(f"{inv}✗", (b.get_x() + b.get_width() / 2, b.get_height()),
                            ha="center", va="bottom", fontsize=6, color="firebrick")  # fmt: skip
    n = data["arms"][arms[0]][cats[0]]["n"]
    ax.set_xticks(range(len(cats)), cats, rotation=15)
    ax.set_ylabel("BFCL AST accuracy (%) — official checker")
    ax.set_ylim(0, 140)  # room for the legend above the bars
    ax.set_yticks(range(0, 101, 20))
    ax.set_title(f"{data['model']}, {n} questions per category (✗ = invalid outputs)")
    ax.legend(fontsize=7, loc="upper center", ncol=2)
    ax.grid(axis="y", alpha=0.3)

    if scale:
        ax2 = axes[0][1]
        native = data["arms"].get("tr_required", {})
        nat = [native[c] for c in ("simple_python", "multiple") if c in native]
        nat_acc = 100 * sum(s["correct"] for s in nat) / max(1, sum(s["n"] for s in nat))
        _scale_curves(ax2, data, nat_acc)
        xg = data["arms"].get("xgrammar", {})
        xnat = [xg[c] for c in ("simple_python", "multiple") if c in xg]
        if xnat:
            xa = 100 * sum(s["correct"] for s in xnat) / sum(s["n"] for s in xnat)
            ax2.plot([0], [xa], "^", color="tab:red", label="XGrammar (native tools)")
        ax2.annotate(
            "XGrammar whole-registry schema: no compile\nwithin 120 s from 1,000 tools "
            "(tool_calls.json)",
            (ax2.get_xlim()[1] - 0.05, 3), fontsize=7, color="tab:red", ha="right",
        )  # fmt: skip
        ax2.set_ylim(0, 105)
        ax2.set_ylabel("% of simple_python + multiple questions")
        ax2.set_title(f"Accuracy vs registry size ({scale['questions']} questions)")
        ax2.set_xlabel("tools in the registry (a shortlist's top k in the prompt and constraint)")
        ax2.legend(fontsize=7, loc="lower left")
        ax2.grid(alpha=0.3)
    fig.tight_layout()
    out = path.with_suffix(".png")
    fig.savefig(out, dpi=120)
    print(out)


if __name__ == "__main__":
    main()
