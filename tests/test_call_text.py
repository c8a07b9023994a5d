"""The one reader of call text, registry/call_text.py: its strict mode (what ToolCallPlan parses)
and its partial mode (what the server's parser and its stream read) find the calls an output was
built from, in every format of the table, with ``json.loads`` as the oracle for the arguments; the
partial mode's view of a growing output only ever extends; the two modes agree
with each other on complete texts and on every prefix of them; the first-completed-trigger rule
against a brute-force search."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.test_serve_units import TEXTS as SERVED
from trierouter.errors import ToolCallError
from trierouter.registry.call_formats import CALL_FORMATS, CallFormat
from trierouter.registry.call_text import (
    envelope,
    first_trigger,
    load_call,
    scan_calls,
    split_calls,
)

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("weather.get", {"city": 'Oslo "}] \\', "days": [1, {"n": 2}]}),
    ("ping", {}),
    ("math.add", {"a": 1, "b": 2}),
]
CONTENT = "Let me look that up: {not a call}.\n"


def _output(fmt: CallFormat, calls: list[tuple[str, dict[str, Any]]], *, auto: bool) -> str:
    """An output in ``fmt`` written from its parts, as the decoder writes it."""
    objs = [json.dumps({"name": n, fmt.arguments_key: a}, ensure_ascii=False) for n, a in calls]
    body = fmt.open + (fmt.separator).join(fmt.prefix + o + fmt.suffix for o in objs) + fmt.close
    if not auto:
        return body
    return CONTENT + ("" if fmt.trigger_in_head else fmt.trigger) + body


@pytest.mark.parametrize("auto", [True, False])
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("name", sorted(CALL_FORMATS))
def test_both_modes_read_the_calls_an_output_was_built_from(name: str, n: int, auto: bool) -> None:
    fmt = CALL_FORMATS[name]
    calls = CALLS[:n]
    text = _output(fmt, calls, auto=auto)
    content, objects = split_calls(fmt, text, auto=auto)
    assert content == (CONTENT if auto else "")
    assert [load_call(o, fmt.arguments_key) for o in objects] == calls
    content, parsed = scan_calls(text, envelope(name, auto=auto))
    assert content == (CONTENT if auto else "")
    assert [(c.name, json.loads(c.arguments), c.complete) for c in parsed] == [
        (n, a, True) for n, a in calls
    ]


@pytest.mark.parametrize("name", sorted(CALL_FORMATS))
def test_partial_mode_only_extends_as_the_output_grows(name: str) -> None:
    fmt = CALL_FORMATS[name]
    text = _output(fmt, CALLS, auto=True)
    env = envelope(name, auto=True)
    final = scan_calls(text, env)[1]
    for end in range(len(text) + 1):
        content, calls = scan_calls(text[:end], env)
        assert content == CONTENT or (content == text[:end] and not calls)
        assert len(calls) <= len(final)
        for got, want in zip(calls, final, strict=False):
            assert got.name == want.name and want.arguments.startswith(got.arguments)
            assert not got.complete or got.arguments == want.arguments
        if calls and calls[-1].complete:
            json.loads(calls[-1].arguments)  # a finished call's arguments are whole JSON


def test_strict_mode_names_what_is_wrong() -> None:
    fmt = CALL_FORMATS["mistral"]
    text = _output(fmt, CALLS[:2], auto=True)
    objects = split_calls(fmt, text[:-1], auto=True)[1]  # the closing "]" cut off
    with pytest.raises(ToolCallError, match="does not end with"):
        load_call(objects[-1], fmt.arguments_key)
    objects = split_calls(fmt, text[:-8], auto=True)[1]  # the last call cut off
    assert len(objects) == 2
    with pytest.raises(ToolCallError, match="tool call is not complete JSON"):
        load_call(objects[-1], fmt.arguments_key)
    with pytest.raises(ToolCallError, match="exactly 'name' and 'arguments'"):
        load_call('{"name": "ping", "arguments": {}, "x": 1}', "arguments")
    with pytest.raises(ToolCallError, match="not a tool call"):
        load_call("ping()", "arguments")
    assert split_calls(CALL_FORMATS["hermes"], "no call here <tool", auto=True) == (
        "no call here <tool",
        [],
    )


def _complete_texts() -> list[tuple[str, str, bool]]:
    """``(format, text, auto)``: every format's outputs above, forced and auto, and the texts the
    server's parser is tested on."""
    built = [
        (name, _output(CALL_FORMATS[name], CALLS[:n], auto=auto), auto)
        for name in sorted(CALL_FORMATS)
        for n in (1, 3)
        for auto in (True, False)
    ]
    return built + [(name, text, True) for name, text in SERVED]


@pytest.mark.parametrize(("name", "text", "auto"), _complete_texts())
def test_strict_and_partial_modes_agree(name: str, text: str, auto: bool) -> None:
    """The one scan's two modes on the same output: the same content and calls on the whole
    text; on each proper prefix the partial mode's finished calls begin the strict result's."""
    fmt = CALL_FORMATS[name]
    env = envelope(name, auto=auto)
    content, objects = split_calls(fmt, text, auto=auto)
    strict = [load_call(o, fmt.arguments_key) for o in objects]
    assert scan_calls(text, env)[0] == content
    parsed = scan_calls(text, env)[1]
    assert all(c.complete for c in parsed)
    assert [(c.name, json.loads(c.arguments)) for c in parsed] == strict
    assert all(c.arguments in o for c, o in zip(parsed, objects, strict=True))
    for end in range(len(text)):
        calls = scan_calls(text[:end], env)[1]
        finished = [(c.name, json.loads(c.arguments)) for c in calls if c.complete]
        assert finished == strict[: len(finished)], text[:end]


def _brute_force(text: str, triggers: list[str]) -> tuple[int, int, int]:
    """The trigger that completes first, by trying every end position in order."""
    seen = "\n" + text  # an output starts a line
    for end in range(1, len(seen) + 1):
        for j, t in enumerate(triggers):
            if seen[:end].endswith(t):
                start = end - len(t) + (1 if t.startswith("\n") else 0)
                return start - 1, end - 1, j
    return -1, -1, -1


def test_first_trigger_matches_a_brute_force_search() -> None:
    watches = [f.watch for f in CALL_FORMATS.values()]
    rng = random.Random(0)
    pieces = [*watches, "x", "\n", " ", "{", '"name"', "```", "<tool", "[", "]"]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        triggers = rng.sample(watches, rng.randint(1, len(watches)))
        assert first_trigger(text, triggers) == _brute_force(text, triggers), (text, triggers)
