"""ToolRegistry: every input form, all-or-nothing batches, save/load, and a real MCP server.

Schemas are checked with ``jsonschema`` directly (``check_schema``) and sample arguments are
validated against them: an oracle independent of the registry's own cached checks.
"""

from __future__ import annotations

import enum
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest

jsonschema = pytest.importorskip("jsonschema")
pydantic = pytest.importorskip("pydantic")

from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field

from trierouter.errors import (
    CorruptFileError,
    DuplicateToolError,
    InvalidToolError,
    McpServerError,
    MissingDependencyError,
    ToolError,
    TrieRouterError,
)
from trierouter.registry.docstrings import parse_docstring
from trierouter.registry.schema_check import clear_caches, schema_problem
from trierouter.registry.tool import Tool
from trierouter.registry.tool_registry import ToolRegistry
from trierouter.testing.mcp_server import server_tools

try:  # resolved from this module's globals by the string annotations of the LangChain test
    from langchain_core.tools import InjectedToolArg
except ImportError:  # pragma: no cover - the test extra installs it
    InjectedToolArg = None

ROOT = Path(__file__).resolve().parent.parent


def _valid(schema: dict[str, Any], sample: dict[str, Any]) -> bool:
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema).is_valid(sample)


def _snapshot(reg: ToolRegistry) -> list[Tool]:
    return list(reg)


def test_public_surface_is_pinned() -> None:
    import trierouter.registry
    import trierouter.router

    assert trierouter.registry.__all__ == [
        "CALL_FORMATS",
        "MAX_NAME_LENGTH",
        "NAMESPACE_SEPARATOR",
        "SHIPPED",
        "CallFormat",
        "ChoiceSet",
        "CompiledTools",
        "TokenIndex",
        "Tool",
        "ToolRegistry",
        "Vocabulary",
        "compile_choices",
        "compile_tools",
        "default_cache_dir",
        "shipped_vocabulary",
    ]
    assert trierouter.router.__all__ == [
        "FunctionCall",
        "Matcher",
        "ParsedOutput",
        "ToolCall",
        "ToolCallError",
        "ToolCallPlan",
        "allocate_token_bitmask",
        "apply_token_bitmask_inplace",
        "bitmask_to_ids",
        "ids_to_bitmask",
        "parse_tool_call",
    ]
    for name in trierouter.router.__all__:
        obj = getattr(trierouter.router, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, TrieRouterError)
    assert issubclass(DuplicateToolError, ToolError) and issubclass(InvalidToolError, ValueError)
    assert issubclass(McpServerError, ConnectionError)


