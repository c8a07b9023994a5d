"""MCP ``tools/list`` listings: one page, the pages of one listing, or ``fetch(cursor) -> page``
followed until the last page; and the errors inside the ``mcp`` client's task groups."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from trierouter.errors import ToolError
from trierouter.registry.forms import field_of

__all__ = ["exception_leaves", "list_tools_page", "mcp_listing"]


def _page_tools(page: Any, where: str) -> tuple[list[Any], Any]:
    if isinstance(page, Mapping) and "result" in page and "tools" not in page:
        page = page["result"]  # a JSON-RPC response
    tools = field_of(page, "tools")
    if not isinstance(tools, list | tuple):
        raise ToolError(
            f"{where} is not a tools/list result: it has no list of tools "
            f"(got a {type(page).__name__})"
        )
    return list(tools), field_of(page, "nextCursor", "next_cursor")


def mcp_listing(result: Any, *, partial: bool) -> list[Any]:
    """Every tool of a listing given as one page, pages, or ``fetch(cursor) -> page``."""
    if callable(result) and not isinstance(result, Mapping) and not hasattr(result, "tools"):
        tools: list[Any] = []
        cursor: Any = None
        seen: set[Any] = set()
        while True:
            page_tools, cursor = _page_tools(result(cursor), f"page {len(seen) + 1}")
            tools.extend(page_tools)
            if not cursor:
                return tools
            if cursor in seen:
                raise ToolError(f"the listing repeats cursor {cursor!r}: it would never end")
            seen.add(cursor)
    if isinstance(result, Mapping) or hasattr(result, "tools"):
        pages = [result]
    elif isinstance(result, Iterable) and not isinstance(result, str | bytes):
        pages = list(result)
    else:
        raise ToolError(
            f"add_mcp takes a tools/list result, its pages or fetch(cursor) -> page, got a "
            f"{type(result).__name__}"
        )
    tools = []
    for i, page in enumerate(pages):
        where = f"MCP page {i + 1} of {len(pages)}"
        page_tools, cursor = _page_tools(page, where)
        tools.extend(page_tools)
        if i < len(pages) - 1 and not cursor:
            raise ToolError(
                f"{where} has no nextCursor, yet more pages follow: pass the pages of one "
                "listing, in order"
            )
        if i == len(pages) - 1 and cursor and not partial:
            raise ToolError(
                f"{where} has nextCursor {cursor!r}: the listing goes on. Pass every page, a "
                "function fetch(cursor) -> page, or partial=True to register these tools anyway"
            )
    return tools


def exception_leaves(err: BaseException) -> list[BaseException]:
    if isinstance(err, BaseExceptionGroup):
        return [leaf for sub in err.exceptions for leaf in exception_leaves(sub)]
    return [err]


async def list_tools_page(session: Any, cursor: Any) -> Any:
    if cursor is None:
        return await session.list_tools()
    if "params" in inspect.signature(session.list_tools).parameters:
        from mcp.types import PaginatedRequestParams  # mcp >= 2: params=...

        return await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
    return await session.list_tools(cursor=cursor)  # mcp 1.x
