"""The serving pieces without a server: native-syntax call parsing and streaming, request checks,
the tool-search rewrite, the worker's failure isolation, ToolRegistry.invoke, the LangChain model
in process (tiny random model, transformers)."""

from __future__ import annotations

import asyncio
import json
import random
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import pytest

from trierouter.registry.call_text import ParsedCall, envelope, scan_calls
from trierouter.registry.tool_registry import ToolRegistry
from trierouter.router.tool_calls.native import ToolCallStream, call_problem

jsonschema = pytest.importorskip("jsonschema")

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "day": {"type": "string", "format": "date"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "ping", "parameters": {}}},
]  # fmt: skip


# -- calls in the native syntax ------------------------------------------------------------------
TEXTS = [
    (
        "hermes",
        'Sure. <tool_call>\n{"name": "get_w\\"x", "arguments": {"a": "}{\\"", "b": [1, {"c": 2}]}}'
        '\n</tool_call>\n<tool_call>\n{"name": "t2", "arguments": {}}\n</tool_call>',
    ),
    ("llama3_json", '{"name": "f", "parameters": {"x": "é"}}; {"name": "g", "parameters": {}}'),
    (
        "mistral",
        'Let me see. [TOOL_CALLS][{"name": "f", "arguments": {"x": "}]"}}, '
        '{"name": "g", "arguments": {"y": [1, {"z": "]"}]}}]',
    ),
    ("json_array", '[{"name": "f", "parameters": {"x": ["]}"]}}, {"name": "g", "parameters": {}}]'),
    ("hermes", "no call here, just text with <tool"),
]


@pytest.mark.parametrize(("fmt", "text"), TEXTS)
def test_streamed_deltas_add_up_to_the_parsed_calls(fmt: str, text: str) -> None:
    env = envelope(fmt, auto=True)
    content, calls = scan_calls(text, env)
    for seed in range(100):
        rng = random.Random(seed)
        stream = ToolCallStream(env)
        pos, got, names, args = 0, "", {}, {}
        while pos < len(text):
            pos = min(len(text), pos + rng.randint(1, 7))
            d = stream.feed(text[:pos])
            got += d.content
            for i, name, frag in d.calls:
                if name is not None:
                    assert i not in names
                    names[i] = name
                args[i] = args.get(i, "") + frag
        # a content that ends in a prefix of the opener keeps that prefix back (it could still
        # have become a call); everything before it streams
        assert content.startswith(got) and len(content) - len(got) < max(1, len(env.trigger or ""))
        assert [names[i] for i in sorted(names)] == [c.name for c in calls]
        assert [args[i] for i in sorted(args)] == [c.arguments for c in calls]


def test_parse_calls_shapes() -> None:
    content, calls = scan_calls(TEXTS[0][1], envelope("hermes", auto=True))
    assert content == "Sure. " and [c.name for c in calls] == ['get_w"x', "t2"]
    assert json.loads(calls[0].arguments) == {"a": '}{"', "b": [1, {"c": 2}]}
    text = '<tool_call>\n{"name": "a", "arguments": {"x": "unfini'
    _, cut = scan_calls(text, envelope("hermes", auto=False))
    assert len(cut) == 1 and not cut[0].complete
    forced = '{"name": "ping", "arguments": {}}'  # the json format under a forced choice
    assert scan_calls(forced, envelope("json", auto=False))[1][0].name == "ping"


def test_call_problem_uses_the_format_checker() -> None:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    ok = ParsedCall("get_weather", '{"city": "Oslo", "day": "2024-02-29"}', True)
    assert call_problem(ok, schemas) is None
    bad = ParsedCall("get_weather", '{"city": "Oslo", "day": "2023-02-29"}', True)
    assert "date" in (call_problem(bad, schemas) or "")
    assert "not one of" in (call_problem(ParsedCall("nope", "{}", True), schemas) or "")


# -- request checks ------------------------------------------------------------------------------
vllm = pytest.importorskip("vllm")


