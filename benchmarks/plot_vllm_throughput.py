"""Plot ``results/vllm_throughput.json`` (written by ``vllm_throughput.py``); reads only the JSON.

One panel per batch size: requests/s against K (log x), one line per method; a last panel shows
trierouter's slowdown against unconstrained decoding (same tokens, same steps) in percent.
Cells where a method produced no valid output (guidance refuses K = 10,000) are left out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent / "results"
COLORS = {
    "unconstrained": "#7f7f7f",
    "trierouter": "#d62728",
    "xgrammar": "#1f77b4",
    "guidance": "#2ca02c",
}


def plot(doc: dict[str, Any], out: Path) -> None:
    rows: list[dict[str, Any]] = doc["results"]
    batches = sorted({r["batch"] for r in rows})
    methods = [m for m in COLORS if any(r["method"] == m for r in rows)]
    fig, axes = plt.subplots(1, len(batches) + 1, figsize=(4.2 * (len(batches) + 1), 3.8))
    for ax, b in zip(axes, batches, strict=False):
        for m in methods:
            pts = sorted(
                (r["k"], r["requests_per_s"])
                for r in rows
                if r["batch"] == b and r["method"] == m and r.get("valid") != 0
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), "o-", color=COLORS[m], label=m)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"batch {b}: requests/s")
        ax.set_xlabel("K (values in the set)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    ax = axes[-1]
    for b in batches:
        pts = sorted(
            (r["k"], r["trierouter_slowdown_vs_unconstrained_pct"])
            for r in doc["ratios"]
            if r["batch"] == b
        )
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", label=f"batch {b}")
    ax.axhline(5, color="k", ls="--", lw=0.8, label="5 % target")
    ax.set_xscale("log")
    ax.set_title("trierouter vs unconstrained (%)")
    ax.set_xlabel("K (values in the set)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    eng = doc.get("engine", {})
    fig.suptitle(f"vLLM {eng.get('vllm', '?')} on {eng.get('device', '?')}: tiny model, greedy")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=HERE / "vllm_throughput.json")
    ap.add_argument("--out", type=Path, default=HERE / "vllm_throughput.png")
    args = ap.parse_args()
    plot(json.loads(args.json.read_text(encoding="utf-8")), args.out)


if __name__ == "__main__":
    main()
