"""The tool registry: tools from every form agent frameworks use, validated, in one namespace.

    registry = ToolRegistry(openai_tools)              # any supported form, auto-detected
    registry.add(get_weather, WeatherQuery, lc_tool)   # callables, pydantic models, LangChain
    registry.add_mcp(pages)                            # MCP tools/list pages, via nextCursor
    registry.add_bfcl(entry["function"])               # BFCL function docs (BFCL's types)
    registry = ToolRegistry.from_mcp_server("python", ["-m", "my_server"])
    registry.save("tools.json"); ToolRegistry.load("tools.json")

Every call is atomic: all its tools are read and validated first, and on any problem the call
raises (naming each offending tool and its position) and registers none of them; what was
registered before stays. Names are unique, non-empty, at most :data:`MAX_NAME_LENGTH` characters,
without surrounding whitespace, control characters or lone surrogates; any other character is
allowed (a decoder emits names JSON-escaped). Parameters are a valid JSON Schema (draft 2020-12,
or the draft its ``$schema`` names) describing an object, every ``$ref`` of which resolves, and
whose every construct some engine serves exactly (:mod:`trierouter.registry.slots.normalize`):
or the tool is *relaxed* (OpenAI's convention, :mod:`trierouter.registry.relax`): a function
with ``"strict": true`` is refused with :class:`~trierouter.errors.UnservedSchemaError` naming
the slot, the keyword and the fix; one without it (the default) is registered, each such
construct served in its nearest exact form (a contradictory ``type`` + ``enum`` as the enum's
values, ``uniqueItems`` as a plain array, an unserved pattern or format as a plain string...),
listed by :meth:`ToolRegistry.relaxed` and :meth:`ToolRegistry.explain`, and logged once per
tool. ``ToolRegistry(strict=True)`` / ``strict=False`` force one mode for every tool.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from trierouter.errors import (
    CorruptFileError,
    DuplicateToolError,
    InvalidToolError,
    McpServerError,
    ToolError,
    TrieRouterError,
    UnservedSchemaError,
    missing,
)
from trierouter.registry import forms as convert
from trierouter.registry.forms import ConversionError
from trierouter.registry.mcp import exception_leaves, list_tools_page, mcp_listing
from trierouter.registry.relax import log_relaxed, relaxed_table, strict_for
from trierouter.registry.schema_check import schema_problem
from trierouter.registry.slots.dispatch import SlotCompiler, unserved_problems
from trierouter.registry.slots.normalize import Problem
from trierouter.registry.tool import NAMESPACE_SEPARATOR, Tool, empty_object, name_problem

_FORMAT = "trierouter.tools"
_VERSION = 1

__all__ = ["ToolRegistry"]


class _Unserved(ConversionError):
    """A construct of the tool's schema that no engine serves exactly."""


