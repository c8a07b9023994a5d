"""Tool calls out of a model's native call syntax, whole or as streaming deltas.

A call is a JSON object ``{"name": "...", "<arguments key>": {...}}`` placed as its
:class:`~trierouter.registry.call_formats.CallFormat` says (``<tool_call>\n`` ...
``\n</tool_call>``, bare Llama-3 JSON, ...). Under ``tool_choice="auto"`` the calls start at the
format's trigger or another opener the model writes (a ```` ```json ```` fence, a bare
``{"name"``: :func:`~trierouter.registry.call_formats.auto_formats`), whichever completes first
(text before it is content); under a forced choice the whole output is calls.
The streaming parser re-reads the text it is given (calls are short) and reports only what is
new: content before the trigger (holding back a suffix that could start it), then per call its
name once complete and its arguments text as it grows. Concatenated, the argument deltas are the
exact arguments text of the finished call, as the model wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trierouter.registry.call_formats import (
    AUTO_OPENERS,
    CALL_FORMATS,
    auto_formats,
    call_format,
    first_trigger,
)

__all__ = [
    "CallEnvelope",
    "ParsedCall",
    "StreamDelta",
    "ToolCallStream",
    "call_problem",
    "envelope",
    "native_plan",
    "parse_calls",
    "scan_json_value",
]


@dataclass(frozen=True)
class CallEnvelope:
    """Where the calls of one output start, and the key of a call's arguments."""

    trigger: str | None = "<tool_call>"
    """Text that starts the calls (before it: content); ``None``: the output is calls only. One
    that begins with a newline starts them only at a line's start (an anchored format's
    :attr:`~trierouter.registry.call_formats.CallFormat.watch`)."""
    args_key: str = "arguments"
    name_key: str = "name"
    also: tuple[tuple[str, str], ...] = ()
    """Other ``(trigger, arguments key)`` that start calls (the other syntaxes of ``auto``)."""

    def opening(self, text: str) -> tuple[int, str]:
        """``(where the calls start, their arguments key)``: the trigger that completes first
        in ``text`` (as the decoder finds it), ``(-1, "")`` when none does."""
        if self.trigger is None:
            return 0, self.args_key
        openers = ((self.trigger, self.args_key), *self.also)
        start, _, j = first_trigger(text, [t for t, _ in openers])
        if j < 0:
            return -1, ""
        return start, openers[j][1]

    def pending(self, text: str) -> int:
        """How many characters at the end of ``text`` could start a trigger."""
        trigs = [] if self.trigger is None else [self.trigger, *(t for t, _ in self.also)]
        seen = "\n" + text  # the output starts a line (anchored triggers begin with "\n")
        return min(len(text), max((_partial_overlap(seen, t) for t in trigs), default=0))


def envelope(fmt: str, *, auto: bool, openers: Sequence[str] | None = AUTO_OPENERS) -> CallEnvelope:
    """The envelope of format ``fmt`` (a :data:`~trierouter.registry.call_formats.CALL_FORMATS`
    name) under ``tool_choice="auto"`` (``auto``; with the other syntaxes of ``openers``, as
    :class:`~trierouter.router.toolcalls.ToolCallPlan` decodes them) or a forced choice."""
    f = call_format(fmt)
    if not auto:
        return CallEnvelope(None, f.arguments_key)
    also = tuple(
        (call_format(o).watch, call_format(o).arguments_key)
        for o in auto_formats(f, tuple(openers or ()))
    )
    return CallEnvelope(f.watch, f.arguments_key, also=also)


def native_plan(
    tools: Any,
    *,
    tool_choice: str = "required",
    allowed: Sequence[str] | None = None,
    parallel: bool = False,
    budget: int | None = None,
    think: str | None = None,
    think_max_tokens: int = 256,
    openers: Sequence[str] | None = None,
) -> Any:
    """A :class:`~trierouter.router.toolcalls.ToolCallPlan` over ``tools`` (compiled for the
    model's format) whose ``budget`` steers free strings (2x: schema slots, 6x: the arguments)
    to their end, so a sampled call finishes within a request's ``max_tokens``; ``openers``:
    the other call syntaxes of ``auto`` (``None``: the default ones)."""
    from trierouter.router.toolcalls import ToolCallPlan

    return ToolCallPlan(
        tools,
        tool_choice=tool_choice,
        allowed=allowed,
        think=think is not None,
        think_end=think or "</think>",
        think_max_tokens=think_max_tokens,
        parallel_tool_calls=parallel,
        string_max_tokens=budget,
        slot_max_tokens=None if budget is None else 2 * budget,
        max_tokens=None if budget is None else 6 * budget,
        openers=openers,
    )


