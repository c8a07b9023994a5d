"""Compile a tool registry for decoding: the names trie and every tool's argument constraint.

    tools = compile_tools(registry, index)          # names trie + the engine of every slot
    tools.explain("github.create_issue")            # which engine serves each slot
    tools.automaton(i)                              # tool i's byte automaton (built on first use)

What is compiled up front: the trie over ``{"name": "<name>", "arguments": `` for every tool and the
engine of every slot of every schema (see :mod:`trierouter.registry.slots.dispatch`). The XGrammar
grammar of a slot that needs one is compiled the first time a call reaches it and kept, one per
distinct sub-schema (``eager_xgrammar=True`` compiles them all up front: about a second each). Each
tool's automaton is wired from the shared slot automata the first time the tool is chosen (about a
millisecond), every state's token mask with it, in the core; both are kept
(``materialize()`` builds all of them up front; ``eager_automata=True`` builds them while compiling,
in the same pass over each distinct schema as the slot analysis)."""

from __future__ import annotations

import copy
import gc
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trierouter.errors import (
    CompileError,
    TrieRouterError,
    UnknownToolError,
    missing,
)
from trierouter.registry.analysis import (
    STEP_WORK,
    ToolsAnalysis,
    analyze_tools,
    drop_unparsed_patterns,
)
from trierouter.registry.analysis import normalized as _normalized
from trierouter.registry.call_formats import CALL_HEAD, CallFormat, call_format
from trierouter.registry.index import TokenIndex
from trierouter.registry.relax import log_relaxed, relaxed_table, strict_for, unserved_error
from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.eager import MaskPipeline
from trierouter.registry.slots.masks import ToolAutomaton, VocabTables
from trierouter.registry.slots.normalize import Problem
from trierouter.registry.slots.slot_records import Slot, slot_table
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary, xgrammar_tokenizer_info

__all__ = [
    "CALL_HEAD",
    "CompiledTools",
    "ToolSpec",
    "check_tools",
    "compile_tools",
    "xgrammar_tokenizer_info",
]