# -- dict forms ----------------------------------------------------------------------------------
OPENAI = [
    {
        "type": "function",
        "function": {
            "name": "github.create_issue",
            "description": "Open an issue.",
            "parameters": {
                "type": "object",
                "properties": {
                    "repo": {"type": "string"},
                    "title": {"type": "string"},
                    "labels": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["repo", "title"],
            },
        },
    },
    {"type": "function", "function": {"name": "github.list_repos", "description": "List."}},
    {
        "type": "function",
        "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}},
    },
]


def test_openai_round_trip_and_namespaces() -> None:
    reg = ToolRegistry(OPENAI)
    assert reg.names() == ["github.create_issue", "github.list_repos", "ping"]
    assert len(reg) == 3 and "ping" in reg and "pong" not in reg
    assert reg["github.create_issue"].source == "openai"
    assert reg.to_openai()[0] == OPENAI[0]
    # missing parameters normalize to the empty object schema
    assert reg["github.list_repos"].parameters == {"type": "object", "properties": {}}
    assert reg.to_openai()[2] == OPENAI[2]
    github = ["github.create_issue", "github.list_repos"]
    assert reg.namespaces() == {"github": github, "": ["ping"]}
    assert reg.namespaces(sep="_") == {
        "github.create": ["github.create_issue"],
        "github.list": ["github.list_repos"],
        "": ["ping"],
    }
    assert [t.name for t in reg] == reg.names()
    with pytest.raises(KeyError, match="pong"):
        reg["pong"]
    # the registry holds a copy: changing the caller's dict afterwards changes nothing
    spec = json.loads(json.dumps(OPENAI[0]))
    reg2 = ToolRegistry([spec])
    spec["function"]["parameters"]["properties"]["repo"]["type"] = "integer"
    assert reg2.to_openai()[0] == OPENAI[0]


def test_anthropic_and_mcp_round_trips_and_cross_format() -> None:
    reg = ToolRegistry(OPENAI)
    anthropic = reg.to_anthropic()
    assert anthropic[0] == {
        "name": "github.create_issue",
        "description": "Open an issue.",
        "input_schema": OPENAI[0]["function"]["parameters"],
    }
    back = ToolRegistry()
    back.add_anthropic(anthropic)
    assert back.to_openai() == reg.to_openai()
    assert {t.source for t in back} == {"anthropic"}
    auto = ToolRegistry(anthropic)  # auto-detected by "input_schema"
    assert auto.to_anthropic() == anthropic
    mcp = [{**reg.to_mcp()[0], "title": "Create issue"}]
    assert mcp[0]["inputSchema"] == OPENAI[0]["function"]["parameters"]
    m = ToolRegistry(mcp)
    assert m["github.create_issue"].title == "Create issue"
    assert m.to_mcp() == mcp
    # the flat Responses-API form and the bare {name, description, parameters} form
    flat = {"type": "function", "name": "flat", "parameters": {"type": "object"}}
    bare = {"name": "bare", "description": "d", "parameters": {"properties": {"x": {}}}}
    r = ToolRegistry([flat, bare])
    assert r["flat"].parameters == {"type": "object", "properties": {}}
    assert r["bare"].parameters == {"properties": {"x": {}}, "type": "object"}
    assert r["bare"].source == "dict"


def test_tool_objects_are_accepted_and_frozen() -> None:
    t = Tool("a.b", "does b", {"type": "object", "properties": {"x": {"type": "integer"}}})
    reg = ToolRegistry([t])
    assert reg["a.b"] == t and reg["a.b"].parameters is not t.parameters
    with pytest.raises(AttributeError):
        t.name = "c"  # type: ignore[misc]
    assert t.to_mcp() == {"name": "a.b", "description": "does b", "inputSchema": t.parameters}
    assert Tool("x").parameters == {"type": "object", "properties": {}}


# -- MCP -----------------------------------------------------------------------------------------
def _pages(tools: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    out = []
    for start in range(0, len(tools), size):
        more = start + size < len(tools)
        page: dict[str, Any] = {"tools": tools[start : start + size]}
        if more:
            page["nextCursor"] = f"c{start + size}"
        out.append(page)
    return out


def test_mcp_pages_given_as_dicts() -> None:
    tools = server_tools(230, source="synthetic")
    pages = _pages(tools, 100)
    assert [bool(p.get("nextCursor")) for p in pages] == [True, True, False]
    reg = ToolRegistry()
    reg.add_mcp(pages)
    assert reg.to_mcp() == tools
    # one page, a JSON-RPC response, the mcp package's objects
    one = ToolRegistry()
    one.add_mcp({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools[:5]}})
    assert one.to_mcp() == tools[:5]
    # a fetch function is followed cursor by cursor
    by_cursor = {None: pages[0], "c100": pages[1], "c200": pages[2]}
    calls: list[Any] = []

    def fetch(cursor: str | None) -> dict[str, Any]:
        calls.append(cursor)
        return by_cursor[cursor]

    fetched = ToolRegistry()
    fetched.add_mcp(fetch)
    assert calls == [None, "c100", "c200"] and fetched.to_mcp() == tools


def test_mcp_incomplete_or_broken_listings_register_nothing() -> None:
    tools = server_tools(30, source="synthetic")
    pages = _pages(tools, 10)
    reg = ToolRegistry([{"name": "keep", "inputSchema": {"type": "object"}}])
    before = _snapshot(reg)
    with pytest.raises(ToolError, match=r"page 2 of 2 has nextCursor 'c20'"):
        reg.add_mcp(pages[:2])
    with pytest.raises(ToolError, match="no nextCursor, yet more pages follow"):
        reg.add_mcp([pages[2], pages[0]])
    with pytest.raises(ToolError, match="repeats cursor"):
        reg.add_mcp(lambda cursor: pages[0])
    with pytest.raises(ToolError, match="not a tools/list result"):
        reg.add_mcp([{"items": []}])
    with pytest.raises(ToolError, match="got a int"):
        reg.add_mcp(3)
    assert _snapshot(reg) == before
    reg.add_mcp(pages[:2], partial=True)
    assert len(reg) == 21
    # a bad tool on the last page: the whole listing is refused
    bad = json.loads(json.dumps(pages))
    bad[2]["tools"][3]["inputSchema"] = {"type": "object", "properties": {"x": {"type": "strin"}}}
    name = bad[2]["tools"][3]["name"]
    fresh = ToolRegistry()
    with pytest.raises(InvalidToolError, match=rf"tools\[23\] '{name}'.*not a valid JSON Schema"):
        fresh.add_mcp(bad)
    assert len(fresh) == 0


def test_mcp_package_objects() -> None:
    types = pytest.importorskip("mcp.types")
    tools = server_tools(12, source="synthetic")
    objs = [types.Tool.model_validate(t) for t in tools]
    reg = ToolRegistry(objs[:4])  # auto-detected by their input schema attribute
    reg.add_mcp(types.ListToolsResult(tools=objs[4:]))
    assert reg.to_mcp() == tools and {t.source for t in reg} == {"mcp"}


def test_from_mcp_server_over_stdio() -> None:
    """A real MCP server (official ``mcp`` library) with 3,000 tools in pages of 500."""
    pytest.importorskip("mcp")
    n, size = 3000, 500
    reg = ToolRegistry.from_mcp_server(
        sys.executable,
        ["-m", "trierouter.testing.mcp_server", "--tools", str(n), "--page-size", str(size)],
        # the server lists the same data as this process (a worktree may point elsewhere)
        env={"PYTHONPATH": str(ROOT)}
        | {k: v for k, v in os.environ.items() if k == "TRIEROUTER_OPENAPI_DIR"},
        cwd=ROOT,
    )
    expected = server_tools(n)
    assert len(reg) == n and len(set(reg.names())) == n
    assert reg.names() == [t["name"] for t in expected]  # each once, in listing order
    got = {t.name: t for t in reg}
    for spec in expected:
        tool = got[spec["name"]]
        assert tool.parameters == spec["inputSchema"], spec["name"]
        assert tool.description == spec.get("description", "")
        assert tool.title == spec.get("title")
        assert tool.source == "mcp"
    assert reg.to_mcp() == expected
    # namespaces are kept in the names and grouped
    spaces = reg.namespaces()
    want: dict[str, list[str]] = {}
    for spec in expected:  # real operations or synthetic tools: each name is namespace.tool
        want.setdefault(spec["name"].partition(".")[0], []).append(spec["name"])
    assert spaces == want and len(spaces) > 1 and "" not in spaces


def test_from_mcp_session_in_process() -> None:
    """Inside an event loop: the high-level ``mcp.Client`` (``cursor=``) and its
    ``ClientSession`` (``params=``), connected in-process to the same paginated server."""
    mcp = pytest.importorskip("mcp")
    import anyio

    from trierouter.testing.mcp_server import build_server

    tools = server_tools(250, source="synthetic")

    async def main() -> tuple[ToolRegistry, ToolRegistry]:
        async with mcp.Client(build_server(tools, 40)) as client:
            return (
                await ToolRegistry.from_mcp_session(client),
                await ToolRegistry.from_mcp_session(client.session),
            )

    for reg in anyio.run(main):
        assert reg.to_mcp() == tools


def test_from_mcp_server_failures_are_clear() -> None:
    pytest.importorskip("mcp")
    server = ["-m", "trierouter.testing.mcp_server", "--source", "synthetic", "--tools", "700"]
    broken = [*server, "--page-size", "300", "--broken-tool", "650"]
    name = server_tools(700, source="synthetic")[650]["name"]
    with pytest.raises(InvalidToolError, match=rf"tools\[650\] '{name}'.*not a valid JSON Schema"):
        ToolRegistry.from_mcp_server(
            sys.executable, broken, env={"PYTHONPATH": str(ROOT)}, cwd=ROOT
        )
    with pytest.raises(McpServerError, match="failed before listing its tools"):
        ToolRegistry.from_mcp_server(sys.executable, ["-c", "pass"])
    with pytest.raises(McpServerError, match="no complete tools/list within 1 s"):
        ToolRegistry.from_mcp_server(
            sys.executable, ["-c", "import time; time.sleep(60)"], timeout=1
        )


def test_server_schemas_are_valid_and_varied() -> None:
    tools = server_tools(400, source="synthetic")
    kinds = set()
    for t in tools:
        Draft202012Validator.check_schema(t["inputSchema"])
        for prop in t["inputSchema"]["properties"].values():
            kinds.add(prop.get("type") or next(iter(prop)))
    assert {"string", "integer", "number", "boolean", "array", "anyOf", "$ref"} <= kinds


def test_from_mcp_server_needs_mcp_and_no_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    async def inside() -> None:
        ToolRegistry.from_mcp_server(sys.executable, ["-c", "pass"])

    pytest.importorskip("mcp")
    with pytest.raises(RuntimeError, match="from_mcp_session"):
        asyncio.run(inside())
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(MissingDependencyError, match=r"trierouter\[mcp\]"):
        ToolRegistry.from_mcp_server(sys.executable, ["-c", "pass"])


def test_package_imports_without_mcp_or_langchain() -> None:
    code = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"
        "sys.modules['langchain_core'] = None\n"
        "from trierouter.registry import ToolRegistry\n"
        "def f(x: int) -> int:\n"
        "    '''Double x.'''\n"
        "    return 2 * x\n"
        "r = ToolRegistry([f, {'name': 'm', 'inputSchema': {'type': 'object'}}])\n"
        "print(r.names())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "['f', 'm']"


# -- pydantic ------------------------------------------------------------------------------------
class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    street: str
    zip_code: str = Field(pattern=r"^\d{5}$")


class CreateTicket(BaseModel):
    """Open a support ticket."""

    subject: str = Field(description="one line")
    priority: Priority = Priority.LOW
    tags: list[str] = []
    address: Address | None = None
    count: int = Field(default=1, ge=1, le=10)


class TreeNode(BaseModel):
    """A recursive model."""

    label: str
    children: list[TreeNode] = []


def test_pydantic_models() -> None:
    reg = ToolRegistry([CreateTicket])
    tool = reg["CreateTicket"]
    assert tool.source == "pydantic" and tool.description == "Open a support ticket."
    schema = tool.parameters
    assert schema["type"] == "object" and schema["required"] == ["subject"]
    assert "title" not in schema and "$defs" in schema
    good = {"subject": "x", "priority": "high", "address": {"street": "a", "zip_code": "12345"}}
    bad = {"subject": "x", "count": 11}
    for sample in (good, bad, {"priority": "low"}, {"subject": "x", "priority": "mid"}):
        ours = _valid(schema, sample)
        theirs = True
        try:
            CreateTicket.model_validate(sample)
        except pydantic.ValidationError:
            theirs = False
        assert ours == theirs, sample
    reg.add_pydantic(TreeNode, name="tree.add", description="Add a tree.")
    tree = reg["tree.add"]
    assert tree.description == "Add a tree." and tree.parameters["type"] == "object"
    assert _valid(tree.parameters, {"label": "a", "children": [{"label": "b"}]})
    assert not _valid(tree.parameters, {"label": "a", "children": [{"x": 1}]})


# -- callables -----------------------------------------------------------------------------------
def get_weather(
    city: str,
    units: Literal["c", "f"] = "c",
    days: int = 1,
    hourly: bool = False,
    extra: list[str] | None = None,
    priority: Priority = Priority.LOW,
    address: Address | None = None,
    options: dict[str, float] | None = None,
) -> str:
    """Get the weather for a city.

    Longer explanation that is not part of the summary.

    Args:
        city: The city name,
            spelled out.
        units (str): Degrees Celsius or Fahrenheit.
        days: How many days ahead.

    Returns:
        A report.
    """
    return f"{city} {units} {days}"


def search_docs(query: str, limit: int = 10, *, exact: bool = False, **filters: Any) -> list[str]:
    """Search the documentation.

    Parameters
    ----------
    query : str
        What to look for.
    limit : int, optional
        At most this many hits.
    exact : bool
        Match the phrase exactly.

    Returns
    -------
    list of str
    """
    return [query] * limit


def rest_style(path: str, mode: int = 0o644) -> None:
    """Change a file's mode.

    :param path: The file.
    :param int mode: The new mode,
        in octal.
    :returns: nothing.
    """


def test_callables_with_docstrings() -> None:
    reg = ToolRegistry()
    reg.add(get_weather, search_docs)
    reg.add_function(rest_style, name="fs.chmod", description="chmod")
    w = reg["get_weather"]
    assert w.source == "callable" and w.description == "Get the weather for a city."
    props = w.parameters["properties"]
    assert props["city"] == {"type": "string", "description": "The city name, spelled out."}
    assert props["units"]["enum"] == ["c", "f"] and props["units"]["default"] == "c"
    assert props["units"]["description"] == "Degrees Celsius or Fahrenheit."
    assert props["days"]["type"] == "integer" and props["hourly"]["type"] == "boolean"
    assert w.parameters["required"] == ["city"]
    assert w.parameters["additionalProperties"] is False
    assert set(w.parameters["$defs"]) == {"Priority", "Address"}
    sample = {"city": "Oslo", "units": "f", "extra": ["wind"], "priority": "high"}
    assert _valid(w.parameters, sample)
    assert get_weather(**sample)  # the schema's arguments call the function
    assert not _valid(w.parameters, {"city": "Oslo", "units": "k"})
    assert not _valid(w.parameters, {"units": "c"})
    s = reg["search_docs"]
    assert s.description == "Search the documentation."
    sp = s.parameters["properties"]
    assert sp["query"]["description"] == "What to look for."
    assert sp["limit"]["description"] == "At most this many hits."
    assert sp["exact"]["description"] == "Match the phrase exactly."
    assert "additionalProperties" not in s.parameters  # **filters accepts more
    assert _valid(s.parameters, {"query": "q", "exact": True, "lang": "en"})
    c = reg["fs.chmod"]
    assert c.description == "chmod"
    assert c.parameters["properties"]["mode"]["description"] == "The new mode, in octal."
    assert c.parameters["properties"]["path"]["description"] == "The file."


def test_callable_variants_and_refusals() -> None:
    import functools

    class Greeter:
        def greet(self, name: str, loud: bool = False) -> str:
            """Greet someone."""
            return name

        def __call__(self, n: int) -> int:
            """Call it."""
            return n

    reg = ToolRegistry()
    reg.add_function(Greeter().greet)
    assert list(reg["greet"].parameters["properties"]) == ["name", "loud"]
    reg.add_function(Greeter(), name="greeter")
    assert reg["greeter"].parameters["required"] == ["n"]
    reg.add_function(functools.partial(get_weather, units="f"), name="weather_f")
    assert "units" in reg["weather_f"].parameters["properties"]
    assert reg["weather_f"].description == "Get the weather for a city."

    def untyped(a, b=2):  # type: ignore[no-untyped-def]
        return a

    reg.add(untyped)
    assert reg["untyped"].parameters["required"] == ["a"]

    def positional(a: int, /, b: int) -> int:
        return a

    reg.add(Greeter())  # named by its class
    assert reg["Greeter"].description == "Call it."
    reg.add_function(lambda q: q, name="echo")
    before = _snapshot(reg)
    with pytest.raises(InvalidToolError, match=r"'<lambda>'.*name=\.\.\."):
        reg.add(lambda q: q)
    with pytest.raises(InvalidToolError, match=r"tools\[0\] 'positional'.*positional-only"):
        reg.add(positional)
    with pytest.raises(InvalidToolError, match=r"tools\[0\] 'opaque'.*no JSON Schema"):
        reg.add_function(opaque)
    assert _snapshot(reg) == before


class Opaque:
    """A plain class: pydantic has no JSON Schema for it."""


def opaque(x: Opaque) -> None:
    """Takes a value pydantic cannot describe."""


def test_parse_docstring_styles() -> None:
    assert parse_docstring(None) == ("", {})
    summary, params = parse_docstring(
        """Fetch rows
        from the table.

        Keyword Args:
            limit (int): Max rows.
            *rest: ignored
        """
    )
    assert summary == "Fetch rows from the table."
    assert params == {"limit": "Max rows.", "rest": "ignored"}
    assert parse_docstring(":param x: the x")[1] == {"x": "the x"}
    assert parse_docstring("Summary.\n:param x: the x")[0] == "Summary."


# -- LangChain -----------------------------------------------------------------------------------
def test_langchain_tools() -> None:
    lc = pytest.importorskip("langchain_core.tools")

    @lc.tool
    def multiply(a: int, b: int = 2) -> int:
        """Multiply two numbers."""
        return a * b

    @lc.tool(parse_docstring=True)
    def lookup(query: str, user_id: Annotated[str, InjectedToolArg]) -> str:
        """Look something up.

        Args:
            query: What to look up.
        """
        return query

    def add(x: float, y: float) -> float:
        return x + y

    structured = lc.StructuredTool.from_function(add, name="math.add", description="Add.")

    class WikiArgs(BaseModel):
        topic: str = Field(description="A topic")
        lang: Literal["en", "de"] = "en"

    class Wiki(lc.BaseTool):  # type: ignore[misc]
        name: str = "wiki.search"
        description: str = "Search the wiki."
        args_schema: type[BaseModel] = WikiArgs

        def _run(self, topic: str, lang: str = "en") -> str:
            return f"{topic}:{lang}"

    wiki = Wiki()
    reg = ToolRegistry([multiply, lookup])
    reg.add_langchain(structured, wiki)
    assert reg.names() == ["multiply", "lookup", "math.add", "wiki.search"]
    assert {t.source for t in reg} == {"langchain"}
    m = reg["multiply"]
    assert m.description == "Multiply two numbers."
    assert m.parameters["required"] == ["a"] and "title" not in m.parameters
    lk = reg["lookup"]
    assert list(lk.parameters["properties"]) == ["query"]  # the injected argument is left out
    assert lk.parameters["properties"]["query"]["description"] == "What to look up."
    assert reg["wiki.search"].parameters["properties"]["topic"]["description"] == "A topic"
    # arguments valid for our schema are accepted by the tool itself
    cases = [
        (multiply, {"a": 3, "b": 4}, 12),
        (structured, {"x": 1.5, "y": 2}, 3.5),
        (wiki, {"topic": "trie", "lang": "de"}, "trie:de"),
    ]
    for lc_tool, args, result in cases:
        assert _valid(reg[lc_tool.name].parameters, args)
        assert lc_tool.invoke(args) == result
    assert not _valid(reg["wiki.search"].parameters, {"topic": "x", "lang": "fr"})
    with pytest.raises(InvalidToolError, match="expected a LangChain tool"):
        reg.add_langchain(add)


# -- errors: named, positioned, and nothing registered --------------------------------------------
def _fn(name: str, params: Any = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, **extra}
    if params is not None:
        spec["parameters"] = params
    return {"type": "function", "function": spec}


GOOD = _fn("ok.tool", {"type": "object", "properties": {"q": {"type": "string"}}})


@pytest.mark.parametrize(
    ("batch", "error", "pattern"),
    [
        ([GOOD, _fn("dup"), _fn("dup")], DuplicateToolError, r"tools\[2\] 'dup'.*tools\[1\]"),
        ([_fn("existing")], DuplicateToolError, r"tools\[0\] 'existing'.*already registered"),
        ([GOOD, _fn("")], InvalidToolError, r"tools\[1\] '': the name is empty"),
        ([_fn(" padded")], InvalidToolError, r"' padded'.*whitespace"),
        ([_fn("bad\nname")], InvalidToolError, r"'bad\\nname'.*control character"),
        ([_fn("x" * 300)], InvalidToolError, r"300 characters, more than 256"),
        (
            [GOOD, _fn("typo", {"type": "object", "properties": {"a": {"type": "strin"}}})],
            InvalidToolError,
            r"tools\[1\] 'typo'.*not a valid JSON Schema.*'strin'.*properties/a/type",
        ),
        ([_fn("top", {"type": "strin"})], InvalidToolError, r"'top'.*not a valid JSON Schema"),
        (
            [_fn("scalar", {"type": "string"})],
            InvalidToolError,
            r"tools\[0\] 'scalar'.*must describe an object.*\"type\": \"string\"",
        ),
        ([_fn("listy", ["a"])], InvalidToolError, r"'listy'.*must be a JSON Schema object"),
        (
            [_fn("setty", {"type": "object", "enum": {1, 2}})],
            InvalidToolError,
            r"'setty'.*not plain JSON",
        ),
        (
            [_fn("minus", {"type": "object", "minProperties": -1})],
            InvalidToolError,
            r"'minus'.*not a valid JSON Schema",
        ),
        ([{"name": "n", "foo": 1}], InvalidToolError, r"tools\[0\] 'n'.*no known tool form"),
        ([GOOD, 42], InvalidToolError, r"tools\[1\]: a int is no supported tool form"),
        ([{"tools": []}], InvalidToolError, r"use add_mcp"),
        ([_fn(7)], InvalidToolError, r"name must be a string"),
        ([_fn("d", None, description=3)], InvalidToolError, r"'d'.*description must be a string"),
    ],
)
def test_errors_name_the_tool_and_register_nothing(
    batch: list[Any], error: type[ToolError], pattern: str
) -> None:
    reg = ToolRegistry([_fn("existing"), _fn("other.one")])
    before = _snapshot(reg)
    with pytest.raises(error, match=pattern) as info:
        reg.add(*batch)
    assert _snapshot(reg) == before, "a failed call must register nothing"
    assert "none of this call was" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TrieRouterError)
    assert len(info.value.problems) >= 1
    assert "ok.tool" not in reg


