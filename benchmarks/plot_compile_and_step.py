"""Plot ``results/compile_and_step.json`` (written by ``compile_and_step.py``); reads only the JSON.

One row per tokenizer; columns: compile time, per-step time for one request, per-step time for
a batch of 256, all against K on log-log axes, one line per engine. A timed-out case is an ``x``
drawn at the time limit; an error is a ``!`` on the axis floor.
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
    "trierouter": "#d62728",
    "trierouter-compact": "#ff7f0e",
    "trierouter-numpy": "#ff9896",
    "xgrammar": "#1f77b4",
    "llguidance": "#2ca02c",
    "outlines-core": "#9467bd",
    "genre-trie": "#7f7f7f",
}


def _get(r: dict[str, Any], *path: str) -> float | None:
    x: Any = r
    for p in path:
        if not isinstance(x, dict) or p not in x:
            return None
        x = x[p]
    return float(x) if isinstance(x, (int, float)) else None


def _series(rows: list[dict[str, Any]], engine: str, *path: str) -> tuple[list[int], list[float]]:
    pts = [
        (r["k"], v)
        for r in rows
        if r["engine"] == engine and r.get("status") == "ok" and (v := _get(r, *path)) is not None
    ]
    pts.sort()
    return [p[0] for p in pts], [p[1] for p in pts]


def plot(doc: dict[str, Any], out: Path) -> None:
    results: list[dict[str, Any]] = doc["results"]
    vocabs = list(dict.fromkeys(r["vocab"] for r in results))
    engines = list(dict.fromkeys(r["engine"] for r in results))
    panels = [
        ("compile (ms)", ("compile_ms",), 1e3),
        ("one request: step, median (µs)", ("step", "median_us"), 1e6),
        ("batch of 256: step (µs)", ("batch", "best_median_us"), 1e6),
    ]
    fig, axes = plt.subplots(
        len(vocabs), len(panels), figsize=(5.2 * len(panels), 4.2 * len(vocabs)), squeeze=False
    )
    for vi, vocab in enumerate(vocabs):
        rows = [r for r in results if r["vocab"] == vocab]
        width = next((r.get("width") for r in rows if r.get("width")), None)
        for pi, (title, path, unit) in enumerate(panels):
            ax = axes[vi][pi]
            for eng in engines:
                color = COLORS.get(eng)
                ks, ys = _series(rows, eng, *path)
                if ks:
                    ax.plot(ks, ys, "o-", color=color, label=eng, lw=1.8, ms=4)
                if pi == 0:  # lazy engines: time to the first mask as a faint dotted line
                    ks2, ys2 = _series(rows, eng, "compile_plus_first_mask_ms")
                    if ks2:
                        ax.plot(ks2, ys2, ":", color=color, lw=1, alpha=0.6)
                if pi == 1:  # the mean shows the tail the median hides
                    ks4, ys4 = _series(rows, eng, "step", "mean_us")
                    if ks4:
                        ax.plot(ks4, ys4, ":", color=color, lw=1.2, alpha=0.7)
                if pi == 1 and eng in ("trierouter", "genre-trie"):
                    ks3, ys3 = _series(rows, eng, "step_ids", "median_us")
                    if ks3:
                        ax.plot(
                            ks3,
                            ys3,
                            "s--",
                            color=color,
                            lw=1,
                            ms=3,
                            alpha=0.8,
                            label=f"{eng} (ids, no packing)",
                        )
                for r in rows:
                    if r["engine"] != eng:
                        continue
                    if r.get("status") == "timeout":
                        limit = float(r.get("timeout_s") or 120) * unit
                        if pi == 0 or r.get("timed_out_phase") != "compile":
                            ax.plot([r["k"]], [limit], "x", color=color, ms=10, mew=2.5)
                            ax.annotate(
                                "timeout",
                                (r["k"], limit),
                                textcoords="offset points",
                                xytext=(4, 4),
                                fontsize=7,
                                color=color,
                            )
                    elif r.get("status") == "error":
                        ax.annotate(
                            "!",
                            (r["k"], 0.02),
                            xycoords=("data", "axes fraction"),
                            color=color,
                            fontsize=12,
                            fontweight="bold",
                            ha="center",
                        )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("K (tool names)")
            ax.set_title(
                f"{vocab} ({width:,} ids): {title}" if width else f"{vocab}: {title}", fontsize=10
            )
            ax.grid(True, which="both", alpha=0.25)
            if pi == 1:
                ax.legend(fontsize=7, loc="best")
    m = doc.get("machine", {})
    fig.suptitle(
        f"compile and step, K tool names: {m.get('cpu_count')} CPUs, {m.get('cpu_model', '')}, "
        f"{m.get('date', '')}  (dotted: compile + first mask, mean step; x: timed out)",
        fontsize=9,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--json", default=str(HERE / "compile_and_step.json"))
    ap.add_argument("--out", default=str(HERE / "compile_and_step.png"))
    args = ap.parse_args(argv)
    plot(json.loads(Path(args.json).read_text()), Path(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