class Prepared(Protocol):
    """Names tries over every tool of a set and their closing tables that another process
    compiled (:class:`~trierouter.registry.inline_tools.StoredNames`); ``None``: not there."""

    def trie(self, fmt: str, lead: str) -> ChoiceSet | None: ...

    def table(self, fmt: str, lead: str, variant: str, trie: ChoiceSet) -> Any | None: ...


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the compiler sees it: a name and the JSON Schema of its arguments."""

    name: str
    parameters: dict[str, Any]
    description: str = ""
    strict: bool | None = None
    """The function's ``strict`` flag (OpenAI's): ``True``, exact or refused (see
    :func:`~trierouter.registry.relax.strict_for`)."""


def _as_spec(tool: Any) -> ToolSpec:
    if isinstance(tool, ToolSpec):
        return tool
    if isinstance(tool, dict):
        f = tool
        if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
            f = tool["function"]
        schema = f.get("parameters", f.get("input_schema", f.get("inputSchema")))
        flag = f.get("strict") is True or None
        return ToolSpec(f["name"], schema or {}, f.get("description") or "", flag)
    name = getattr(tool, "name", None)
    params = getattr(tool, "parameters", None)
    if isinstance(name, str) and isinstance(params, dict):
        flag = getattr(tool, "strict", None) is True or None
        return ToolSpec(name, params, getattr(tool, "description", "") or "", flag)
    raise CompileError(
        f"tool {tool!r:.80}: expected a ToolRegistry Tool, an OpenAI / Anthropic / MCP tool "
        "dict or a ToolSpec"
    )


@dataclass
class CompileStats:
    tools: int = 0
    names_ms: float = 0.0
    analysis_ms: float = 0.0
    xgrammar_ms: float = 0.0
    xgrammar_grammars: int = 0
    analysis_reused: bool = False
    """The slot analysis came ready-made (``analysis=``, e.g. from the API process)."""
    slots_by_engine: dict[str, int] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        return self.names_ms + self.analysis_ms + self.xgrammar_ms


class CompiledTools:
    """A registry compiled against one tokenizer: names trie, slot engines, automata on demand
    (``eager_automata=True``: every tool's automaton with every mask built while compiling,
    in the slot analysis's pass over each distinct schema; with the compiled core, each
    automaton's final wiring, byte classes and masks run on a second thread meanwhile; at most
    ``cache_size`` held)."""

    def __init__(
        self,
        tools: Iterable[Any],
        index: TokenIndex,
        *,
        format: str | CallFormat = "json",
        eager_xgrammar: bool = False,
        eager_automata: bool = False,
        cache_size: int = 4096,
        strict: bool | None = None,
        analysis: ToolsAnalysis | None = None,
        prepared: Prepared | None = None,
    ) -> None:
        self._prepared = prepared
        """Names tries (and their closing tables) made elsewhere, by call format and lead."""
        self._loaded: dict[tuple[str, str], ChoiceSet] = {}
        self._closing: dict[tuple[str, str, str], tuple[ChoiceSet, Any]] = {}
        """Closing tables computed here, by format, lead and variant, with their trie."""
        # Python's cyclic collector is paused while compiling (and restored after): a compile
        # allocates many long-lived objects and no cycles, and each collection would traverse
        # all of them again
        paused = gc.isenabled()
        gc.disable()
        try:
            self._compile(
                tools, index, format, eager_xgrammar, eager_automata, cache_size, strict, analysis
            )
        finally:
            if paused:
                gc.enable()

    def _compile(
        self,
        tools: Iterable[Any],
        index: TokenIndex,
        format: str | CallFormat,
        eager_xgrammar: bool,
        eager_automata: bool,
        cache_size: int,
        strict: bool | None,
        analysis: ToolsAnalysis | None,
    ) -> None:
        self.index = index
        self.vocabulary = index.vocabulary
        try:
            self.format = call_format(format)
        except TrieRouterError as exc:
            raise CompileError(str(exc)) from None
        """The model-native call syntax the names trie and the automata are built for."""
        self.tail = self.format.tail()
        self.specs: list[ToolSpec] = [_as_spec(t) for t in tools]
        if not self.specs:
            raise CompileError("tools: the registry is empty; register at least one tool")
        self.stats = CompileStats(tools=len(self.specs))
        self._by_name = {s.name: i for i, s in enumerate(self.specs)}
        if len(self._by_name) != len(self.specs):
            seen: set[str] = set()
            dup = next(s.name for s in self.specs if s.name in seen or seen.add(s.name))  # type: ignore[func-returns-value]
            raise CompileError(f"tool {dup!r} is registered twice; tool names must be unique")
        t0 = time.perf_counter()
        self._by_escaped = {_escaped(s.name): i for i, s in enumerate(self.specs)}
        self._leads: list[str] = []
        self._tries: dict[str, ChoiceSet] = {}
        self._twins: dict[CallFormat, CompiledTools] = {}
        self.names = self._set_format(self.format)
        """The names trie of a whole call head (``tool_choice="required"``)."""
        t1 = time.perf_counter()
        self.strict = strict
        self._builder = SlotCompiler(strict=False)
        self._tables = VocabTables.get(self.vocabulary)
        self._automata: OrderedDict[tuple[str, bool], ToolAutomaton] = OrderedDict()
        self._schema_keys: list[str | None] = [None] * len(self.specs)
        self._cache_size = cache_size
        self._slots: list[list[Slot]] | None = []
        self.relaxed: dict[str, list[Problem]] = {}
        """Per relaxed tool, what it is served without (kind and slot path of each)."""
        if eager_automata:
            self.xgrammar_schemas = self._build_all()
            drop_unparsed_patterns(
                [s.name for s in self.specs], self.slots, self.relaxed, self.xgrammar_schemas
            )
            for slots in self.slots:
                for sl in slots:
                    self.stats.slots_by_engine[sl.engine] = (
                        self.stats.slots_by_engine.get(sl.engine, 0) + 1
                    )
        else:
            if analysis is None:
                analysis = analyze_tools([(s.name, s.parameters) for s in self.specs])
            elif list(analysis.names) != [s.name for s in self.specs]:
                raise CompileError("analysis: made for other tools than these")
            else:
                self.stats.analysis_reused = True
            self._slots = None if analysis.slots is None else [list(t) for t in analysis.slots]
            self.relaxed = {n: list(ps) for n, ps in analysis.relaxed.items()}
            self.xgrammar_schemas = dict(analysis.xgrammar_schemas)
            self.stats.slots_by_engine = dict(analysis.engines)
        refused = {
            s.name: self.relaxed[s.name]
            for s in self.specs
            if s.name in self.relaxed and strict_for(strict, s.strict)
        }
        if refused:
            raise unserved_error(refused)
        if not self.stats.analysis_reused:  # else logged where it was made
            log_relaxed(self.relaxed)
        t2 = time.perf_counter()
        self.stats.names_ms = (t1 - t0) * 1e3
        self.stats.analysis_ms = (t2 - t1) * 1e3
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._xgr_compiler: Any = None
        self._grammars: dict[str, Any] = {}
        if eager_xgrammar and self.xgrammar_schemas:
            t3 = time.perf_counter()
            for key in self.xgrammar_schemas:
                self.grammar(key)
            self.stats.xgrammar_ms = (time.perf_counter() - t3) * 1e3
        self.stats.xgrammar_grammars = len(self._grammars)

    def _build_all(self) -> dict[str, dict[str, Any]]:
        """``eager_automata``: every distinct schema analysed and built in one pass (the build
        lists the same slots and problems as the dry analysis: one code path decides both),
        every automaton with every mask held (up to ``cache_size``); the XGrammar slots."""
        done: dict[str, tuple[list[Slot], list[Problem]]] = {}
        tail = self.format.tail().encode()
        head = self.format.ARGS_HEAD.encode()
        with MaskPipeline() as masks:  # wiring, classes, masks on a second thread
            for i, s in enumerate(self.specs):
                schema = _normalized(s.parameters)
                skey = _schema_key(schema, i)
                self._schema_keys[i] = skey
                hit = done.get(skey)
                if hit is None:
                    # wired, compressed and masked by the core on the masks' thread
                    frag, slots, problems = self._builder._tool(schema, tail, head, True)
                    hit = done[skey] = (slots, problems)
                    auto = ToolAutomaton(frag, self._tables, masks=False)
                    masks.add(auto)
                    self._keep((skey, False), auto)
                self.slots.append(list(hit[0]))  # the eager pass: _slots is a list
                if hit[1]:
                    self.relaxed[s.name] = list(hit[1])
        return dict(self._builder.xgrammar_slots)

    @property
    def slots(self) -> list[list[Slot]]:
        """Per tool, each slot and the engine that serves it (analysed again on first use when
        the analysis came from a store, which keeps only what decoding needs)."""
        if self._slots is None:
            found = analyze_tools([(s.name, s.parameters) for s in self.specs]).slots
            self._slots = [list(t) for t in found or ()]
        return self._slots

    def _set_format(self, fmt: CallFormat) -> ChoiceSet:
        self.format = fmt
        self.tail = fmt.tail()
        leads = {fmt.lead(), fmt.lead(after_trigger=True), fmt.lead(following=True)}
        leads.add(fmt.lead(following=True, held=fmt.held(hold=True)))
        self._leads = sorted(leads, key=len, reverse=True)
        self._tries = {}
        return self.names_for(None)

    def with_format(self, format: str | CallFormat) -> CompiledTools:
        """These tools for another call syntax: the specs and the slot analysis are shared (a
        100,000-tool registry is analysed once), the names trie and the automata are the new
        format's (built now and on demand), kept for the next call."""
        fmt = call_format(format)
        if fmt == self.format:
            return self
        with self._lock:
            twin = self._twins.get(fmt)
        if twin is None:
            twin = copy.copy(self)
            twin._automata = OrderedDict()
            twin._closing = {}
            twin._lock = threading.Lock()
            twin._key_locks = {}
            twin._twins = {}
            twin._grammars = dict(self._grammars)
            twin.names = twin._set_format(fmt)
            with self._lock:
                twin = self._twins.setdefault(fmt, twin)
        return twin

    # -- lookup --------------------------------------------------------------------------------
    def name_text(self, name: str, lead: str | None = None) -> str:
        """What a names trie holds for ``name``: ``lead`` (default: the format's whole call head)
        and the JSON-escaped name."""
        return (self.format.lead() if lead is None else lead) + _escaped(name)

    def __len__(self) -> int:
        return len(self.specs)

    @property
    def width(self) -> int:
        return self.vocabulary.width

    @property
    def end_ids(self) -> tuple[int, ...]:
        return self.vocabulary.end_ids

    def tool_index(self, name: str) -> int:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownToolError(
                f"no tool named {name!r} in this registry of {len(self.specs)} tools; "
                "use a registered name (tools.specs)"
            ) from None

    def tool_of_node(self, names: ChoiceSet, node: int) -> int:
        """The tool whose name is complete at trie node ``node`` of ``names``."""
        text = names.value_at(node)
        if text is None:
            raise KeyError(f"node {node}: no tool name ends here")
        for lead in self._leads:
            if text.startswith(lead):
                i = self._by_escaped.get(text[len(lead) :])
                if i is not None:
                    return i
        raise KeyError(f"node {node}: {text!r} is not a tool name of this registry")

    def names_for(self, subset: Sequence[str] | None, *, lead: str | None = None) -> ChoiceSet:
        """A names trie over ``subset`` (a shortlist, or one forced tool; ``None``: every tool,
        compiled once per ``lead`` and kept), each name after ``lead`` (default: the format's
        whole call head) and before the format's ``", "arguments": ``."""
        lead = self.format.lead() if lead is None else lead
        if subset is None:
            trie = self._tries.get(lead)
            if trie is None:
                key = (self.format.name, lead)
                got = None if self._prepared is None else self._prepared.trie(*key)
                if got is not None:
                    trie = self._loaded[key] = got
                else:
                    STEP_WORK["names_trie"] += 1
                    texts = [lead + e for e in self._by_escaped]
                    trie = compile_choices(
                        texts, self.index, terminator=self.format.name_tail, allow_end=False
                    )
                self._tries[lead] = trie
            return trie
        texts = []
        for n in subset:
            self.tool_index(n)
            texts.append(self.name_text(n, lead))
        return compile_choices(texts, self.index, terminator=self.format.name_tail, allow_end=False)

    def prepared_table(self, lead: str, names: ChoiceSet, variant: str) -> Any | None:
        """The closing table (``variant``: how the arguments were sized) prepared with
        ``names``, when that is the trie over every tool after ``lead`` loaded from there."""
        key = (self.format.name, lead)
        kept = self._closing.get((*key, variant))
        if kept is not None and kept[0] is names:
            return kept[1]
        if self._prepared is None or self._loaded.get(key) is not names:
            return None
        return self._prepared.table(*key, variant, names)

    def keep_table(self, lead: str, names: ChoiceSet, variant: str, table: Any) -> None:
        """Keep a closing table computed for ``names`` (:meth:`prepared_table` answers it)."""
        self._closing[(self.format.name, lead, variant)] = (names, table)

    @property
    def nbytes(self) -> int:
        """Bytes held of its own: names tries, automata and the other formats' twins."""
        own = sum(t.nbytes for t in self._tries.values())
        own += int(sum(a.nbytes for _, table in self._closing.values() for a in table[:2]))
        own += sum(a.nbytes for a in list(self._automata.values()))
        return own + sum(t.nbytes for t in list(self._twins.values()))

    # -- engines -------------------------------------------------------------------------------
    def automaton(self, i: int, *, hold: bool = False) -> ToolAutomaton:
        """Tool ``i``'s argument automaton (a space, ``{...}``, then :attr:`tail`; ``hold``:
        without the suffix's last character, see :meth:`CallFormat.tail`), built on first use;
        tools with the same parameter schema share one."""
        with self._lock:
            return self._automaton(i, hold)[0]

    def _automaton(
        self, i: int, hold: bool, masks: MaskPipeline | None = None
    ) -> tuple[ToolAutomaton, tuple[str, bool] | None]:
        """:meth:`automaton` under the lock; the key it is kept under if built now (``masks``:
        its last wiring, classes and masks queued there)."""
        skey = self._schema_keys[i]
        if skey is None:
            skey = self._schema_keys[i] = _schema_key(_normalized(self.specs[i].parameters), i)
        key = (skey, hold)
        a = self._automata.get(key)
        if a is not None:
            self._automata.move_to_end(key)
            return a, None
        frag, _ = self._builder.tool(
            _normalized(self.specs[i].parameters),
            self.format.tail(hold=hold).encode(),
            self.format.ARGS_HEAD.encode(),
            defer=masks is not None,
        )
        a = ToolAutomaton(frag, self._tables, masks=masks is None)
        if masks is not None:
            masks.add(a)
        return self._keep(key, a), key

    def _keep(self, key: tuple[str, bool], a: ToolAutomaton) -> ToolAutomaton:
        """Hold ``a`` under ``key``, dropping the least recently used beyond ``cache_size``."""
        self._automata[key] = a
        while len(self._automata) > self._cache_size:
            self._automata.popitem(last=False)
        return a

    def grammar(self, key: str) -> Any:
        """The compiled XGrammar grammar for XGrammar slot ``key`` (compiled once; other keys and
        the automata are not blocked while it compiles)."""
        g = self._grammars.get(key)
        if g is not None:
            return g
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
            compiler = self._xgrammar_compiler()
        with key_lock:
            g = self._grammars.get(key)
            if g is None:
                schema = self.xgrammar_schemas.get(key)
                if schema is None:
                    schema = json.loads(key)
                try:
                    g = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
                except Exception as exc:  # checked at compile: a bug if it happens
                    raise CompileError(
                        f"XGrammar refused the slot schema {key[:120]}: {str(exc)[:200]}"
                    ) from exc
                self._grammars[key] = g
            return g

    def _xgrammar_compiler(self) -> Any:
        if self._xgr_compiler is None:
            try:
                import xgrammar as xgr
            except ImportError as exc:  # pragma: no cover
                raise missing("xgrammar", "tools") from exc
            self._xgr_compiler = xgr.GrammarCompiler(
                xgrammar_tokenizer_info(self.vocabulary), cache_enabled=False
            )
        return self._xgr_compiler

    def materialize(self) -> None:
        """Build every tool's automaton and every state's mask now (``eager_automata=True``
        does it while compiling); with the compiled core, as in an eager compile (wiring,
        classes and masks on a second thread), holding the lock until every mask is kept; on an
        error, the automata left without masks are dropped. The cyclic collector is paused."""
        paused = gc.isenabled()
        gc.disable()
        built: list[tuple[tuple[str, bool], ToolAutomaton]] = []
        self._lock.acquire()
        try:
            with MaskPipeline() as masks:
                for i in range(len(self.specs)):
                    a, key = self._automaton(i, False, masks)
                    if key is not None:
                        built.append((key, a))
        except BaseException:
            for key, a in built:  # (mask_table: None until the masks are kept)
                if a.mask_table is None and self._automata.get(key) is a:
                    del self._automata[key]
            raise
        finally:
            self._lock.release()
            if paused:
                gc.enable()

    def explain(self, name: str) -> str:
        """A table of the slots of tool ``name`` and the engine serving each (and what a
        relaxed tool is served without)."""
        table = slot_table(self.slots[self.tool_index(name)], len(self.specs))
        return table + relaxed_table(self.relaxed.get(name, []))


