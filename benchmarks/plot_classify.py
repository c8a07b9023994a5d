"""Plots benchmarks/results/classify.json: top-1 accuracy of every arm per source, recall@k.

python benchmarks/plot_classify.py [--json benchmarks/results/classify.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARMS = {
    "retriever_top1": "retriever top-1",
    "greedy": "model, greedy",
    "exact": "model, exact top-1",
    "combined": "combined (calibrated)",
    "free_mapped": "model, free text mapped",
    "smollm2_exact": "SmolLM2, exact top-1",
    "smollm2_combined": "SmolLM2, combined",
    "qwen15_exact": "Qwen-1.5B, exact top-1",
    "qwen15_combined": "Qwen-1.5B, combined",
    "think_exact": "think, exact top-1",
    "think_combined": "think, combined",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "classify.json"))
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(args.json)
    d = json.loads(path.read_text())
    k = d["k"]
    table = d.get("arms") or d["sources"]  # every arm per source (older files: the first)
    sources = [s for s, r in d["sources"].items() if "n" in r]
    have = [a for a in ARMS if any(a in table[s] for s in sources)]
    arms = [*have, f"recall_at_{k}"]
    names = [*(ARMS[a] for a in have), f"recall@{k} (bound)"]
    fig, ax = plt.subplots(figsize=(10, 4.4))
    width = 0.8 / len(arms)
    for j, (arm, name) in enumerate(zip(arms, names, strict=True)):
        xs = [i + (j - (len(arms) - 1) / 2) * width for i in range(len(sources))]
        ys = [table[s].get(arm, 0.0) for s in sources]
        hatch = "//" if arm.startswith("recall") else None
        ax.bar(xs, ys, width, label=name, hatch=hatch, alpha=0.6 if hatch else 1.0)
    ax.set_xticks(range(len(sources)))
    ax.set_xticklabels([f"{s} (n={d['sources'][s]['n']})" for s in sources])
    ax.set_ylabel("top-1 accuracy")
    ax.set_ylim(0, 1)
    secs = d.get("targets", {}).get("seconds_per_text")
    speed = f", {secs:.2f} s/text" if secs is not None else ""
    ax.set_title(
        f"ICD-10-CM, {d['labels']:,} labels, k={k}: {d['model']} over the "
        f"{d['retriever_used']} shortlist{speed} (shared 2-core host)",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    fig.tight_layout()
    out = path.with_suffix(".png")
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
