"""Per-token cost of tool-call decoding vs unconstrained sampling (transformers, tiny model).

    python benchmarks/tool_call_overhead.py     # -> results/tool_call_overhead.json

100 prompts, batch 25, temperature 1.0: free text (a plan that allows every token) against
ToolCallPlan over 5,000 real tools, the first time (automata and masks built on first visit,
XGrammar slots compiled on first use) and again (warm).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    import torch
    import transformers

    from trierouter.registry.compiler import compile_tools
    from trierouter.registry.index import TokenIndex
    from trierouter.registry.vocabulary import Vocabulary
    from trierouter.router.plan import FreeText, compile_plan
    from trierouter.router.tool_calls.plan import ToolCallPlan
    from trierouter.router.transformers import generate
    from trierouter.testing.tiny_model import build_tiny_model
    from trierouter.testing.tool_calls import diverse_openapi_tools

    torch.set_num_threads(1)
    path = str(build_tiny_model(ROOT / ".cache" / "tiny-qwen2"))
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    width = int(model.get_output_embeddings().weight.shape[0])
    idx = TokenIndex.get(Vocabulary.from_tokenizer(tok, width=width))
    ct = compile_tools(diverse_openapi_tools(5000), idx)
    plan = ToolCallPlan(ct, string_max_tokens=8, slot_max_tokens=16, max_tokens=48)
    free = compile_plan([FreeText(until="</never>", max_tokens=10_000)], idx)
    prompts = [f"Request {i}: call the right tool." for i in range(100)]
    out: dict[str, dict[str, float]] = {}
    runs = [("unconstrained (free text)", free), ("tool call, first use", plan)]
    runs.append(("tool call, warm", plan))
    for name, p in runs:
        t0 = time.perf_counter()
        res = generate(model, tok, prompts, p, max_new_tokens=96, do_sample=True,
                       temperature=1.0, seed=0, batch_size=25)  # fmt: skip
        dt = time.perf_counter() - t0
        n = sum(len(r.token_ids) for r in res)
        out[name] = {"s": round(dt, 2), "tokens": n, "ms_per_token": round(dt / n * 1e3, 3)}
        print(name, out[name], flush=True)
    target = ROOT / "benchmarks/results/tool_call_overhead.json"
    target.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
