"""The tool sets a server's engine constrains calls to, and the call plans over them.

Named registries (``$TRIEROUTER_TOOLS``) are compiled when the engine starts, one copy per call
format the requests use; inline sets are compiled on first use from what the API process's
worker prepared (:mod:`.prepare`) and kept in an LRU bounded in count and bytes; ``tool_choice:
"none"`` needs no tool at all. :meth:`EngineToolSets.warm`, run on the engine's warm-up thread,
builds what each registry's first ``required`` and ``auto`` request would otherwise build inside
the step (its names tries in the model's call formats, their turn-closing tables, the free-text
rows of the ``auto`` openers).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trierouter.registry.analysis import AnalysisStore, tools_key
from trierouter.registry.compiler import CompiledTools, compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.inline_tools import compile_inline
from trierouter.router.tool_calls.closing import plan_tables
from trierouter.router.tool_calls.native import native_plan
from trierouter.router.vllm.args import ARG_TOOLS, RequestSpec, logger

__all__ = ["EngineToolSets"]

_NO_TOOL = {"name": "no_call", "parameters": {"type": "object", "properties": {}}}
"""What ``tool_choice: "none"`` compiles instead of the request's tools: its constraint is the
call format's opener, forbidden, and the same whatever the tools (a new inline set sent with
``"none"`` is neither analysed nor compiled in the engine's step)."""


class EngineToolSets:
    """Registries, inline sets and call plans of one engine (see the module docstring)."""

    def __init__(
        self,
        index: Callable[[], TokenIndex],
        store: AnalysisStore | None,
        registries: dict[str, CompiledTools],
        cache_size: int,
        cache_bytes: int,
    ) -> None:
        self._index, self._store = index, store
        self.registries = registries
        self.cache_size, self.cache_bytes = cache_size, cache_bytes
        self.inline: OrderedDict[str, CompiledTools] = OrderedDict()
        self._formatted: dict[tuple[str, str], CompiledTools] = {}
        self._no_tools: dict[str, CompiledTools] = {}  # by call format: tool_choice "none"
        self._plans: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        """Held by :meth:`warm` while it builds, and by :meth:`plan` for a registry: a request
        that comes during the warm-up waits for it instead of building the same alongside."""

    def plan(self, spec: RequestSpec) -> Any:
        """The :class:`~trierouter.router.tool_calls.plan.ToolCallPlan` of a request (cached)."""
        fmt = spec.tool_format
        if spec.tools_name is not None and spec.tools_name not in self.registries:
            raise ValueError(f"{ARG_TOOLS}={spec.tools_name!r}: unknown registry")
        if spec.tool_choice == "none":  # text without the call opener: no tool plays a part
            src, tools = "none:" + fmt, self._no_tools.get(fmt)
            if tools is None:  # once per format, a few milliseconds
                tools = compile_tools([_NO_TOOL], self._index(), format=fmt)
                self._no_tools[fmt] = tools
        elif spec.tools_name is not None:
            with self._lock:
                return self._registry_plan(spec)
        else:
            src, tools = self._inline_set(spec, fmt)
        return self._plan(src, tools, spec)

    def _registry_plan(self, spec: RequestSpec) -> Any:
        assert spec.tools_name is not None
        tools = self.registry_in(spec.tools_name, spec.tool_format)
        return self._plan(f"tools:{spec.tools_name}", tools, spec)

    def _inline_set(self, spec: RequestSpec, fmt: str) -> tuple[str, CompiledTools]:
        assert spec.tools_inline is not None
        sha = tools_key(spec.tools_inline)
        src = "inline:" + sha + ":" + fmt
        tools = self.inline.get(src)
        if tools is not None:
            self.inline.move_to_end(src)
            return src, tools
        tools = compile_inline(spec.tools_inline, self._index(), format=fmt, store=self._store,
                               key=sha)  # fmt: skip
        self.inline[src] = tools
        # bounded in count and in bytes (measured now: names tries, automata, masks)
        sizes = [t.nbytes for t in self.inline.values()]
        while len(self.inline) > 1 and (
            len(self.inline) > self.cache_size or sum(sizes) > self.cache_bytes
        ):
            self.inline.popitem(last=False)
            sizes.pop(0)
        return src, tools

    def _plan(self, src: str, tools: CompiledTools, spec: RequestSpec) -> Any:
        none = src.startswith("none:")
        allowed = None if spec.allowed is None or none else sorted(set(spec.allowed))
        subset = None if allowed is None else hashlib.sha256("\n".join(allowed).encode()).digest()
        key = (
            src, spec.tool_format, spec.tool_choice, spec.think, spec.think_max_tokens,
            spec.tool_budget, spec.parallel_tool_calls, subset, spec.auto_openers,
        )  # fmt: skip
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        plan = native_plan(
            tools,
            tool_choice=spec.tool_choice,
            allowed=allowed,
            parallel=spec.parallel_tool_calls,
            budget=spec.tool_budget,
            think=spec.think,
            think_max_tokens=spec.think_max_tokens,
            openers=spec.auto_openers,
        )
        self._plans[key] = plan
        while len(self._plans) > self.cache_size:
            self._plans.popitem(last=False)
        return plan

    def registry_in(self, name: str, fmt: str) -> CompiledTools:
        """Named registry ``name`` in call format ``fmt`` (the slot analysis shared)."""
        key = (name, fmt)
        hit = self._formatted.get(key)
        if hit is None:
            hit = self._formatted[key] = self.registries[name].with_format(fmt)
        return hit

    def registry_of(self, tools: Any) -> str | None:
        """The name of the registry ``tools`` is (in some call format), or ``None``."""
        named = [k for k, v in self.registries.items() if v is tools]
        named += [k for (k, _), v in list(self._formatted.items()) if v is tools]  # warm() adds
        return named[0] if named else None

    def warm(self, fmt: str, openers: Sequence[str] | None) -> None:
        """Build, for every registry, what its first ``required`` and ``auto`` request in call
        format ``fmt`` would build inside the step (the model's ``auto`` ``openers``; one call
        and several): the names tries of the first and following calls, their closing tables,
        the first masks. A failure is
        logged (the first such request then meets it)."""
        with self._lock:
            for name in self.registries:
                try:
                    tools = self.registry_in(name, fmt)
                    for choice, parallel in WARMED:
                        plan = native_plan(tools, tool_choice=choice, parallel=parallel,
                                           openers=openers)  # fmt: skip
                        plan_tables(plan)  # every call's closing table, kept with its tools
                        row = np.zeros((1, (plan.width + 31) // 32), dtype=np.int32)
                        plan.fill_next_token_bitmask(plan.start(), row, 0, remaining=1024)
                except Exception as exc:
                    logger.warning("trierouter: registry %r not warmed: %r", name, exc)


WARMED: tuple[tuple[str, bool], ...] = (
    ("required", True), ("required", False), ("auto", True), ("auto", False),
)  # fmt: skip
"""The ``(tool_choice, parallel calls)`` plans :meth:`EngineToolSets.warm` builds."""
