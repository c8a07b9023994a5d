"""A tool call in the model's native syntax, as a server needs it besides decoding: the plan
with budgets (:func:`native_plan`), streaming deltas (:class:`ToolCallStream`) and a parsed call
checked against a request's schemas (:func:`call_problem`).

The call text is read by :mod:`trierouter.registry.call_text` (partial mode: every call so far,
the last one possibly unfinished). The streaming parser re-reads the text it is given (calls are
short) and reports only what is new: content before the trigger (holding back a suffix that could
start it), then per call its name once complete and its arguments text as it grows.
Concatenated, the argument deltas are the exact arguments text of the finished call, as the model
wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trierouter.registry.call_formats import CALL_FORMATS
from trierouter.registry.call_text import CallEnvelope, ParsedCall

__all__ = [
    "FORMAT_NAMES",
    "StreamDelta",
    "ToolCallStream",
    "call_problem",
    "native_plan",
]


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
    """A :class:`~trierouter.router.tool_calls.plan.ToolCallPlan` over ``tools`` (compiled for the
    model's format) whose ``budget`` steers free strings (2x: schema slots, 6x: the arguments)
    to their end, so a sampled call finishes within a request's ``max_tokens``; ``openers``:
    the other call syntaxes of ``auto`` (``None``: the default ones)."""
    from trierouter.router.tool_calls.plan import ToolCallPlan

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
class StreamDelta:
    content: str = ""
    calls: list[tuple[int, str | None, str]] = field(default_factory=list)
    """(call index, name when first seen else None, arguments fragment)."""


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
        cut, calls = env.calls(text)
        if env.trigger is not None:
            safe = len(text) - env.pending(text) if cut < 0 else cut
            if safe > self._content_sent and self._names_sent == 0:
                out.content = text[self._content_sent : safe]
                self._content_sent = safe
            if cut < 0:
                return out
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
