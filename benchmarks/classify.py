"""Does the classifier classify? A real model over ICD-10-CM, the retriever, and both combined.

    OMP_NUM_THREADS=2 nice -n 10 python benchmarks/classify.py [--sources inclusion,lay,abbrev]
        [--n 50] [--cal-n 60] [--seed 0] [--k 20] [--threads 2] [--dtype bfloat16]
        [--arms qwen,free_mapped,smollm2,qwen15,think] [--keep] [--free-tokens 24]
    python benchmarks/classify.py --stage build      # only build (and cache) the two shortlists
    python benchmarks/classify.py --resummarise      # recompute the summaries of --out

Labels: the 74,731 billable ICD-10-CM codes with their descriptions. Queries: the held-out
query sources of ``benchmarks/_icd_sources.py`` (never indexed). Both shortlists index the
descriptions and the *training* half of the inclusion terms, less ``--cal-pool`` terms held out
as calibration pseudo-queries (the set's own synonyms, unseen by the index, never a test
query): BM25 only (its n-gram weight cross-validated on the indexed synonyms), and
``Shortlist.build``'s hybrid (BM25 + the shipped MiniLM + an exact faiss index, fused by
``DEFAULT_FUSION``, what cross-validation on ICD-10-CM's synonyms chose in
``benchmarks/shortlist.py``). Both are cached on disk between runs.

Samples are fixed before anything runs: per source ``--n`` texts drawn with
``random.Random(seed)``, and ``--cal-n`` calibration terms, processed calibration first, then
the sources round-robin in chunks of ``--chunk`` (a partial run has the first texts of every
sample; the JSON is written after each chunk).

The retriever the model reads is the one with the better recall@k on the *calibration* terms
(both retrievers' top-1 and recall@k are reported on every sample, and on ``--retriever-n``
texts per source). Model: Qwen2.5-Coder-0.5B-Instruct, transformers, ``--dtype``, ``--threads``
torch threads, ``Classifier(policy="shortlist", k=K, top_n=K)``: the prompt lists the K
candidates as ``code: description`` in the retriever's order, and the K candidates' token tree
is scored in ONE forward call (prompt + tree, tree attention), which gives every candidate's
exact log-probability and the greedy label.

Arms, per source (a hit: the answer is one of the query's gold codes): ``retriever_top1``;
``recall_at_k`` (the gold among the K candidates: the bound on every other arm); ``greedy``
(greedy constrained decoding); ``exact`` (the top-1 of the exact scores); ``combined`` (the
exact log-probabilities plus a retriever-rank prior, its one weight calibrated on the
calibration terms only: ``trierouter.classify_combine``, the library's
``Classifier(combine=...)``). Seconds per text: wall time of
``Classifier.classify`` for one text (shortlist query, prompt, trie compile, token tree, the
forward call, scoring), excluding model load and shortlist build. The host is shared with
other jobs: load averages are recorded before and after.

More arms on the same samples (``--arms``; ``--keep`` keeps the arms of ``--out`` not rerun,
``runs`` giving each arm's commit, date and whether it is partial), from ``_classify_arms.py``:
``free_mapped`` (Qwen writes freely, greedy, at most ``--free-tokens`` new tokens, the first
line, after the SAME prompt as above, the K candidates listed; a label code written at the
answer's start is taken, otherwise the answer is a query to the same retriever and its top-1
is the label; seconds per text cover generation and mapping), and ``smollm2``
(SmolLM2-135M-Instruct through the same classifier, prompt and retriever: greedy, exact,
combined with its own weight calibrated on the same calibration terms by the same rule);
``qwen15`` (Qwen2.5-Coder-1.5B-Instruct the same way) and ``think`` (Qwen-0.5B writing at most
``--think-tokens`` of free text after ``<think>`` before the label is chosen and scored:
``Classifier(think=True)``), each with its own calibrated weight; ``targets.other_models`` checks
the issue's targets on each of them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _classify_arms import free_row, free_summary, load_pair, run_meta
from _icd_sources import SEED as SPLIT_SEED
from _icd_sources import IcdData, icd_data
from _provenance import arm_run

from trierouter.classify_combine import WEIGHTS, calibrate, combined_ranking
from trierouter.data.icd10cm_queries import icd10cm_inclusion_terms
from trierouter.registry.index import default_cache_dir
from trierouter.shortlist import Shortlist

RESULTS = ROOT / "benchmarks" / "results"
MODEL = "qwen2.5-coder-0.5b-instruct"
SECOND = "smollm2-135m-instruct"
QWEN15 = "qwen2.5-coder-1.5b-instruct"
EXTRA = {  # more arms through the same classifier, prompt, retriever and rule: (model, think)
    "smollm2": (SECOND, False),
    "qwen15": (QWEN15, False),
    "think": (MODEL, True),
}
ARMS = ("qwen", "free_mapped", *EXTRA)
RETRIEVERS = ("bm25", "hybrid")
Sample = tuple[list[str], list[frozenset[str]]]


def log(*a: Any) -> None:
    print(*a, flush=True)


def part_key(arm: str) -> str:
    """Where an extra arm's rows live in the result (SmolLM2's key predates the others)."""
    return "second_model" if arm == "smollm2" else f"model_{arm}"


def calibration_split(data: IcdData, pool: int, seed: int) -> tuple[dict[str, list[str]], Sample]:
    """The synonyms to index (training terms less ``pool`` held out) and the held-out terms
    with their gold codes, in a seeded order."""
    terms = icd10cm_inclusion_terms()
    held = random.Random(f"calibration:{seed}").sample(sorted(data.train_terms), pool)
    out = set(held)
    synonyms = {c: [t for t in ts if t not in out] for c, ts in data.synonyms.items()}
    return {c: ts for c, ts in synonyms.items() if ts}, (held, [terms[t] for t in held])


def shortlists(data: IcdData, synonyms: dict[str, list[str]], tag: str) -> dict[str, Any]:
    """The BM25-only and hybrid shortlists over descriptions + ``synonyms`` (cached on disk)."""
    out: dict[str, Any] = {}
    for name in RETRIEVERS:
        folder = default_cache_dir() / "bench" / f"icd10cm_{name}_{tag}.shortlist"
        t0 = time.perf_counter()
        if (folder / "shortlist.json").is_file():
            sl = Shortlist.load(folder, values=data.codes)
        else:
            # hybrid: the fusion the cross-validation chose on ICD-10-CM's synonyms
            # (DEFAULT_FUSION, benchmarks/shortlist.py) rather than re-validated here, and an
            # exact (flat) index: minutes less on a shared host
            hybrid = name == "hybrid"
            sl = Shortlist.build(
                data.codes,
                descriptions=data.descs,
                synonyms=synonyms,
                use_embedding=hybrid,
                cv_queries=0 if hybrid else 2000,
                kind="flat",
                progress=False,
            )
            sl.report["build_seconds_total"] = round(time.perf_counter() - t0, 1)
            sl.save(folder)
        log(f"shortlist {name}: {sl!r} ({time.perf_counter() - t0:.0f}s)")
        out[name] = sl
    return out


def retriever_arms(sl: Any, texts: list[str], gold: list[frozenset[str]], k: int) -> dict[str, Any]:
    """Top-1 and recall@k of one retriever on one sample."""
    ids = [sl.search_ids([t], k)[0] for t in texts]
    top1 = sum(bool(len(i)) and sl.values[int(i[0])] in g for i, g in zip(ids, gold, strict=True))
    rec = sum(bool({sl.values[int(j)] for j in i} & g) for i, g in zip(ids, gold, strict=True))
    n = len(texts)
    return {"n": n, "top1": round(top1 / n, 4), f"recall_at_{k}": round(rec / n, 4)}


def model_row(clf: Any, text: str, gold: frozenset[str], k: int) -> dict[str, Any]:
    """One text through the classifier: every candidate's exact score, the greedy label."""
    t0 = time.perf_counter()
    [p] = clf.classify([text], top_n=k)
    seconds = time.perf_counter() - t0
    cands = clf.candidates(text)  # remembered by the router: no second retrieval
    return {
        "text": text,
        "gold": sorted(gold),
        "candidates": cands,
        "model": {s.label: round(s.logprob, 4) for s in p.scores},
        "greedy": p.greedy,
        "exact": p.label,
        "note": p.note,
        **({"thought": p.thought} if p.thought is not None else {}),
        "seconds": round(seconds, 3),
        "forward_calls": p.forward_calls,
        "tree_nodes": p.expansions,
        "prompt_tokens": len(clf._backend.encode(clf.render_prompt(text))),
    }


