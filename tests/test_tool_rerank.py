"""The tool reranker against independent oracles, on the tiny model.

Oracle of a candidate's score: ``tests/test_path_scores``' ``oracle_canonical``: per name, one
plain forward call over ``prompt + its own encoding`` (no tree, no cache), the constrained
log-softmax over the tokens found by comparing token bytes with the candidate names, the best
end id closing it. Oracle of the ranking: a plain sort of ``logprob - w * log(1 + rank)``.
Negative control: the same names scored against a larger set's names (renormalised over the
union) are not the set's own scores, so the comparison can fail.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.test_classify import _one_thread, tiny
from tests.test_path_scores import oracle_canonical
from trierouter.classify_combine import WEIGHTS
from trierouter.registry.index import TokenIndex
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.label_scorer import TransformersScorer
from trierouter.router.tool_rerank import ToolReranker, one_line, tool_prompt
from trierouter.router.transformers import model_width
from trierouter.shortlist.tool_text import ToolIndex

__all__ = ["_one_thread", "tiny"]

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = {
    "get_user_info": "Get a user's profile by user id",
    "get_user": "Get a user",
    "uber.ride": "Book an Uber ride to a location",
    "call_uber": "Call an uber taxi",
    "math.gcd": "Greatest common divisor of two integers",
    "gcd": "Greatest common divisor",
    "calculate_BMI": "Body mass index from weight and height",
    "weather.getForecastByCity": "Weather forecast for a city",
    "get_weather": "Current weather in a city",
    "stock_price.get": "Latest stock price of a ticker",
}
CONVERSATIONS: list[Any] = [
    "What is the weather in Oslo tomorrow?",
    [
        {"role": "system", "content": "You help with travel."},
        {"role": "user", "content": "I need a ride to the airport."},
        {"role": "assistant", "content": "Where from?"},
        {"role": "user", "content": "From the central station, please book an uber"},
    ],
]


@pytest.fixture(scope="module")
def chat(tiny: tuple[Any, Any]) -> tuple[Any, Any]:
    model, tok = tiny
    tok.chat_template = CHATML
    return model, tok


@pytest.fixture(scope="module")
def index(chat: tuple[Any, Any]) -> TokenIndex:
    model, tok = chat
    return TokenIndex.get(Vocabulary.from_tokenizer(tok, width=model_width(model)))


def _tools() -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": n, "description": d, "parameters": {}}}
        for n, d in TOOLS.items()
    ]


def test_one_call_scores_equal_a_forward_call_per_candidate(
    chat: tuple[Any, Any], index: TokenIndex
) -> None:
    model, tok = chat
    scorer = TransformersScorer((model, tok))
    small = ["get_user_info", "get_user", "gcd", "math.gcd", "uber.ride"]
    big = list(TOOLS)
    for conv in CONVERSATIONS:
        ctx = tool_prompt(tok, conv)
        calls = scorer.calls
        (s_small, s_big), nodes, respelled = scorer.score_sets(ctx, [small, big], index)
        assert scorer.calls == calls + 1  # both sets in one forward call
        assert respelled == [] and nodes > len(big)
        for names, got in ((small, s_small), (big, s_big)):
            want = oracle_canonical(model, tok, ctx, names)
            assert got.keys() == set(names)
            for n in names:
                assert abs(got[n][0] - want[n][0]) < 1e-5, (n, got[n][0], want[n][0])
                assert list(got[n][1]) == want[n][1]
        # negative control: the small set's names renormalised over the big set are not its
        # own scores (get_user / get_user_info share a prefix with names only the big set has)
        off = [n for n in small if abs(s_big[n][0] - s_small[n][0]) > 1e-3]
        assert off, "scores over another set's names should differ"
        # one set alone in its own call: the same scores
        [alone], _, _ = scorer.score_sets(ctx, [small], index)
        assert all(abs(alone[n][0] - s_small[n][0]) < 1e-5 for n in small)


def test_rank_is_the_combined_formula_over_the_searchs_candidates(
    chat: tuple[Any, Any],
) -> None:
    model, tok = chat
    search = ToolIndex.build(_tools())
    for w in (0.0, 1.0, 16.0):
        rr = ToolReranker(model, tok, index=search, k=6, combine=w)
        for conv in CONVERSATIONS:
            r = rr.rank(conv)
            query, cands = rr.search(conv)
            assert r.query == query and len(r.tools) == len(cands) > 1
            assert r.forward_calls == 1 and r.score_kind == "canonical" and r.weight == w
            names = [n for n, _ in cands]
            ctx = tool_prompt(tok, conv)
            assert r.prompt_tokens == len(ctx)
            want = oracle_canonical(model, tok, ctx, names)
            combined = {n: want[n][0] - w * math.log(1 + i) for i, n in enumerate(names)}
            order = sorted(names, key=lambda n: (-combined[n], names.index(n)))
            assert r.names() == order and r.tool == order[0]
            for t in r.tools:
                assert t.search_rank == names.index(t.name)
                assert t.search_score == dict(cands)[t.name]
                assert abs(t.logprob - want[t.name][0]) < 1e-5
                assert abs(t.combined - combined[t.name]) < 1e-5
            # explain(): one line per candidate in the ranking's order, its own numbers
            lines = r.explain().splitlines()
            assert lines[1].startswith(f"* {order[0]}  search #{names.index(order[0]) + 1}")
            for line, n in zip(lines[1:], order, strict=True):
                assert f" {n}  search #{names.index(n) + 1} " in line
                assert abs(float(line.split("logprob ")[1].split()[0]) - want[n][0]) < 1e-3
    # a huge w: the search's order; w = 0: the model's (they differ here)
    cands = [(n, float(len(TOOLS) - i)) for i, n in enumerate(TOOLS)]
    conv = CONVERSATIONS[0]
    by_search = ToolReranker(model, tok, combine=1e6).rank(conv, candidates=cands)
    assert [t.search_rank for t in by_search.tools] == list(range(len(TOOLS)))
    by_model = ToolReranker(model, tok).rank(conv, candidates=cands)
    lps = [t.logprob for t in by_model.tools]
    assert lps == sorted(lps, reverse=True)
    assert by_model.names() != by_search.names()


def test_calibrate_picks_the_weight_a_plain_loop_picks(chat: tuple[Any, Any]) -> None:
    model, tok = chat
    search = ToolIndex.build(_tools())
    examples: list[tuple[Any, str]] = [
        ("weather forecast for a city", "weather.getForecastByCity"),
        ("current weather in Paris", "get_weather"),
        ("book an uber ride", "uber.ride"),
        ("greatest common divisor of 12 and 18", "math.gcd"),
        ("body mass index", "calculate_BMI"),
        ("user profile of user 7", "get_user_info"),
    ]
    rr = ToolReranker(model, tok, index=search, k=5)
    got = rr.calibrate(examples)
    assert rr.combine is got and got.calibrated_on == tuple(t for t, _ in examples)
    oracle = []
    for text, gold in examples:
        _, cands = rr.search(text)
        names = [n for n, _ in cands]
        oracle.append((names, oracle_canonical(model, tok, tool_prompt(tok, text), names), gold))
    table = {}
    for w in WEIGHTS:
        acc = mrr = 0.0
        for names, want, gold in oracle:
            score = {n: want[n][0] - w * math.log1p(i) for i, n in enumerate(names)}
            order = sorted(names, key=lambda n: (-score[n], names.index(n)))
            acc += order[0] == gold
            mrr += next((1 / (i + 1) for i, n in enumerate(order) if n == gold), 0.0)
        table[w] = (acc / len(examples), mrr / len(examples))
    best = max(WEIGHTS, key=lambda w: (round(table[w][0], 4), round(table[w][1], 4), -w))
    assert len(set(table.values())) > 1  # the weights rank differently: the choice matters
    assert got.weight == best
    assert all(abs(got.by_weight[str(w)][0] - table[w][0]) < 1e-4 for w in WEIGHTS)


def test_prompt_and_errors(chat: tuple[Any, Any]) -> None:
    model, tok = chat
    text = tok.decode(tool_prompt(tok, CONVERSATIONS[1], listed=["a_tool", "b_tool"]))
    assert text.count("<|im_start|>system") == 1  # the conversation's system text is merged
    assert "You help with travel." in text and "Tools: a_tool, b_tool" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert "Where from?" in text and "book an uber" in text  # the whole conversation
    described = tok.decode(tool_prompt(tok, "hi", listed={"a_tool": "Does a.", "b_tool": ""}))
    assert "Tools:\n- a_tool: Does a.\n- b_tool<|im_end|>" in described
    assert one_line("Gets a user. Then more. " + "x " * 10) == "Gets a user"
    assert one_line("word " * 40, limit=12) == "word word..."
    with pytest.raises(ValueError, match="descriptions="):
        ToolReranker(model, tok, listing="descriptions")
    bare = transformers.AutoTokenizer.from_pretrained(tok.name_or_path)
    bare.chat_template = None
    with pytest.raises(ValueError, match="chat_template"):
        tool_prompt(bare, "hi")
    rr = ToolReranker(model, tok, k=3)
    with pytest.raises(ValueError, match="index="):
        rr.rank("hi")
    r = rr.rank("hi", candidates=[("gcd", 2.0), ("math.gcd", 1.0)])
    assert sorted(r.names()) == ["gcd", "math.gcd"] and r.search_ms == 0.0
    assert rr.rank("hi", candidates=[]).tool is None
    with pytest.raises(ValueError, match="k=0"):
        ToolReranker(model, tok, k=0)
