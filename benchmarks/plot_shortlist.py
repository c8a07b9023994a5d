"""Plot benchmarks/results/shortlist.json (written by benchmarks/shortlist.py) to a PNG."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS / "shortlist.json"
    dst = src.with_suffix(".png")
    data: dict[str, Any] = json.loads(src.read_text())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(20, 10), gridspec_kw={"width_ratios": [1.6, 1.0]})
    ax = axes[0][0]
    icd = data.get("icd10cm", {})
    rec = icd.get("recall", {})
    if rec:
        methods = list(rec)
        sources = [s for s in next(iter(rec.values())) if s != "mean"] + ["mean"]
        width = 0.8 / len(methods)
        for j, m in enumerate(methods):
            xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(sources))]
            bars = ax.bar(xs, [rec[m][s]["R@10"] for s in sources], width, label=m)
            ax.scatter(
                xs,
                [rec[m][s]["R@1"] for s in sources],
                marker="_",
                color="k",
                s=60,
                zorder=3,
                label="R@1" if j == 0 else None,
            )
            if m == "shortlist":
                for b in bars:
                    b.set_edgecolor("k")
                    b.set_linewidth(1.2)
        counts = icd.get("sources", {})
        ax.set_xticks(range(len(sources)))
        ax.set_xticklabels(
            [f"{s}\n({counts[s]['queries']})" if s in counts else s for s in sources], fontsize=8
        )
        ax.set_ylim(0, 1)
        ax.set_ylabel("R@10 (bars), R@1 (ticks)")
        ax.legend(fontsize=7, ncol=2)
        ax.set_title(
            "ICD-10-CM, 74,731 codes: every method on five query sources "
            "(shortlist = Shortlist.build default, outlined)",
            fontsize=9,
        )

    ax = axes[0][1]
    rows: list[tuple[str, float]] = []
    # the dedicated quiet run (--sections latency), which the report quotes; else the icd run's
    lat = data.get("icd10cm_latency") or icd.get("latency", {})
    src_lat = {k: v for k, v in lat.items() if isinstance(v, dict) and "bm25+syn" in v}
    if src_lat:
        comps = list(next(iter(src_lat.values())))
        for c in comps:
            med = float(np.median([v[c]["cpu"]["median_ms"] for v in src_lat.values()]))
            rows.append((f"{c} (ICD, CPU)", med))
    api = data.get("openapi", {})
    if "bm25" in api:
        rows.append(("BM25 (100K tools)", api["bm25"]["query"]["median_ms"]))
    emb = api.get("embedding", {})
    if "flat_search_full" in emb:
        rows.append(("faiss flat (100K)", emb["flat_search_full"]["median_ms"]))
        rows.append(("faiss HNSW (100K)", emb["hnsw_search_full_ef128"]["median_ms"]))
    syn = data.get("synthetic_1m", {})
    if "bm25_words" in syn:
        rows.append(("BM25 words (1M)", syn["bm25_words"]["query"]["median_ms"]))
    if rows:
        ax.barh([r[0] for r in rows], [r[1] for r in rows], color="tab:blue")
        ax.axvline(5, color="gray", ls="--", lw=0.8)
        ax.set_xlabel("single-query latency, median ms (dashed: 5 ms)")
        ax.set_title(
            "Single-query latency, 1 thread, median (ICD: CPU time, median over sources, "
            f"{'--sections latency' if 'icd10cm_latency' in data else 'icd run'}; "
            f"{lat.get('index_kind', '?')} embedding index)",
            fontsize=9,
        )
        ax.tick_params(axis="y", labelsize=8)

    ax = axes[1][0]
    per = api.get("per_request", {})
    if per:
        ks = [int(k.split("=")[1]) for k in per]
        ax.plot(
            ks,
            [v["compile_shortlist"]["median_ms"] for v in per.values()],
            "o-",
            label="compile ChoiceSet over shortlist",
        )
        ax.plot(
            ks,
            [v["restrict_full_trie_masks"]["median_ms"] for v in per.values()],
            "s-",
            label="restrict precompiled full trie (masks only)",
        )
        ax.axhline(2, color="gray", ls="--", lw=0.8)
        ax.set_xlabel("shortlist size k")
        ax.set_ylabel("median ms per request")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
        ax.set_title("Per-request constraint over 100K openapi tools (dashed: 2 ms)", fontsize=9)

    ax = axes[1][1]
    hs = [
        ("ICD-10-CM", icd.get("hierarchy")),
        ("openapi 100K", api.get("hierarchy")),
        ("synthetic 1M", syn.get("hierarchy")),
    ]
    hs = [(n, h) for n, h in hs if h]
    if hs:
        hx = range(len(hs))
        ax.bar([x - 0.2 for x in hx], [h["groups"] for _, h in hs], 0.4, label="groups G")
        ax.bar(
            [x + 0.2 for x in hx], [h["group_size_max"] for _, h in hs], 0.4, label="largest group"
        )
        ax.scatter(list(hx), [h["sqrtK_ceil"] for _, h in hs], color="k", zorder=3, label="⌈√K⌉")
        ax.scatter(
            list(hx),
            [2 * h["sqrtK_ceil"] for _, h in hs],
            color="r",
            marker="_",
            s=400,
            zorder=3,
            label="2⌈√K⌉ (Prop. 2 bound)",
        )
        ax.set_xticks(list(hx))
        ax.set_xticklabels([f"{n}\ncompile {h['compile_seconds']} s" for n, h in hs], fontsize=8)
        ax.legend(fontsize=8)
        ax.set_title("√K hierarchy: group count and size", fontsize=9)

    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