def summarise(rows: list[dict[str, Any]], k: int, weight: float | None) -> dict[str, Any]:
    """Accuracy of every arm, recall@k, speed and forward calls over ``rows``."""
    n = len(rows)

    def acc(pick: Any) -> float:
        return round(sum(pick(r) in set(r["gold"]) for r in rows) / n, 4)

    out: dict[str, Any] = {
        "n": n,
        "retriever_top1": acc(lambda r: r["candidates"][0] if r["candidates"] else None),
        f"recall_at_{k}": round(
            sum(bool(set(r["candidates"]) & set(r["gold"])) for r in rows) / n, 4
        ),
        "greedy": acc(lambda r: r["greedy"]),
        "exact": acc(lambda r: r["exact"]),
    }
    if weight is not None:
        out["combined"] = acc(
            lambda r: (combined_ranking(r["candidates"], r["model"], weight) or [None])[0]
        )
    secs = [r["seconds"] for r in rows]
    out |= {
        "seconds_per_text": round(statistics.mean(secs), 3),
        "seconds_per_text_median": round(statistics.median(secs), 3),
        "forward_calls_per_text": round(statistics.mean(r["forward_calls"] for r in rows), 3),
        "tree_nodes_per_text": round(statistics.mean(r["tree_nodes"] for r in rows), 1),
        "prompt_tokens_per_text": round(statistics.mean(r["prompt_tokens"] for r in rows), 1),
        "exact_is_retriever_top1": round(
            sum(bool(r["candidates"]) and r["exact"] == r["candidates"][0] for r in rows) / n, 4
        ),
    }
    return out


