"""Request checks that need the tools themselves, run in the API server process before a request
reaches the engine: inline tools must register (valid names, valid JSON Schemas, no duplicates)
and pass the compiler's slot analysis; a named tool must exist; a named registry must be
configured. The worker would otherwise find these problems mid-batch.

Results are cached by content hash, so a client that sends the same tools with every request
pays the checks once. Each tool follows the request: a function with ``"strict": true`` is served
exactly or refused; one without it is served, relaxed where no engine serves a construct exactly
(:mod:`trierouter.registry.relax`; logged once per tool, and listed on each call of it by
:func:`schema_relaxations`).
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from trierouter import settings
from trierouter.errors import TrieRouterError
from trierouter.registry.analysis import AnalysisStore, ToolsAnalysis, tools_key
from trierouter.registry.compiler import check_tools
from trierouter.registry.inline_tools import analyze_specs
from trierouter.registry.slots.dispatch import unserved_problems
from trierouter.registry.slots.normalize import Problem
from trierouter.registry.slots.slot_records import analyses_kept
from trierouter.registry.tool_registry import ToolRegistry
from trierouter.router.vllm.args import ARG_TOOLS
from trierouter.router.vllm.named import (
    list_tool_registries,
    load_registry_requests,
    load_tool_registries,
)

__all__ = [
    "BUILTIN_CHOICES",
    "RegistrySpecs",
    "check_inline_tools",
    "check_tool_choice",
    "count_work",
    "inline_text",
    "known_inline",
    "prepare_inline_tools",
    "registry_specs",
    "relaxed_field",
    "relaxed_response",
    "remember_inline",
    "schema_relaxations",
]

BUILTIN_CHOICES = ("required", "auto", "none")
"""``tool_choice`` values that are not a tool name."""

_CACHE_SIZE = 256
_inline_ok: OrderedDict[str, tuple[str, ...] | str] = OrderedDict()
"""Inline tool checks by :func:`tools_key`: the names, or the message that refuses them."""
_lock = threading.Lock()


_work: Any = None


def count_work(stage: str) -> None:
    """One more request examined by trierouter at ``stage`` (``middleware``, ``parser``,
    ``schema_check``: an analysis not answered from the cache), on the server's ``/metrics`` as
    ``trierouter_request_work_total{stage=...}`` (prometheus_client, vLLM's registry)."""
    global _work
    if _work is None:
        with _lock:
            if _work is None:
                try:
                    from prometheus_client import Counter
                except ImportError:  # no server around: nothing to count for
                    _work = False
                    return
                _work = Counter(
                    "trierouter_request_work",
                    "Requests trierouter examined, by stage (after the server's authentication)",
                    ["stage"],
                )
    if _work:
        _work.labels(stage).inc()


def check_inline_tools(tools_json: str) -> tuple[str, ...]:
    """The tool names of ``tools_json`` (a JSON list of tool dicts), or ``ValueError`` naming
    every problem (``tools[i] 'name': why``); answered from the cache when the middleware
    prepared the same text (:func:`prepare_inline_tools`) or an earlier request had it."""
    key = tools_key(tools_json)
    verdict = _cached(key)
    if verdict is None:
        verdict, _ = _check(key, tools_json, analyze=False)
    if isinstance(verdict, str):
        raise ValueError(verdict)
    return verdict


def inline_text(tools: Sequence[Mapping[str, Any]]) -> str:
    """The JSON text of a request's inline tools as the engine gets them (property order as
    the model saw it): what :func:`check_inline_tools` and the analysis store are keyed by."""
    return json.dumps(list(tools), ensure_ascii=False)


def known_inline(key: str) -> bool:
    """Whether the inline tools with :func:`tools_key` ``key`` were checked already."""
    with _lock:
        return key in _inline_ok


def remember_inline(key: str, verdict: tuple[str, ...] | str) -> None:
    """Cache the check of the inline tools with :func:`tools_key` ``key``: their names, or the
    message of the ``ValueError`` that refuses them."""
    with _lock:
        _inline_ok[key] = verdict
        _inline_ok.move_to_end(key)
        while len(_inline_ok) > _CACHE_SIZE:
            _inline_ok.popitem(last=False)


def prepare_inline_tools(tools_json: str) -> tuple[str, ...] | str:
    """What the middleware runs for a request's inline tools, in a worker process: the check of
    :func:`check_inline_tools` and the slot analysis the engine would otherwise run inside its
    step, written to ``$TRIEROUTER_ANALYSIS_DIR`` (:class:`AnalysisStore`). Returns the names or
    the message that refuses the tools (for :func:`remember_inline`). Tools prepared before
    (this process's cache, their analysis still stored) are answered at once."""
    key = tools_key(tools_json)
    store = AnalysisStore.from_env()
    hit = _cached(key)
    if hit is not None and (isinstance(hit, str) or store is None or store.has(key)):
        return hit
    verdict, analysis = _check(key, tools_json, analyze=True)
    if store is not None and analysis is not None:
        store.put(key, analysis)
    return verdict


def _cached(key: str) -> tuple[str, ...] | str | None:
    with _lock:
        hit = _inline_ok.get(key)
        if hit is not None:
            _inline_ok.move_to_end(key)
    return hit


def _check(
    key: str, tools_json: str, *, analyze: bool
) -> tuple[tuple[str, ...] | str, ToolsAnalysis | None]:
    """The verdict on ``tools_json`` (names, or the refusal's message), remembered, and its
    analysis when ``analyze``."""
    count_work("schema_check")
    try:
        names, analysis = _checked(tools_json, analyze=analyze)
    except ValueError as exc:
        remember_inline(key, str(exc))
        return str(exc), None
    remember_inline(key, names)
    return names, analysis


def _checked(tools_json: str, *, analyze: bool) -> tuple[tuple[str, ...], ToolsAnalysis | None]:
    try:
        tools = json.loads(tools_json)
    except ValueError as exc:
        raise ValueError(f"tools: not JSON ({exc})") from exc
    if not isinstance(tools, list) or not tools:
        raise ValueError("tools: expected a non-empty list of tool objects")
    try:
        registry = ToolRegistry()
        if not analyze:
            registry.add(*tools)  # strict tools with unserved constructs are refused here
            check_tools(registry)
            return tuple(t.name for t in registry), None
        with analyses_kept():  # one walk of each schema serves both
            registry.add(*tools)
            check_tools(registry, slots=False)
            analysis = analyze_specs(tools, text=tools_json)  # the tools as the engine gets them
    except (TrieRouterError, ValueError, TypeError, KeyError, RecursionError) as exc:
        raise ValueError(f"tools: {exc}") from exc
    return tuple(t.name for t in registry), analysis


def schema_relaxations(schema: Any) -> list[Problem]:
    """What a tool whose argument schema is ``schema`` is served without (kind and slot path of
    each relaxation; empty for a schema served exactly), cached by content."""
    if not isinstance(schema, dict) or not schema:
        return []
    try:
        text = json.dumps(schema, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return []
    return list(_relaxations(text))


def relaxed_response(response: bytes, request: Mapping[str, Any]) -> bytes | None:
    """A non-streamed chat completion ``response`` (its body) of ``request`` (its parsed body)
    with the ``trierouter`` extension field on each call of a relaxed tool, as the parser puts
    it on a streamed delta: ``{"relaxed": [{"kind", "path", "why"}, ...]}``, and ``"invalid"``
    when the finished call fails the tool's original schema. ``None`` when no call is of a
    relaxed tool. (vLLM rebuilds a non-streamed call from its id, name and arguments and drops
    the parser's field, so the server's middleware adds it here.)"""
    from trierouter.registry.call_text import ParsedCall
    from trierouter.router.tool_calls.native import call_problem

    try:
        data = json.loads(response)
    except ValueError:
        return None
    calls = [
        call
        for choice in (data.get("choices") or [] if isinstance(data, dict) else [])
        if isinstance(choice, dict)
        for call in (choice.get("message") or {}).get("tool_calls") or []
        if isinstance(call, dict) and isinstance(call.get("function"), dict)
    ]
    if not calls:
        return None
    schemas = _request_schemas(request, {c["function"].get("name") for c in calls})
    changed = False
    for call in calls:
        fn = call["function"]
        name = fn.get("name")
        relaxed = schema_relaxations(schemas.get(name))
        if not relaxed:
            continue
        problem = call_problem(ParsedCall(name, str(fn.get("arguments", "")), True), schemas)
        call["trierouter"] = relaxed_field(relaxed, problem)
        changed = True
    return json.dumps(data, ensure_ascii=False).encode() if changed else None


def relaxed_field(relaxed: Sequence[Problem], invalid: str | None = None) -> dict[str, Any]:
    """The ``trierouter`` extension field of a relaxed tool's call: ``{"relaxed": [{"kind",
    "path", "why"}, ...]}``, with ``"invalid"`` when the finished call fails the original
    schema."""
    field: dict[str, Any] = {"relaxed": [p.to_dict() for p in relaxed]}
    if invalid is not None:
        field["invalid"] = invalid
    return field


def _request_schemas(request: Mapping[str, Any], names: set[Any]) -> dict[str, Any]:
    """The argument schemas of the tools ``names`` of ``request`` (its inline ``tools`` or its
    named registry's), by name."""
    registry = (request.get("vllm_xargs") or {}).get(ARG_TOOLS)
    if isinstance(registry, str):
        try:
            specs = registry_specs(registry)
        except (ValueError, OSError):
            return {}
        return {n: specs.by_name[n].parameters or {"type": "object"} for n in names & specs.names}
    out: dict[str, Any] = {}
    for t in request.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and fn.get("name") in names:
            out[fn["name"]] = fn.get("parameters") or {"type": "object"}
    return out


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _relaxations(text: str) -> tuple[Problem, ...]:
    return tuple(unserved_problems(json.loads(text)))


def check_tool_choice(choice: str, names: Sequence[str] | frozenset[str], where: str) -> None:
    """A named ``choice`` must be one of ``names`` (``where``: the tools' origin, for the
    message)."""
    if choice in BUILTIN_CHOICES:
        return
    known = names if isinstance(names, frozenset) else frozenset(names)
    if choice not in known:
        some = ", ".join(sorted(known)[:10])
        raise ValueError(
            f"tool_choice={choice!r}: no tool of that name in {where} ({len(known)} tools: "
            f"{some}{', ...' if len(known) > 10 else ''}); name one of them, or use 'required' "
            "or 'auto'"
        )


class RegistrySpecs:
    """A named registry as the API server holds it: the tools the engine compiles (read as the
    compiler reads them, so both processes agree on the names), by name."""

    def __init__(
        self, name: str, tools: list[Any], requests: dict[str, list[str]] | None = None
    ) -> None:
        """``requests``: requests written per tool name, indexed by the tool search beside
        each tool's text (a name the registry lacks is refused, naming it)."""
        self.name = name
        self.specs = check_tools(tools, slots=False)  # the engine runs the slot analysis
        self.by_name = {s.name: s for s in self.specs}
        self.names = frozenset(self.by_name)
        if requests is not None:
            unknown = sorted(set(requests) - self.names)
            if unknown:
                raise ValueError(
                    f"registry {name!r}: its requests file names {len(unknown)} tools it does "
                    f"not hold ({', '.join(repr(u) for u in unknown[:5])}): keys must be the "
                    "tools' names, as QuestionWriter.write returns them"
                )
        self.requests = requests

    def __len__(self) -> int:
        return len(self.names)

    def openai(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """The OpenAI tool dicts of ``names``, in that order."""
        out = []
        for n in names:
            s = self.by_name[n]
            fn: dict[str, Any] = {"name": s.name}
            if s.description:
                fn["description"] = s.description
            fn["parameters"] = s.parameters or {"type": "object", "properties": {}}
            out.append({"type": "function", "function": fn})
        return out


_registries: dict[tuple[str, str], RegistrySpecs] = {}


def registry_specs(name: str) -> RegistrySpecs:
    """Registry ``name`` from ``$TRIEROUTER_TOOLS`` (loaded once per process), or
    ``ValueError`` (which does not list the configured names: the server log does)."""
    cfg = settings.TOOLS.get()
    key = (cfg, name)
    with _lock:
        hit = _registries.get(key)
    if hit is not None:
        return hit
    if name not in list_tool_registries():  # the names are not listed to the caller
        raise ValueError(f"tool registry {name!r:.80} is not configured on this server")
    specs = RegistrySpecs(name, load_tool_registries(cfg)[name], load_registry_requests(cfg, name))
    with _lock:
        _registries[key] = specs
    return specs
