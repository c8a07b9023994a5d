"""ICD-10-CM coding: one of the 74,731 billable codes per clinical note.

The full code set decodes through the √K hierarchy (chapter/block/category groups, then the
code); a shortlist over the official descriptions is the other way. Each prediction carries
the exact log-probabilities of its top codes.

    python examples/icd10cm_coding.py [--model DIR] [--policy hierarchy|shortlist]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from _common import model_argument, model_dir

from trierouter.classify import Classifier
from trierouter.data.icd10cm import icd10cm_codes, icd10cm_description, icd10cm_path
from trierouter.testing.tiny_model import VLLM_CPU_ENV

NOTES = [
    "Displaced fracture of the neck of the right femur, initial encounter",
    "Type 2 diabetes mellitus without complications",
    "Cholera due to Vibrio cholerae",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model_argument(parser)
    parser.add_argument("--policy", choices=("hierarchy", "shortlist"), default="hierarchy")
    parser.add_argument("--engine", choices=("transformers", "vllm"), default="transformers")
    args = parser.parse_args(argv)
    if args.engine == "vllm":  # in-process engine settings for CPUs (see VLLM_CPU_ENV)
        for key, value in VLLM_CPU_ENV.items():
            os.environ.setdefault(key, value)
    codes = icd10cm_codes()
    t = time.perf_counter()
    if args.policy == "hierarchy":
        clf = Classifier(
            codes,
            model=model_dir(args.model),
            engine=args.engine,
            policy="hierarchy",
            path=icd10cm_path,
            top_n=3,
        )
    else:
        descriptions = [icd10cm_description(c) for c in codes]
        clf = Classifier(
            codes,
            descriptions=descriptions,
            model=model_dir(args.model),
            engine=args.engine,
            policy="shortlist",
            k=32,
        )
    print(f"{clf} ready in {time.perf_counter() - t:.1f} s")
    for p in clf.classify(NOTES, top_n=3):
        assert p.label in clf.routed.values
        how = "exact top-3" if p.exact else "not exact: budget reached, or no scores (vLLM)"
        print(f"{p.text[:60]!r}\n  -> {p.label}  {icd10cm_description(p.label)[:60]}  ({how})")
        for s in p.scores:
            print(f"     {s.label:10} log p = {s.logprob:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