def _normalize(
    tool: Tool, *, owned: bool = False, strict: bool | None = None
) -> tuple[Tool, list[Problem]]:
    """A validated copy of ``tool`` (a deep copy of its parameters unless ``owned``: parsed
    from a file, referenced by nothing else, made an object schema) and its relaxations;
    refused when held strict (:func:`~trierouter.registry.relax.strict_for`) and a construct
    of it is served exactly by no engine."""
    if not isinstance(tool.name, str):
        raise ConversionError(f"its name must be a string, got {type(tool.name).__name__}")
    problem = name_problem(tool.name)
    if problem:
        raise ConversionError(problem, name=tool.name)
    if not isinstance(tool.description, str):
        raise ConversionError("its description must be a string", name=tool.name)
    if tool.title is not None and not isinstance(tool.title, str):
        raise ConversionError("its title must be a string or None", name=tool.name)
    params: Any = tool.parameters
    if params is None:
        params = empty_object()
    if not isinstance(params, Mapping):
        raise ConversionError(
            f"its parameters must be a JSON Schema object (a dict), got {type(params).__name__}",
            name=tool.name,
        )
    try:
        text = json.dumps(params, ensure_ascii=False, allow_nan=False)
        if not owned:  # a deep copy: later changes to the caller's dict do not leak
            params = json.loads(text)
    except (TypeError, ValueError) as err:
        raise ConversionError(
            f"its parameters are not plain JSON ({err}): use dicts, lists, str, int, float, "
            "bool and None only",
            name=tool.name,
        ) from err
    except RecursionError:
        raise ConversionError("its parameters are nested too deeply", name=tool.name) from None
    problem = schema_problem(params, text)
    if problem:
        raise ConversionError(
            f"its parameters are not a valid JSON Schema: {problem}", name=tool.name
        )
    kind = params.get("type", "object")
    if kind not in ("object", ["object"]):
        raise ConversionError(
            f'its parameters must describe an object (top-level "type": "object"), got '
            f'"type": {json.dumps(kind)}: wrap the value in a property of an object',
            name=tool.name,
        )
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    unserved = unserved_problems(params)
    if unserved and strict_for(strict, tool.strict):
        listed = "; ".join(str(p) for p in unserved[:5])
        more = f" (and {len(unserved) - 5} more)" if len(unserved) > 5 else ""
        raise _Unserved(
            f"its schema uses what no engine serves exactly: {listed}{more}. Fix the "
            'schema, or drop the function\'s "strict": true (or register it with '
            "ToolRegistry(strict=False)) to serve it relaxed, without those constraints",
            name=tool.name,
        )
    return replace(tool, parameters=params), unserved


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pauses the cyclic GC while many small objects are made (none of them cyclic): with 100,000
    tools its full passes over the growing heap cost more than the work itself."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _auto(obj: Any) -> Tool:
    """Reads any supported form, detected by its type and shape."""
    if isinstance(obj, Tool):
        return obj
    if isinstance(obj, Mapping):
        return convert.from_dict(obj)
    if convert.is_pydantic_model(obj):
        return convert.from_pydantic(obj)
    if convert.is_langchain_tool(obj):
        return convert.from_langchain(obj)
    if isinstance(getattr(obj, "name", None), str) and (
        hasattr(obj, "inputSchema") or hasattr(obj, "input_schema")
    ):
        return convert.from_mcp(obj)  # the mcp package's Tool objects
    if callable(obj):
        return convert.from_callable(obj)
    raise ConversionError(
        f"a {type(obj).__name__} is no supported tool form: pass an OpenAI / Anthropic / MCP "
        "dict, a pydantic model class, a function, a LangChain tool or a Tool"
    )


def _flatten(tools: tuple[Any, ...]) -> list[Any]:
    out: list[Any] = []
    for t in tools:
        if isinstance(t, list | tuple):
            out.extend(t)
        else:
            out.append(t)
    return out