def test_every_problem_of_a_batch_is_listed() -> None:
    reg = ToolRegistry()
    batch = [_fn(f"t{i}", {"type": "strin"}) for i in range(12)] + [_fn("fine")]
    with pytest.raises(InvalidToolError) as info:
        reg.add_openai(batch)
    assert len(info.value.problems) == 12
    assert "12 tools could not be registered" in str(info.value) and "2 more" in str(info.value)
    assert len(reg) == 0
    with pytest.raises(InvalidToolError, match="an OpenAI tool"):
        reg.add_openai([{"type": "retrieval"}])
    with pytest.raises(InvalidToolError, match="an Anthropic tool"):
        reg.add_anthropic([{"description": "no name"}])
    reg.add_openai(batch[-1])
    assert reg.names() == ["fine"]


# -- save / load ---------------------------------------------------------------------------------
def _mixed_registry() -> ToolRegistry:
    reg = ToolRegistry(OPENAI)
    reg.add(get_weather, CreateTicket, {"name": "ünïcode.tool", "inputSchema": {"type": "object"}})
    reg.add_mcp({"tools": server_tools(50, source="synthetic")})
    return reg


def test_save_load_round_trip(tmp_path: Path) -> None:
    reg = _mixed_registry()
    path = tmp_path / "tools.json"
    reg.save(path)
    back = ToolRegistry.load(path)
    assert list(back) == list(reg)
    assert back.namespaces() == reg.namespaces()
    assert [t.source for t in back] == [t.source for t in reg]
    assert json.loads(path.read_text(encoding="utf-8"))["count"] == len(reg)
    assert not list(tmp_path.glob("*.tmp"))


