"""The server's tool search: a named registry's tools for one conversation, fitted to the context.

A request that names a registry (``vllm_xargs.trierouter_tools``) gets the tools the search
ranks first for its conversation (:func:`conversation_query`), rendered into its ``tools`` so
the chat template shows them. Two things bound that list:

- ``trierouter_tool_search`` (default 16): how many tools the search proposes;
- the served model's context: the tools rendered into the prompt must fit
  ``max_model_len`` less the request's own messages and its ``max_tokens`` (or
  :data:`DEFAULT_OUTPUT_RESERVE` when it sends none). A tool that would take more than a quarter
  of that budget is rendered compact (its description cut to the first sentence, parameter
  descriptions left out: the argument constraint still comes from the full schema); a tool that
  does not fit even so is left out, and the next one is tried. A request whose own text is
  short is never refused because of what the search added.

The search (:class:`ToolSearch`) is BM25 over each tool's
:func:`~trierouter.shortlist.tool_text.tool_text` (its name as written and in words, its
description, its parameters), built once per registry in the background
(``trierouter_search_text="name_description"``: over names and descriptions only, the
search before parameters were indexed). What was considered,
with scores, and what reached the prompt is returned as the routing record
(:func:`expand_registry`), which the middleware puts into the response as the
``trierouter_routing`` extension field.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trierouter.router.vllm.args import ARG_ALLOWED, ARG_TOOLS
from trierouter.router.vllm.checks import RegistrySpecs, registry_specs

__all__ = [
    "ARG_CONSTRAIN",
    "ARG_SEARCH_TEXT",
    "ARG_TOOL_SEARCH",
    "DEFAULT_OUTPUT_RESERVE",
    "SEARCH_TEXTS",
    "BadRequest",
    "PromptContext",
    "ToolSearch",
    "compact_tool",
    "conversation_query",
    "expand_registry",
    "search_for",
]

ARG_TOOL_SEARCH = "trierouter_tool_search"
ARG_CONSTRAIN = "trierouter_constrain"
ARG_SEARCH_TEXT = "trierouter_search_text"
DEFAULT_K = 16
MAX_K = 256
MAX_TWINS_SHOWN = 8
"""Twins (:func:`~trierouter.shortlist.tool_text.twin_key`) named per candidate, at most."""
DEFAULT_OUTPUT_RESERVE = 1024
"""Tokens kept for the answer when a request sends no ``max_tokens``."""
_SHARE = 4
"""A tool over ``1 / _SHARE`` of the tools' budget is rendered compact."""


class BadRequest(ValueError):
    """A request the middleware refuses (HTTP 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def conversation_query(messages: Any, *, turns: int = 3) -> str:
    """The text a tool search looks for: the last ``turns`` user and tool messages, newest
    first (the current question weighs most)."""
    texts: list[str] = []
    if not isinstance(messages, list):
        return ""
    for m in reversed(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "tool"):
            continue
        c = m.get("content")
        if isinstance(c, list):  # content parts
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        if isinstance(c, str) and c.strip():
            texts.append(c)
        if len(texts) >= turns:
            break
    return "\n".join(texts)


SEARCH_TEXTS = ("tool_text", "name_description")
"""What a tool is indexed under: ``tool_text`` (the default: name as written and in words,
description, parameters) or ``name_description`` (name and description: the search before
parameters were indexed, kept to compare against)."""


class ToolSearch:
    """The search of one registry (:data:`SEARCH_TEXTS`): the default index is built once in
    the background when the registry is first used, another on the first request for it."""

    def __init__(self, specs: RegistrySpecs) -> None:
        self.specs = specs
        self._ready = threading.Event()
        self._indexes: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self.build_seconds: dict[str, float] = {}
        threading.Thread(target=self._build, daemon=True, name="trierouter-bm25").start()

    def _index(self, text: str) -> Any:
        from trierouter.shortlist.tool_text import ToolIndex

        t0 = time.perf_counter()
        tools = self.specs.specs
        if text == "tool_text":  # with the requests written per tool when configured
            index = ToolIndex.build(tools, expansions=self.specs.requests)
        else:  # names and descriptions only: the search before parameters were indexed
            index = ToolIndex.build(tools, document=lambda name, desc, _: f"{name} {desc}")
        index.twins("")  # the registry's twin groups, built with its index
        self.build_seconds[text] = round(time.perf_counter() - t0, 3)
        return index

    def _build(self) -> None:
        try:
            self._indexes[SEARCH_TEXTS[0]] = self._index(SEARCH_TEXTS[0])
        except BaseException as exc:  # reported to every request that needs it
            self._error = exc
        finally:
            self._ready.set()

    def ready(self, text: str = SEARCH_TEXTS[0]) -> Any:
        """The index of ``text``, once built (waits for the background build, or builds it)."""
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError(f"tool search index failed to build: {self._error}")
        with self._lock:
            index = self._indexes.get(text)
            if index is None:
                index = self._indexes[text] = self._index(text)
        return index


_searches: dict[RegistrySpecs, ToolSearch] = {}
_search_lock = threading.Lock()


def search_for(name: str) -> ToolSearch:
    """The search of registry ``name`` as ``$TRIEROUTER_TOOLS`` configures it now (started on
    first use, shared by every request)."""
    specs = registry_specs(name)
    with _search_lock:
        s = _searches.get(specs)
        if s is None:
            s = _searches[specs] = ToolSearch(specs)
        return s


# -- fitting the context ---------------------------------------------------------------------------
@dataclass
class PromptContext:
    """What the budget of a prompt's tools is measured with: the served model's tokenizer (its
    chat template) and context length."""

    tokenizer: Any
    max_model_len: int
    _overhead: int | None = field(default=None, repr=False)

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def messages_tokens(self, messages: Any) -> int:
        """The conversation's tokens as the chat template renders it without tools (a
        conservative estimate from its characters where the template cannot render it)."""
        try:
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            return self.count(text)
        except Exception:  # the engine renders it its own way; do not refuse here
            return len(json.dumps(messages, ensure_ascii=False)) // 2

    def tools_overhead(self) -> int:
        """Tokens the template adds around its tools (its tools header), measured once."""
        if self._overhead is None:
            msgs = [{"role": "user", "content": "x"}]
            probe = {"type": "function", "function": {"name": "probe", "parameters": {}}}
            try:
                with_tool = self.tokenizer.apply_chat_template(
                    msgs, tools=[probe], add_generation_prompt=True, tokenize=False
                )
                without = self.tokenizer.apply_chat_template(
                    msgs, add_generation_prompt=True, tokenize=False
                )
                extra = self.count(with_tool) - self.count(without) - self.tool_tokens(probe)
                self._overhead = max(0, extra)
            except Exception:
                self._overhead = 256
        return self._overhead

    def tool_tokens(self, tool: dict[str, Any]) -> int:
        """One tool's tokens as a template renders it (its JSON, and a line break)."""
        return self.count(json.dumps(tool, ensure_ascii=False)) + 1