def _schema_key(schema: dict[str, Any], i: int) -> str:
    """What tools sharing one automaton share: the schema's JSON, key order kept (properties
    are written in schema order); ``#i`` for a schema that is not plain JSON (not shared)."""
    try:
        return json.dumps(schema, ensure_ascii=False)
    except (TypeError, ValueError):
        return f"#{i}"


def _escaped(name: str) -> str:
    return json.dumps(name, ensure_ascii=False)[1:-1]


def compile_tools(
    tools: Iterable[Any], index: TokenIndex | Vocabulary, **kwargs: Any
) -> CompiledTools:
    """Compile ``tools`` (a ToolRegistry, or Tool / OpenAI / Anthropic / MCP dicts) for
    ``index``."""
    if isinstance(index, Vocabulary):
        index = TokenIndex.get(index)
    return CompiledTools(tools, index, **kwargs)


def check_tools(
    tools: Iterable[Any], *, slots: bool = True, strict: bool | None = None
) -> list[ToolSpec]:
    """What :class:`CompiledTools` checks before it needs a tokenizer: every tool reads as a
    spec, names are unique, every schema passes the slot analysis (``slots=False``: not this
    one, the slowest; a tool held strict, :func:`~trierouter.registry.relax.strict_for`, is
    refused for what no engine serves exactly). Raises ``CompileError`` naming the tool;
    cheap enough for an API server to run per request."""
    specs = [_as_spec(t) for t in tools]
    if not specs:
        raise CompileError("tools: the registry is empty; register at least one tool")
    seen: set[str] = set()
    exact, loose = SlotCompiler(dry=True), SlotCompiler(dry=True, strict=False)
    for i, s in enumerate(specs):
        if s.name in seen:
            raise CompileError(f"tools[{i}] {s.name!r} is given twice; tool names must be unique")
        seen.add(s.name)
        if not slots:
            continue
        try:
            (exact if strict_for(strict, s.strict) else loose).tool(_normalized(s.parameters), b"")
        except (CompileError, ValueError, TypeError, KeyError, RecursionError) as exc:
            raise CompileError(f"tools[{i}] {s.name!r}: {exc}") from exc
    return specs
