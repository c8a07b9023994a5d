"""Tool-search recall on LiveMCPBench (held out): BM25 alone over the 526 real MCP tools.

    python benchmarks/livemcpbench_search.py [--out benchmarks/results/livemcpbench_search.json]

The pool is every tool of the pinned wheel (``trierouter.data.livemcpbench``): 526 tools named
``<server>.<tool>``, nothing added or removed. The query is the task's text as the user wrote it;
the 94 tasks with a gold tool are all measured (none left out, nothing tuned: BM25Index with its
default parameters over ``name + " " + description``). recall@k (``hit``): the share of tasks
with some gold tool in the top k; ``all``: every gold tool in the top k; ``fraction``: the mean
share of gold tools in the top k. Per task, the rank of its best-ranked gold tool.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from pathlib import Path
from typing import Any

from trierouter.data.livemcpbench import (
    LIVEMCPBENCH_WHEEL,
    load_livemcpbench,
    mean_recall,
    task_recall,
)
from trierouter.shortlist import BM25Index

KS = (1, 3, 5, 10, 20)
OUT = Path(__file__).resolve().parent / "results" / "livemcpbench_search.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    bench = load_livemcpbench()
    names = [t["function"]["name"] for t in bench.tools]
    texts = [f"{t['function']['name']} {t['function']['description']}" for t in bench.tools]
    t0 = time.perf_counter()
    index = BM25Index.build(names, texts)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    rankings = {t.query: index.search(t.query, max(KS)) for t in bench.tasks}
    search_ms = (time.perf_counter() - t0) / len(bench.tasks) * 1000
    rows = task_recall(bench.tasks, names, lambda q: rankings[q], KS)
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "source": {
            "wheel": LIVEMCPBENCH_WHEEL.requirement,
            "file": LIVEMCPBENCH_WHEEL.filename,
            "sha256": LIVEMCPBENCH_WHEEL.sha256,
            "license": "Apache-2.0 (the wheel's LICENSE)",
        },
        "held_out": "never used to tune or calibrate anything",
        "pool": {
            "rule": "every tool of the wheel, named <server>.<tool>",
            "tools": len(names),
            "servers": len(bench.servers),
        },
        "tasks": len(bench.tasks),
        "unlabelled_tasks": [t.id for t in bench.unlabelled],
        "methods": {
            "bm25": {
                "index": "BM25Index.build(names, name + ' ' + description), defaults",
                "recall": mean_recall(rows),
                "build_s": round(build_s, 4),
                "search_ms_per_query": round(search_ms, 3),
                "first_gold_rank": {r.task_id: r.first_gold for r in rows},
            }
        },
        "machine": platform.platform(),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    rec = result["methods"]["bm25"]["recall"]
    print(f"bm25 recall@k (some gold tool in the top k) over {len(rows)} tasks: {rec['hit']}")
    print(f"every gold tool in the top k: {rec['all']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
