"""Requests written per tool (doc2query) and the tool search over them.

Oracles: the model's own greedy ``generate`` per prompt, unbatched (what the writer's batch
must reproduce); the cache counted by the tools the model wrote; the BM25 search with and
without the requests (a tool found only through its requests' words).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.test_classify import _one_thread, tiny
from tests.test_tool_rerank import CHATML
from trierouter.router.tool_requests import QuestionWriter, parse_requests
from trierouter.shortlist.tool_text import ToolIndex, expanded_text, tool_text

__all__ = ["_one_thread", "tiny"]

TOOLS = [
    {"name": "trends.get_weread_rank", "description": "Get the WeRead book ranking.",
     "parameters": {"type": "object", "properties": {"category": {"type": "string"}}}},
    {"name": "get_weather", "description": "Current weather in a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "stock_price.get", "description": "Latest stock price of a ticker symbol.",
     "parameters": {"type": "object", "properties": {"ticker": {"type": "string"}}}},
]  # fmt: skip


@pytest.fixture(scope="module")
def chat(tiny: tuple[Any, Any]) -> tuple[Any, Any]:
    model, tok = tiny
    tok.chat_template = CHATML
    return model, tok


def test_parse_requests_strips_bullets_and_keeps_n_distinct() -> None:
    text = (
        '1. What is the weather in Oslo?\n\n- "Is it raining in Paris"\n'
        "2) What is the weather in Oslo?\n* Wind in Rome\n(3) Snow?"
    )
    assert parse_requests(text, 3) == [
        "What is the weather in Oslo?",
        "Is it raining in Paris",
        "Wind in Rome",
    ]
    assert parse_requests("", 3) == []


def test_batched_writing_equals_one_greedy_generate_per_tool(chat: tuple[Any, Any]) -> None:
    model, tok = chat
    writer = QuestionWriter((model, tok), n=2, batch_size=3, max_new_tokens=12)
    got = writer.write(TOOLS, progress=False)
    assert list(got) == [t["name"] for t in TOOLS] and writer.generated == len(TOOLS)
    for t in TOOLS:  # the oracle: transformers' greedy generate, one prompt alone, no padding
        ids = tok(writer.prompt(t["name"], t["description"], t["parameters"]), return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=12, do_sample=False,
                                 pad_token_id=tok.pad_token_id or tok.eos_token_id)  # fmt: skip
        new = out[0, ids["input_ids"].shape[1] :].tolist()
        ends = set(writer.scorer.end_ids)
        cut = next((i for i, x in enumerate(new) if x in ends), len(new))
        want = parse_requests(tok.decode(new[:cut], skip_special_tokens=True), 2)
        assert got[t["name"]] == want, t["name"]


def test_cache_reads_back_and_writes_only_changed_tools(
    chat: tuple[Any, Any], tmp_path: Path
) -> None:
    cache = tmp_path / "reg.questions.json"
    first = QuestionWriter(chat, n=2, max_new_tokens=8)
    a = first.write(TOOLS, cache=cache, progress=False)
    assert first.generated == 3 and cache.is_file()
    again = QuestionWriter(chat, n=2, max_new_tokens=8)
    assert again.write(TOOLS, cache=cache, progress=False) == a and again.generated == 0
    changed = [dict(TOOLS[0], description="Get the WeRead ranking of books this week."), *TOOLS[1:]]
    third = QuestionWriter(chat, n=2, max_new_tokens=8)
    b = third.write(changed, cache=cache, progress=False)
    assert third.generated == 1 and b["get_weather"] == a["get_weather"]
    # another n is another prompt: nothing read back
    other = QuestionWriter(chat, n=3, max_new_tokens=8)
    other.write(TOOLS[:1], cache=cache, progress=False)
    assert other.generated == 1
    assert json.loads(cache.read_text())["prompt"]


def test_search_finds_a_tool_through_its_requests_only() -> None:
    query = "how much is apple trading at right now"
    plain = ToolIndex.build(TOOLS)
    assert [n for n, _ in plain.search(query, 3)] == ["trends.get_weread_rank"]  # one n-gram
    written = {"stock_price.get": ["How much is Apple trading at?", "Price of TSLA now"]}
    expanded = ToolIndex.build(TOOLS, expansions=written)
    assert expanded.search(query, 3)[0][0] == "stock_price.get"
    # a tool without requests is indexed under its own text
    t = TOOLS[1]
    assert expanded_text(t["name"], t["description"], t["parameters"], []) == tool_text(
        t["name"], t["description"], t["parameters"]
    )
    with pytest.raises(ValueError, match="not both"):
        ToolIndex.build(TOOLS, expansions=written, document=tool_text)


def test_a_tokenizer_without_chat_template_is_refused(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    bare = transformers.AutoTokenizer.from_pretrained(tok.name_or_path)
    bare.chat_template = None
    with pytest.raises(ValueError, match="chat_template"):
        QuestionWriter((model, bare))


def test_the_command_writes_a_requests_file_the_server_reads(
    tiny: tuple[Any, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trierouter write-requests``: a requests file keyed by the registry's tool names, read
    back from its cache on a second run; a model folder without a chat template is one line
    naming the fix (exit 2)."""
    from trierouter.cli import main

    model, tok = tiny
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tok.chat_template = None  # the shared tokenizer, as built: no template
    tok.save_pretrained(folder)
    reg = tmp_path / "tools.json"
    reg.write_text(json.dumps([{"type": "function", "function": t} for t in TOOLS]))
    out = tmp_path / "requests.json"
    argv = ["write-requests", "--registry", str(reg), "--model", str(folder), "-o", str(out),
            "--n", "2"]  # fmt: skip
    assert main(argv) == 2
    assert "chat_template" in capsys.readouterr().err
    tok.chat_template = CHATML
    tok.save_pretrained(folder)
    assert main(argv) == 0
    got = json.loads(out.read_text())
    assert sorted(got) == sorted(t["name"] for t in TOOLS)
    assert all(isinstance(v, list) and len(v) <= 2 for v in got.values())
    assert "3 written now" in capsys.readouterr().err
    assert main(argv) == 0 and json.loads(out.read_text()) == got
    assert "0 written now" in capsys.readouterr().err
