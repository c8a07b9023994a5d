"""Per-request arguments of the vLLM processor (``SamplingParams.extra_args`` / ``vllm_xargs``),
their parsing and the server's request limits. Imports no vLLM: usable at the API layer.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter import settings
from trierouter.registry.call_formats import CALL_FORMATS

__all__ = [
    "ARG_ALLOWED",
    "ARG_CHOICES",
    "ARG_PARALLEL",
    "ARG_PREFIX",
    "ARG_SET",
    "ARG_THINK",
    "ARG_THINK_MAX_TOKENS",
    "ARG_TOOL_FORMAT",
    "ENV_INLINE_CACHE",
    "ENV_INLINE_CACHE_BYTES",
    "ENV_MAX_INLINE",
    "ENV_MAX_INLINE_VALUES",
    "ENV_MAX_TEXT_BYTES",
    "ENV_MAX_THINK_TOKENS",
    "ENV_MAX_TOTAL_BYTES",
    "ENV_MAX_VALUE_BYTES",
    "ENV_SETS",
    "RequestLimits",
    "RequestSpec",
    "parse_request",
]


logger = logging.getLogger(__name__)

ARG_SET = "trierouter_set"
ARG_CHOICES = "trierouter_choices"
ARG_THINK = "trierouter_think"
ARG_THINK_MAX_TOKENS = "trierouter_think_max_tokens"
ARG_PREFIX = "trierouter_prefix"
ARG_TOOLS = "trierouter_tools"
ARG_TOOLS_INLINE = "trierouter_tools_inline"
ARG_TOOL_CHOICE = "trierouter_tool_choice"
ARG_TOOL_BUDGET = "trierouter_tool_budget"
ARG_TOOL_FORMAT = "trierouter_tool_format"
ARG_PARALLEL = "trierouter_parallel_tool_calls"
ARG_ALLOWED = "trierouter_allowed"
ARG_AUTO_OPENERS = "trierouter_auto_openers"
_ARGS = (
    ARG_SET, ARG_CHOICES, ARG_THINK, ARG_THINK_MAX_TOKENS, ARG_PREFIX, ARG_TOOLS,
    ARG_TOOLS_INLINE, ARG_TOOL_CHOICE, ARG_TOOL_BUDGET, ARG_TOOL_FORMAT, ARG_PARALLEL,
    ARG_ALLOWED, ARG_AUTO_OPENERS,
)  # fmt: skip
TOOL_FORMATS = tuple(CALL_FORMATS)
"""Native call syntaxes ``trierouter_tool_format`` accepts (:mod:`trierouter.registry.call_formats`;
``json``: the bare call object)."""
# the variables' names, as errors cite them (declared in trierouter.settings)
ENV_TOOLS = settings.TOOLS.name
ENV_SETS = settings.SETS.name
ENV_INLINE_CACHE = settings.INLINE_CACHE.name
ENV_INLINE_CACHE_BYTES = settings.INLINE_CACHE_BYTES.name
ENV_MAX_INLINE = "TRIEROUTER_MAX_INLINE"
"""The older name of :data:`ENV_MAX_INLINE_VALUES`, still read."""
ENV_MAX_INLINE_VALUES = settings.MAX_INLINE_VALUES.name
ENV_MAX_VALUE_BYTES = settings.MAX_VALUE_BYTES.name
ENV_MAX_TOTAL_BYTES = settings.MAX_TOTAL_BYTES.name
ENV_MAX_TEXT_BYTES = settings.MAX_TEXT_BYTES.name
ENV_MAX_THINK_TOKENS = settings.MAX_THINK_TOKENS.name
_SET_SUFFIXES = (".trt", ".txt", ".json")
_DEFAULT_THINK_MAX = 256

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


# -- request arguments --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Bounds on one request's ``trierouter_*`` arguments (module docstring: the variables)."""

    max_inline_values: int = settings.MAX_INLINE_VALUES.default
    """Values in ``trierouter_choices``."""
    max_value_bytes: int = settings.MAX_VALUE_BYTES.default
    """UTF-8 bytes of one inline value."""
    max_total_bytes: int = settings.MAX_TOTAL_BYTES.default
    """UTF-8 bytes of all inline values together (bounds the trie and its compile time)."""
    max_text_bytes: int = settings.MAX_TEXT_BYTES.default
    """UTF-8 bytes of ``trierouter_prefix``, ``trierouter_think`` and ``trierouter_set``."""
    max_think_tokens: int = settings.MAX_THINK_TOKENS.default
    """Largest ``trierouter_think_max_tokens``."""

    @classmethod
    def from_env(cls) -> RequestLimits:
        """The limits set by the ``TRIEROUTER_MAX_*`` variables, defaults elsewhere."""
        return cls(
            max_inline_values=settings.MAX_INLINE_VALUES.get(),
            max_value_bytes=settings.MAX_VALUE_BYTES.get(),
            max_total_bytes=settings.MAX_TOTAL_BYTES.get(),
            max_text_bytes=settings.MAX_TEXT_BYTES.get(),
            max_think_tokens=settings.MAX_THINK_TOKENS.get(),
        )