FORMAT_NAMES: tuple[str, ...] = tuple(CALL_FORMATS)
"""The call formats the decoder serves."""


@dataclass
class ParsedCall:
    name: str
    arguments: str
    """The arguments object exactly as generated (JSON text)."""
    complete: bool


@dataclass
class StreamDelta:
    content: str = ""
    calls: list[tuple[int, str | None, str]] = field(default_factory=list)
    """(call index, name when first seen else None, arguments fragment)."""


def scan_json_value(text: str, start: int) -> int:
    """End index (exclusive) of the JSON object/array/string starting at ``text[start]``, or -1
    while it is incomplete."""
    depth = 0
    in_str = False
    esc = False
    i = start
    n = len(text)
    if start >= n:
        return -1
    if text[start] == '"':
        i = start + 1
        while i < n:
            c = text[i]
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                return i + 1
            i += 1
        return -1
    while i < n:
        c = text[i]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def _calls_from(text: str, pos: int, env: CallEnvelope, args_key: str) -> list[ParsedCall]:
    """Every (possibly partial) call object in ``text[pos:]``."""
    import re

    calls: list[ParsedCall] = []
    name_re = re.compile(r'\{\s*"' + re.escape(env.name_key) + r'"\s*:\s*')
    args_re = re.compile(r'\s*,\s*"' + re.escape(args_key) + r'"\s*:\s*')
    while True:
        start = text.find("{", pos)
        if start < 0:
            return calls
        m = name_re.match(text, start)
        if m is None:
            return calls
        name_end = scan_json_value(text, m.end())
        if name_end < 0:
            return calls
        try:
            name = json.loads(text[m.end() : name_end])
        except ValueError:
            return calls
        if not isinstance(name, str):
            return calls
        a = args_re.match(text, name_end)
        if a is None:
            calls.append(ParsedCall(name, "", False))
            return calls
        args_end = scan_json_value(text, a.end())
        if args_end < 0:
            calls.append(ParsedCall(name, text[a.end() :], False))
            return calls
        close = args_end + len(text[args_end:]) - len(text[args_end:].lstrip())
        done = close < len(text) and text[close] == "}"
        calls.append(ParsedCall(name, text[a.end() : args_end], done))
        if not done:
            return calls
        pos = close + 1


def parse_calls(text: str, env: CallEnvelope) -> tuple[str, list[ParsedCall]]:
    """(content before the calls, the calls) of a finished output."""
    cut, key = env.opening(text)
    if cut < 0:
        return text, []
    return text[:cut], _calls_from(text, cut, env, key)


def _partial_overlap(text: str, tag: str) -> int:
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ToolCallStream:
    """Streaming deltas for one output (feed the whole text so far each time)."""

    def __init__(self, env: CallEnvelope) -> None:
        self.env = env
        self._content_sent = 0
        self._names_sent = 0
        self._args_sent: list[int] = []

    def feed(self, text: str) -> StreamDelta:
        env = self.env
        out = StreamDelta()
        cut, key = env.opening(text)
        if env.trigger is not None:
            safe = len(text) - env.pending(text) if cut < 0 else cut
            if safe > self._content_sent and self._names_sent == 0:
                out.content = text[self._content_sent : safe]
                self._content_sent = safe
            if cut < 0:
                return out
        calls = _calls_from(text, cut, env, key)
        for i, call in enumerate(calls):
            if i >= self._names_sent:
                out.calls.append((i, call.name, ""))
                self._names_sent = i + 1
                self._args_sent.append(0)
            new = call.arguments[self._args_sent[i] :]
            if new:
                self._args_sent[i] = len(call.arguments)
                if out.calls and out.calls[-1][0] == i:
                    j, nm, frag = out.calls[-1]
                    out.calls[-1] = (j, nm, frag + new)
                else:
                    out.calls.append((i, None, new))
        return out


def call_problem(call: ParsedCall, schemas: Mapping[str, dict[str, Any]]) -> str | None:
    """Why ``call`` is not a valid call of one of ``schemas`` (name -> JSON Schema of the
    arguments), checked with ``jsonschema`` and its format checker; ``None`` when it is."""
    import jsonschema

    if not call.complete:
        return f"the call of {call.name!r} is not finished: {call.arguments[-60:]!r}"
    schema = schemas.get(call.name)
    if schema is None:
        return f"{call.name!r} is not one of the request's tools"
    try:
        args = json.loads(call.arguments)
    except ValueError as exc:
        return f"the arguments of {call.name!r} are not JSON ({exc})"
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    errors = sorted(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(args), key=str)
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
        msg = errors[0].message
        return f"the arguments of {call.name!r} do not match its schema at {where}: {msg}"
    return None
