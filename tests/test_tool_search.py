"""The server's tool search: tool documents, compact rendering and the context budget.

Oracles: the chat template itself (the prompt rendered with the tools that were kept, counted
by the model's tokenizer, must fit ``max_model_len`` less the answer's reserve), ``jsonschema``
with its format checker (a compact tool accepts and refuses exactly what the full one does),
and brute force (the search's scores are BM25's own scores of every document).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from trierouter.shortlist.tool_text import name_words, tool_text

jsonschema = pytest.importorskip("jsonschema")


def _tool(name: str, desc: str, props: dict[str, Any], required: list[str] | None = None) -> Any:
    params = {"type": "object", "properties": props, "required": required or []}
    return {"type": "function", "function": {"name": name, "description": desc,
                                             "parameters": params}}  # fmt: skip


def test_name_words_splits_identifiers() -> None:
    assert name_words("weather.getForecastByCity_v2") == "weather get forecast by city v 2"
    assert name_words("HTTPServerError") == "http server error"
    assert name_words("calculate_BMI") == "calculate bmi"
    assert name_words("") == ""


def test_tool_text_holds_name_description_and_parameters_within_its_bound() -> None:
    props = {
        "ticker": {"type": "string", "description": "Stock symbol"},
        "unit": {"enum": ["usd", "eur"]},
        "range": {"type": "object", "properties": {"startDate": {"type": "string"}}},
    }
    text = tool_text("finance.getQuote", "Latest price.", {"type": "object", "properties": props})
    for part in ("finance.getQuote", "finance get quote", "Latest price.", "ticker: Stock symbol",
                 "unit (usd, eur)", "range start date"):  # fmt: skip
        assert part in text, (part, text)
    many = {f"p{i}": {"type": "string", "description": "x" * 50} for i in range(100)}
    long = tool_text("t", "d" * 300, {"type": "object", "properties": many}, max_chars=500)
    assert len(long) <= 500 and long.startswith("t (t). " + "d" * 300)
    huge_desc = tool_text("t", "d" * 900, {"type": "object", "properties": many}, max_chars=500)
    assert "d" * 900 in huge_desc  # the name and description are always whole


def test_a_parameter_finds_the_tool_its_name_and_description_do_not() -> None:
    from trierouter.shortlist import BM25Index

    tools = [
        _tool(
            "get_price",
            "Get the latest market price quote of a company.",
            {"ticker": {"type": "string"}},
        ),
        _tool("daily_quote", "A quote.", {"day": {"type": "string"}}),
        *(_tool(f"misc_{i}", f"Something else {i}.", {}) for i in range(30)),
    ]
    fns = [t["function"] for t in tools]
    docs = [tool_text(f["name"], f["description"], f["parameters"]) for f in fns]
    old = [f"{f['name']} {f['description']}" for f in fns]
    query = "quote for ticker NVDA"
    new_index = BM25Index.build([f["name"] for f in fns], docs)
    assert new_index.search(query, 1) == ["get_price"]
    old_index = BM25Index.build([f["name"] for f in fns], old)
    assert old_index.search(query, 1) == ["daily_quote"]  # the name + description index misses


# -- compact rendering -----------------------------------------------------------------------------
def _random_instance(rng: random.Random) -> Any:
    pick = rng.randrange(6)
    if pick == 0:
        return rng.choice(["2024-01-31", "2024-13-01", "abc", "", "x" * 12])
    if pick == 1:
        return rng.choice([0, -3, 7, 11, 2.5])
    if pick == 2:
        return rng.choice([True, None])
    if pick == 3:
        return [_random_instance(rng) for _ in range(rng.randrange(3))]
    keys = ["title", "description", "n", "day", "mode", "extra"]
    return {k: _random_instance(rng) for k in rng.sample(keys, rng.randrange(4))}


def test_compact_tools_accept_and_refuse_what_the_full_ones_do() -> None:
    from trierouter.router.vllm.tool_search import compact_tool

    schema = {
        "type": "object",
        "description": "The request. Long text follows. " * 20,
        "properties": {
            "title": {"type": "string", "maxLength": 10, "description": "a property named title"},
            "description": {"type": "string", "title": "Description", "examples": ["x"]},
            "n": {"type": "integer", "minimum": 0, "maximum": 10, "description": "count"},
            "day": {"type": "string", "format": "date", "description": "ISO day"},
            "mode": {"enum": ["a", "b"], "description": "mode"},
        },
        "required": ["title", "n"],
        "additionalProperties": False,
    }
    tool = _tool("t", "First sentence. Second sentence. Third.", {})
    tool["function"]["parameters"] = schema
    small = compact_tool(tool)
    assert small["function"]["description"] == "First sentence"
    assert len(json.dumps(small)) < len(json.dumps(tool)) / 3
    assert set(small["function"]["parameters"]["properties"]) == set(schema["properties"])
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    full_v = jsonschema.Draft202012Validator(schema, format_checker=checker)
    small_v = jsonschema.Draft202012Validator(
        small["function"]["parameters"], format_checker=checker
    )
    rng = random.Random(0)
    instances = [_random_instance(rng) for _ in range(3000)]
    instances += [{"title": "ok", "n": 3}, {"title": "ok", "n": 3, "day": "2024-02-30"}]
    verdicts = [(full_v.is_valid(x), small_v.is_valid(x)) for x in instances]
    assert all(a == b for a, b in verdicts)
    assert any(a for a, _ in verdicts) and not all(a for a, _ in verdicts)


# -- the context budget ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    transformers = pytest.importorskip("transformers")
    from trierouter.testing.serve import tiny_tool_model

    model = tiny_tool_model(tmp_path_factory.mktemp("tiny") / "model")
    return transformers.AutoTokenizer.from_pretrained(str(model))


def _huge(i: int) -> Any:
    props = {f"field_{j}": {"type": "string", "description": f"Field {j} of record {i}. " * 12}
             for j in range(40)}  # fmt: skip
    return _tool(f"records.update_{i}", f"Update record kind {i}. " + "More. " * 50, props)


def _rendered_tokens(tok: Any, messages: list[Any], tools: list[Any]) -> int:
    text = tok.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                   tokenize=False)  # fmt: skip
    return len(tok(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("max_tokens", [None, 256, 3000])
def test_the_tools_kept_fit_the_context_as_the_template_renders_them(
    tokenizer: Any, max_tokens: int | None
) -> None:
    from trierouter.router.vllm.tool_search import (
        DEFAULT_OUTPUT_RESERVE,
        PromptContext,
        fit_tools,
    )

    small = [_tool(f"small_{i}", "A small tool.", {"x": {"type": "string"}}) for i in range(4)]
    huge = [_huge(i) for i in range(4)]
    tools = [huge[0], small[0], huge[1], small[1], huge[2], *small[2:], huge[3]]
    hi = [{"role": "user", "content": "hi"}]
    assert all(_rendered_tokens(tokenizer, hi, [t]) > 1500 for t in huge)  # each huge
    messages = [{"role": "user", "content": "Update record 2 with field 3 set to blue."}]
    body: dict[str, Any] = {"messages": messages}
    if max_tokens:
        body["max_tokens"] = max_tokens
    ctx = PromptContext(tokenizer, 4096)
    kept, fates, figures = fit_tools(tools, 0, body, ctx)
    reserve = max_tokens or DEFAULT_OUTPUT_RESERVE
    total = _rendered_tokens(tokenizer, messages, kept)
    assert total + reserve <= 4096, (total, reserve, fates)  # the oracle: the template itself
    assert figures["tools_tokens"] <= figures["tools_budget"]
    assert len(kept) == sum(f != "over_budget" for f in fates) >= 1
    assert all(f == "full" for f, t in zip(fates, tools, strict=True) if t in small)
    assert "compact" in fates  # the huge ones are rendered compact, not dropped first
    # everything the search proposed, uncut, would not have fit
    assert _rendered_tokens(tokenizer, messages, tools) + reserve > 4096


def test_pinned_tools_are_always_kept(tokenizer: Any) -> None:
    from trierouter.router.vllm.tool_search import PromptContext, fit_tools

    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}
    kept, fates, _ = fit_tools([_huge(0), _huge(1)], 2, body, PromptContext(tokenizer, 900))
    assert len(kept) == 2 and fates == ["compact", "compact"]


def test_a_registry_request_never_refused_for_what_the_search_added(
    tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("vllm")
    from trierouter.router.vllm.server import read_body
    from trierouter.router.vllm.tool_search import PromptContext

    reg = [_huge(i) for i in range(40)]
    (tmp_path / "api.json").write_text(json.dumps(reg))
    monkeypatch.setenv("TRIEROUTER_TOOLS", str(tmp_path / "api.json"))
    messages = [{"role": "user", "content": "update record 7, field 3"}]
    body = {"model": "m", "messages": messages,
            "vllm_xargs": {"trierouter_tools": "api", "trierouter_tool_search": 16}}  # fmt: skip
    new, _, routing = read_body(json.dumps(body).encode(), "hermes", PromptContext(tokenizer, 8192))
    out = json.loads(new or b"{}")
    assert routing is not None
    assert _rendered_tokens(tokenizer, messages, out["tools"]) + 1024 <= 8192
    cands = routing["candidates"]
    assert cands[0]["name"] == "records.update_7"  # BM25 on the parameters too
    shown = [c["name"] for c in cands if c["prompt"] != "over_budget"]
    assert out["vllm_xargs"]["trierouter_allowed"] == shown
    assert [t["function"]["name"] for t in out["tools"]] == shown
    assert any(c["prompt"] == "over_budget" for c in cands)  # 16 huge tools would not fit
    # the scores are BM25's own, best first
    scores = [c["search_score"] for c in cands]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    # without a context (no served model known) nothing is cut
    new, _, routing = read_body(json.dumps(body).encode(), "hermes", None)
    assert routing is not None and all(c["prompt"] == "full" for c in routing["candidates"])


def test_the_search_text_is_chosen_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("vllm")
    from trierouter.router.vllm.server import BadRequest, read_body

    reg = [
        _tool("get_price", "Get the latest market price quote of a company.",
              {"ticker": {"type": "string"}}),
        _tool("daily_quote", "A quote.", {"day": {"type": "string"}}),
        *(_tool(f"misc_{i}", f"Something else {i}.", {}) for i in range(30)),
    ]  # fmt: skip
    (tmp_path / "api.json").write_text(json.dumps(reg))
    monkeypatch.setenv("TRIEROUTER_TOOLS", str(tmp_path / "api.json"))
    body: dict[str, Any] = {
        "model": "m", "messages": [{"role": "user", "content": "quote for ticker NVDA"}],
        "vllm_xargs": {"trierouter_tools": "api", "trierouter_tool_search": 1},
    }  # fmt: skip
    first = {}
    for text in ("tool_text", "name_description"):
        body["vllm_xargs"]["trierouter_search_text"] = text
        _, _, routing = read_body(json.dumps(body).encode(), "hermes")
        assert routing is not None and routing["search"] == f"bm25:{text}"
        first[text] = routing["candidates"][0]["name"]
    assert first == {"tool_text": "get_price", "name_description": "daily_quote"}
    body["vllm_xargs"]["trierouter_search_text"] = "embeddings"
    with pytest.raises(BadRequest, match="trierouter_search_text='embeddings'"):
        read_body(json.dumps(body).encode(), "hermes")


def test_a_registry_with_written_requests_is_searched_through_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry configured with its requests file: the search indexes them beside each
    tool's text (a tool found through its requests' words alone), the routing record says so;
    the engine reads the same entry's tools; a requests file naming a tool the registry lacks
    and an entry of another form are refused, naming the problem."""
    pytest.importorskip("vllm")
    from trierouter.router.vllm.named import load_tool_registries
    from trierouter.router.vllm.server import read_body

    reg = [
        _tool(
            "stock_price.get", "Latest price of a ticker symbol.", {"ticker": {"type": "string"}}
        ),
        _tool("trends.get_weread_rank", "Get the WeRead book ranking.", {}),
        *(_tool(f"misc_{i}", f"Something else {i}.", {}) for i in range(20)),
    ]
    (tmp_path / "tools.json").write_text(json.dumps(reg))
    written = {"stock_price.get": ["How much is Apple trading at?"]}
    (tmp_path / "req.json").write_text(json.dumps(written))
    for name, entry in (
        ("plain", "tools.json"),
        ("api", {"tools": "tools.json", "requests": "req.json"}),
    ):
        cfg = tmp_path / f"{name}.cfg.json"
        cfg.write_text(json.dumps({name: entry}))
    messages = [{"role": "user", "content": "how much is apple trading at right now"}]
    first = {}
    for name in ("plain", "api"):
        monkeypatch.setenv("TRIEROUTER_TOOLS", str(tmp_path / f"{name}.cfg.json"))
        body = {"model": "m", "messages": messages,
                "vllm_xargs": {"trierouter_tools": name, "trierouter_tool_search": 3}}  # fmt: skip
        _, _, routing = read_body(json.dumps(body).encode(), "hermes")
        assert routing is not None
        first[name] = (routing["search"], routing["candidates"][0]["name"])
    assert first["api"] == ("bm25:tool_text+requests", "stock_price.get")
    assert first["plain"][0] == "bm25:tool_text" and first["plain"][1] != "stock_price.get"
    tools = load_tool_registries(str(tmp_path / "api.cfg.json"))["api"]
    assert [t["function"]["name"] for t in tools] == [t["function"]["name"] for t in reg]
    (tmp_path / "req.json").write_text(json.dumps({"stock_price.get:9f1c": ["x"]}))
    cfg = tmp_path / "bad.cfg.json"
    cfg.write_text(json.dumps({"bad": {"tools": "tools.json", "requests": "req.json"}}))
    monkeypatch.setenv("TRIEROUTER_TOOLS", str(cfg))
    from trierouter.router.vllm.checks import registry_specs

    with pytest.raises(ValueError, match=r"does not hold \('stock_price.get:9f1c'\)"):
        registry_specs("bad")
    cfg.write_text(json.dumps({"bad": {"tools": "tools.json", "request": "req.json"}}))
    with pytest.raises(ValueError, match=r"expected \{'tools'"):
        load_tool_registries(str(cfg))