def targets(res: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, checked on the per-source summaries of Qwen-0.5B (and, under
    ``other_models``, of each extra arm complete on every source)."""
    out = _targets(res["sources"])
    other = {a: _targets(res[part_key(a)]["sources"]) for a in EXTRA if part_key(a) in res}
    if out and (other := {a: t for a, t in other.items() if t}):
        out["other_models"] = other
    return out


def _targets(src: dict[str, Any]) -> dict[str, Any]:
    if not src or any("combined" not in s for s in src.values()):
        return {}
    mean = {
        a: statistics.mean(s[a] for s in src.values())
        for a in ("retriever_top1", "exact", "combined")
    }
    better = max(mean["retriever_top1"], mean["exact"])
    worst = min(s["combined"] - max(s["retriever_top1"], s["exact"]) for s in src.values())
    secs = statistics.mean(s["seconds_per_text"] for s in src.values())
    return {
        "mean": {a: round(v, 4) for a, v in mean.items()},
        "combined_minus_better_points": round(100 * (mean["combined"] - better), 1),
        "combined_ge_better_plus_5": mean["combined"] >= better + 0.05,
        "worst_source_combined_minus_better_points": round(100 * worst, 1),
        "no_source_below_by_more_than_2": worst >= -0.02,
        "seconds_per_text": round(secs, 3),
        "seconds_per_text_le_1_5": secs <= 1.5,
    }


def resummarise(res: dict[str, Any]) -> None:
    k = res["k"]
    for part in (res, *(res.get(part_key(a)) for a in EXTRA)):
        if not part:
            continue
        w = part.get("calibration", {}).get("weight")
        if part.get("calibration", {}).get("rows"):
            part["calibration"] |= {"summary": summarise(part["calibration"]["rows"], k, w)}
        for r in part["sources"].values():
            if r["rows"]:
                r |= summarise(r["rows"], k, w)
    for a in EXTRA:  # the first model on the same texts, for an arm run on fewer of them
        for s, r in (res.get(part_key(a)) or {"sources": {}})["sources"].items():
            first = res["sources"][s]["rows"][: r.get("n", 0)]
            if r.get("n") and len(first) == r["n"] < len(res["sources"][s]["rows"]):
                same = summarise(first, k, res.get("calibration", {}).get("weight"))
                r["first_model_same_texts"] = {
                    x: same[x] for x in ("retriever_top1", "exact", "combined") if x in same
                }
    for r in res.get("free_mapped", {}).get("sources", {}).values():
        if r["rows"]:
            r |= free_summary(r["rows"])
    res["targets"] = targets(res)
    res["arms"] = arms_by_source(res)


def arms_by_source(res: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Every arm's top-1 accuracy per source and its mean over the sources (``n`` per arm and
    source beside it: a partial arm has fewer texts)."""
    table_: dict[str, dict[str, Any]] = {}
    for s, r in res["sources"].items():
        row: dict[str, Any] = {a: r[a] for a in ("retriever_top1", "exact", "greedy") if a in r}
        row |= {a: r[a] for a in ("combined", f"recall_at_{res['k']}") if a in r}
        row["n"] = r.get("n", 0)
        if (f := res.get("free_mapped", {}).get("sources", {}).get(s, {})).get("n"):
            row |= {"free_mapped": f["free_mapped"], "free_mapped_n": f["n"]}
        for arm in EXTRA:
            m = (res.get(part_key(arm)) or {"sources": {}})["sources"].get(s, {})
            if m.get("n"):
                row |= {f"{arm}_{a}": m[a] for a in ("greedy", "exact", "combined") if a in m}
                row[f"{arm}_n"] = m["n"]
        table_[s] = row
    arms = {a for r in table_.values() for a in r if a != "n" and not a.endswith("_n")}
    table_["mean"] = {
        a: round(statistics.mean(r[a] for r in table_.values()), 4)
        for a in sorted(arms)
        if all(a in r for r in table_.values())
    }
    return table_


def table(res: dict[str, Any]) -> str:
    k = res["k"]
    head = (
        f"| source | n | retriever top-1 | recall@{k} | greedy | exact top-1 | combined "
        "| s/text | forward calls/text | exact = retriever top-1 |"
    )
    lines = [head, "|" + " --- |" * 10]
    for s, r in res["sources"].items():
        if "n" not in r:
            continue
        lines.append(
            f"| {s} | {r['n']} | {r['retriever_top1']:.2f} | {r[f'recall_at_{k}']:.2f} "
            f"| {r['greedy']:.2f} | {r['exact']:.2f} | {r.get('combined', float('nan')):.2f} "
            f"| {r['seconds_per_text']:.2f} | {r['forward_calls_per_text']:.1f} "
            f"| {r['exact_is_retriever_top1']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sources", default="inclusion,lay,abbrev")
    ap.add_argument("--n", type=int, default=50, help="texts per source")
    ap.add_argument("--cal-n", type=int, default=40, help="calibration pseudo-queries")
    ap.add_argument("--cal-pool", type=int, default=200, help="terms held out of the index")
    ap.add_argument("--retriever-n", type=int, default=150, help="texts per source, no model")
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    ap.add_argument("--stage", default="all", choices=("build", "all"))
    ap.add_argument("--out", default=str(RESULTS / "classify.json"))
    ap.add_argument("--resummarise", action="store_true")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"some of {','.join(ARMS)}")
    ap.add_argument("--keep", action="store_true", help="keep the arms of --out not rerun")
    ap.add_argument("--free-tokens", type=int, default=24, help="free_mapped: new tokens")
    ap.add_argument("--think-tokens", type=int, default=64, help="think: free tokens at most")
    args = ap.parse_args()
    out = Path(args.out)
    if args.resummarise:
        res = json.loads(out.read_text())
        resummarise(res)
        out.write_text(json.dumps(res, indent=1) + "\n")
        log(table(res))
        return

    import torch

    torch.set_num_threads(args.threads)
    t_run = time.perf_counter()
    data = icd_data(2000)
    synonyms, cal = calibration_split(data, args.cal_pool, args.seed)
    sls = shortlists(data, synonyms, f"cal{args.cal_pool}_seed{args.seed}")
    if args.stage == "build":
        return
    cal = (cal[0][: args.cal_n], cal[1][: args.cal_n])
    samples: dict[str, Sample] = {}
    wide: dict[str, Sample] = {}
    for s in args.sources.split(","):
        q = data.sources[s]
        order = list(range(len(q)))
        random.Random(args.seed).shuffle(order)
        pick = order[: args.retriever_n]
        wide[s] = ([q.queries[i] for i in pick], [frozenset(q.gold[i]) for i in pick])
        samples[s] = (wide[s][0][: args.n], wide[s][1][: args.n])
    log(f"samples: {', '.join(f'{s} {len(v[0])}' for s, v in samples.items())}, cal {len(cal[0])}")

    # retrievers alone (no model): the calibration terms choose the one the model reads
    retr: dict[str, Any] = {}
    for name, sl in sls.items():
        retr[name] = {"calibration": retriever_arms(sl, *cal, args.k)}
        for s in samples:
            retr[name][s] = retriever_arms(sl, *samples[s], args.k)
            retr[name][f"{s}_wide"] = retriever_arms(sl, *wide[s], args.k)
        log(f"retriever {name}: {json.dumps(retr[name])}")
    key = f"recall_at_{args.k}"
    chosen = max(RETRIEVERS, key=lambda r: (retr[r]["calibration"][key], r == "hybrid"))
    log(f"the model reads the {chosen} shortlist (recall@{args.k} on the calibration terms)")

    arms = args.arms.split(",")
    if unknown := set(arms) - set(ARMS):
        raise SystemExit(f"--arms: unknown {sorted(unknown)}; expected some of {ARMS}")
    import transformers

    from trierouter.classify import Classifier

    def classifier(name: str, think: bool = False) -> Any:
        return Classifier(
            data.codes,
            descriptions=data.descs,
            model=load_pair(name, args.dtype),
            policy="shortlist",
            retriever=sls[chosen],
            k=args.k,
            top_n=args.k,
            think=think,
            think_tokens=args.think_tokens,
        )

    def utc() -> str:
        return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")

    prov = arm_run({k: v for k, v in vars(args).items() if k != "out"})
    now = prov["date"]
    machine = {
        "commit": prov["commit"],
        "dirty": prov["dirty"],
        "date": now,
        "settings": prov["settings"],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpus": os.cpu_count(),
        "shared_host": f"2 cores shared with other agents' jobs; run under nice -n {os.nice(0)}",
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
    }
    if args.keep:
        res = json.loads(out.read_text())
        same = {"k": args.k, "seed": args.seed, "n_per_source": args.n, "retriever_used": chosen}
        if any(res.get(a) != v for a, v in same.items()) or "qwen" in arms:
            raise SystemExit(f"--keep: {out} differs in {same}, or --arms reruns qwen")
        for s, (texts, _) in samples.items():
            if [r["text"] for r in res["sources"][s]["rows"]] != texts:
                raise SystemExit(f"--keep: {out} has other {s} texts than this sample")
        m = res["machine"]
        res.setdefault("runs", {}).setdefault("qwen", {"commit": m["commit"], "date": m["date"]})
    else:
        res = {
            "machine": machine,
            "model": MODEL,
            "engine": f"transformers ({args.dtype}), one forward call per text (token tree)",
            "labels": len(data.codes),
            "k": args.k,
            "seed": args.seed,
            "split_seed": SPLIT_SEED,
            "n_per_source": args.n,
            "retrievers": {
                name: {
                    "repr": repr(sl),
                    "fusion": sl.fusion.name,
                    "report_build_seconds": sl.report.get("build_seconds_total"),
                }
                for name, sl in sls.items()
            },
            "retriever_arms": retr,
            "retriever_used": chosen,
            "retriever_rule": f"the better recall@{args.k} on the calibration terms",
            "fusion": {
                "rule": "score = model exact logprob - w * log(1 + retriever rank); w of "
                f"{list(WEIGHTS)} with the best calibration top-1 (then MRR, then smaller w)",
            },
            "calibration": {
                "what": f"{args.cal_n} training inclusion terms held out of both indexes "
                f"(of {args.cal_pool} held out), seeded; never a test query",
                "rows": [],
            },
            "excluded": "model loading, shortlist build",
            "sources": {s: {"rows": []} for s in samples},
        }
    total = len(cal[0]) + sum(len(v[0]) for v in samples.values())
    planned = {"qwen": total, "free_mapped": total - len(cal[0])} | {a: total for a in EXTRA}

    started: dict[str, str] = {}

    def save(arm: str, part: dict[str, Any]) -> None:
        started.setdefault(arm, now)
        done = len(part.get("calibration", {}).get("rows", [])) + sum(
            len(r["rows"]) for r in part["sources"].values()
        )
        res.setdefault("runs", {})[arm] = (
            machine
            | run_meta(machine["commit"], started[arm], done, planned[arm])
            | {"loadavg_after": [round(x, 2) for x in os.getloadavg()], "written": utc()}
        )
        res["wall_seconds"] = round(time.perf_counter() - t_run, 1)
        resummarise(res)
        out.write_text(json.dumps(res, indent=1) + "\n")

    clf = None
    if "qwen" in arms or "free_mapped" in arms:
        clf = classifier(MODEL)
    if "qwen" in arms:
        res["machine"] |= {"loadavg_after": machine["loadavg_before"]}
        run_model(clf, res, cal, samples, args, lambda: save("qwen", res), "")
    if "free_mapped" in arms:
        started["free_mapped"] = utc()
        part = res["free_mapped"] = {
            "model": MODEL,
            "prompt": "the constrained arms' prompt (the K candidates listed), then 'Label: '",
            "rule": "a label code at the answer's start, else the retriever's top-1 for the "
            f"answer; greedy, at most {args.free_tokens} new tokens, the first line",
            "sources": {s: {"rows": []} for s in samples},
        }
        labels = set(data.codes)
        for start in range(0, args.n, args.chunk):
            for s, (texts, gold) in samples.items():
                for j in range(start, min(start + args.chunk, len(texts))):
                    row = free_row(clf, sls[chosen], labels, texts[j], gold[j], args.free_tokens)
                    part["sources"][s]["rows"].append(row)
                    hit = "+" if row["label"] in gold[j] else "-"
                    log(
                        f"  [free {s} {j + 1}/{len(texts)}] {hit} {row['how']:9} "
                        f"{row['seconds']:.1f}s {texts[j][:40]!r} -> {row['answer'][:40]!r}"
                    )
                save("free_mapped", part)
    for arm in (a for a in EXTRA if a in arms):
        name, think = EXTRA[arm]
        started[arm] = utc()
        clf = None  # the previous model is freed before the next loads
        part = res[part_key(arm)] = {
            "model": name,
            "think": {"tokens": args.think_tokens} if think else None,
            "calibration": {"rows": []},
            "sources": {s: {"rows": []} for s in samples},
        }
        clf = classifier(name, think)

        def save_arm(arm: str = arm, part: dict[str, Any] = part) -> None:
            save(arm, part)

        run_model(clf, part, cal, samples, args, save_arm, f"{arm} ")
    log(table(res))
    log(json.dumps(res["arms"], indent=1))
    log(f"wrote {out} ({res['wall_seconds'] / 60:.1f} min)")


