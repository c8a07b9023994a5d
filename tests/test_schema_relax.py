"""OpenAI's convention for real-world schemas: ``"strict": true`` is exact or refused; without it a
tool is always served, each construct no engine serves exactly relaxed to its nearest exact form,
recorded (kind, slot path), listed by ``explain``, logged once, and the finished call validated
against the original schema. Oracle: ``jsonschema`` with its format checker, against the original
schema and against the relaxed schema written out by hand."""

from __future__ import annotations

import json
import logging
import random
from typing import Any

import numpy as np
import pytest

from trierouter.errors import UnservedSchemaError
from trierouter.registry import ToolRegistry
from trierouter.registry.compiler import compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.relax import strict_for
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.bitmask import bitmask_to_ids
from trierouter.router.tool_calls.call import ToolCallError
from trierouter.router.tool_calls.plan import ToolCallPlan

jsonschema = pytest.importorskip("jsonschema")

DONTCARE = ["1", "2", "3", "4", "dontcare"]
SLOPPY = {"type": "integer", "enum": DONTCARE, "description": "number of people"}
"""A real BFCL live tool's argument: an integer whose enum lists strings."""


def _fn(name: str, props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    params = {"type": "object", "properties": props, "required": list(props)}
    return {"type": "function", "function": {"name": name, "parameters": params, **extra}}


SIX = [
    _fn("find_restaurant", {"city": {"type": "string"}, "people": SLOPPY}),
    _fn("get_weather", {"city": {"type": "string"}, "day": {"type": "string", "format": "date"}}),
    _fn("book_taxi", {"seats": {"type": "integer", "minimum": 1, "maximum": 6}}),
    _fn("play_song", {"title": {"type": "string", "maxLength": 20}}),
    _fn("set_alarm", {"time": {"type": "string", "format": "time"}}),
    _fn("send_sms", {"to": {"type": "string", "pattern": "^[0-9]{6,12}$"}}),
]


def _valid(schema: dict[str, Any], value: Any) -> bool:
    cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    return bool(cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(value))


# -- kinds: (what, property schema, kind, the relaxed schema by hand) ---------------------------
_ANY_STRING_ID = {"type": "string", "pattern": "^[A-Za-z0-9-]+$"}
KINDS: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    ("type contradicting its enum", SLOPPY, "type", {"enum": DONTCARE}),
    ("enum contradicting its siblings", {"type": "string", "maxLength": 2, "enum": ["abc", "def"]},
     "enum", {"enum": ["abc", "def"]}),
    ("uniqueItems", {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3},
                     "uniqueItems": True},
     "uniqueItems", {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}}),
    ("a pattern XGrammar reads differently", {"type": "string", "pattern": "^\\S+$",
                                              "maxLength": 6},
     "pattern", {"type": "string", "maxLength": 6}),
    ("a format no engine serves", {"type": "string", "format": "duration"}, "format",
     {"type": "string"}),
    ("a format beside a length bound", {"type": "string", "format": "email", "maxLength": 80},
     "format", {"type": "string", "maxLength": 80}),
    ("oneOf branches that overlap", {"oneOf": [{"type": "integer"}, {"type": "number"}]},
     "oneOf", {"anyOf": [{"type": "integer"}, {"type": "number"}]}),
    ("multipleOf on a number", {"type": "number", "minimum": 0, "maximum": 9, "multipleOf": 0.5},
     "multipleOf", {"type": "number", "minimum": 0, "maximum": 9}),
    ("not", {"type": "string", "maxLength": 3, "not": {"const": "no"}}, "not",
     {"type": "string", "maxLength": 3}),
]  # fmt: skip