def test_tool_index_reads_every_tool_form_alike() -> None:
    from trierouter import ToolRegistry
    from trierouter.shortlist import BM25Index, ToolIndex

    openai_tools = [
        _tool("finance.getQuote", "Latest price.", {"ticker": {"type": "string"}}),
        _tool("weather.get", "Weather now.", {"city": {"type": "string"}}),
        *(_tool(f"misc_{i}", f"Something else {i}.", {"x": {"type": "string"}}) for i in range(20)),
    ]
    fns = [t["function"] for t in openai_tools]
    anthropic = [{"name": f["name"], "description": f["description"],
                  "input_schema": f["parameters"]} for f in fns]  # fmt: skip
    mcp = [{"name": f["name"], "description": f["description"], "inputSchema": f["parameters"]}
           for f in fns]  # fmt: skip
    registry = ToolRegistry(openai_tools)
    query = "ticker quote for NVDA"
    # the oracle: BM25Index over tool_text built by hand
    by_hand = BM25Index.build(
        [f["name"] for f in fns],
        [tool_text(f["name"], f["description"], f["parameters"]) for f in fns],
    )
    want = by_hand.search(query, 5)
    assert want[0] == "finance.getQuote"
    every = by_hand.value_scores(query)  # each tool's BM25 score, the whole set scored
    want_scores = [round(float(every[by_hand.values.index(n)]), 4) for n in want]
    for form in (openai_tools, anthropic, mcp, list(registry)):
        got = ToolIndex.build(form).search(query, 5)
        assert [n for n, _ in got] == want
        assert [v for _, v in got] == want_scores
        assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
    assert ToolIndex.build(openai_tools).search("   ", 5) == []
    assert len(ToolIndex.build(mcp)) == len(fns)