def test_request_xargs_refuses_each_bad_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from trierouter.router.vllm.tool_parser import request_xargs

    monkeypatch.setenv("TRIEROUTER_MAX_INLINE_TOOLS", "4")
    good = request_xargs(TOOLS, "required", parallel=True, fmt="hermes", max_tokens=80)
    assert good["trierouter_tool_choice"] == "required" and good["trierouter_tool_budget"] == 10
    assert json.loads(good["trierouter_tools_inline"]) == TOOLS
    named = {"type": "function", "function": {"name": "nope"}}
    with pytest.raises(ValueError, match="no tool of that name"):
        request_xargs(TOOLS, named, parallel=True, fmt="hermes")
    broken = [{"type": "function", "function": {"name": "b", "parameters": {"type": 12}}}]
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        request_xargs(broken, "required", parallel=True, fmt="hermes")
    many = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(5)]
    with pytest.raises(ValueError, match="TRIEROUTER_MAX_INLINE_TOOLS"):
        request_xargs(many, "required", parallel=True, fmt="hermes")
    with pytest.raises(ValueError, match="not configured"):
        request_xargs(None, "required", parallel=True, fmt="hermes", xargs={
            "trierouter_tools": "nope"})  # fmt: skip


def test_tool_search_rewrites_a_registry_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trierouter.router.vllm.launch import serve_argv
    from trierouter.router.vllm.server import BadRequest, read_body

    reg = [*TOOLS, *({"type": "function", "function": {"name": f"sync_thing_{i}",
                                                      "description": f"sync thing {i}"}}
                     for i in range(50))]  # fmt: skip
    (tmp_path / "api.json").write_text(json.dumps(reg))
    monkeypatch.setenv("TRIEROUTER_TOOLS", str(tmp_path / "api.json"))
    body = {"model": "m", "messages": [{"role": "user", "content": "weather in Oslo?"}],
            "tool_choice": "required",
            "vllm_xargs": {"trierouter_tools": "api", "trierouter_tool_search": 3}}  # fmt: skip
    out = json.loads(read_body(json.dumps(body).encode(), "hermes")[0] or b"{}")
    names = [t["function"]["name"] for t in out["tools"]]
    assert names == ["get_weather"], names  # only what matches: never padded to k
    assert out["vllm_xargs"]["trierouter_allowed"] == names
    body["messages"] = [{"role": "user", "content": "zqxj vbnm"}]  # matches no tool
    with pytest.raises(BadRequest, match="no tool of registry 'api' matches") as err:
        read_body(json.dumps(body).encode(), "hermes")[0]
    assert err.value.param == "vllm_xargs"
    body["vllm_xargs"]["trierouter_tools"] = "secret_registry_name_probe"
    with pytest.raises(BadRequest, match="is not configured on this server") as err:
        read_body(json.dumps(body).encode(), "hermes")[0]
    assert "'api'" not in str(err.value)  # the configured names are not told to the caller
    body["vllm_xargs"]["trierouter_tools"] = "api"
    body["vllm_xargs"]["trierouter_tool_search"] = 0
    with pytest.raises(BadRequest, match="trierouter_tool_search"):
        read_body(json.dumps(body).encode(), "hermes")[0]
    mw = "trierouter.router.vllm.server.ToolSearchMiddleware"
    assert serve_argv(["M", "--tool-call-parser", "x"])[:6] == [
        "--middleware", mw, "--model", "M", "--tool-call-parser", "x"]  # fmt: skip
    # a user's own middleware is added after ours (outside it: it runs first)
    argv = serve_argv(["M", "--middleware", "my.Auth"])
    assert argv.index(mw) < argv.index("my.Auth") and argv.count(mw) == 1


BAD_SHAPES = [  # (body fields, the field the 400 must name)
    ({"tools": 5}, "tools"),
    ({"tools": [5]}, "tools[0]"),
    ({"tools": [{"function": {"name": 3}}]}, "tools[0]"),
    ({"tools": [{"function": {"name": "a", "parameters": [1]}}]}, "tools[0].function.parameters"),
    ({"tool_choice": {"function": "x"}, "vllm_xargs": {"trierouter_tools": "api"}}, "tool_choice"),
    ({"messages": {"role": "user"}}, "messages"),
    ({"vllm_xargs": {"trierouter_tools": "api"}, "tools": {"a": 1}}, "tools"),
]


