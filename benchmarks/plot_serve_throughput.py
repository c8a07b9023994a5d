"""Plot ``results/serve_throughput.json`` (written by ``serve_throughput.py``); reads only the JSON.

    python benchmarks/plot_serve_throughput.py [--json PATH]    # writes PATH with .png

Left: output tokens/s against concurrency, one line per arm (median over rounds, the range as
error bars); right: p50 latency (solid) and p99 (dotted) against concurrency.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "results"
LABELS = {
    "tr_auto": "trierouter serve, auto",
    "tr_required": "trierouter serve, required",
    "vllm_required": "vLLM, required (XGrammar)",
    "vllm_free": "vLLM, free text",
}


def plot(doc: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = doc["summary"]
    fig, (ax, lat) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, arm in enumerate(a for a in LABELS if a in summary):
        per = summary[arm]
        cs = sorted(per, key=int)
        xs = [int(c) for c in cs]
        tps = [per[c].get("tokens_per_s", float("nan")) for c in cs]
        err = [
            [t - per[c].get("tokens_per_s_min", t) for c, t in zip(cs, tps, strict=True)],
            [per[c].get("tokens_per_s_max", t) - t for c, t in zip(cs, tps, strict=True)],
        ]
        color = f"C{i}"
        ax.errorbar(xs, tps, yerr=err, marker="o", color=color, capsize=3, label=LABELS[arm])
        lat.plot(xs, [per[c]["latency_p50_s"] for c in cs], "o-", color=color)
        lat.plot(xs, [per[c]["latency_p99_s"] for c in cs], "s:", color=color, alpha=0.6)
    conc = sorted({int(c) for per in summary.values() for c in per})
    for a in (ax, lat):
        a.set_xscale("log", base=2)
        a.set_xticks(conc, [str(c) for c in conc])
        a.minorticks_off()
        a.set_xlabel("requests in flight")
        a.grid(alpha=0.3)
    ax.set_ylabel("output tokens/s")
    ax.legend(fontsize=7)
    lat.set_ylabel("latency per request (s): p50 solid, p99 dotted")
    runs = {r.get("commit") for r in doc.get("runs", {}).values()}
    fig.suptitle(
        f"Tool calls through a server, {doc['model']}, one run at {', '.join(sorted(runs))}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", type=Path, default=HERE / "serve_throughput.json")
    args = p.parse_args(argv)
    out = args.json.with_suffix(".png")
    plot(json.loads(args.json.read_text()), out)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