def test_twins_are_the_tools_a_question_alone_cannot_tell_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twins (one API in several namespaces or spellings) against a brute-force pairwise rule,
    and named per candidate in the routing record, so a user sees why a near-duplicate won."""
    from trierouter.shortlist import ToolIndex
    from trierouter.shortlist.tool_text import twin_key

    names = ["math.gcd", "number_theory.gcd", "gcd", "lcm", "calculate_BMI", "calculate_bmi",
             "health.calculateBmi", "calc_bmi", "get_user_v2", "get_user_v_2",
             "weather.get"]  # fmt: skip
    index = ToolIndex.build([_tool(n, f"Tool {n}.", {"x": {"type": "string"}}) for n in names])

    def same(a: str, b: str) -> bool:  # the rule spelt out: last segment, letters and digits
        last = [n.split(".")[-1].lower() for n in (a, b)]
        return ["".join(ch for ch in s if ch.isalnum()) for s in last] == [
            "".join(ch for ch in s if ch.isalnum()) for s in last[::-1]
        ]

    for n in names:
        assert index.twins(n) == [m for m in names if m != n and same(n, m)], n
    assert twin_key("number_theory.gcd") == "gcd" and index.twins("lcm") == []
    assert sorted(index.twins("calculate_bmi")) == ["calculate_BMI", "health.calculateBmi"]

    pytest.importorskip("vllm")
    from trierouter.router.vllm.server import read_body

    reg = [_tool(n, f"Compute the {n.split('.')[-1]} of numbers.", {"a": {"type": "integer"}})
           for n in names]  # fmt: skip
    (tmp_path / "api.json").write_text(json.dumps(reg))
    monkeypatch.setenv("TRIEROUTER_TOOLS", str(tmp_path / "api.json"))
    body = {"model": "m", "messages": [{"role": "user", "content": "gcd of 12 and 18"}],
            "vllm_xargs": {"trierouter_tools": "api", "trierouter_tool_search": 4}}  # fmt: skip
    _, _, routing = read_body(json.dumps(body).encode(), "hermes")
    assert routing is not None
    by_name = {c["name"]: c for c in routing["candidates"]}
    assert {"math.gcd", "number_theory.gcd", "gcd"} <= set(by_name)
    for n, c in by_name.items():
        assert c.get("twins", []) == [m for m in names if m != n and same(n, m)]
