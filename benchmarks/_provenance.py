"""Where, when and how each arm of a benchmark ran, and the check that no table hides a mix.

Every benchmark that writes several arms (a comparison) keeps one record per arm in the result
JSON's ``runs``: ``result["runs"][ARM] = arm_run(settings)`` when the arm starts and
``finish_run(record)`` when it ends. A record holds the commit (short ``HEAD``, with ``dirty``
when ``trierouter/``, ``csrc/`` or ``benchmarks/`` differ from it), the date (UTC), the load
average at the start and the end, the CPUs and the arm's settings. Arms kept from an earlier
run keep their own record; categories of an arm rerun alone keep theirs under ``by_category``
(:func:`merge_run`). A record recovered from git after the fact says ``commit: "unknown"`` and
``stored_in``: the commit that added its numbers (the code it ran is not known).

:func:`check_table` is what ``benchmarks/report.py`` runs on every table that puts arms side by
side: arms of different runs (:func:`run_label`) may share a table only if each arm's row (or
column) names its own run; otherwise :class:`MixedRuns` is raised and the report refuses to
render.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
UNKNOWN = "unknown"
CODE = ("trierouter", "csrc", "benchmarks", ":!benchmarks/results")
"""The paths whose uncommitted changes make a run ``dirty`` (git pathspecs): the code, not the
result files a run writes (its own JSON, written after its first arm, would flag the next)."""


class MixedRuns(ValueError):
    """A table puts arms of different runs side by side without naming each arm's run."""


def _git(*args: str, root: Path = ROOT) -> str:
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    return out.stdout.strip()


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def arm_run(settings: Mapping[str, Any] | None = None, *, root: Path = ROOT) -> dict[str, Any]:
    """The record of an arm starting now: commit, whether the code differs from it, date,
    load average, CPUs, host, nice level and ``settings`` (JSON-ready values)."""
    commit = _git("rev-parse", "--short", "HEAD", root=root) or UNKNOWN
    dirty = bool(_git("status", "--porcelain", "--", *CODE, root=root))
    return {
        "commit": commit,
        "dirty": dirty,
        "date": utc_now(),
        "loadavg_start": _load(),
        "cpus": os.cpu_count(),
        "host": f"{platform.machine()}, nice {os.nice(0)}",
        "python": platform.python_version(),
        "settings": {k: _plain(v) for k, v in (settings or {}).items()},
    }


def finish_run(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the end: load average and date."""
    return record | {"loadavg_end": _load(), "ended": utc_now()}


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return str(v)


def merge_run(
    previous: Mapping[str, Any] | None, new: dict[str, Any], kept: Iterable[str]
) -> dict[str, Any]:
    """The record of an arm rerun on some categories: ``new``, with the ``kept`` categories
    (those not rerun) keeping the run they came from under ``by_category``."""
    out = dict(new)
    if previous is None:
        return out
    by = dict(previous.get("by_category", {}))
    own = {k: v for k, v in previous.items() if k != "by_category"}
    keep = {c: by.get(c, own) for c in kept}
    if keep:
        out["by_category"] = keep
    return out


def run_label(record: Mapping[str, Any] | None) -> str:
    """How a table names one run: its commit (``+dirty`` for uncommitted code), or ``unknown``
    with the commit that stored the numbers, when that is all git tells."""
    if not record:
        return UNKNOWN
    commit = str(record.get("commit") or UNKNOWN)
    if commit == UNKNOWN:
        stored = record.get("stored_in")
        return f"{UNKNOWN}, stored in {stored}" if stored else UNKNOWN
    return commit + ("+dirty" if record.get("dirty") else "")


def run_labels(record: Mapping[str, Any] | None) -> list[str]:
    """Every run an arm's numbers come from: its own, then its categories' own (sorted)."""
    own = run_label(record)
    others = {run_label(r) for r in (record or {}).get("by_category", {}).values()}
    return [own, *sorted(others - {own})]


RUN_NOTE = (
    "Run: the commit each arm ran at and its date (`+dirty`: with uncommitted changes); "
    "`unknown, stored in C`: the run recorded no commit and C is the commit that added its "
    "numbers (recovered from git); a category after `;` comes from another run than the rest "
    "of its row."
)
"""The legend of a run column, printed under a table that has one."""


def category_run(record: Mapping[str, Any] | None, category: str) -> dict[str, Any] | None:
    """The record of the run one category of an arm comes from."""
    if record is None:
        return None
    by = record.get("by_category") or {}
    return dict(by.get(category) or {k: v for k, v in record.items() if k != "by_category"})


def run_cell(record: Mapping[str, Any] | None) -> str:
    """A table cell naming an arm's run(s): ``commit (date)``, then each category from
    another run."""
    if not record:
        return UNKNOWN
    own = run_label(record)
    date = str(record.get("date") or "")[:10]
    cell = f"{own} ({date})" if date else own
    by: dict[str, list[str]] = {}
    for cat, r in (record.get("by_category") or {}).items():
        if run_label(r) != own:
            by.setdefault(run_label(r), []).append(cat)
    for label, cats in sorted(by.items()):
        cell += f"; {', '.join(sorted(cats))}: {label}"
    return cell


def is_mixed(runs: Mapping[str, Mapping[str, Any] | None], arms: Iterable[str]) -> bool:
    """Whether the ``arms`` come from more than one run. An arm without a record counts as a
    run of its own (unknown), unless no arm has one: a file without per-arm records is one run,
    cited by the file's own commit and date."""
    arms = list(arms)
    if not any(runs.get(a) for a in arms):
        return False
    labels = set()
    for a in arms:
        if runs.get(a) is None:
            return True
        labels.update(run_labels(runs[a]))
    return len(labels) > 1


def arm_runs(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result's per-arm records (``runs``; an older file's list of invocations is not)."""
    runs = result.get("runs")
    return dict(runs) if isinstance(runs, Mapping) else {}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def check_table(
    where: str,
    table: Sequence[str],
    labels: Mapping[str, str],
    runs: Mapping[str, Mapping[str, Any] | None],
) -> None:
    """Raise :class:`MixedRuns` if the markdown ``table`` shows arms of different runs without
    each arm's row or column naming every run its numbers come from.

    ``labels``: each arm's label as the table prints it, the first cell of its row or a cell of
    the header (its column); ``runs``: the result's per-arm records."""
    if not is_mixed(runs, labels):
        return
    rows = [_cells(line) for line in table if line.lstrip().startswith("|")]
    rows = [r for r in rows if not all(set(c) <= set("-: ") for c in r)]
    if not rows:
        raise ValueError(f"{where}: no markdown table to check")
    header, body = rows[0], rows[1:]
    missing = []
    for arm, label in labels.items():
        if label in header:
            j = header.index(label)
            seen = " ".join(r[j] for r in body if j < len(r))
        else:
            found = [r for r in body if r and r[0] == label]
            if not found:
                raise ValueError(f"{where}: arm {arm!r} ({label!r}) is not in the table")
            seen = " ".join(found[0][1:])
        missing += [f"{arm} ({want})" for want in run_labels(runs.get(arm)) if want not in seen]
    if missing:
        found_runs = sorted({x for a in labels for x in run_labels(runs.get(a))})
        raise MixedRuns(
            f"{where}: the table puts arms of {len(found_runs)} runs side by side "
            f"({', '.join(found_runs)}) and does not name the run of {', '.join(missing)}. "
            "Rerun the arms together (one run, one commit) or give the table a run column "
            "(or row) from benchmarks/_provenance.py's run_cell."
        )