def _utf8_len(arg: str, text: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{arg}: {text[max(0, exc.start - 10) : exc.end + 10]!r} is not encodable as UTF-8 "
            f"({exc.reason}); lone surrogates cannot be produced by a tokenizer"
        ) from exc


def _check_text(arg: str, text: str, limits: RequestLimits) -> None:
    n = len(text) if len(text) > limits.max_text_bytes else _utf8_len(arg, text)
    if n > limits.max_text_bytes:
        raise ValueError(
            f"{arg}: {n}+ bytes, more than ${ENV_MAX_TEXT_BYTES}={limits.max_text_bytes}"
        )


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """A request's constraint, parsed from ``SamplingParams.extra_args``."""

    set_name: str | None
    """A named set from ``$TRIEROUTER_SETS`` (or ``None`` with inline values)."""
    values: tuple[str, ...] | None
    """Inline values (or ``None`` with a named set)."""
    think: str | None = None
    """Delimiter ending free text before the value (think-then-answer), if any."""
    think_max_tokens: int = _DEFAULT_THINK_MAX
    """Free tokens allowed before the rest of ``think`` is forced."""
    prefix: str = ""
    """Literal text forced before the value."""
    tools_name: str | None = None
    """A named tool registry (a tool call instead of a value)."""
    tools_inline: str | None = None
    """Inline tools, as canonical JSON."""
    tool_choice: str = "required"
    tool_budget: int | None = None
    tool_format: str = "json"
    """The native call syntax (:data:`TOOL_FORMATS`)."""
    parallel_tool_calls: bool = False
    """More than one call may follow the first (the format's separator between them)."""
    allowed: tuple[str, ...] | None = None
    """Calls restricted to these tools of the registry (a shortlist)."""
    auto_openers: tuple[str, ...] | None = None
    """Under ``auto``, the other call syntaxes whose opener starts a call (``None``: the
    default :data:`~trierouter.registry.call_formats.AUTO_OPENERS`)."""

    @property
    def is_tool_call(self) -> bool:
        return self.tools_name is not None or self.tools_inline is not None

    @property
    def is_plain(self) -> bool:
        """The value alone (no think, no prefix): served by the vectorized set path."""
        return self.think is None and not self.prefix and not self.is_tool_call

    @property
    def source_key(self) -> str:
        """Identifies the set: ``set:NAME`` or ``inline:SHA256``."""
        if self.set_name is not None:
            return f"set:{self.set_name}"
        h = hashlib.sha256(json.dumps(self.values, ensure_ascii=False).encode("utf-8"))
        return f"inline:{h.hexdigest()}"


