"""Tool calls out of a model's native call syntax, whole or as streaming deltas.

A call is a JSON object ``{"name": "...", "<args key>": {...}}`` inside the format's envelope
(``<tool_call>\\n`` ... ``\\n</tool_call>``, ``[TOOL_CALLS][`` ... ``]``, bare JSON, ...). The
streaming parser re-reads the text it has been given (calls are short) and reports only what is
new: content before the first call (holding back a suffix that could start the opener), then per
call its name once complete and its arguments text as it grows. Concatenated, the argument deltas
are the exact arguments text of the finished call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ENVELOPES",
    "NATIVE_FORMATS",
    "CallEnvelope",
    "ParsedCall",
    "StreamDelta",
    "ToolCallStream",
    "call_problem",
    "call_tail",
    "native_plan",
    "parse_calls",
    "scan_json_value",
]


@dataclass(frozen=True)
class CallEnvelope:
    """How calls sit in the text: what opens the calls, what closes each, the arguments key."""

    opener: str = "<tool_call>"
    """Starts the call section (``""``: the text itself starts with the first call's ``{``)."""
    args_key: str = "arguments"
    name_key: str = "name"


ENVELOPES: Mapping[str, CallEnvelope] = {
    "hermes": CallEnvelope("<tool_call>", "arguments"),
    "llama3": CallEnvelope("", "parameters"),
    "mistral": CallEnvelope("[TOOL_CALLS]", "arguments"),
}
"""Where calls sit in each native syntax (see :mod:`trierouter.router.formats`)."""

NATIVE_FORMATS: Mapping[str, tuple[str, str]] = {
    "json": ("", ""),
    "hermes": ("<tool_call>\n", "\n</tool_call>"),
}
"""(opener, closer) around one ``{"name": ..., "arguments": {...}}`` call, per syntax that the
decoder serves (interim table until :mod:`trierouter.router.formats` lands)."""


def call_tail(fmt: str) -> str:
    """What follows a call's arguments object in ``fmt``: the ``}`` and the closer."""
    return "}" + NATIVE_FORMATS[fmt][1]


def native_plan(
    tools: Any,
    *,
    fmt: str,
    tool_choice: str = "required",
    allowed: Sequence[str] | None = None,
    budget: int | None = None,
    think: str | None = None,
    think_max_tokens: int = 256,
) -> Any:
    """A :class:`~trierouter.router.toolcalls.ToolCallPlan` for one call in syntax ``fmt``
    (``tools`` compiled with ``tail=call_tail(fmt)``): forced choices start with the opener as
    forced text, ``"auto"`` lets the opener start a call, ``"none"`` never lets it appear.
    ``budget`` steers free strings (and 2x: schema slots, 6x: the arguments) to their end."""
    from trierouter.router.toolcalls import ToolCallPlan

    opener, closer = NATIVE_FORMATS[fmt]
    forced = tool_choice not in ("auto", "none")
    if forced and opener and think is None:  # the opener, as a forced literal
        think_end, think_max = opener, 0
    else:
        think_end, think_max = think or "</think>", think_max_tokens
    return ToolCallPlan(
        tools,
        tool_choice=tool_choice,
        allowed=allowed,
        think=think is not None or (forced and bool(opener)),
        think_end=think_end,
        think_max_tokens=think_max,
        call_prefix=opener or "<tool_call>",
        call_suffix=closer,
        string_max_tokens=budget,
        slot_max_tokens=None if budget is None else 2 * budget,
        max_tokens=None if budget is None else 6 * budget,
    )


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


def _calls_from(text: str, pos: int, env: CallEnvelope) -> list[ParsedCall]:
    """Every (possibly partial) call object in ``text[pos:]``."""
    calls: list[ParsedCall] = []
    name_re = re.compile(r'\{\s*"' + re.escape(env.name_key) + r'"\s*:\s*')
    args_re = re.compile(r'\s*,\s*"' + re.escape(env.args_key) + r'"\s*:\s*')
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
    if env.opener:
        cut = text.find(env.opener)
        if cut < 0:
            return text, []
        return text[:cut], _calls_from(text, cut + len(env.opener), env)
    stripped = text.lstrip()
    if not stripped.startswith("{"):
        return text, []
    return "", _calls_from(text, len(text) - len(stripped), env)


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
        if env.opener:
            cut = text.find(env.opener)
            safe = len(text) - _partial_overlap(text, env.opener) if cut < 0 else cut
        else:
            stripped = text.lstrip()
            if not stripped:
                safe = 0
                cut = -1
            elif stripped.startswith("{"):
                cut = safe = 0
            else:
                cut, safe = -1, len(text)
        if safe > self._content_sent and (cut < 0 or self._names_sent == 0):
            out.content = text[self._content_sent : safe]
            self._content_sent = safe
        if cut < 0:
            return out
        calls = _calls_from(text, cut + len(env.opener), env)
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