def run_model(clf: Any, part: dict[str, Any], cal: Sample, samples: dict[str, Sample],
              args: argparse.Namespace, save: Any, tag: str) -> None:  # fmt: skip
    """Calibration rows, the weight, then the sources round-robin in chunks, saved after each."""
    for i, (t, g) in enumerate(zip(*cal, strict=True)):
        row = model_row(clf, t, g, args.k)
        part["calibration"]["rows"].append(row)
        log(
            f"  [{tag}cal {i + 1}/{len(cal[0])}] {row['seconds']:.1f}s "
            f"{row['forward_calls']} call(s)  {t[:50]!r}"
        )
    w, table_w = calibrate(part["calibration"]["rows"])
    part["calibration"] |= {"weight": w, "by_weight": table_w}
    log(f"calibrated weight {w} (top-1, MRR by weight: {table_w})")
    save()
    for start in range(0, args.n, args.chunk):
        for s, (texts, gold) in samples.items():
            for j in range(start, min(start + args.chunk, len(texts))):
                row = model_row(clf, texts[j], gold[j], args.k)
                part["sources"][s]["rows"].append(row)
                first = (row["candidates"] or [None])[0]
                comb = (combined_ranking(row["candidates"], row["model"], w) or [None])[0]
                picks = (first, row["greedy"], row["exact"], comb)
                hit = "".join("+" if x in gold[j] else "-" for x in picks)
                log(
                    f"  [{tag}{s} {j + 1}/{len(texts)}] R/G/E/C {hit} {row['seconds']:.1f}s "
                    f"{row['forward_calls']} call(s)  {texts[j][:50]!r}"
                )
            save()


if __name__ == "__main__":
    main()