def parse_request(
    extra_args: Mapping[str, Any] | None,
    limits: RequestLimits | None = None,
    *,
    checked: bool = False,
) -> RequestSpec | None:
    """Parse ``extra_args``; ``None`` when the request carries no ``trierouter_*`` argument.

    Raises ``ValueError`` naming the argument and what would be accepted, also when an argument
    exceeds ``limits`` (default: :meth:`RequestLimits.from_env`). ``checked``: the arguments
    passed this parse already (the engine's copy of a request its frontend validated): inline
    tools given as JSON text are kept as they are instead of parsed and written again (2 MB
    for 1,000 real tools, inside the engine's step).
    """
    if not extra_args:
        return None
    if not isinstance(extra_args, Mapping):
        raise ValueError(f"extra_args: expected a mapping, got {type(extra_args).__name__}")
    mine = {
        k: v for k, v in extra_args.items() if isinstance(k, str) and k.startswith("trierouter")
    }
    if not mine:
        return None
    unknown = sorted(set(mine) - set(_ARGS))
    if unknown:
        raise ValueError(f"unknown trierouter argument(s) {unknown}; accepted: {list(_ARGS)}")
    name, values = mine.get(ARG_SET), mine.get(ARG_CHOICES)
    tools_name, tools_inline = mine.get(ARG_TOOLS), mine.get(ARG_TOOLS_INLINE)
    given = [k for k in (ARG_SET, ARG_CHOICES, ARG_TOOLS, ARG_TOOLS_INLINE) if k in mine]
    if len(given) != 1:
        raise ValueError(
            f"give exactly one of {ARG_SET!r} (a named set), {ARG_CHOICES!r}, {ARG_TOOLS!r} (a "
            f"named tool registry) or {ARG_TOOLS_INLINE!r}; got {given or 'none'}"
        )
    lim = limits if limits is not None else RequestLimits.from_env()
    if tools_name is not None or tools_inline is not None:
        return _parse_tools(mine, tools_name, tools_inline, lim, checked)
    tool_only = (ARG_TOOL_CHOICE, ARG_TOOL_BUDGET, ARG_TOOL_FORMAT, ARG_PARALLEL, ARG_ALLOWED)
    for k in (*tool_only, ARG_AUTO_OPENERS):
        if k in mine:
            raise ValueError(f"{k} needs {ARG_TOOLS!r} or {ARG_TOOLS_INLINE!r}")
    parsed: tuple[str, ...] | None = None
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{ARG_SET}={name!r:.80}: expected a set name (non-empty str)")
    if name is not None:
        _check_text(ARG_SET, name, lim)
    if values is not None:
        parsed = _parse_values(values, lim)
    think = mine.get(ARG_THINK)
    if think is not None and (not isinstance(think, str) or not think):
        raise ValueError(f"{ARG_THINK}={think!r:.60}: expected a non-empty delimiter string")
    if think is not None:
        _check_text(ARG_THINK, think, lim)
    max_tokens = mine.get(ARG_THINK_MAX_TOKENS, _DEFAULT_THINK_MAX)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise ValueError(f"{ARG_THINK_MAX_TOKENS}={max_tokens!r:.40}: expected an int >= 0")
    if ARG_THINK_MAX_TOKENS in mine and max_tokens > lim.max_think_tokens:
        raise ValueError(
            f"{ARG_THINK_MAX_TOKENS}={max_tokens}: more than "
            f"${ENV_MAX_THINK_TOKENS}={lim.max_think_tokens}"
        )
    if ARG_THINK_MAX_TOKENS in mine and think is None:
        raise ValueError(f"{ARG_THINK_MAX_TOKENS} needs {ARG_THINK}")
    prefix = mine.get(ARG_PREFIX, "")
    if not isinstance(prefix, str):
        raise ValueError(f"{ARG_PREFIX}={prefix!r:.60}: expected a str")
    _check_text(ARG_PREFIX, prefix, lim)
    return RequestSpec(
        set_name=name,
        values=parsed,
        think=think,
        think_max_tokens=int(max_tokens),
        prefix=prefix,
    )