@pytest.mark.parametrize(("fields", "named"), BAD_SHAPES)
def test_malformed_bodies_are_a_400_naming_the_field(
    fields: dict[str, object], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trierouter.router.vllm.server import BadRequest, read_body

    (tmp_path / "api.json").write_text(json.dumps(TOOLS))
    monkeypatch.setenv("TRIEROUTER_TOOLS", str(tmp_path / "api.json"))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": TOOLS, "tool_choice": "none", **fields}  # fmt: skip
    with pytest.raises(BadRequest) as err:
        read_body(json.dumps(body).encode(), "hermes")[0]
    assert str(err.value).startswith(named + ":"), err.value


def test_a_body_nested_past_the_parser_is_a_400_naming_the_field() -> None:
    from trierouter.router.vllm.server import BadRequest, read_body

    deep = b'{"model": "m", "tool_choice": "none", "messages": ' + b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(BadRequest, match=r"^messages: JSON nested too deeply") as err:
        read_body(deep + b"}", "hermes")[0]
    assert err.value.param == "messages"
    with pytest.raises(BadRequest, match=r"^request body: JSON nested too deeply"):
        read_body(b"[" * 100_000, "hermes")[0]


def test_nothing_of_the_middleware_runs_before_vllms_authentication(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's own AuthenticationMiddleware below ours, as ``vllm serve --api-key`` stacks them:
    an unauthenticated request is answered 401 by vLLM without its body being read or anything
    of trierouter called; an authenticated malformed one gets trierouter's 400."""
    from vllm.entrypoints.serve.middleware.authenticate import AuthenticationMiddleware

    from trierouter.router.vllm import server

    calls: list[str] = []
    nothing = (None, None, None)
    monkeypatch.setattr(server, "read_body", lambda *a: calls.append("rewrite") or nothing)
    monkeypatch.setattr(server, "count_work", lambda stage: calls.append(stage))

    async def endpoint(scope: dict, receive: object, send: object) -> None:
        calls.append("endpoint")

    stack = server.ToolSearchMiddleware(AuthenticationMiddleware(endpoint, tokens=["k"]))
    body = json.dumps({"model": "m", "messages": [], "tools": TOOLS * 2048}).encode()

    def run(headers: list[tuple[bytes, bytes]], path: str = "/v1/chat/completions") -> int:
        sent: list[dict] = []
        reads: list[int] = []

        async def receive() -> dict:
            reads.append(1)
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(msg: dict) -> None:
            sent.append(msg)

        scope = {"type": "http", "method": "POST", "path": path, "root_path": "",
                 "headers": [(b"content-length", str(len(body)).encode()), *headers]}  # fmt: skip
        asyncio.run(stack(scope, receive, send))
        if "rewrite" not in calls:
            assert not reads  # the body was never read
        return int(sent[0]["status"]) if sent else 200

    for bad in ([], [(b"authorization", b"Bearer nope")], [(b"authorization", b"Basic k")]):
        assert run(bad) == 401 and calls == []
    assert run([(b"authorization", b"Bearer k")]) == 200
    assert calls == ["middleware", "rewrite", "endpoint"]


def test_configured_auth_that_cannot_be_found_stops_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trierouter.router.vllm.server import ToolSearchMiddleware

    async def endpoint(scope: dict, receive: object, send: object) -> None:
        return None

    monkeypatch.setenv("VLLM_API_KEY", "k")
    with pytest.raises(RuntimeError, match="AuthenticationMiddleware"):
        ToolSearchMiddleware(endpoint)
    monkeypatch.delenv("VLLM_API_KEY")
    assert ToolSearchMiddleware(endpoint)._accepted is None  # no key: nothing to wait for


def _stream_all(parser: object, text: str, request: object, ids: list[int]) -> dict[int, str]:
    args: dict[int, str] = {}
    for end in range(1, len(text) + 1):
        d = parser.extract_tool_calls_streaming(  # type: ignore[attr-defined]
            text[: end - 1], text[:end], text[end - 1], [], ids, ids[:1], request
        )
        for tc in (d.tool_calls if d is not None else None) or []:
            args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
    return args


def test_streamed_calls_are_validated_like_whole_ones() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from trierouter.router.vllm.tool_parser import TrieRouterHermesToolParser

    tok = SimpleNamespace(eos_token_id=0, all_special_ids=[0])
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                tools=TOOLS, tool_choice="required")  # fmt: skip
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"day": "2024-02-29", "city": "Oslo"'
    good += "}}"
    args = _stream_all(TrieRouterHermesToolParser(tok), good + "\n</tool_call>", req, [5])
    assert json.loads(args[0]) == {"day": "2024-02-29", "city": "Oslo"}
    whole = TrieRouterHermesToolParser(tok).extract_tool_calls(good + "\n</tool_call>", req)
    assert whole.tool_calls[0].function.arguments == args[0]
    for bad in (good.replace("2024", "2023"), good.replace('"city": "Oslo"', '"town": "Oslo"')):
        with pytest.raises(RuntimeError, match="not valid") as err:  # 2023-02-29: no such day
            TrieRouterHermesToolParser(tok).extract_tool_calls(bad + "\n</tool_call>", req)
        with pytest.raises(RuntimeError, match="not valid") as err2:
            _stream_all(TrieRouterHermesToolParser(tok), bad + "\n</tool_call>", req, [5])
        assert str(err2.value) == str(err.value)  # the same check, the same message
    # a required request that failed in the worker: one end token, no text -> an error
    failed = TrieRouterHermesToolParser(tok)
    with pytest.raises(RuntimeError, match="no call for a required tool call"):
        failed.extract_tool_calls_streaming("", "", "", [], [0], [0], req)
    auto = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                 tools=TOOLS, tool_choice="auto")  # fmt: skip
    assert TrieRouterHermesToolParser(tok).extract_tool_calls_streaming(
        "", "", "", [], [0], [0], auto) is None  # fmt: skip