def compact_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """``tool`` with its description cut to the first sentence (at most 200 characters) and the
    descriptions, titles and examples inside its parameters left out; every keyword that
    constrains a value is kept."""
    fn = dict(tool["function"])
    desc = str(fn.get("description") or "")
    if desc:
        first = desc.split(". ")[0].strip()
        fn["description"] = first if len(first) <= 200 else first[:197] + "..."
    if "parameters" in fn:
        fn["parameters"] = _strip_docs(fn["parameters"])
    return {**tool, "function": fn}


_DOCS = frozenset({"description", "title", "examples", "example", "$comment"})


def _strip_docs(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k in _DOCS and not isinstance(v, dict):
                continue  # a documentation keyword (a property *named* "title" is a dict)
            if k in ("properties", "patternProperties", "$defs", "definitions") and isinstance(
                v, dict
            ):
                out[k] = {name: _strip_docs(sub) for name, sub in v.items()}
            else:
                out[k] = _strip_docs(v)
        return out
    if isinstance(schema, list):
        return [_strip_docs(v) for v in schema]
    return schema


def _output_reserve(body: dict[str, Any]) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        v = body.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return DEFAULT_OUTPUT_RESERVE


def fit_tools(
    tools: Sequence[dict[str, Any]], pinned: int, body: dict[str, Any], ctx: PromptContext
) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """The tools (in order) that fit the prompt's budget, each as rendered; the fate of each
    (``"full"``, ``"compact"`` or ``"over_budget"``); and the budget's figures. The first
    ``pinned`` tools (named by the request itself) are always kept (compact if large)."""
    base = ctx.messages_tokens(body.get("messages"))
    reserve = _output_reserve(body)
    budget = ctx.max_model_len - base - reserve - ctx.tools_overhead()
    used = 0
    kept: list[dict[str, Any]] = []
    fates: list[str] = []
    for i, tool in enumerate(tools):
        full = ctx.tool_tokens(tool)
        if full <= max(0, budget) // _SHARE and used + full <= budget:
            kept.append(tool)
            fates.append("full")
            used += full
            continue
        small = compact_tool(tool)
        n = ctx.tool_tokens(small)
        if used + n <= budget or i < pinned:
            kept.append(small)
            fates.append("compact")
            used += n
        else:
            fates.append("over_budget")
    figures = {
        "max_model_len": ctx.max_model_len,
        "messages_tokens": base,
        "output_reserve": reserve,
        "tools_budget": max(0, budget),
        "tools_tokens": used,
    }
    return kept, fates, figures


# -- the request -----------------------------------------------------------------------------------
def expand_registry(body: dict[str, Any], ctx: PromptContext | None = None) -> dict[str, Any]:
    """Rewrite a request naming a registry (in place): the searched tools that fit into
    ``tools``; returns the routing record (the ``trierouter_routing`` field)."""
    xargs = body.get("vllm_xargs")
    assert isinstance(xargs, dict) and ARG_TOOLS in xargs
    name = xargs[ARG_TOOLS]
    if not isinstance(name, str):
        raise BadRequest(f"vllm_xargs.{ARG_TOOLS}: expected a registry name", "vllm_xargs")
    try:
        specs = registry_specs(name)
    except ValueError as exc:
        raise BadRequest(f"vllm_xargs.{ARG_TOOLS}: {exc}", "vllm_xargs") from exc
    k = xargs.pop(ARG_TOOL_SEARCH, DEFAULT_K)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise BadRequest(
            f"vllm_xargs.{ARG_TOOL_SEARCH}={k!r:.40}: expected an int in 1..{MAX_K}",
            "vllm_xargs",
        )
    constrain = xargs.pop(ARG_CONSTRAIN, "shortlist")
    if constrain not in ("shortlist", "registry"):
        raise BadRequest(
            f"vllm_xargs.{ARG_CONSTRAIN}={constrain!r:.40}: expected 'shortlist' or 'registry'",
            "vllm_xargs",
        )
    text = xargs.pop(ARG_SEARCH_TEXT, SEARCH_TEXTS[0])
    if text not in SEARCH_TEXTS:
        raise BadRequest(
            f"vllm_xargs.{ARG_SEARCH_TEXT}={text!r:.40}: expected one of {list(SEARCH_TEXTS)}",
            "vllm_xargs",
        )
    pinned: list[str] = []
    for t in body.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) else None
        n = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(n, str) or n not in specs.names:
            raise BadRequest(
                f"tools: {n!r:.80} is not in registry {name!r}; with a registry, tools may "
                "only name its tools (they are always shortlisted)",
                "tools",
            )
        pinned.append(n)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        fn = choice.get("function")
        forced = fn.get("name") if isinstance(fn, dict) else None
        if isinstance(forced, str):
            if forced not in specs.names:
                raise BadRequest(
                    f"tool_choice: no tool named {forced!r} in registry {name!r}", "tool_choice"
                )
            pinned.append(forced)
    pinned = list(dict.fromkeys(pinned))
    search = search_for(name)
    query = conversation_query(body.get("messages"))
    t0 = time.perf_counter()
    index = search.ready(text)  # the first requests after start wait for it (reported apart)
    expanded = text == "tool_text" and bool(specs.requests)
    t1 = time.perf_counter()
    found: list[tuple[str, float]] = index.search(query, k)
    search_ms = (time.perf_counter() - t1) * 1000
    wait_ms = (t1 - t0) * 1000
    score = dict(found)
    names = list(dict.fromkeys([*pinned, *(n for n, _ in found)]))
    if not names:
        raise BadRequest(
            f"vllm_xargs.{ARG_TOOLS}: no tool of registry {name!r} matches the conversation "
            "(BM25 over the tools' names, descriptions and parameters, on the user and tool "
            "turns); name the tools to offer in `tools` or in tool_choice",
            "vllm_xargs",
        )
    tools = specs.openai(names)
    figures: dict[str, Any] = {}
    if ctx is not None:
        tools, fates, figures = fit_tools(tools, len(pinned), body, ctx)
    else:
        fates = ["full"] * len(names)
    shown = [n for n, f in zip(names, fates, strict=True) if f != "over_budget"]
    if not shown:
        b = figures
        raise BadRequest(
            f"vllm_xargs.{ARG_TOOLS}: no tool of registry {name!r} fits the context: "
            f"max_model_len {b['max_model_len']} less the messages ({b['messages_tokens']} "
            f"tokens) and the answer's reserve ({b['output_reserve']}: max_tokens, default "
            f"{DEFAULT_OUTPUT_RESERVE}) leaves {b['tools_budget']} tokens; send a lower "
            "max_tokens or a shorter conversation",
            "vllm_xargs",
        )
    body["tools"] = tools
    if constrain == "shortlist":
        xargs[ARG_ALLOWED] = shown
    body["vllm_xargs"] = xargs
    return {
        "registry": name,
        "search": f"bm25:{text}" + ("+requests" if expanded else ""),
        "query": query[:500],
        "k": k,
        "search_ms": round(search_ms, 3),
        **({"index_wait_ms": round(wait_ms, 1)} if wait_ms >= 1 else {}),
        "candidates": [
            {
                "name": n,
                "rank": i + 1,
                "search_score": score.get(n),
                "pinned": n in pinned,
                "prompt": fate,
                **({"twins": tw[:MAX_TWINS_SHOWN]} if (tw := index.twins(n)) else {}),
            }
            for i, (n, fate) in enumerate(zip(names, fates, strict=True))
        ],
        "constrain": constrain,
        **({"budget": figures} if figures else {}),
    }
