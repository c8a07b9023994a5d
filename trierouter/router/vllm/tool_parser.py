"""Standard OpenAI tool calling on ``vllm serve``: the ``trierouter`` tool parser.

vLLM's chat server hands every request with ``tools`` to the tool parser named by
``--tool-call-parser`` twice: ``adjust_request`` after the prompt is rendered (the tools are in
it, by the model's own chat template) and before sampling parameters are made, then
``extract_tool_calls`` / ``extract_tool_calls_streaming`` on the output. This parser

- checks the request (tools register, schemas analyse, a named tool exists, limits hold) and
  refuses it with ``VLLMValidationError``, which vLLM answers with HTTP 400 before anything
  reaches the engine;
- turns ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` into the ``trierouter_*``
  ``vllm_xargs`` that :class:`~trierouter.router.vllm.processor.TrieRouterLogitsProcessor`
  decodes in the model's native call syntax (no structured-outputs grammar is compiled);
- reads calls out of the native syntax into ``message.tool_calls`` (and streaming deltas),
  each checked with ``jsonschema`` and its format checker against the tool's original schema.

A tool without ``"strict": true`` whose schema holds what no engine serves exactly is served
relaxed (:mod:`trierouter.registry.relax`; logged once per tool when the request is checked).
The parser's tool calls of it carry the extension field ``trierouter`` (``{"relaxed": [{"kind",
"path", "why"}, ...]}``, ``"invalid": "<why>"`` when the finished call fails its original schema,
which is then logged as a warning instead of failing the request). vLLM 0.32 streams the
parser's deltas as they are (the field reaches the client on the delta that names the call) but
rebuilds a non-streamed call from its id, name and arguments, dropping the field: the server's
middleware adds it to the answer (:func:`~trierouter.router.vllm.checks.relaxed_response`).

``supports_required_and_named = False``: vLLM then parses ``"required"`` and named choices with
this parser too, instead of its JSON-list convention.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from trierouter import settings
from trierouter.errors import missing
from trierouter.registry.call_formats import model_call_format
from trierouter.registry.call_text import ParsedCall, envelope, scan_calls
from trierouter.router.openers import model_openers
from trierouter.router.tool_calls.native import FORMAT_NAMES, ToolCallStream, call_problem
from trierouter.router.vllm.args import (
    ARG_ALLOWED,
    ARG_AUTO_OPENERS,
    ARG_PARALLEL,
    ARG_TOOL_BUDGET,
    ARG_TOOL_CHOICE,
    ARG_TOOL_FORMAT,
    ARG_TOOLS,
    ARG_TOOLS_INLINE,
    ENV_MAX_TOTAL_BYTES,
    RequestLimits,
)
from trierouter.router.vllm.checks import (
    check_inline_tools,
    check_tool_choice,
    count_work,
    inline_text,
    registry_specs,
    relaxed_field,
    schema_relaxations,
)

try:
    from vllm.entrypoints.generate.base.protocol import (  # type: ignore[import-not-found,unused-ignore]
        DeltaFunctionCall,
        DeltaMessage,
        DeltaToolCall,
        ExtractedToolCallInformation,
        FunctionCall,
        ToolCall,
    )
    from vllm.entrypoints.openai.chat_completion.protocol import (  # type: ignore[import-not-found,unused-ignore]
        ChatCompletionNamedToolChoiceParam,
        ChatCompletionRequest,
    )
    from vllm.exceptions import VLLMValidationError  # type: ignore[import-not-found,unused-ignore]
    from vllm.tool_parsers.abstract_tool_parser import (  # type: ignore[import-not-found,unused-ignore]
        ToolParser,
    )
except ImportError as exc:  # pragma: no cover - exercised only without vllm
    raise missing("vllm", "vllm") from exc

__all__ = [
    "ARG_ALLOWED",
    "ARG_CONSTRAIN",
    "ARG_PARALLEL",
    "ARG_TOOL_FORMAT",
    "ARG_TOOL_SEARCH",
    "ENV_MAX_INLINE_TOOLS",
    "ENV_TOOL_FORMAT",
    "TrieRouterToolParser",
    "detect_format",
    "request_xargs",
]

logger = logging.getLogger(__name__)

ARG_TOOL_SEARCH = "trierouter_tool_search"
ARG_CONSTRAIN = "trierouter_constrain"
ENV_TOOL_FORMAT = settings.TOOL_FORMAT.name
ENV_MAX_INLINE_TOOLS = settings.MAX_INLINE_TOOLS.name


def detect_format(tokenizer: Any) -> str:
    """The native call syntax of the served model: ``$TRIEROUTER_TOOL_FORMAT``, else the first
    marker found in its chat template, else in its vocabulary; ``ValueError`` when none is."""
    env = settings.TOOL_FORMAT.get()
    if env:
        return env
    fmt = model_call_format(tokenizer)
    if fmt is not None:
        return fmt
    raise ValueError(
        "cannot tell the model's tool-call syntax from its chat template or vocabulary; set "
        f"${ENV_TOOL_FORMAT} to one of {list(FORMAT_NAMES)} or use --tool-call-parser "
        "trierouter_<format>"
    )


def _choice_of(tool_choice: Any) -> str:
    if isinstance(tool_choice, ChatCompletionNamedToolChoiceParam):
        return str(tool_choice.function.name)
    if isinstance(tool_choice, Mapping):  # a raw request body (the middleware)
        return str(tool_choice["function"]["name"])
    return str(tool_choice or "auto")


def request_xargs(
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: Any,
    *,
    parallel: bool | None,
    fmt: str,
    xargs: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The ``vllm_xargs`` that constrain a request with these standard fields (``ValueError``
    naming the problem when they cannot be served)."""
    out = dict(xargs or {})
    choice = _choice_of(tool_choice)
    registry = out.get(ARG_TOOLS)
    if registry is not None:
        if not isinstance(registry, str):
            raise ValueError(f"{ARG_TOOLS}={registry!r:.60}: expected a registry name")
        specs = registry_specs(registry)
        check_tool_choice(choice, specs.names, f"registry {registry!r}")
        allowed = out.get(ARG_ALLOWED)
        if allowed is not None:
            bad = [n for n in allowed if n not in specs.names]
            if bad:
                raise ValueError(f"{ARG_ALLOWED}: {bad[:5]} are not in registry {registry!r}")
    else:
        if not tools:
            raise ValueError("tools: give at least one tool (or a registry in vllm_xargs)")
        lim = RequestLimits.from_env()
        max_tools = settings.MAX_INLINE_TOOLS.get()
        if len(tools) > max_tools:
            raise ValueError(
                f"tools: {len(tools)} tools, more than ${ENV_MAX_INLINE_TOOLS}={max_tools}; "
                f"serve large sets as a named registry (${settings.TOOLS.name})"
            )
        text = inline_text(tools)
        if len(text) > lim.max_total_bytes:
            raise ValueError(
                f"tools: {len(text)} bytes, more than ${ENV_MAX_TOTAL_BYTES}="
                f"{lim.max_total_bytes}; serve large sets as a named registry"
            )
        names = check_inline_tools(text)
        check_tool_choice(choice, names, "the request's tools")
        out[ARG_TOOLS_INLINE] = text
    out[ARG_TOOL_CHOICE] = choice
    out[ARG_TOOL_FORMAT] = fmt
    # a named choice is one call of that tool (OpenAI's meaning); otherwise parallel_tool_calls
    out[ARG_PARALLEL] = 0 if parallel is False or choice not in ("auto", "required") else 1
    if max_tokens is not None and ARG_TOOL_BUDGET not in out and choice != "none":
        # steer long free strings to their end so a call finishes within max_tokens
        out[ARG_TOOL_BUDGET] = max(4, int(max_tokens) // 8)
    for k in (ARG_TOOL_SEARCH, ARG_CONSTRAIN):  # consumed by the middleware
        out.pop(k, None)
    return out


class TrieRouterToolParser(ToolParser):  # type: ignore[misc,unused-ignore]
    """``--tool-call-parser trierouter``: constrains tool calls with trierouter (module doc)."""

    supports_required_and_named = False
    format_name: str | None = None
    """The native syntax; ``None``: :func:`detect_format`."""

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None) -> None:
        super().__init__(tokenizer, tools)
        self.format = self.format_name or detect_format(tokenizer)
        # the other syntaxes this model starts calls with under auto (learned beside the model)
        self.openers = model_openers(getattr(tokenizer, "name_or_path", None))
        self._stream: ToolCallStream | None = None
        self._ids: dict[int, str] = {}
        self._checked = 0  # streamed calls validated so far

    # -- request -------------------------------------------------------------------------------
    def adjust_request(self, request: Any) -> Any:
        if not isinstance(request, ChatCompletionRequest):
            raise VLLMValidationError(
                "trierouter serves tool calls on /v1/chat/completions only",
                parameter="tools",
            )
        xargs = request.vllm_xargs or {}
        if not request.tools and ARG_TOOLS not in xargs:
            return request
        count_work("parser")
        if request.tool_choice == "none":
            return request
        if request.response_format is not None and request.response_format.type != "text":
            raise VLLMValidationError(
                "response_format together with tools: trierouter constrains the tool calls; "
                "send one or the other",
                parameter="response_format",
            )
        tools = [t.model_dump(exclude_none=True) for t in (request.tools or [])]
        if ARG_TOOLS in xargs and tools:
            specs = registry_specs(str(xargs[ARG_TOOLS]))
            tools = [t for t in tools if t["function"]["name"] not in specs.names]
            if tools:
                raise VLLMValidationError(
                    f"tools {[t['function']['name'] for t in tools][:5]} are not in registry "
                    f"{xargs[ARG_TOOLS]!r}; with a registry, tools may only name its tools",
                    parameter="tools",
                )
        try:
            request.vllm_xargs = request_xargs(
                tools,
                request.tool_choice,
                parallel=request.parallel_tool_calls,
                fmt=self.format,
                xargs=xargs,
                max_tokens=request.max_completion_tokens or request.__dict__.get("max_tokens"),
            )
        except ValueError as exc:
            raise VLLMValidationError(str(exc), parameter="tools") from exc
        if request.tool_choice in (None, "auto"):  # the decoder cuts where the parser does
            request.vllm_xargs[ARG_AUTO_OPENERS] = list(self.openers)
        request.structured_outputs = None
        request.skip_special_tokens = False  # the call markers are special tokens in some models
        return request

    # -- output --------------------------------------------------------------------------------
    def _schemas(self, request: Any) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        registry = (request.vllm_xargs or {}).get(ARG_TOOLS)
        if registry is not None:
            specs = registry_specs(str(registry))
            return _RegistrySchemas(specs)  # type: ignore[return-value]
        for t in request.tools or []:
            out[t.function.name] = t.function.parameters or {"type": "object"}
        return out

    def _forced(self, request: Any) -> bool:
        return request.tool_choice not in (None, "auto", "none")

    def _envelope(self, request: Any) -> Any:
        return envelope(self.format, auto=not self._forced(request), openers=self.openers)

    def extract_tool_calls(self, model_output: str, request: Any) -> Any:
        content, calls = scan_calls(model_output, self._envelope(request))
        if not calls:
            if self._forced(request) and not model_output.strip():
                raise RuntimeError(
                    "trierouter: the engine returned no call for a required tool call (the "
                    "request failed in the worker; see the server log)"
                )
            return ExtractedToolCallInformation(
                tools_called=False, tool_calls=[], content=model_output
            )
        finished = [c for c in calls if c.complete]
        if not finished:  # cut by max_tokens: what came out, as text (finish_reason "length")
            return ExtractedToolCallInformation(
                tools_called=False, tool_calls=[], content=model_output
            )
        schemas = self._schemas(request)
        out = []
        for call in finished:
            out.append(_tool_call(call, *_verdict(call, schemas)))
        return ExtractedToolCallInformation(
            tools_called=True, tool_calls=out, content=content or None
        )

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: Any,
    ) -> Any:
        if self._stream is None:
            self._stream = ToolCallStream(self._envelope(request))
        self._check_streamed(current_text, delta_token_ids, request)
        delta = self._stream.feed(current_text)
        calls = []
        for i, name, frag in delta.calls:
            if name is not None:
                self._ids[i] = ToolCall(function=FunctionCall(name=name, arguments="")).id
                opened = DeltaToolCall(
                    index=i,
                    id=self._ids[i],
                    type="function",
                    function=DeltaFunctionCall(name=name, arguments=frag),
                )
                relaxed = schema_relaxations(self._schemas(request).get(name))
                if relaxed:
                    opened.trierouter = relaxed_field(relaxed)  # type: ignore[attr-defined,unused-ignore]
                calls.append(opened)
            else:
                calls.append(DeltaToolCall(index=i, function=DeltaFunctionCall(arguments=frag)))
        if not calls and not delta.content:
            return None
        return DeltaMessage(content=delta.content or None, tool_calls=calls)

    def _check_streamed(self, text: str, new_ids: Sequence[int], request: Any) -> None:
        """What :meth:`extract_tool_calls` checks, as the stream goes: each finished call is
        validated (``jsonschema`` + format checker) before its last fragment is sent, and a
        required call whose request failed in the worker (an end token, no text) raises, so the
        stream ends with vLLM's error event instead of an empty success."""
        if not text:
            if new_ids and self._forced(request) and self._ends(new_ids[-1], request):
                raise RuntimeError(
                    "trierouter: the engine returned no call for a required tool call (the "
                    "request failed in the worker; see the server log)"
                )
            return
        calls = scan_calls(text, self._envelope(request))[1]
        done = [c for c in calls if c.complete]
        if len(done) <= self._checked:
            return
        schemas = self._schemas(request)
        for call in done[self._checked :]:
            _verdict(call, schemas)
        self._checked = len(done)

    def _ends(self, token: int, request: Any) -> bool:
        """Whether ``token`` can be the end token a failed worker row emits (the tokenizer's
        EOS or one of its special tokens; without ``stop`` strings any token that left no text
        is one, since a constrained call starts with text)."""
        if not request.stop:
            return True
        tok = self.model_tokenizer
        specials = set(getattr(tok, "all_special_ids", None) or ())
        return token == getattr(tok, "eos_token_id", None) or token in specials


