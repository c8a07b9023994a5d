"""Inline tool sets (a request's tools as JSON text) between the API process and the engine.

:func:`analyze_specs` runs the slot analysis of :class:`~trierouter.registry.compiler.
CompiledTools` as plain data (:mod:`trierouter.registry.analysis`), with each tool's span in the
set's text; :func:`compile_inline` compiles a set with the analysis an API process stored for it:
the names trie only, each tool's schema parsed from the text when a call first reaches it.
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from trierouter.errors import CompileError
from trierouter.registry.analysis import (
    ENV_ANALYSIS_DIR,
    AnalysisStore,
    ToolsAnalysis,
    analyze_tools,
    text_spans,
    tools_key,
)
from trierouter.registry.compiler import CompiledTools, ToolSpec, _as_spec, compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["StoredNames", "analyze_specs", "compile_inline"]

logger = logging.getLogger("trierouter")


def compile_inline(
    text: str,
    index: TokenIndex,
    *,
    format: str,
    store: AnalysisStore | None,
    key: str | None = None,
) -> CompiledTools:
    """An inline tool set (its JSON text) compiled with the slot analysis an API process stored
    for it (the names trie only, or not even that: names tries the API process's worker
    compiled, :meth:`AnalysisStore.put_names`, are loaded when the plan asks for them), or
    analysed here without one, with a warning: in a server's engine that runs inside the batch
    step (:mod:`trierouter.registry.analysis`). ``key``: :func:`tools_key` of ``text``, if
    the caller has it."""
    key = tools_key(text) if key is None else key
    prepared = None if store is None else StoredNames(store, key, index.vocabulary)
    paused = gc.isenabled()
    gc.disable()  # a collection over a server's objects could cost more than the parse
    try:
        analysis = None if store is None else store.get(key)
        if analysis is not None and analysis.spans:  # each schema parsed when a call needs it
            inline: Any = _stored_specs(text, analysis)
        else:
            inline = json.loads(text)
    finally:
        if paused:
            gc.enable()
    if analysis is None:
        logger.warning(
            "trierouter: %d inline tools analysed inside the engine's step (no analysis from "
            "the API process: requests sent to the engine without trierouter serve's "
            "middleware, or $%s unset); other requests in the batch wait for it",
            len(inline) if isinstance(inline, list) else 0,
            ENV_ANALYSIS_DIR,
        )
    try:
        return compile_tools(inline, index, format=format, analysis=analysis, prepared=prepared)
    except CompileError:
        if analysis is None:
            raise
        logger.warning("trierouter: a stored tools analysis did not fit; analysing again")
        return compile_tools(inline, index, format=format)


def analyze_specs(tools: Iterable[Any], *, text: str | None = None) -> ToolsAnalysis:
    """The slot analysis :class:`CompiledTools` runs for ``tools`` (the same dicts or objects it
    is given), as plain data to hand to ``CompiledTools(..., analysis=...)`` later or in
    another process (:mod:`trierouter.registry.analysis`). With ``text``, the JSON the tools
    were read from, each tool's span in it and its strict flag too (:func:`compile_inline` then
    parses a tool only when a call reaches it)."""
    items = list(tools)
    specs = [_as_spec(t) for t in items]
    analysis = analyze_tools([(s.name, s.parameters) for s in specs])
    spans = None if text is None else text_spans(items, text)
    if spans is None:
        return analysis
    return replace(analysis, strict=tuple(s.strict for s in specs), spans=spans)


class StoredNames:
    """The names tries and closing tables of the tool set ``key`` in ``store`` for ``vocab``
    (:meth:`AnalysisStore.put_names`), read when a plan asks for them."""

    def __init__(self, store: AnalysisStore, key: str, vocab: Vocabulary) -> None:
        self.store, self.key, self.vocab = store, key, vocab

    def trie(self, fmt: str, lead: str) -> ChoiceSet | None:
        return self.store.get_trie(self.key, self.vocab, fmt, lead)

    def table(self, fmt: str, lead: str, variant: str, trie: ChoiceSet) -> Any | None:
        return self.store.get_table(self.key, self.vocab, fmt, lead, variant, trie)


class _StoredSpec(ToolSpec):
    """A tool of an inline set whose argument schema is read from the set's JSON text the first
    time it is needed (a call reaching the tool), not when the set is compiled."""

    __slots__ = ("_parsed", "_span", "_text")
    _parsed: dict[str, Any] | None
    _span: tuple[int, int]
    _text: str

    @property
    def parameters(self) -> dict[str, Any]:
        if self._parsed is None:
            a, b = self._span
            object.__setattr__(self, "_parsed", _as_spec(json.loads(self._text[a:b])).parameters)
        assert self._parsed is not None
        return self._parsed


def _stored_specs(text: str, analysis: ToolsAnalysis) -> list[ToolSpec]:
    out: list[ToolSpec] = []
    for name, strict, span in zip(analysis.names, analysis.strict, analysis.spans, strict=True):
        spec = object.__new__(_StoredSpec)
        for key, value in (
            ("name", name), ("description", ""), ("strict", strict),
            ("_text", text), ("_span", span), ("_parsed", None),
        ):  # fmt: skip
            object.__setattr__(spec, key, value)
        out.append(spec)
    return out