def _parse_tools(
    mine: Mapping[str, Any], name: Any, inline: Any, lim: RequestLimits, checked: bool = False
) -> RequestSpec:
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{ARG_TOOLS}={name!r:.80}: expected a registry name (non-empty str)")
    text = None
    if checked and isinstance(inline, str) and len(inline) <= lim.max_total_bytes:
        text, inline = inline, None  # validated by the frontend; read once, where compiled
    if isinstance(inline, str):  # vllm_xargs carries only scalars and lists: JSON text
        if len(inline) > lim.max_total_bytes:
            raise ValueError(
                f"{ARG_TOOLS_INLINE}: {len(inline)} bytes of tools, more than "
                f"${ENV_MAX_TOTAL_BYTES}={lim.max_total_bytes}"
            )
        try:
            inline = json.loads(inline)
        except ValueError as exc:
            raise ValueError(f"{ARG_TOOLS_INLINE}: not JSON ({exc})") from exc
    if inline is not None:
        if not (isinstance(inline, list) and inline and all(isinstance(t, dict) for t in inline)):
            raise ValueError(f"{ARG_TOOLS_INLINE}: expected a non-empty list of tool objects")
        text = json.dumps(inline, ensure_ascii=False)  # property order is what the model saw
        if len(text) > lim.max_total_bytes:
            raise ValueError(
                f"{ARG_TOOLS_INLINE}: {len(text)} bytes of tools, more than "
                f"${ENV_MAX_TOTAL_BYTES}={lim.max_total_bytes}; configure a registry "
                f"({ENV_TOOLS}) instead"
            )
    choice = mine.get(ARG_TOOL_CHOICE, "required")
    if not isinstance(choice, str) or not choice:
        raise ValueError(
            f"{ARG_TOOL_CHOICE}={choice!r:.60}: expected 'required', 'auto', 'none' or a tool name"
        )
    budget = mine.get(ARG_TOOL_BUDGET)
    bad = isinstance(budget, bool) or not isinstance(budget, int) or budget < 1
    if budget is not None and bad:
        raise ValueError(f"{ARG_TOOL_BUDGET}={budget!r:.40}: expected an int >= 1")
    think = mine.get(ARG_THINK)
    if think is not None and (not isinstance(think, str) or not think):
        raise ValueError(f"{ARG_THINK}={think!r:.60}: expected a non-empty delimiter string")
    max_tokens = mine.get(ARG_THINK_MAX_TOKENS, _DEFAULT_THINK_MAX)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise ValueError(f"{ARG_THINK_MAX_TOKENS}={max_tokens!r:.40}: expected an int >= 0")
    if ARG_PREFIX in mine:
        raise ValueError(f"{ARG_PREFIX} does not apply to tool calls")
    fmt = mine.get(ARG_TOOL_FORMAT, "json")
    if fmt not in TOOL_FORMATS:
        raise ValueError(f"{ARG_TOOL_FORMAT}={fmt!r:.40}: expected one of {list(TOOL_FORMATS)}")
    parallel = mine.get(ARG_PARALLEL, False)
    if parallel not in (0, 1) or isinstance(parallel, float):  # True / False / 0 / 1
        raise ValueError(f"{ARG_PARALLEL}={parallel!r:.40}: expected true or false (or 1 / 0)")
    allowed = mine.get(ARG_ALLOWED)
    if allowed is not None:
        if name is None:
            raise ValueError(f"{ARG_ALLOWED} needs {ARG_TOOLS!r} (a registry to restrict)")
        ok = isinstance(allowed, list) and allowed and all(isinstance(a, str) for a in allowed)
        if not ok:
            raise ValueError(f"{ARG_ALLOWED}: expected a non-empty list of tool names")
        if len(allowed) > lim.max_inline_values:
            raise ValueError(f"{ARG_ALLOWED}: {len(allowed)} names, more than the inline limit")
        allowed = tuple(allowed)
    openers = mine.get(ARG_AUTO_OPENERS)
    if openers is not None:
        if not isinstance(openers, list) or any(o not in TOOL_FORMATS for o in openers):
            raise ValueError(
                f"{ARG_AUTO_OPENERS}={openers!r:.80}: expected a list of {list(TOOL_FORMATS)}"
            )
        openers = tuple(openers)
    return RequestSpec(
        set_name=None,
        values=None,
        think=think,
        think_max_tokens=int(max_tokens),
        tools_name=name,
        tools_inline=text,
        tool_choice=choice,
        tool_budget=budget,
        tool_format=fmt,
        parallel_tool_calls=bool(parallel),
        allowed=allowed,
        auto_openers=openers,
    )


def _parse_values(values: Any, lim: RequestLimits) -> tuple[str, ...]:
    """Inline values: a flat list of strings within the limits (checked before any copy)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{ARG_CHOICES}: expected a list of strings, got {type(values).__name__}")
    if not values:
        raise ValueError(f"{ARG_CHOICES}: the list is empty; give at least one value")
    if len(values) > lim.max_inline_values:
        raise ValueError(
            f"{ARG_CHOICES}: {len(values)} values, more than "
            f"${ENV_MAX_INLINE_VALUES}={lim.max_inline_values}; "
            f"configure a named set ({ENV_SETS}) instead"
        )
    total = 0
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise ValueError(f"{ARG_CHOICES}[{i}] = {v!r:.60} is {type(v).__name__}, expected str")
        # a str has at least as many UTF-8 bytes as characters: a long one is refused uncopied
        n = len(v) if len(v) > lim.max_value_bytes else _utf8_len(f"{ARG_CHOICES}[{i}]", v)
        if n > lim.max_value_bytes:
            raise ValueError(
                f"{ARG_CHOICES}[{i}]: {n}+ bytes, more than "
                f"${ENV_MAX_VALUE_BYTES}={lim.max_value_bytes}"
            )
        total += n
        if total > lim.max_total_bytes:
            raise ValueError(
                f"{ARG_CHOICES}: more than ${ENV_MAX_TOTAL_BYTES}={lim.max_total_bytes} bytes "
                f"of values (at value {i}); configure a named set ({ENV_SETS}) instead"
            )
    return tuple(values)


# -- named sets ---------------------------------------------------------------------------------