@pytest.mark.parametrize("case", KINDS, ids=[k[0] for k in KINDS])
def test_each_kind_recorded_and_explained(
    case: tuple[str, dict[str, Any], str, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    what, prop, kind, _ = case
    name = "k_" + what.replace(" ", "_")
    tool = _fn(name, {"x": prop})
    with caplog.at_level(logging.WARNING, logger="trierouter"):
        registry = ToolRegistry([tool])
        ToolRegistry([tool])  # the same tool again: logged once per tool and process
    relaxed = registry.relaxed(name)
    assert [(p.kind, p.path) for p in relaxed] == [(kind, "x")]
    assert relaxed[0].to_dict() == {"kind": kind, "path": "x", "why": relaxed[0].why}
    assert f"x  {kind}: " in registry.explain(name)
    logged = [r for r in caplog.records if name in r.getMessage()]
    assert len(logged) == 1 and kind in logged[0].getMessage()
    with pytest.raises(UnservedSchemaError, match=kind):
        ToolRegistry([_fn(name, {"x": prop}, strict=True)])


def test_one_sloppy_tool_of_six_is_served_and_strict_refuses_it() -> None:
    registry = ToolRegistry(SIX)  # OpenAI's default: no "strict": true
    assert len(registry) == 6
    assert [n for n in registry.names() if registry.relaxed(n)] == ["find_restaurant"]
    (p,) = registry.relaxed("find_restaurant")
    assert (p.kind, p.path) == ("type", "people")
    assert "enum of 5" in registry.explain("find_restaurant")  # served as the enum's values
    strict = [*SIX[1:], _fn("find_restaurant", SIX[0]["function"]["parameters"]["properties"],
                             strict=True)]  # fmt: skip
    with pytest.raises(UnservedSchemaError, match=r"find_restaurant.*people: type"):
        ToolRegistry(strict)
    # the flag of each function decides; a registry's strict= forces every tool
    exact = [_fn(t["function"]["name"], t["function"]["parameters"]["properties"], strict=True)
             for t in SIX[1:]]  # fmt: skip
    assert len(ToolRegistry(exact)) == 5
    with pytest.raises(UnservedSchemaError):
        ToolRegistry(SIX, strict=True)
    assert len(ToolRegistry(strict, strict=False)) == 6
    assert [strict_for(f, t) for f in (None, True, False) for t in (None, False, True)] == [
        False, False, True, True, True, True, False, False, False,
    ]  # fmt: skip


def test_many_relaxed_tools_log_each_once_and_stay_readable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from trierouter.registry.relax import LOUD

    tools = [_fn(f"many_{i}", {"x": {"type": "array", "uniqueItems": True}}) for i in range(15)]
    with caplog.at_level(logging.INFO, logger="trierouter"):
        ToolRegistry(tools)
        ToolRegistry(tools)  # again: nothing new to say
    named = [r for r in caplog.records if "'many_" in r.getMessage()]
    assert sorted(r.getMessage().split("'")[1] for r in named) == sorted(
        f"many_{i}" for i in range(15)
    )
    assert [r.levelno for r in named] == [logging.WARNING] * LOUD + [logging.INFO] * (15 - LOUD)
    summary = [r for r in caplog.records if "more tools are served relaxed" in r.getMessage()]
    assert len(summary) == 1 and summary[0].getMessage().startswith(f"{15 - LOUD} more")


def test_saved_and_loaded_keep_the_flag(tmp_path: Any) -> None:
    flagged = _fn("exact", {"a": {"type": "string"}}, strict=True)
    registry = ToolRegistry([flagged, SIX[0]])
    registry.save(tmp_path / "t.json")
    back = ToolRegistry.load(tmp_path / "t.json")
    assert back["exact"].strict is True and back["find_restaurant"].strict is None
    assert back.relaxed("find_restaurant") == registry.relaxed("find_restaurant")
    assert back.to_openai()[0]["function"]["strict"] is True


def _calls(tools: list[dict[str, Any]], vocab: Vocabulary, n: int, seed: int) -> list[str]:
    """``n`` random constrained walks (``tool_choice="required"``): each call's text."""
    compiled = compile_tools(tools, TokenIndex.get(vocab))
    plan = ToolCallPlan(compiled, tool_choice="required")
    rng = random.Random(seed)
    row = np.zeros((1, (plan.width + 31) // 32), dtype=np.int32)
    out = []
    for _ in range(n):
        st: Any = plan.start()
        toks: list[int] = []
        limit = 160
        for k in range(limit):
            plan.fill_next_token_bitmask(st, row, 0, remaining=limit - k)
            ids = bitmask_to_ids(row[0], plan.width).tolist()
            ends = [e for e in vocab.end_ids if e in ids]
            t = ends[0] if ends and rng.random() < 0.5 else ids[rng.randrange(len(ids))]
            st = plan.advance(st, t)
            assert st[0] != plan.DEAD
            if st[0] == plan.TERMINATED:
                break
            toks.append(t)
        else:
            raise AssertionError(f"no end within {limit} tokens")
        out.append(b"".join(vocab.tokens[t] for t in toks).decode())
    return out


@pytest.mark.parametrize("case", KINDS, ids=[k[0] for k in KINDS])
def test_decoded_calls_valid_for_the_relaxed_schema_and_checked_against_the_original(
    case: tuple[str, dict[str, Any], str, dict[str, Any]], qwen2: Vocabulary
) -> None:
    what, prop, _, by_hand = case
    tool = _fn("t", {"x": prop})
    relaxed_schema = {"type": "object", "properties": {"x": by_hand}, "required": ["x"]}
    original = tool["function"]["parameters"]
    compiled = compile_tools([tool], TokenIndex.get(qwen2))
    plan = ToolCallPlan(compiled, tool_choice="required")
    seen_invalid = 0
    for text in _calls([tool], qwen2, 12, seed=len(what)):
        (call,) = plan.parse_calls(text, validate=False).calls
        args = call.args
        assert _valid(relaxed_schema, args), (what, text)  # exact for the relaxed schema
        if _valid(original, args):
            assert plan.parse(text) is not None
        else:  # invalid against the original: reported as such, never returned as valid
            seen_invalid += 1
            with pytest.raises(ToolCallError, match="do not match its schema"):
                plan.parse(text)
    if what == "type contradicting its enum":
        assert seen_invalid == 12  # no value satisfies the original: every call reported


def test_server_serves_the_request_and_reports_relaxations() -> None:
    """The inline tools of one request: one sloppy tool of six served (not a 400), refused with
    ``"strict": true``; the parser's call of it carries the ``trierouter`` extension field, with
    the check against the original schema's verdict, and so does the streamed delta naming it."""
    pytest.importorskip("vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.exceptions import VLLMValidationError

    from trierouter.router.vllm.checks import check_inline_tools
    from trierouter.router.vllm.tool_parser import TrieRouterHermesToolParser

    assert len(check_inline_tools(json.dumps(SIX))) == 6
    flagged = json.loads(json.dumps(SIX))
    flagged[0]["function"]["strict"] = True
    with pytest.raises(ValueError, match="find_restaurant"):
        check_inline_tools(json.dumps(flagged))
    parser = TrieRouterHermesToolParser(None)
    msgs = [{"role": "user", "content": "a table for two in Oslo"}]
    req = ChatCompletionRequest(model="m", messages=msgs, tools=SIX, tool_choice="required")
    parser.adjust_request(req)
    bad = ChatCompletionRequest(model="m", messages=msgs, tools=flagged, tool_choice="required")
    with pytest.raises(VLLMValidationError, match="find_restaurant"):
        parser.adjust_request(bad)
    for people in ('"2"', "2"):  # neither is valid against the original (nothing is)
        text = f'<tool_call>\n{{"name": "find_restaurant", "arguments": {{"city": "Oslo", ' \
               f'"people": {people}}}}}\n</tool_call>'  # fmt: skip
        got = parser.extract_tool_calls(text, req)
        (tc,) = got.tool_calls
        ext = json.loads(tc.model_dump_json())["trierouter"]
        assert ext["relaxed"] == [
            {"kind": "type", "path": "people", "why": ext["relaxed"][0]["why"]}
        ]
        assert "people" in ext["invalid"]
        streamed = TrieRouterHermesToolParser(None).extract_tool_calls_streaming(
            "", text, text, [], [], [], req
        )
        (opened,) = json.loads(streamed.model_dump_json())["tool_calls"]
        assert opened["function"]["name"] == "find_restaurant"
        assert opened["trierouter"]["relaxed"] == ext["relaxed"]
    # an exact tool's call carries nothing
    text = '<tool_call>\n{"name": "book_taxi", "arguments": {"seats": 2}}\n</tool_call>'
    (tc,) = parser.extract_tool_calls(text, req).tool_calls
    assert "trierouter" not in json.loads(tc.model_dump_json())