# -- the worker: a request that fails does so alone ----------------------------------------------
def _engine_processor(tmp_path_factory: pytest.TempPathFactory, width: int) -> Any:
    """The vLLM logits processor over the tiny Qwen2 model, as an engine core makes it."""
    import torch

    from trierouter.router.vllm.processor import TrieRouterLogitsProcessor
    from trierouter.testing.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("units-model") / "qwen2")
    gen = json.loads((model / "generation_config.json").read_text())
    mc = SimpleNamespace(
        tokenizer=str(model), tokenizer_revision=None, trust_remote_code=False,
        get_vocab_size=lambda: width, try_get_generation_config=lambda: gen,
    )  # fmt: skip
    cfg = SimpleNamespace(model_config=mc, scheduler_config=SimpleNamespace(max_num_seqs=4))
    return TrieRouterLogitsProcessor(cfg, torch.device("cpu"), False)


def test_engine_builds_its_token_index_at_start(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The token index, the end row and the turn closer's counter are built on a thread when
    the engine makes the processor, before any request: the first request does not build them
    inside the step."""
    from trierouter.router.bitmask import bitmask_to_ids
    from trierouter.router.tool_calls.greedy import counter

    proc = _engine_processor(tmp_path_factory, 151_872)
    proc._warm.join(timeout=300)
    assert not proc._warm.is_alive()
    index = proc._index
    assert index is not None and proc._end_row is not None  # no request was made
    assert proc._ensure_index() is index  # the first request takes it as built
    vocab = index.vocabulary
    assert bitmask_to_ids(proc._end_row).tolist() == sorted(set(vocab.end_ids))
    assert counter(vocab)._trie is not None  # the closer's pieces trie, prepared


def test_worker_fails_a_bad_request_alone(tmp_path_factory: pytest.TempPathFactory) -> None:
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from trierouter.router.vllm.processor import TrieRouterLogitsProcessor

    width = 151_872
    proc = _engine_processor(tmp_path_factory, width)
    bad = SamplingParams(extra_args={"trierouter_tools_inline": json.dumps(TOOLS),
                                     "trierouter_tool_choice": "missing_tool"})  # fmt: skip
    good = SamplingParams(extra_args={"trierouter_tools_inline": json.dumps(TOOLS),
                                      "trierouter_tool_choice": "required",
                                      "trierouter_tool_format": "hermes"})  # fmt: skip
    with pytest.raises(ValueError, match="no tool of that name"):
        TrieRouterLogitsProcessor.validate_params(bad)  # the API server refuses it ...
    outs: list[list[int]] = [[], []]
    # ... and a worker driven directly (no validate_params) fails it alone
    proc.update_state(BatchUpdate(batch_size=2, removed=[], added=[(0, bad, [1], outs[0]),
                                                                   (1, good, [1], outs[1])],
                                  moved=[]))  # fmt: skip
    logits = torch.zeros((2, width))
    proc.apply(logits)
    end_ids = set(proc._index.vocabulary.end_ids)
    assert set(torch.isfinite(logits[0]).nonzero().flatten().tolist()) == end_ids
    allowed = torch.isfinite(logits[1]).nonzero().flatten().tolist()
    assert allowed and not set(allowed) & end_ids  # the opener is forced

    # the inline tool-set cache is bounded in bytes too: with room for none, the newest stays
    from trierouter.router.vllm.args import parse_request

    proc._tool_sets.cache_bytes = 1
    for tools in (TOOLS, TOOLS[:1]):
        proc._tool_sets.plan(parse_request({"trierouter_tools_inline": json.dumps(tools),
                                            "trierouter_tool_choice": "required",
                                            "trierouter_tool_format": "hermes"}))  # fmt: skip
    (only,) = proc._tool_sets.inline.values()
    assert [t.name for t in only.specs] == ["get_weather"]
    assert 0 < only.nbytes < proc._index.nbytes  # its own bytes, not the shared index

    # the engine keeps the JSON text its frontend validated (checked: no second parse inside
    # the step); text that does not parse fails its own request alone, in the compile
    text = json.dumps(TOOLS)
    spec = parse_request({"trierouter_tools_inline": text}, checked=True)
    assert spec is not None and spec.tools_inline is text
    spaced = parse_request({"trierouter_tools_inline": json.dumps(TOOLS, indent=1)})
    assert spaced is not None and spaced.tools_inline == text  # the frontend writes it canonically
    broken = SamplingParams(extra_args={"trierouter_tools_inline": "[{oops",
                                        "trierouter_tool_choice": "required",
                                        "trierouter_tool_format": "hermes"})  # fmt: skip
    with pytest.raises(ValueError, match="not JSON"):
        TrieRouterLogitsProcessor.validate_params(broken)
    proc.update_state(BatchUpdate(batch_size=1, removed=[1], added=[(0, broken, [1], [])],
                                  moved=[]))  # fmt: skip
    logits = torch.zeros((1, width))
    proc.apply(logits)
    assert set(torch.isfinite(logits[0]).nonzero().flatten().tolist()) == end_ids


# -- ToolRegistry.invoke -------------------------------------------------------------------------
def weather(city: str, days: int = 1) -> str:
    """Weather.

    Args:
        city: the city
        days: how many days
    """
    return f"{city}:{days}"


async def aweather(city: str) -> str:
    """Async weather."""
    return f"async {city}"


def test_registry_invoke_and_ainvoke() -> None:
    from pydantic import BaseModel

    class Flight(BaseModel):
        """A flight."""

        origin: str
        seats: int

    reg = ToolRegistry([weather, aweather, Flight, TOOLS[1]])
    assert reg.invoke({"function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}) == (
        "Oslo:1"
    )
    assert reg.invoke({"name": "weather", "args": {"city": "Rome", "days": 3}}) == "Rome:3"
    assert reg.invoke({"name": "Flight", "args": {"origin": "X", "seats": 2}}).seats == 2
    assert asyncio.run(reg.ainvoke({"name": "aweather", "args": {"city": "Nice"}})) == "async Nice"
    assert asyncio.run(reg.ainvoke({"name": "weather", "args": {"city": "Bonn"}})) == "Bonn:1"
    with pytest.raises(ValueError, match="do not match its schema"):
        reg.invoke({"name": "weather", "args": {"city": 3}})
    with pytest.raises(ValueError, match="no Python callable"):
        reg.invoke({"name": "ping", "args": {}})
    with pytest.raises(ValueError, match="async"):
        reg.invoke({"name": "aweather", "args": {"city": "x"}})


# -- LangChain, in process -----------------------------------------------------------------------
def test_chat_trierouter_in_process(tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("langchain_core")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformers import AutoModelForCausalLM, AutoTokenizer
    from langchain_core.tools import tool as lc_tool

    from trierouter.router.langchain import ChatTrieRouter
    from trierouter.testing.serve import tiny_tool_model

    @lc_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    path = tiny_tool_model(tmp_path_factory.mktemp("lc-model") / "qwen2")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    llm = ChatTrieRouter(model=model, tokenizer=tok, max_tokens=160, temperature=1.0, seed=0)
    forms = [weather, add, TOOLS[0]]
    reg = ToolRegistry(forms)
    schemas = {t.name: t.parameters for t in reg}
    for choice in ("any", "add", "get_weather"):
        msg = llm.bind_tools(forms, tool_choice=choice).invoke("What is 2 + 3?")
        (call,) = msg.tool_calls
        assert choice == "any" or call["name"] == choice
        v = jsonschema.Draft202012Validator(
            schemas[call["name"]], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
        assert not list(v.iter_errors(call["args"])), call
        if call["name"] != "get_weather":
            reg.invoke(call)
    label = llm.with_structured_output(Literal["spam", "ham"]).invoke("Buy now!")
    assert label in ("spam", "ham")


def test_a_non_streamed_answer_reports_relaxed_tools_on_their_calls() -> None:
    """The middleware's rewrite of a non-streamed answer (vLLM drops the parser's field there):
    each call of a relaxed tool gets ``trierouter.relaxed`` (and ``invalid`` when its original
    schema refuses it, as ``jsonschema`` says); calls of exact tools are left as they were."""
    jsonschema = pytest.importorskip("jsonschema")
    from trierouter.router.vllm.checks import relaxed_response

    sloppy = {
        "type": "object",
        "properties": {"stars": {"type": "integer", "enum": ["1", "2", "dontcare"]}},
    }
    exact = {"type": "object", "properties": {"city": {"type": "string"}}}
    request = {
        "tools": [
            {"type": "function", "function": {"name": "rate", "parameters": sloppy}},
            {"type": "function", "function": {"name": "weather", "parameters": exact}},
        ]
    }

    def answer(*calls: tuple[str, str]) -> bytes:
        tcs = [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
               for i, (n, a) in enumerate(calls)]  # fmt: skip
        return json.dumps({"choices": [{"index": 0, "message": {"tool_calls": tcs}}]}).encode()

    assert relaxed_response(answer(("weather", '{"city": "Oslo"}')), request) is None
    assert relaxed_response(b"not json", request) is None
    both = answer(("weather", '{"city": "Oslo"}'), ("rate", '{"stars": "2"}'))
    out = relaxed_response(both, request)
    assert out is not None
    tcs = json.loads(out)["choices"][0]["message"]["tool_calls"]
    before = json.loads(both)["choices"][0]["message"]["tool_calls"]
    assert [t["function"] for t in tcs] == [t["function"] for t in before]  # calls untouched
    assert "trierouter" not in tcs[0]
    ext = tcs[1]["trierouter"]
    assert [(r["kind"], r["path"]) for r in ext["relaxed"]] == [("type", "stars")]
    errors = list(jsonschema.Draft202012Validator(sloppy).iter_errors({"stars": "2"}))
    assert errors and "stars" in ext["invalid"] and errors[0].message in ext["invalid"]