class ToolRegistry:
    """An ordered set of uniquely named, validated tools (see the module docstring);
    ``strict``: ``None`` (default), each function's own ``"strict"`` flag decides (absent:
    relaxed); ``True``, every tool exact or refused; ``False``, every tool served."""

    __slots__ = ("_relaxed", "_runners", "_strict", "_tools")

    def __init__(self, tools: Iterable[Any] = (), *, strict: bool | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._relaxed: dict[str, list[Problem]] = {}
        self._strict = strict
        self._runners: dict[str, Any] = {}
        items = list(tools)
        if items:
            self.add(*items)

    # -- adding ----------------------------------------------------------------------------------
    def _commit(
        self, items: Iterable[Any], read: Callable[[Any], Tool], *, owned: bool = False
    ) -> list[Tool]:
        """Reads and validates every item, then registers all of them or none."""
        with _gc_paused():
            return self._commit_paused(items, read, owned=owned)

    def _commit_paused(
        self, items: Iterable[Any], read: Callable[[Any], Tool], *, owned: bool
    ) -> list[Tool]:
        problems: list[str] = []
        kinds: list[type[ToolError]] = []
        batch: dict[str, int] = {}
        ready: list[Tool] = []
        runners: dict[str, Any] = {}
        relaxed: dict[str, list[Problem]] = {}
        for i, obj in enumerate(items):
            try:
                tool, unserved = _normalize(read(obj), owned=owned, strict=self._strict)
            except ConversionError as err:
                who = f"tools[{i}] {err.name!r}" if err.name is not None else f"tools[{i}]"
                problems.append(f"{who}: {err}")
                kinds.append(
                    UnservedSchemaError if isinstance(err, _Unserved) else InvalidToolError
                )
                continue
            where = f"tools[{i}] {tool.name!r} ({tool.source})"
            if tool.name in self._tools:
                have = self._tools[tool.name]
                problems.append(
                    f"{where}: a tool of that name is already registered (from {have.source}): "
                    "rename one of them, e.g. with a namespace prefix"
                )
                kinds.append(DuplicateToolError)
            elif tool.name in batch:
                problems.append(
                    f"{where}: the name is given twice in this call (also "
                    f"tools[{batch[tool.name]}]): rename one of them, e.g. with a namespace prefix"
                )
                kinds.append(DuplicateToolError)
            else:
                batch[tool.name] = i
                ready.append(tool)
                if unserved:
                    relaxed[tool.name] = unserved
                if _runnable(obj):
                    runners[tool.name] = obj
        if problems:
            shown = "\n  ".join(problems[:10])
            more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
            count = f"{len(problems)} tools" if len(problems) > 1 else "1 tool"
            raise kinds[0](
                f"{count} could not be registered, so none of this call was:\n  {shown}{more}",
                problems=problems,
            )
        for tool in ready:
            self._tools[tool.name] = tool
        self._relaxed.update(relaxed)
        log_relaxed(relaxed)
        self._runners.update(runners)
        return ready

    def add(self, *tools: Any) -> list[Tool]:
        """Registers tools in any supported form, auto-detected (lists are flattened); returns
        them as registered. All or nothing: raises :class:`~trierouter.errors.ToolError`."""
        return self._commit(_flatten(tools), _auto)

    def add_openai(self, tools: Iterable[Mapping[str, Any]] | Mapping[str, Any]) -> list[Tool]:
        """OpenAI tools: ``{"type": "function", "function": {name, description, parameters}}``."""
        items = [tools] if isinstance(tools, Mapping) else list(tools)
        return self._commit(items, convert.from_openai)

    def add_anthropic(self, tools: Iterable[Mapping[str, Any]] | Mapping[str, Any]) -> list[Tool]:
        """Anthropic tools: ``{"name", "description", "input_schema"}``."""
        items = [tools] if isinstance(tools, Mapping) else list(tools)
        return self._commit(items, convert.from_anthropic)

    def add_bfcl(
        self,
        functions: Iterable[Mapping[str, Any]] | Mapping[str, Any],
        *,
        language: str = "python",
        hint: bool = True,
    ) -> list[Tool]:
        """BFCL function docs (``{"name", "description", "parameters": {"type": "dict", ...}}``
        with BFCL's types ``dict``, ``float``, ``tuple``, ``any``...), converted to JSON Schema as
        BFCL's own handlers convert them; ``language``: ``"python"``, ``"java"`` or
        ``"javascript"`` (BFCL's simple_java / simple_javascript docs); ``hint``: append BFCL's
        language note to each description. :meth:`add` detects Python docs on its own."""
        items = [functions] if isinstance(functions, Mapping) else list(functions)
        return self._commit(items, lambda f: convert.from_bfcl(f, language=language, hint=hint))

    def add_mcp(self, result_or_pages: Any, *, partial: bool = False) -> list[Tool]:
        """MCP tools from a ``tools/list`` result (dict, JSON-RPC response or the ``mcp``
        package's object), an iterable of the pages of one listing, or a function
        ``fetch(cursor) -> page`` that is followed until a page has no ``nextCursor``. A last page
        that still has a ``nextCursor`` is refused unless ``partial``."""
        return self._commit(mcp_listing(result_or_pages, partial=partial), convert.from_mcp)

    def add_function(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Tool:
        """A plain function: signature, type hints and docstring become the tool."""
        return self._commit(
            [fn], lambda f: convert.from_callable(f, name=name, description=description)
        )[0]

    def add_pydantic(
        self, model: Any, *, name: str | None = None, description: str | None = None
    ) -> Tool:
        """A pydantic model class whose fields are the arguments (name: the class name)."""
        return self._commit(
            [model], lambda m: convert.from_pydantic(m, name=name, description=description)
        )[0]

    def add_langchain(self, *tools: Any) -> list[Tool]:
        """LangChain tools (``@tool``, ``StructuredTool``, ``BaseTool``), duck-typed."""
        return self._commit(_flatten(tools), convert.from_langchain)

    # -- MCP servers -----------------------------------------------------------------------------
    @classmethod
    async def from_mcp_session(cls, session: Any) -> ToolRegistry:
        """Every tool of an initialized MCP ``ClientSession``, all pages of ``tools/list``."""
        pages: list[Any] = []
        cursor: Any = None
        seen: set[Any] = set()
        while True:
            page = await list_tools_page(session, cursor)
            pages.append(page)
            cursor = convert.field_of(page, "nextCursor", "next_cursor")
            if not cursor:
                break
            if cursor in seen:
                raise ToolError(f"the MCP server repeats cursor {cursor!r}: it would never end")
            seen.add(cursor)
        registry = cls()
        registry.add_mcp(pages)
        return registry

    @classmethod
    def from_mcp_server(
        cls,
        command: str,
        args: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 120.0,
    ) -> ToolRegistry:
        """Starts an MCP server over stdio (the official ``mcp`` client), lists all its tools
        and stops it. Blocking; inside an event loop use :meth:`from_mcp_session`."""
        try:
            import anyio
            from mcp import ClientSession
            from mcp.client.stdio import StdioServerParameters, stdio_client
        except ImportError as err:
            raise missing("mcp", "mcp") from err
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "from_mcp_server blocks and cannot run inside an event loop: "
                "await ToolRegistry.from_mcp_session(session) instead"
            )
        params = StdioServerParameters(
            command=command,
            args=list(args),
            env=dict(env) if env is not None else None,
            cwd=os.fspath(cwd) if cwd is not None else None,
        )

        async def main() -> ToolRegistry:
            with anyio.fail_after(timeout):
                async with stdio_client(params) as (read, write):  # noqa: SIM117
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        return await cls.from_mcp_session(session)

        server = " ".join([command, *params.args])
        try:
            result: ToolRegistry = anyio.run(main)
        except Exception as err:
            # the client's task groups wrap everything: show the errors themselves
            leaves = exception_leaves(err)
            if len(leaves) == 1 and isinstance(leaves[0], TrieRouterError):
                raise leaves[0] from None
            if any(isinstance(e, TimeoutError) for e in leaves):
                why = f"no complete tools/list within {timeout:g} s"
            else:
                why = "; ".join(f"{type(e).__name__}: {e}" for e in leaves)
            raise McpServerError(
                f"MCP server `{server}` failed before listing its tools ({why}); its own "
                "messages, if any, went to stderr"
            ) from err
        return result

    # -- reading ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        """Tools in registration order."""
        return iter(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise KeyError(f"no tool named {name!r} among {len(self._tools)} tools") from None

    def __repr__(self) -> str:
        return f"ToolRegistry({len(self._tools)} tools)"

    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._tools)

    def namespaces(self, *, sep: str = NAMESPACE_SEPARATOR) -> dict[str, list[str]]:
        """Names grouped by the part before the first ``sep`` (``github.create_issue`` →
        ``github``); names without it are under ``""``. Full names are kept everywhere."""
        out: dict[str, list[str]] = {}
        for name in self._tools:
            head, found, _ = name.partition(sep)
            out.setdefault(head if found else "", []).append(name)
        return out

    def to_openai(self) -> list[dict[str, Any]]:
        """Every tool in OpenAI's form, in registration order."""
        return [t.to_openai() for t in self._tools.values()]

    def to_anthropic(self) -> list[dict[str, Any]]:
        """Every tool in Anthropic's form, in registration order."""
        return [t.to_anthropic() for t in self._tools.values()]

    def to_mcp(self) -> list[dict[str, Any]]:
        """Every tool in MCP's form (the ``tools`` of one ``tools/list`` page)."""
        return [t.to_mcp() for t in self._tools.values()]

    # -- running -------------------------------------------------------------------------------
    def invoke(self, call: Any) -> Any:
        """Run the Python callable registered for ``call``'s tool (:func:`~trierouter.registry.
        invoke.invoke_tool`): arguments checked against the schema first."""
        from trierouter.registry.invoke import invoke_tool

        return invoke_tool(self, call)

    async def ainvoke(self, call: Any) -> Any:
        """:meth:`invoke` for event loops (:func:`~trierouter.registry.invoke.ainvoke_tool`)."""
        from trierouter.registry.invoke import ainvoke_tool

        return await ainvoke_tool(self, call)

    def runner(self, name: str) -> Any:
        """The function, pydantic model or LangChain tool registered as ``name``, or ``None``
        when the tool came from a schema (a dict, MCP) and has nothing to run."""
        self[name]
        return self._runners.get(name)

    # -- files -----------------------------------------------------------------------------------
    def compile(self, index: Any, **kwargs: Any) -> Any:
        """Compile for decoding against a tokenizer index (or Vocabulary): the names trie and
        every argument slot's engine (:func:`trierouter.registry.compiler.compile_tools`)."""
        from trierouter.registry.compiler import compile_tools

        kwargs.setdefault("strict", self._strict)
        return compile_tools(list(self), index, **kwargs)

    @property
    def strict(self) -> bool | None:
        """``True``: every tool exact or refused; ``False``: every tool served, relaxed where
        needed; ``None`` (default): each function's own ``strict`` flag decides."""
        return self._strict

    def relaxed(self, name: str) -> list[Problem]:
        """What calls of tool ``name`` are not held to (kind and slot path of each relaxation;
        empty for a tool served exactly)."""
        self[name]
        return list(self._relaxed.get(name, ()))

    def explain(self, name: str) -> str:
        """Which engine serves each slot of tool ``name`` (no tokenizer needed): the same
        analysis the compiler runs, so it always agrees with what a call is served by."""
        from trierouter.registry.analysis import normalized as _normalized
        from trierouter.registry.slots.slot_records import slot_table

        slots, _ = SlotCompiler(dry=True, strict=False).analyze(_normalized(self[name].parameters))
        return slot_table(slots, len(self)) + relaxed_table(self.relaxed(name))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the registry as JSON (atomically: a temporary file, then a rename)."""
        with _gc_paused():
            rows = []
            for t in self._tools.values():
                row: dict[str, Any] = {"name": t.name, "description": t.description}
                if t.title is not None:
                    row["title"] = t.title
                row["source"] = t.source
                if t.strict is not None:
                    row["strict"] = t.strict
                row["parameters"] = t.parameters
                rows.append(row)
            doc = {"format": _FORMAT, "version": _VERSION, "count": len(rows), "tools": rows}
            # json.dumps runs in C; json.dump would encode chunk by chunk in Python
            text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
        path = Path(path)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text, "utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, strict: bool | None = None) -> ToolRegistry:
        """Reads a file written by :meth:`save`, validating every tool again; a truncated,
        altered or foreign file raises :class:`~trierouter.errors.CorruptFileError`."""
        try:
            with _gc_paused():
                doc = json.loads(Path(path).read_bytes())
        except (ValueError, UnicodeDecodeError) as err:
            raise CorruptFileError(
                f"{path}: not a trierouter tool registry (bad JSON: {err})"
            ) from err
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise CorruptFileError(
                f"{path}: not a trierouter tool registry (no format {_FORMAT!r})"
            )
        if doc.get("version") != _VERSION:
            raise CorruptFileError(
                f"{path}: tool registry version {doc.get('version')!r}, this trierouter reads "
                f"{_VERSION}: save it again with the version that wrote it"
            )
        rows = doc.get("tools")
        if not isinstance(rows, list) or doc.get("count") != len(rows):
            raise CorruptFileError(f"{path}: the tool list is missing or truncated")
        registry = cls(strict=strict)
        try:
            registry._commit(rows, _from_row, owned=True)
        except UnservedSchemaError:
            raise
        except ToolError as err:
            raise CorruptFileError(f"{path}: altered or corrupt: {err}") from err
        return registry


def _from_row(row: Any) -> Tool:
    if not isinstance(row, dict) or not isinstance(row.get("source", "dict"), str):
        raise ConversionError("a saved tool is a JSON object with name, description, parameters")
    return convert.from_dict(row)


def _runnable(obj: Any) -> bool:
    """What :meth:`ToolRegistry.invoke` can run: functions, pydantic models, LangChain tools."""
    if isinstance(obj, Tool | Mapping):
        return False
    return bool(
        convert.is_pydantic_model(obj) or convert.is_langchain_tool(obj) or callable(obj)
    ) and not hasattr(obj, "inputSchema")
