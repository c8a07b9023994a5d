"""Model-native call formats: the model's own tokenization of its native call text is accepted
step by step, random walks give text that an independent parser of the format (a regex like
vLLM's hermes parser, ``json.loads``) reads as calls valid against their schemas, parallel calls
and ``auto`` included."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from trierouter import CompileError
from trierouter.registry.call_formats import CALL_FORMATS
from trierouter.registry.compiler import CompiledTools, compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.tool_calls.plan import ToolCallPlan

jsonschema = pytest.importorskip("jsonschema")

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "weather.get", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "math.add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
        "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "ping", "parameters": {}}},
]  # fmt: skip
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] or {} for t in TOOLS}


@pytest.fixture(scope="module")
def compiled(qwen2_index: TokenIndex) -> dict[str, CompiledTools]:
    return {name: compile_tools(TOOLS, qwen2_index, format=name) for name in CALL_FORMATS}


def _native(fmt: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """The call text as the model's chat template describes it (written independently of the
    CallFormat table)."""
    if fmt == "hermes":
        return "\n".join(
            "<tool_call>\n" + json.dumps({"name": n, "arguments": a}) + "\n</tool_call>"
            for n, a in calls
        )
    if fmt == "json_fence":
        return "\n".join(
            "```json\n" + json.dumps({"name": n, "arguments": a}) + "\n```" for n, a in calls
        )
    if fmt == "json_object_braced":  # the object in doubled braces, as in an escaped template
        return "\n".join("{" + json.dumps({"name": n, "arguments": a}) + "}" for n, a in calls)
    if fmt == "llama3_json":
        return "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in calls)
    if fmt == "mistral":  # mistral-common's v3+ tool-call encoding: the marker, then json.dumps
        return "[TOOL_CALLS]" + json.dumps([{"name": n, "arguments": a} for n, a in calls])
    if fmt == "json_array":  # vLLM's tool_choice="required" schema: an array of calls
        return json.dumps([{"name": n, "parameters": a} for n, a in calls])
    if fmt == "json_array_lines":  # the same array, one call per indented line
        body = ",\n    ".join(json.dumps({"name": n, "parameters": a}) for n, a in calls)
        return "[\n    " + body + "\n]"
    return "\n".join(json.dumps({"name": n, "arguments": a}) for n, a in calls)


def _accepts(plan: ToolCallPlan, tokens: list[int], vocab: Vocabulary) -> bool:
    st: Any = plan.start()
    for t in tokens:
        if t not in plan.allowed_token_ids(st).tolist():
            return False
        st = plan.advance(st, t)
        if st[0] == plan.DEAD:
            return False
    if vocab.end_ids[0] not in plan.allowed_token_ids(st).tolist():
        return False
    return plan.advance(st, vocab.end_ids[0])[0] == plan.TERMINATED


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("weather.get", {"city": "Oslo", "unit": "c"}),
    ("math.add", {"a": 2, "b": 40}),
]


@pytest.mark.parametrize("fmt", sorted(CALL_FORMATS))
def test_the_models_own_tokenization_is_accepted(
    compiled: dict[str, CompiledTools], qwen2: Vocabulary, qwen_encode: Any, fmt: str
) -> None:
    tools = compiled[fmt]
    one = qwen_encode(_native(fmt, CALLS[:1]))
    two = qwen_encode(_native(fmt, CALLS))
    required = ToolCallPlan(tools, tool_choice="required")
    assert _accepts(required, one, qwen2)
    assert not _accepts(required, two, qwen2)  # one call unless parallel calls are allowed
    parallel = ToolCallPlan(tools, tool_choice="required", parallel_tool_calls=True)
    if not CALL_FORMATS[fmt].held(hold=True) and not CALL_FORMATS[fmt].close:
        # no suffix held back: a token joining the last "}" and the separator ("}}\n", "}\n")
        # is not allowed, so the model's text is tokenized with the call's end as a boundary
        first = _native(fmt, CALLS[:1])
        two = qwen_encode(first) + qwen_encode(_native(fmt, CALLS)[len(first) :])
    assert _accepts(parallel, one, qwen2) and _accepts(parallel, two, qwen2)
    out = parallel.parse_calls(qwen2.decode(two).decode())
    assert [(c.name, c.args) for c in out.calls] == CALLS
    named = ToolCallPlan(tools, tool_choice="math.add")
    assert not _accepts(named, one, qwen2)
    # auto: text, or the trigger and calls
    auto = ToolCallPlan(tools, tool_choice="auto", parallel_tool_calls=True)
    if fmt != "llama3_json":  # a Llama 3 JSON call is the whole answer, not text then a call
        anchored = CALL_FORMATS[fmt].anchored
        lead = "Let me check.\n" if anchored else "Let me check. "  # a line start
        text = lead + _native(fmt, CALLS)
        tokens = qwen_encode(text)
        if fmt == "json":  # the bare format marks a call in free text with <tool_call>
            text = "Let me check. <tool_call>" + _native(fmt, CALLS)
            tokens = qwen_encode("Let me check. <tool_call>") + two
        elif anchored:  # tokenized with the first call's end as a boundary
            tokens = qwen_encode(lead) + two
        assert _accepts(auto, tokens, qwen2)
        out = auto.parse_calls(text)
        assert out.content == (lead if fmt != "json" else "Let me check. ")
        assert [c.name for c in out.calls] == ["weather.get", "math.add"]
    assert _accepts(auto, qwen_encode("It is sunny in Oslo."), qwen2)
    assert auto.parse_calls("It is sunny in Oslo.").calls == []


def _independent_parse(fmt: str, text: str) -> list[tuple[str, dict[str, Any]]]:
    if fmt == "hermes":  # as vLLM's hermes parser: tags, then json.loads
        bodies = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)
        assert "\n".join(f"<tool_call>\n{b}\n</tool_call>" for b in bodies) == text
        objs = [json.loads(b) for b in bodies]
        return [(o["name"], o["arguments"]) for o in objs]
    if fmt == "json_fence":  # as a Markdown reader: ```json fences, then json.loads
        bodies = re.findall(r"```json\n(.*?)\n```", text, re.S)
        assert "\n".join(f"```json\n{b}\n```" for b in bodies) == text
        objs = [json.loads(b) for b in bodies]
        return [(o["name"], o["arguments"]) for o in objs]
    if fmt == "json_object_braced":  # one object per line, each in one more pair of braces
        lines = text.split("\n")  # json.dumps escapes newlines inside strings
        assert all(b.startswith("{{") and b.endswith("}}") for b in lines)
        objs = [json.loads(b[1:-1]) for b in lines]
        return [(o["name"], o["arguments"]) for o in objs]
    if fmt in ("mistral", "json_array", "json_array_lines"):  # as vLLM's Mistral parser
        marker = "[TOOL_CALLS]" if fmt == "mistral" else ""
        assert text.startswith(marker)
        objs = json.loads(text[len(marker) :])
        assert isinstance(objs, list) and objs
        key = "arguments" if fmt == "mistral" else "parameters"
        assert all(set(o) == {"name", key} for o in objs)
        return [(o["name"], o[key]) for o in objs]
    sep = "; " if fmt == "llama3_json" else "\n"
    key = "parameters" if fmt == "llama3_json" else "arguments"
    objs = json.loads("[" + text.replace("}" + sep + '{"name"', '}, {"name"') + "]")
    return [(o["name"], o[key]) for o in objs]


@pytest.mark.parametrize("fmt", sorted(CALL_FORMATS))
def test_random_walks_are_native_and_valid(
    compiled: dict[str, CompiledTools], qwen2: Vocabulary, fmt: str
) -> None:
    plan = ToolCallPlan(compiled[fmt], tool_choice="required", parallel_tool_calls=True)
    rng = random.Random(5)
    lengths = []
    for _ in range(25):
        st: Any = plan.start()
        toks: list[int] = []
        for _ in range(300):
            ids = plan.allowed_token_ids(st).tolist()
            ends = [i for i in ids if i in qwen2.end_ids]
            t = ends[0] if ends and rng.random() < 0.3 else rng.choice(ids)
            toks.append(t)
            st = plan.advance(st, t)
            assert st[0] != plan.DEAD
            if st[0] == plan.TERMINATED:
                break
        if st[0] != plan.TERMINATED:
            continue
        text = qwen2.decode(toks[:-1]).decode("utf-8")
        calls = _independent_parse(fmt, text)
        assert [(c.name, c.args) for c in plan.parse_calls(text).calls] == calls
        for name, args in calls:
            jsonschema.validate(args, SCHEMAS[name])
        lengths.append(len(calls))
    assert len(lengths) >= 15 and max(lengths) >= 2


def test_unknown_format_is_refused(qwen2_index: TokenIndex) -> None:
    with pytest.raises(CompileError, match=r"unknown tool-call format.*hermes"):
        compile_tools(TOOLS, qwen2_index, format="harmony?")


class _Tok:
    """A tokenizer as the detectors see one: a chat template and a vocabulary view."""

    def __init__(self, template: Any, vocab: dict[str, int] | None) -> None:
        self.chat_template = template
        self._vocab = vocab

    def get_vocab(self) -> dict[str, int]:
        if self._vocab is None:
            raise NotImplementedError("no vocabulary view")
        return self._vocab


@pytest.mark.parametrize(
    ("template", "vocab", "expected"),
    [
        ("{% for t in tools %}<tool_call>{{ t }}</tool_call>{% endfor %}", {}, "hermes"),
        ("{{ '<|python_tag|>' }}{{ messages }}", {}, "llama3_json"),
        ({"default": "plain", "tool_use": "[TOOL_CALLS] {{ tools }}"}, {}, "mistral"),
        (None, {"hello": 0, "[TOOL_CALLS]": 5}, "mistral"),
        ("plain {{ messages }}", {"<tool_call>": 7}, "hermes"),
        ("plain {{ messages }}", {"hello": 0}, None),
        (None, None, None),
    ],
)
def test_one_detector_tells_a_models_call_format(
    template: Any, vocab: dict[str, int] | None, expected: str | None, monkeypatch: Any
) -> None:
    """The vLLM tool parser and the LangChain adapter both ask registry.call_formats: same
    answer, the template before the vocabulary, a clear error naming the fix when neither tells."""
    from trierouter.registry.call_formats import model_call_format
    from trierouter.router.langchain import ChatTrieRouter
    from trierouter.router.vllm.tool_parser import detect_format

    monkeypatch.delenv("TRIEROUTER_TOOL_FORMAT", raising=False)
    tok = _Tok(template, vocab)
    assert model_call_format(tok) == expected
    chat = ChatTrieRouter(tokenizer=tok)
    if expected is None:
        with pytest.raises(ValueError, match="TRIEROUTER_TOOL_FORMAT"):
            detect_format(tok)
        with pytest.raises(ValueError, match="tool_format="):
            chat._format()
    else:
        assert detect_format(tok) == expected
        assert chat._format() == expected
    monkeypatch.setenv("TRIEROUTER_TOOL_FORMAT", "llama3_json")
    assert detect_format(tok) == "llama3_json"
