"""The one reader of tool-call text: where a model's calls start, their JSON objects, and the name
and arguments each one holds.

A call is a JSON object ``{"name": "...", "<arguments key>": {...}}`` placed as its
:class:`~trierouter.registry.call_formats.CallFormat` says (``<tool_call>\\n`` ...
``\\n</tool_call>``, bare Llama-3 JSON, Mistral's ``[TOOL_CALLS][...]``, ...). Under
``tool_choice="auto"`` the calls start at the format's trigger or another opener the model writes
(a ```` ```json ```` fence, a bare ``{"name"`` or ``{{"name"`` at a line's start:
:func:`auto_formats`), whichever completes first
(:func:`first_trigger`, the rule the decoder follows too); text before it is content. Under a
forced choice the whole output is calls.

Two modes of one scan (:func:`_scan`: find where the next call object starts, read it, go on
after it), over that one rule:

- **strict** (:func:`split_calls`, :func:`load_call`): the format's wrapper, separators and
  closing text exactly, each object read by the JSON decoder, a call object with exactly its two
  keys; what :class:`~trierouter.router.tool_calls.plan.ToolCallPlan` parses and validates.
- **partial** (:class:`CallEnvelope`, :func:`scan_calls`, :func:`scan_json_value`): every call
  object after the opener, the last one possibly unfinished, its arguments text exactly as the
  model wrote it; what a server's parser and its streaming deltas read while the text grows.

No other module scans call text (``tests/test_layout.py`` checks it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, AnyStr, Protocol

from trierouter.errors import ToolCallError
from trierouter.registry.call_formats import AUTO_OPENERS, CALL_HEAD, CallFormat, call_format

__all__ = [
    "CallEnvelope",
    "ParsedCall",
    "auto_formats",
    "envelope",
    "first_trigger",
    "load_arguments",
    "load_call",
    "scan_calls",
    "scan_json_value",
    "split_calls",
]


# -- where the calls start -----------------------------------------------------------------------
def first_trigger(
    text: AnyStr, triggers: Sequence[AnyStr], *, line_start: bool = True
) -> tuple[int, int, int]:
    """``(start, end, j)``: where in ``text`` the trigger that completes first starts and ends,
    and its index in ``triggers``; ``(-1, -1, -1)`` when none occurs. The rule by which the
    decoder starts a call under ``auto`` and the parsers cut the output where it started.

    A trigger that begins with a newline (:attr:`CallFormat.watch` of an anchored format)
    matches at a line's start; ``line_start``: ``text`` starts a line (it is a whole output),
    so such a trigger matches at its very start too, and ``start`` is where the text after
    that newline begins."""
    nl = "\n" if isinstance(text, str) else b"\n"
    lead = nl if line_start else nl[:0]
    seen = lead + text
    best, first, which = -1, -1, -1
    for j, t in enumerate(triggers):
        pos = seen.find(t)
        if pos < 0:
            continue
        end = pos + len(t) - len(lead)
        if best < 0 or end < best:
            best, which = end, j
            first = end - len(t) + (1 if t.startswith(nl) else 0)
    return first, best, which


def _matches_inside(outer: CallFormat, inner: CallFormat) -> bool:
    """``inner``'s trigger can match inside text that matches ``outer``'s: it occurs in it at a
    place where it may match (anywhere, or when :attr:`~CallFormat.anchored` at the start, which
    may be a line's start, or after a newline)."""
    t, pos = outer.trigger, outer.trigger.find(inner.trigger)
    while pos >= 0:
        if not inner.anchored or pos == 0 or t[pos - 1] == "\n":
            return True
        pos = t.find(inner.trigger, pos + 1)
    return False


def auto_formats(fmt: str | CallFormat, openers: tuple[str, ...] = AUTO_OPENERS) -> tuple[str, ...]:
    """The formats of ``openers`` that start calls under ``auto`` beside ``fmt``: those whose
    trigger neither holds nor is held in ``fmt``'s or an earlier one's where it may match (Llama
    3's bare ``{"name": "`` already starts where ``json_object``'s ``{"name"`` at a line start
    would; ``{"name"`` inside ``{{"name"`` is not at a line start, so both are kept and the
    doubled brace opens its own syntax)."""
    seen = [call_format(fmt)]
    out: list[str] = []
    for name in openers:
        f = call_format(name)
        if any(_matches_inside(f, s) or _matches_inside(s, f) for s in seen):
            continue
        seen.append(f)
        out.append(name)
    return tuple(out)


def _partial_overlap(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` are a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


_WS = re.compile(r"\s*")


def _skip_ws(text: str, pos: int) -> int:
    m = _WS.match(text, pos)
    return m.end() if m else pos


# -- the one scan: strict and partial modes --------------------------------------------------------
_STOP, _CLOSED = -1, -2
"""What :meth:`_Mode.seek` answers when no further call starts: the text is done (or not in the
format), or (strict) the turn's closing text follows."""


@dataclass(frozen=True)
class _Call:
    """One call object :func:`_scan` read."""

    start: int
    end: int
    """``text[start:end]``: strict, the call object's text (unfinished: the rest of the text);
    partial, its arguments' text (unfinished: what there is)."""
    complete: bool
    next: int
    """Where the scan goes on (:data:`_STOP`: it stops after this call)."""
    name: str = ""
    """The tool's name (partial mode)."""


class _Mode(Protocol):
    def seek(self, text: str, pos: int, *, after_call: bool) -> int:
        """Where the next call object starts at or after ``pos`` (``after_call``: a call was read
        before), or :data:`_STOP` / :data:`_CLOSED`."""

    def read(self, text: str, start: int) -> _Call | None:
        """The call object starting at ``text[start]``; ``None``: not a call object."""


def _scan(text: str, pos: int, mode: _Mode) -> tuple[list[_Call], bool]:
    """``(the call objects from pos on, whether a closing text ended them)``: the one loop of
    both modes; it stops at the first call that is unfinished or not followed as ``mode`` says."""
    calls: list[_Call] = []
    while True:
        start = mode.seek(text, pos, after_call=bool(calls))
        if start < 0:
            return calls, start == _CLOSED
        call = mode.read(text, start)
        if call is None:
            return calls, False
        calls.append(call)
        if call.next < 0:
            return calls, False
        pos = call.next


class _Strict:
    """The format exactly: its opening, each call's prefix, one JSON object (the JSON decoder's)
    and its suffix, separators between calls, its closing; whitespace around each is tolerated."""

    def __init__(self, fmt: CallFormat) -> None:
        self.opening, self.closing = fmt.open.strip(), fmt.close.strip()
        self.prefix, self.suffix = fmt.prefix.strip(), fmt.suffix.strip()
        self.separator = fmt.separator.strip()
        self.decoder = json.JSONDecoder()

    def seek(self, text: str, pos: int, *, after_call: bool) -> int:
        if not after_call and self.opening:
            pos = _skip_ws(text, pos)
            if not text.startswith(self.opening, pos):
                return _STOP
            pos += len(self.opening)
        pos = _skip_ws(text, pos)
        if after_call:
            if self.closing and text.startswith(self.closing, pos):
                return _CLOSED
            if self.separator and text.startswith(self.separator, pos):
                pos = _skip_ws(text, pos + len(self.separator))
        if pos >= len(text):
            return _STOP
        if self.prefix:
            if not text.startswith(self.prefix, pos):
                return _STOP
            pos = _skip_ws(text, pos + len(self.prefix))
        return pos

    def read(self, text: str, start: int) -> _Call:
        try:
            _, end = self.decoder.raw_decode(text, start)
        except json.JSONDecodeError:  # the rest of the text: load_call names what is wrong
            return _Call(start, len(text), False, _STOP)
        pos = end
        if self.suffix:
            pos = _skip_ws(text, pos)
            if text.startswith(self.suffix, pos):
                pos += len(self.suffix)
            elif pos < len(text):
                return _Call(start, end, True, _STOP)
        return _Call(start, end, True, pos)


class _Partial:
    """Every call object ``{"<name key>": "...", "<arguments key>": ...}`` after ``pos``, whatever
    lies between them; the last one possibly unfinished. ``prefix``: text that may come right
    before each object (the ``{`` of a doubled-brace call, which a search for ``{`` finds
    first)."""

    def __init__(self, name_key: str, args_key: str, prefix: str = "") -> None:
        lead = re.escape(prefix.strip())
        opt = f"(?:{lead}\\s*)?" if lead else ""
        self.name_re = re.compile(opt + r'\{\s*"' + re.escape(name_key) + r'"\s*:\s*')
        self.args_re = re.compile(r'\s*,\s*"' + re.escape(args_key) + r'"\s*:\s*')

    def seek(self, text: str, pos: int, *, after_call: bool) -> int:
        return text.find("{", pos)

    def read(self, text: str, start: int) -> _Call | None:
        m = self.name_re.match(text, start)
        name_end = -1 if m is None else scan_json_value(text, m.end())
        if m is None or name_end < 0:
            return None
        try:
            name = json.loads(text[m.end() : name_end])
        except ValueError:
            return None
        if not isinstance(name, str):
            return None
        a = self.args_re.match(text, name_end)
        if a is None:
            return _Call(name_end, name_end, False, _STOP, name)
        args_end = scan_json_value(text, a.end())
        if args_end < 0:
            return _Call(a.end(), len(text), False, _STOP, name)
        close = _skip_ws(text, args_end)
        if close < len(text) and text[close] == "}":
            return _Call(a.end(), args_end, True, close + 1, name)
        return _Call(a.end(), args_end, False, _STOP, name)


# -- strict: the format exactly ------------------------------------------------------------------
def split_calls(fmt: CallFormat, text: str, *, auto: bool) -> tuple[str, list[str]]:
    """``(content, [call object text, ...])`` of an output in format ``fmt``.

    Strict, as a server-side parser for the format is: under ``auto`` the calls start at the
    format's trigger (:attr:`~CallFormat.watch`; before it: content); each call is its prefix,
    one JSON object and its suffix, calls separated by the separator (whitespace around it is
    tolerated), all of them after the opening and before the closing text where the format has
    them (a turn left open comes back as a last entry naming the problem). Text that is not in
    the format is content with no calls. An object the JSON decoder refuses comes back with the
    rest of the text, for :func:`load_call` to name what is wrong with it.
    """
    content, rest = "", text
    if auto:
        cut = first_trigger(text, [fmt.watch])[0]
        if cut < 0:
            return text, []
        content = text[:cut]
        rest = text[cut if fmt.trigger_in_head else cut + len(fmt.trigger) :]
    found, closed = _scan(rest, 0, _Strict(fmt))
    if not found and not auto:
        return text, []
    calls = [rest[c.start : c.end] for c in found]
    closing = fmt.close.strip()
    if closing and found and found[-1].complete and not closed:  # load_call reports it
        calls.append(f"the turn does not end with {closing!r}: {rest[-40:]!r}")
    return content, calls


def load_call(text: str, arguments_key: str) -> tuple[str, Any]:
    """``(name, arguments)`` of one call object ``{"name": ..., "<arguments_key>": ...}`` (an
    entry of :func:`split_calls`); :class:`~trierouter.errors.ToolCallError` naming the problem
    when it is not complete JSON or has other keys."""
    if not text.startswith(CALL_HEAD[:1]):
        raise ToolCallError(f"not a tool call: {text[:80]!r}")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"tool call is not complete JSON ({exc.msg}): {text[-80:]!r}") from exc
    if not isinstance(obj, dict) or set(obj) != {"name", arguments_key}:
        raise ToolCallError(
            f"tool call must have exactly 'name' and {arguments_key!r}: {text[:80]!r}"
        )
    return obj["name"], obj[arguments_key]


def load_arguments(text: str) -> Any:
    """The arguments a call's JSON text holds (empty or blank text: ``{}``); ``ValueError``
    when it is not JSON."""
    return json.loads(text) if text.strip() else {}


# -- partial: every call so far, the last one possibly unfinished ---------------------------------
@dataclass
class ParsedCall:
    """A call read in partial mode."""

    name: str
    arguments: str
    """The arguments object exactly as generated (JSON text; unfinished: what there is)."""
    complete: bool


@dataclass(frozen=True)
class CallEnvelope:
    """Where the calls of one output start, and the key of a call's arguments."""

    trigger: str | None = "<tool_call>"
    """Text that starts the calls (before it: content); ``None``: the output is calls only. One
    that begins with a newline starts them only at a line's start (an anchored format's
    :attr:`~trierouter.registry.call_formats.CallFormat.watch`)."""
    args_key: str = "arguments"
    name_key: str = "name"
    also: tuple[tuple[str, str, str], ...] = ()
    """Other ``(trigger, arguments key, prefix)`` that start calls (the other syntaxes of
    ``auto``)."""
    prefix: str = ""
    """Text before each call object (:attr:`~trierouter.registry.call_formats.CallFormat.prefix`):
    the partial mode reads over it where it begins with the object's own ``{`` (a doubled-brace
    call)."""

    def opening(self, text: str) -> tuple[int, str, str]:
        """``(where the calls start, their arguments key, their prefix)``: the trigger that
        completes first in ``text`` (as the decoder finds it), ``(-1, "", "")`` when none
        does."""
        if self.trigger is None:
            return 0, self.args_key, self.prefix
        openers = ((self.trigger, self.args_key, self.prefix), *self.also)
        start, _, j = first_trigger(text, [t for t, _, _ in openers])
        if j < 0:
            return -1, "", ""
        return start, openers[j][1], openers[j][2]

    def pending(self, text: str) -> int:
        """How many characters at the end of ``text`` could start a trigger."""
        trigs = [] if self.trigger is None else [self.trigger, *(t for t, _, _ in self.also)]
        seen = "\n" + text  # the output starts a line (anchored triggers begin with "\n")
        return min(len(text), max((_partial_overlap(seen, t) for t in trigs), default=0))

    def calls(self, text: str) -> tuple[int, list[ParsedCall]]:
        """``(where the calls start, every call object from there)``, the last one possibly
        unfinished; ``(-1, [])`` when no call starts in ``text``."""
        cut, key, prefix = self.opening(text)
        if cut < 0:
            return -1, []
        found = _scan(text, cut, _Partial(self.name_key, key, prefix))[0]
        return cut, [ParsedCall(c.name, text[c.start : c.end], c.complete) for c in found]


def envelope(fmt: str, *, auto: bool, openers: Sequence[str] | None = AUTO_OPENERS) -> CallEnvelope:
    """The envelope of format ``fmt`` (a :data:`~trierouter.registry.call_formats.CALL_FORMATS`
    name) under ``tool_choice="auto"`` (``auto``; with the other syntaxes of ``openers``, as
    :class:`~trierouter.router.tool_calls.plan.ToolCallPlan` decodes them) or a forced choice."""
    f = call_format(fmt)
    if not auto:
        return CallEnvelope(None, f.arguments_key, prefix=f.prefix)
    others = [call_format(o) for o in auto_formats(f, tuple(openers or ()))]
    also = tuple((o.watch, o.arguments_key, o.prefix) for o in others)
    return CallEnvelope(f.watch, f.arguments_key, also=also, prefix=f.prefix)


def scan_calls(text: str, env: CallEnvelope) -> tuple[str, list[ParsedCall]]:
    """``(content before the calls, the calls)`` of an output, partial mode
    (:meth:`CallEnvelope.calls`)."""
    cut, calls = env.calls(text)
    if cut < 0:
        return text, []
    return text[:cut], calls


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
