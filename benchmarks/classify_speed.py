"""Seconds per text of the whole classifier: retrieval, prompt, one forward call, exact top-5.

    OMP_NUM_THREADS=2 nice -n 10 python benchmarks/classify_speed.py [--n 50] [--threads 2]
        [--model qwen2.5-coder-1.5b-instruct]    # -> classify_speed_qwen15.json

The fixed samples of ``benchmarks/results/classify.json`` (its texts per source, seed 0, never
indexed) through ``Classifier(policy="shortlist", retriever=<the hybrid shortlist of
benchmarks/classify.py, cached on disk>, k=20, top_n=5)``, Qwen2.5-Coder-0.5B-Instruct in
transformers (bfloat16, ``--threads`` torch threads), one ``classify([text])`` call timed per
text: the shortlist query (BM25 + MiniLM), the prompt with the 20 candidates, the set's compile,
its token tree and the one forward call that scores every candidate exactly. Model load and
shortlist build excluded; two calibration terms (never a test text) warm up first. Also
recorded: forward calls per text and whether the exact top-1 equals classify.json's. The host
is shared: the load average is recorded before and after each source.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

RESULTS = ROOT / "benchmarks" / "results"
MODEL = "qwen2.5-coder-0.5b-instruct"
QWEN15 = "qwen2.5-coder-1.5b-instruct"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=50, help="texts per source")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=MODEL, choices=(MODEL, QWEN15))
    ap.add_argument("--out", default=None, help="default: classify_speed[_qwen15].json")
    args = ap.parse_args()
    import torch
    from _classify_arms import load_pair, machine_meta
    from _icd_sources import icd_data
    from classify import calibration_split, shortlists

    from trierouter.classify import Classifier

    torch.set_num_threads(args.threads)
    ref = json.loads((RESULTS / "classify.json").read_text())
    data = icd_data(2000)
    synonyms, cal = calibration_split(data, 200, ref["seed"])
    sl = shortlists(data, synonyms, f"cal200_seed{ref['seed']}")[ref["retriever_used"]]
    clf = Classifier(
        data.codes,
        descriptions=data.descs,
        model=load_pair(args.model, "bfloat16"),
        policy="shortlist",
        retriever=sl,
        k=ref["k"],
        top_n=5,
    )
    clf.classify(cal[0][:2])  # warm-up, not timed
    sources = {}
    arm = ref["sources"] if args.model == MODEL else ref["model_qwen15"]["sources"]
    for s, part in arm.items():
        rows = part["rows"][: args.n]
        load0 = [round(x, 2) for x in os.getloadavg()]
        secs, calls, same = [], [], 0
        for r in rows:
            t0 = time.perf_counter()
            [p] = clf.classify([r["text"]])
            secs.append(time.perf_counter() - t0)
            calls.append(p.forward_calls)
            same += p.label == r["exact"]
        sources[s] = {
            "n": len(rows),
            "seconds_per_text": round(statistics.mean(secs), 3),
            "seconds_per_text_median": round(statistics.median(secs), 3),
            "seconds_per_text_max": round(max(secs), 3),
            "forward_calls_per_text": round(statistics.mean(calls), 3),
            "exact_top1_as_classify_json": same,
            "loadavg_before": load0,
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }
        print(s, json.dumps(sources[s]), flush=True)
    res = {
        "what": "seconds per text of Classifier.classify: retrieval, prompt, one forward call, "
        "exact scores of all k candidates, top-5 kept",
        "model": args.model,
        "engine": "transformers (bfloat16), one forward call per text (token tree)",
        "k": ref["k"],
        "top_n": 5,
        "retriever": ref["retriever_used"],
        "sources": sources,
        "seconds_per_text": round(
            statistics.mean(x["seconds_per_text"] for x in sources.values()), 3
        ),
        "machine": machine_meta(ROOT, {k: v for k, v in vars(args).items() if k != "out"}),
    }
    suffix = "" if args.model == MODEL else "_qwen15"
    out = Path(args.out or RESULTS / f"classify_speed{suffix}.json")
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k != "sources"}, indent=1))


if __name__ == "__main__":
    main()