def test_load_refuses_corrupt_files(tmp_path: Path) -> None:
    reg = _mixed_registry()
    path = tmp_path / "tools.json"
    reg.save(path)
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)

    def write(name: str, content: str | bytes) -> Path:
        p = tmp_path / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        return p

    bad_schema = json.loads(text)
    bad_schema["tools"][1]["parameters"] = {"type": 5}
    dup = json.loads(text)
    dup["tools"][2]["name"] = dup["tools"][0]["name"]
    dup_name = dup["tools"][0]["name"]
    cases = {
        write("truncated.json", text[: len(text) // 2]): "bad JSON",
        write("binary.json", b"\xff\xfe\x00garbage"): "bad JSON",
        write("foreign.json", json.dumps({"tools": []})): "no format",
        write("list.json", "[1, 2]"): "no format",
        write("version.json", json.dumps({**doc, "version": 99})): "version 99",
        write("short.json", json.dumps({**doc, "tools": doc["tools"][:-1]})): "truncated",
        write("schema.json", json.dumps(bad_schema)): r"tools\[1\] 'github.list_repos'",
        write("dup.json", json.dumps(dup)): rf"tools\[2\] '{dup_name}'.*twice",
        write("row.json", json.dumps({**doc, "count": 1, "tools": [[1]]})): r"tools\[0\]",
    }
    for file, pattern in cases.items():
        with pytest.raises(CorruptFileError, match=pattern):
            ToolRegistry.load(file)


def test_many_tools_add_save_load(tmp_path: Path) -> None:
    """10,000 tools through every step (the 100,000-tool timings are in the benchmark)."""
    tools = server_tools(10_000, source="synthetic")
    reg = ToolRegistry()
    reg.add_mcp(_pages(tools, 1000))
    assert len(reg) == 10_000
    reg.save(tmp_path / "big.json")
    back = ToolRegistry.load(tmp_path / "big.json")
    assert back.names() == reg.names() and back.to_openai()[-1] == reg.to_openai()[-1]


# -- the cached schema check against jsonschema itself --------------------------------------------
def _random_schema(rng: random.Random, depth: int = 0) -> Any:
    """Mostly valid schemas with occasional mistakes of the kinds people make."""
    if rng.random() < 0.05:
        return rng.choice([True, False, 3, "string", None, []])
    node: dict[str, Any] = {}
    kind = rng.choice(["string", "integer", "number", "boolean", "object", "array", "null"])
    node["type"] = rng.choice([kind] * 12 + [[kind, "null"], "strin", ["string", "string"]])
    if rng.random() < 0.3:
        node["description"] = rng.choice(["text", 5, ""])
    if rng.random() < 0.2:
        node["enum"] = rng.choice([["a", "b"], [], "a", [1, 1]])
    if rng.random() < 0.2:
        node[rng.choice(["minimum", "maxLength", "minItems"])] = rng.choice([0, 3, -1, 2.5, "x"])
    if rng.random() < 0.1:
        node["pattern"] = rng.choice(["^a+$", "(", 7])
    if rng.random() < 0.1:
        node["format"] = rng.choice(["date", "uuid", 1])
    if rng.random() < 0.1:
        node["default"] = rng.choice([1, "x", None, [1]])
    if depth < 3:
        if rng.random() < 0.5:
            props = {f"p{i}": _random_schema(rng, depth + 1) for i in range(rng.randint(0, 4))}
            node["properties"] = props if rng.random() < 0.95 else list(props)
            if props and rng.random() < 0.5:
                node["required"] = rng.choice([list(props)[:1], ["p0", "p0"], "p0", [1]])
        if rng.random() < 0.2:
            node["items"] = _random_schema(rng, depth + 1)
        if rng.random() < 0.15:
            node[rng.choice(["anyOf", "oneOf", "allOf"])] = rng.choice(
                [[_random_schema(rng, depth + 1), _random_schema(rng, depth + 1)], [], {}]
            )
        if rng.random() < 0.1:
            node["$defs"] = {"D": _random_schema(rng, depth + 1)}
        if rng.random() < 0.1:
            node["additionalProperties"] = rng.choice([False, {"type": "string"}, 1])
    return node


def test_cached_schema_check_agrees_with_jsonschema() -> None:
    rng = random.Random(1234)
    clear_caches()
    valid = invalid = 0
    draft7 = "http://json-schema.org/draft-07/schema#"
    for i in range(800):
        schema = _random_schema(rng)
        if not isinstance(schema, dict):
            continue
        if i % 3 == 0:  # draft 7, as MCP servers built on zod-to-json-schema declare
            schema = {"$schema": draft7, **schema}
            if rng.random() < 0.3:
                schema["items"] = [{"type": "string"}, rng.choice([{"type": "strin"}, True])]
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
            expected = True
        except jsonschema.SchemaError:
            expected = False
        got = schema_problem(schema, json.dumps(schema)) is None
        assert got == expected, schema
        # asked again, from the caches
        assert (schema_problem(schema, json.dumps(schema)) is None) == expected, schema
        valid += expected
        invalid += not expected
    assert valid > 100 and invalid > 100
    # another draft named by $schema is checked by that draft's rules
    tuple_items = {"$schema": draft7, "items": [{"type": "string"}]}
    assert schema_problem(tuple_items) is None
    assert schema_problem({"items": [{"type": "string"}]}) is not None  # not 2020-12
    assert schema_problem({"$schema": "http://json-schema.org/draft-04/schema#"}) is None
    # a $schema inside a subschema does not switch the rules for that node
    nested = {"type": "object", "properties": {"a": {**tuple_items, "type": "array"}}}
    with pytest.raises(jsonschema.SchemaError):
        Draft202012Validator.check_schema(nested)
    assert schema_problem(nested) is not None