class _RegistrySchemas(Mapping[str, dict[str, Any]]):
    """A registry's argument schemas by tool name, read on demand."""

    def __init__(self, specs: Any) -> None:
        self._specs = specs

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name not in self._specs.names:
            raise KeyError(name)
        params: dict[str, Any] = self._specs.by_name[name].parameters or {"type": "object"}
        return params

    def __iter__(self) -> Any:
        return iter(self._specs.names)

    def __len__(self) -> int:
        return len(self._specs.names)


def _verdict(call: ParsedCall, schemas: Mapping[str, Any]) -> tuple[list[Any], str | None]:
    """The relaxations of ``call``'s tool and why its original schema refuses the call (or
    ``None``): an exact tool's invalid call raises (a bug if it happens); a relaxed tool's is
    logged and returned."""
    problem = call_problem(call, schemas)
    relaxed = schema_relaxations(schemas.get(call.name))
    if problem is not None and not relaxed:
        raise RuntimeError(f"trierouter: the model's tool call is not valid: {problem}")
    if problem is not None:
        logger.warning("trierouter: a call of relaxed tool %r: %s", call.name, problem)
    return relaxed, problem


def _tool_call(call: ParsedCall, relaxed: list[Any], invalid: str | None) -> Any:
    """The OpenAI tool call; a relaxed tool's with the ``trierouter`` extension field."""
    out = ToolCall(type="function", function=FunctionCall(name=call.name, arguments=call.arguments))
    if relaxed:
        out.trierouter = relaxed_field(relaxed, invalid)  # type: ignore[attr-defined,unused-ignore]
    return out


def _subclass(fmt: str) -> type[TrieRouterToolParser]:
    return type(f"TrieRouterToolParser_{fmt}", (TrieRouterToolParser,), {"format_name": fmt})


TrieRouterHermesToolParser = _subclass("hermes")
TrieRouterLlama3ToolParser = _subclass("llama3_json")
TrieRouterJsonToolParser = _subclass("json")
TrieRouterMistralToolParser = _subclass("mistral")
TrieRouterJsonArrayToolParser = _subclass("json_array")
