"""Fuzzed chat-completion request bodies for a live ``trierouter serve`` (hypothesis).

Shared by ``tests/test_serve.py`` (a few dozen bodies against the module's server) and
``benchmarks/serve_fuzz.py`` (minutes of them, ``benchmarks/results/serve_fuzz.json``). A body
is a plausible request (messages, tools whose schemas combine every JSON Schema keyword the
compiler reads, with contradictions, dangling and recursive ``$ref``, odd names, every
``tool_choice`` form, sampling fields at and past their limits, ``trierouter_*`` extra args) in
which, half of the time, one field is then replaced by arbitrary JSON. What the server may
answer: any 2xx or 4xx; never a 5xx, never a dropped connection, and afterwards a good request
is still answered with a valid call (:func:`send`, :func:`server_fault`,
:func:`good_request_ok`).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

__all__ = ["bodies", "good_request_ok", "send", "server_fault"]

_TYPES = ["string", "integer", "number", "boolean", "object", "array", "null"]
_FORMATS = ["date", "date-time", "time", "email", "uuid", "uri", "ipv4", "ipv6", "hostname", "x"]
_PATTERNS = ["^[A-Z]{3}$", "^a+$", "[", "(?i)x", "^\\d{2,4}-\\w$", "", "^(a|b)*c?$"]

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
"""Arbitrary JSON."""


def _leaf_schema() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.sampled_from(_TYPES) | st.lists(st.sampled_from(_TYPES), max_size=3)},
            optional={
                "minLength": st.integers(-1, 40),
                "maxLength": st.integers(-1, 40),
                "minimum": st.integers(-100, 100) | st.floats(-1e3, 1e3),
                "maximum": st.integers(-100, 100),
                "exclusiveMinimum": st.integers(-5, 5),
                "multipleOf": st.sampled_from([0, 1, 2, 0.5, -1]),
                "pattern": st.sampled_from(_PATTERNS),
                "format": st.sampled_from(_FORMATS),
                "default": json_values,
                "description": st.text(max_size=20),
            },
        ),
        st.fixed_dictionaries(
            {"enum": st.lists(json_values, max_size=6)},
            optional={"type": st.sampled_from(_TYPES)},
        ),
        st.fixed_dictionaries({"const": json_values}),
        st.sampled_from([{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/missing"}, {"$ref": "#"}, {}]),
    )


def _extend(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    props = st.dictionaries(st.text(min_size=0, max_size=10), inner, max_size=4)
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object"), "properties": props},
            optional={
                "required": st.lists(st.text(max_size=10), max_size=3),
                "additionalProperties": st.booleans() | inner,
                "$defs": st.fixed_dictionaries({"a": inner}),
                "minProperties": st.integers(0, 3),
                "maxProperties": st.integers(0, 3),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("array"), "items": inner},
            optional={
                "minItems": st.integers(-1, 5),
                "maxItems": st.integers(-1, 5),
                "uniqueItems": st.booleans(),
                "prefixItems": st.lists(inner, max_size=2),
            },
        ),
        st.builds(
            lambda k, v: {k: v},
            st.sampled_from(["anyOf", "oneOf", "allOf"]),
            st.lists(inner, max_size=3),
        ),
        st.builds(lambda s: {"not": s}, inner),
    )


schemas: st.SearchStrategy[dict[str, Any]] = st.recursive(_leaf_schema(), _extend, max_leaves=8)
"""JSON Schemas of argument objects and their parts (valid, contradictory, or nonsense)."""

_names = st.one_of(
    st.from_regex(r"[a-z][a-z0-9_.]{0,20}", fullmatch=True),
    st.text(max_size=30),
    st.sampled_from(["get_weather", "", " ", "a" * 300, "名前", "x\ny", "<tool_call>", '{"name"']),
)


def _tool() -> st.SearchStrategy[Any]:
    params = st.one_of(schemas, st.just({"type": "object"}), json_values)
    function = st.fixed_dictionaries(
        {"name": _names},
        optional={"description": st.text(max_size=40), "parameters": params,
                  "strict": st.booleans() | json_values},
    )  # fmt: skip
    return st.fixed_dictionaries(
        {"type": st.sampled_from(["function", "other"]), "function": function}
    )


def _tool_choice(names: list[str]) -> st.SearchStrategy[Any]:
    named = st.sampled_from(names or ["nothing"]).map(
        lambda n: {"type": "function", "function": {"name": n}}
    )
    return st.one_of(st.sampled_from(["auto", "required", "none", "other"]), named, json_values)


def _messages() -> st.SearchStrategy[Any]:
    text = st.text(max_size=60)
    user = st.fixed_dictionaries({"role": st.just("user"), "content": text})
    call = st.fixed_dictionaries(
        {"id": st.text(max_size=8), "type": st.just("function"),
         "function": st.fixed_dictionaries({"name": _names, "arguments": st.text(max_size=30)})},
    )  # fmt: skip
    assistant = st.fixed_dictionaries(
        {"role": st.just("assistant")},
        optional={"content": st.none() | text, "tool_calls": st.lists(call, max_size=2)},
    )
    tool = st.fixed_dictionaries(
        {"role": st.just("tool"), "content": text}, optional={"tool_call_id": st.text(max_size=8)}
    )
    return st.lists(st.one_of(user, assistant, tool), min_size=1, max_size=4).map(
        lambda ms: [{"role": "user", "content": "What is the weather in Oslo?"}, *ms]
    )


def _xargs() -> st.SearchStrategy[Any]:
    keys = st.sampled_from(
        ["trierouter_tools", "trierouter_tool_search", "trierouter_constrain", "trierouter_choices",
         "trierouter_set", "trierouter_auto_openers", "trierouter_allowed", "other"]
    )  # fmt: skip
    return st.dictionaries(keys, json_values | st.sampled_from(["api", "registry", "missing"]))


@st.composite
def _body(draw: Any) -> dict[str, Any]:
    tools = draw(st.lists(_tool(), max_size=5))
    names = [str(t["function"].get("name")) for t in tools]
    body: dict[str, Any] = {"model": "tiny", "messages": draw(_messages())}
    if tools or draw(st.booleans()):
        body["tools"] = tools
    optional: dict[str, st.SearchStrategy[Any]] = {
        "tool_choice": _tool_choice(names),
        "parallel_tool_calls": st.booleans(),
        "max_tokens": st.integers(-2, 40),
        "temperature": st.sampled_from([0.0, 1.0, 2.0, -1.0, 3.5]),
        "stream": st.booleans(),
        "n": st.integers(0, 2),
        "logprobs": st.booleans(),
        "response_format": st.sampled_from(
            [{"type": "json_object"}, {"type": "text"}, {"type": 5}]
        ),
        "vllm_xargs": _xargs(),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            body[key] = draw(strategy)
    body.setdefault("max_tokens", 24)
    if draw(st.booleans()):  # one field, top-level or inside a tool, replaced by arbitrary JSON
        where = draw(st.sampled_from([*body, "tools.0.function", "tools.0.function.parameters"]))
        value = draw(json_values)
        if where.startswith("tools.0") and body.get("tools"):
            fn = body["tools"][0]["function"]
            if where.endswith("parameters"):
                fn["parameters"] = value
            else:
                body["tools"][0]["function"] = value
        elif where in body:
            body[where] = value
    return body


def bodies() -> st.SearchStrategy[dict[str, Any]]:
    """Request bodies (module docstring)."""
    return _body()


def send(url: str, body: Any, key: str, timeout: float = 300.0) -> tuple[int, str]:
    """``(HTTP status, the answer)`` of ``body`` posted to ``url``'s chat completions with API
    key ``key`` (a streamed answer read to its end); status 0 when the connection failed."""
    import httpx

    data = json.dumps(body).encode()  # lone surrogates as JSON escapes
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", content=data, headers=headers,
                          timeout=timeout) as r:  # fmt: skip
            return r.status_code, b"".join(r.iter_bytes()).decode(errors="replace")
    except httpx.HTTPError as exc:
        return 0, f"{type(exc).__name__}: {exc}"


def server_fault(status: int, text: str) -> str | None:
    """What in an answer is the server's fault: a 5xx, a dropped connection, or an error event
    with a 5xx code inside a streamed 200; ``None`` for any other answer."""
    if status == 0:
        return f"connection: {text[:200]}"
    if status >= 500:
        return f"HTTP {status}: {text[:200]}"
    if status == 200 and text.startswith("data:"):
        for line in text.splitlines():
            if line.startswith("data: {") and '"error"' in line and '"code": 5' in line:
                return f"streamed error: {line[:200]}"
    return None


GOOD_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"],
        },
    },
}


def good_request_ok(url: str, key: str) -> str | None:
    """``None`` when a good ``required`` request is answered with a call that ``jsonschema``
    validates against its tool; else what went wrong (the engine died, a 5xx, ...)."""
    import jsonschema

    body = {
        "model": "tiny", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [GOOD_TOOL], "tool_choice": "required", "max_tokens": 48, "temperature": 0.0,
    }  # fmt: skip
    status, text = send(url, body, key)
    if status != 200:
        return f"good request: HTTP {status}: {text[:200]}"
    try:
        (call,) = json.loads(text)["choices"][0]["message"]["tool_calls"]
        args = json.loads(call["function"]["arguments"])
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        return f"good request: no single call ({exc}): {text[:200]}"
    schema = GOOD_TOOL["function"]["parameters"]  # type: ignore[index]
    cls = jsonschema.Draft202012Validator
    errors = list(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(args))
    return f"good request: invalid call {args}: {errors[0].message}" if errors else None
