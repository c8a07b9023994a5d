"""Plots benchmarks/results/bfcl.json: accuracy per category and arm; accuracy vs registry size.

python benchmarks/plot_bfcl.py [--json benchmarks/results/bfcl.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABELS = {
    "free": "free text + vLLM Hermes parser",
    "free_lenient": "free text, any JSON taken as the call",
    "xgrammar": "XGrammar (vLLM required schema)",
    "tr_required": "trierouter required",
    "tr_auto": "trierouter auto",
    "tr_think": "trierouter think-then-answer",
}


def table(data: dict) -> str:  # type: ignore[type-arg]
    """The README's results table (markdown) from the JSON."""
    arms = [a for a in LABELS if a in data["arms"]]
    cats = [c for c in next(iter(data["arms"].values())) if c != "wall_s"]
    head = "| arm | " + " | ".join(cats) + " | tokens/call | s/call |"
    lines = [head, "|" + " --- |" * (len(cats) + 3)]
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
        stats = [row[c] for c in cats if c in row]
        tok = sum(s["tokens_per_call"] * s["n"] for s in stats) / sum(s["n"] for s in stats)
        sec = sum(s["seconds_per_call"] * s["n"] for s in stats) / sum(s["n"] for s in stats)
        lines.append(f"| {LABELS[arm]} | " + " | ".join(cells) + f" | {tok:.0f} | {sec:.1f} |")
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = data.get("scale")
    fig, axes = plt.subplots(1, 2 if scale else 1, figsize=(15 if scale else 9, 5), squeeze=False)
    ax = axes[0][0]
    arms = [a for a in LABELS if a in data["arms"]]
    cats = [c for c in next(iter(data["arms"].values())) if c != "wall_s"]
    width = 0.8 / max(1, len(arms))
    for i, arm in enumerate(arms):
        ys = [data["arms"][arm].get(c, {}).get("accuracy", 0.0) * 100 for c in cats]
        xs = [j + (i - (len(arms) - 1) / 2) * width for j in range(len(cats))]
        bars = ax.bar(xs, ys, width, label=LABELS[arm])
        for b, c in zip(bars, cats, strict=True):
            inv = data["arms"][arm].get(c, {}).get("invalid", 0)
            if inv:
                ax.annotate(f"{inv}✗", (b.get_x() + b.get_width() / 2, b.get_height()),
                            ha="center", va="bottom", fontsize=6, color="firebrick")  # fmt: skip
    n = next(iter(next(iter(data["arms"].values())).values()))["n"]
    ax.set_xticks(range(len(cats)), cats, rotation=15)
    ax.set_ylabel("BFCL AST accuracy (%) — official checker")
    ax.set_ylim(0, 105)
    ax.set_title(f"{data['model']}, {n} questions per category (✗ = invalid outputs)")
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(axis="y", alpha=0.3)

    if scale:
        ax2 = axes[0][1]
        native = data["arms"].get("tr_required", {})
        nat = [native[c] for c in ("simple_python", "multiple") if c in native]
        sizes = ["native"] + [str(s) for s in scale["sizes"]]
        acc = []
        if nat:
            acc.append(100 * sum(s["correct"] for s in nat) / sum(s["n"] for s in nat))
        else:
            acc.append(float("nan"))
        rec = [100.0]
        k = scale["k"]
        for s in scale["sizes"]:
            row = scale["by_size"].get(str(s))
            acc.append(100 * row["tr_required"]["accuracy"] if row else float("nan"))
            rec.append(100 * row["recall_at"][str(k)] if row else float("nan"))
        xs = list(range(len(sizes)))
        ax2.plot(xs, acc, "o-", label=f"trierouter required (BM25 top-{k} shortlist)")
        ax2.plot(xs, rec, "s--", label=f"shortlist recall@{k} (bounds accuracy)")
        xg = data["arms"].get("xgrammar", {})
        xnat = [xg[c] for c in ("simple_python", "multiple") if c in xg]
        if xnat:
            xa = 100 * sum(s["correct"] for s in xnat) / sum(s["n"] for s in xnat)
            ax2.plot([0], [xa], "^", color="tab:red", label="XGrammar (native tools)")
        ax2.annotate(
            "XGrammar whole-registry schema: no compile\nwithin 120 s from 1,000 tools "
            "(tool_calls.json)",
            (2, 8), fontsize=7, color="tab:red", ha="center",
        )  # fmt: skip
        ax2.set_xticks(xs, [f"K={s}" if s != "native" else "native (1-4)" for s in sizes])
        ax2.set_ylim(0, 105)
        ax2.set_ylabel("% of simple_python + multiple questions")
        ax2.set_title(f"Accuracy vs registry size ({scale['questions']} questions)")
        ax2.legend(fontsize=7, loc="lower left")
        ax2.grid(alpha=0.3)
    fig.tight_layout()
    out = path.with_suffix(".png")
    fig.savefig(out, dpi=120)
    print(out)


if __name__ == "__main__":
    main()
