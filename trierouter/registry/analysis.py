"""A tool list's slot analysis as plain data, and a store that hands it to another process.

The slot analysis (which engine serves each slot, what is relaxed, the XGrammar sub-schemas) is
the part of a tool compile that needs no tokenizer, and for a real registry it is nearly all of
it: 1,000 OpenAPI operations take about 1.3 s of Python here against 9 ms for the names trie.
``trierouter serve`` runs it once per new inline tool set in the API process, after
authentication and off both the event loop and the engine's step, and writes the result to an
:class:`AnalysisStore` (a private folder, ``$TRIEROUTER_ANALYSIS_DIR``); the logits processor in
the engine core reads it back (milliseconds) instead of analysing the set inside a batch step.

    a = analyze_tools([("get_weather", {"type": "object", ...}), ...])
    store.put(key, a); store.get(key) == a
    compile_tools(tools, index, analysis=a)      # the names trie only: the analysis is reused

A stored file is JSON only (nothing is unpickled or executed), carries the tool names it was made
for, and is checked field by field when read: a file that does not read back is reported and
ignored (the engine then analyses the set itself), never half-used.

The same store carries what needs the tokenizer, compiled where the engine's step does not
wait: the engine publishes its vocabulary (:meth:`AnalysisStore.put_vocabulary`), and the API
process's worker compiles a new set's names tries and their turn-closing tables with it
(:meth:`AnalysisStore.put_names`; set files, checked like any ``.trt`` when read). Every file
counts toward the store's bytes, the oldest removed first.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from trierouter import settings
from trierouter.errors import CorruptFileError
from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.normalize import Problem
from trierouter.registry.slots.slot_records import Slot, kept_analysis
from trierouter.registry.store import load_arrays, save_arrays

if TYPE_CHECKING:
    from trierouter.registry.trie import ChoiceSet
    from trierouter.registry.vocabulary import Vocabulary

__all__ = [
    "ENV_ANALYSIS_DIR",
    "STEP_WORK",
    "AnalysisStore",
    "ToolsAnalysis",
    "analyze_tools",
    "drop_unparsed_patterns",
    "normalized",
    "text_spans",
    "tools_key",
]

logger = logging.getLogger("trierouter")

ENV_ANALYSIS_DIR = settings.ANALYSIS_DIR.name
"""The folder an API process writes analyses to and the engine reads them from."""
ENV_ANALYSIS_BYTES = settings.ANALYSIS_BYTES.name
_FORMAT = "trierouter-tools-analysis"
_VERSION = 1
_KEY = re.compile(r"[0-9a-f]{64}")
_VOCAB_FILE = "vocabulary.trv"
_ENTRIES = ("*.json", "*.trt", "*.cost")
_TABLE = "trierouter-names-table"

STEP_WORK: Counter[str] = Counter()
"""Compiles of a new set's pieces in this process, by kind (``names_trie``: a names trie over
every tool; ``closer_table``: its turn-closing table; ``value_set``: a request's inline values):
a server's engine counts what it did inside its step because nothing prepared it (logged by
the logits processor)."""


def _load_set(path: Path, vocab: Vocabulary, what: str) -> ChoiceSet | None:
    """The set file at ``path`` for ``vocab``, checked like any set file (``None``: no file, or
    it does not read back: logged as stored ``what`` ignored)."""
    from trierouter.registry.trie import ChoiceSet

    try:
        return ChoiceSet.load(path, vocab, mmap=False) if path.is_file() else None
    except (CorruptFileError, OSError, ValueError) as exc:
        logger.warning("trierouter: ignoring stored %s: %s", what, exc)
        return None


def tools_key(tools_json: str) -> str:
    """The store key of an inline tool set: the SHA-256 of its JSON text (as the engine gets it)."""
    return hashlib.sha256(tools_json.encode("utf-8", "surrogatepass")).hexdigest()


def text_spans(tools: Sequence[Any], text: str) -> tuple[tuple[int, int], ...] | None:
    """Where each tool's object lies in ``text`` (``[start, end)`` characters) when ``text`` is
    :func:`json.dumps` of the list (``ensure_ascii=False``), checked character for character;
    ``None`` when it is written otherwise."""
    parts = [json.dumps(t, ensure_ascii=False) for t in tools]
    if "[" + ", ".join(parts) + "]" != text:
        return None
    spans, at = [], 1
    for part in parts:
        spans.append((at, at + len(part)))
        at += len(part) + 2
    return tuple(spans)


def normalized(schema: dict[str, Any]) -> dict[str, Any]:
    """An empty argument schema as the object with no properties it means."""
    if not schema:
        return {"type": "object", "properties": {}}
    return schema


@dataclass(frozen=True)
class ToolsAnalysis:
    """The slot analysis of a tool list, in the list's order."""

    names: tuple[str, ...]
    slots: tuple[tuple[Slot, ...], ...] | None
    """Per tool, each slot and the engine that serves it (``None`` when read from a store:
    only ``explain`` needs them, and :class:`CompiledTools` analyses again for it)."""
    relaxed: dict[str, list[Problem]]
    """Per relaxed tool, what its calls are not held to."""
    xgrammar_schemas: dict[str, dict[str, Any]]
    """The sub-schemas XGrammar serves, by slot key (unparseable patterns already dropped)."""
    strict: tuple[bool | None, ...] = ()
    """Per tool, its ``strict`` flag (``True`` or ``None``), when the analysis carries spans."""
    engines: dict[str, int] = field(default_factory=dict)
    """How many slots each engine serves, over all the tools."""
    spans: tuple[tuple[int, int], ...] = ()
    """Per tool, where its object lies in the set's JSON text (``[start, end)`` characters), so
    a reader parses a tool only when a call reaches it; empty: parse the whole text."""

    def to_bytes(self) -> bytes:
        doc = {
            "format": _FORMAT,
            "version": _VERSION,
            "names": list(self.names),
            "engines": self.engines,
            "relaxed": {
                n: [[p.path, p.keyword, p.why, p.fix] for p in ps] for n, ps in self.relaxed.items()
            },
            "xgrammar": self.xgrammar_schemas,
            "strict": list(self.strict),
            "spans": [list(sp) for sp in self.spans],
        }
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, what: str = "analysis") -> ToolsAnalysis:
        """Reads :meth:`to_bytes` back; ``CorruptFileError`` naming the first wrong field."""
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise CorruptFileError(f"{what}: not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise CorruptFileError(f"{what}: not a trierouter tools analysis")
        if doc.get("version") != _VERSION:
            raise CorruptFileError(f"{what}: version {doc.get('version')!r}, expected {_VERSION}")
        names: Any = doc.get("names")
        engines, relaxed, xgr = (doc.get(k) for k in ("engines", "relaxed", "xgrammar"))
        if not _strs(names):
            raise CorruptFileError(f"{what}: names is not a list of tool names")
        if not (isinstance(engines, dict) and all(type(v) is int for v in engines.values())):
            raise CorruptFileError(f"{what}: engines is not a map of engine names to counts")
        if not (
            isinstance(relaxed, dict)
            and set(relaxed) <= set(names)
            and all(type(ps) is list for ps in relaxed.values())
            and all(type(p) is list and len(p) == 4 for ps in relaxed.values() for p in ps)
            and all(type(x) is str for ps in relaxed.values() for p in ps for x in p)
        ):
            raise CorruptFileError(f"{what}: relaxed is not a map of listed tools to problems")
        if not (isinstance(xgr, dict) and all(type(v) is dict for v in xgr.values())):
            raise CorruptFileError(f"{what}: xgrammar is not a map of slot keys to schemas")
        strict, spans = doc.get("strict"), doc.get("spans")
        if not (
            isinstance(strict, list)
            and isinstance(spans, list)
            and (not spans or len(spans) == len(strict) == len(names))
            and all(x is True or x is None for x in strict)
            and all(type(sp) is list and len(sp) == 2 for sp in spans)
            and all(type(x) is int and x >= 0 for sp in spans for x in sp)
        ):
            raise CorruptFileError(f"{what}: strict and spans do not match the tools")
        return cls(
            names=tuple(names),
            slots=None,
            engines=engines,
            relaxed={n: [Problem(*p) for p in ps] for n, ps in relaxed.items()},
            xgrammar_schemas=xgr,
            strict=tuple(strict),
            spans=tuple((a, b) for a, b in spans),
        )


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(type(x) is str for x in v)


def analyze_tools(tools: Sequence[tuple[str, dict[str, Any]]]) -> ToolsAnalysis:
    """The slot analysis of ``(name, argument schema)`` pairs, every tool served (relaxed where
    needed; whether a relaxed tool is refused is its ``strict`` flag's business, decided by the
    caller). An unparseable XGrammar ``pattern`` is dropped from its slot and recorded as a
    relaxation of every tool with that slot. Exceptions propagate (``KeyError``,
    ``ValueError``, ``RecursionError`` for a malformed schema)."""
    dry = SlotCompiler(dry=True, strict=False)
    slots: list[tuple[Slot, ...]] = []
    relaxed: dict[str, list[Problem]] = {}
    kept_xgr: dict[str, dict[str, Any]] = {}
    for name, schema in tools:
        kept = kept_analysis(normalized(schema))
        if kept is None:
            found, problems = dry.analyze(normalized(schema))
        else:  # the same walk, done when the tools were registered (analyses_kept)
            found, problems, xgr_slots = kept
            kept_xgr.update(xgr_slots)
        slots.append(tuple(found))
        if problems:
            relaxed[name] = list(problems)
    xgr = dict(dry.xgrammar_slots) | kept_xgr
    names = tuple(n for n, _ in tools)
    drop_unparsed_patterns(names, slots, relaxed, xgr)
    engines: dict[str, int] = {}
    for found_slots in slots:
        for sl in found_slots:
            engines[sl.engine] = engines.get(sl.engine, 0) + 1
    return ToolsAnalysis(names, tuple(slots), relaxed, xgr, engines=engines)


def drop_unparsed_patterns(
    names: Sequence[str],
    slots: Sequence[Sequence[Slot]],
    relaxed: dict[str, list[Problem]],
    xgrammar_schemas: dict[str, Any],
) -> None:
    """Every ``pattern`` of an XGrammar slot parses in XGrammar; one that does not is dropped
    from its slot (in place) and recorded as a relaxation of every tool with that slot."""
    bad: dict[str, str] = {}
    for key, schema in xgrammar_schemas.items():
        for pattern in _patterns(schema):
            why = xgrammar_regex_problem(pattern)
            if why is not None:
                bad[key] = f"XGrammar cannot parse pattern {pattern!r:.60} ({why})"
    for key in bad:
        xgrammar_schemas[key] = _without(xgrammar_schemas[key], "pattern")
    if not bad:
        return
    for name, found in zip(names, slots, strict=True):
        for sl in found:
            if sl.engine == "xgrammar" and sl.key in bad:
                relaxed.setdefault(name, []).append(
                    Problem(sl.path, "pattern", bad[sl.key], "rewrite or drop the pattern")
                )


def _patterns(schema: Any) -> list[str]:
    out: list[str] = []
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "pattern" and isinstance(v, str):
                out.append(v)
            elif k not in ("enum", "const"):
                out += _patterns(v)
    elif isinstance(schema, list):
        for v in schema:
            out += _patterns(v)
    return out


_REGEX_CHECKED: dict[str, str | None] = {}


def xgrammar_regex_problem(pattern: str) -> str | None:
    """Why XGrammar cannot parse ``pattern`` (``None`` if it can); cached."""
    if pattern not in _REGEX_CHECKED:
        import xgrammar as xgr

        try:
            xgr.Grammar.from_regex(pattern)
            why = None
        except Exception as exc:  # XGrammar raises RuntimeError with its parser's message
            why = str(exc).strip().splitlines()[-1][:120]
        if len(_REGEX_CHECKED) > 100_000:
            _REGEX_CHECKED.clear()
        _REGEX_CHECKED[pattern] = why
    return _REGEX_CHECKED[pattern]


def _without(schema: Any, keyword: str) -> Any:
    if isinstance(schema, dict):
        return {k: _without(v, keyword) for k, v in schema.items() if k != keyword}
    if isinstance(schema, list):
        return [_without(v, keyword) for v in schema]
    return schema


class AnalysisStore:
    """Analyses by key in one folder, written atomically (a temporary file, then a rename) and
    bounded in bytes (the oldest files go first)."""

    def __init__(
        self, root: str | os.PathLike[str], max_bytes: int = settings.ANALYSIS_BYTES.default
    ) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    @classmethod
    def from_env(cls) -> AnalysisStore | None:
        """The store ``$TRIEROUTER_ANALYSIS_DIR`` names (``None`` when unset)."""
        root = settings.ANALYSIS_DIR.get()
        return None if root is None else cls(root, settings.ANALYSIS_BYTES.get())

    def _path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise ValueError(f"analysis key {key!r:.80}: expected 64 hex digits")
        return self.root / f"{key}.json"

    def put(self, key: str, analysis: ToolsAnalysis) -> None:
        path = self._path(key)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(analysis.to_bytes())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self._trim()

    def has(self, key: str) -> bool:
        """Whether an analysis is stored for ``key`` (not read)."""
        return self._path(key).is_file()

    def get(self, key: str) -> ToolsAnalysis | None:
        """The analysis stored for ``key``; ``None`` when there is none (a file that does not
        read back is logged and removed). ``CompiledTools`` checks the tool names it lists."""
        path = self._path(key)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        try:
            return ToolsAnalysis.from_bytes(raw, str(path))
        except CorruptFileError as exc:
            logger.warning("trierouter: ignoring a stored tools analysis: %s", exc)
            path.unlink(missing_ok=True)
            return None

    # -- what a worker compiles with the engine's vocabulary ------------------------------------
    def put_vocabulary(self, vocab: Vocabulary) -> None:
        """Publish the engine's vocabulary (exact token bytes, ids, width) for its workers."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        arrays: dict[str, npt.NDArray[Any]] = {
            "buffer": vocab.buffer,
            "offsets": vocab.offsets.astype(np.int64),
            "end_ids": np.asarray(vocab.end_ids, dtype=np.int64),
            "special": np.asarray(sorted(vocab.special_ids), dtype=np.int64),
        }
        meta = {"width": vocab.width, "name": vocab.name, "hash": vocab.hash}
        save_arrays(self.root / _VOCAB_FILE, "trierouter-vocabulary", arrays, meta)

    def vocabulary_version(self) -> str | None:
        """Which vocabulary file is published (its modification time and size; ``None``: none)."""
        try:
            st = (self.root / _VOCAB_FILE).stat()
        except OSError:
            return None
        return f"{st.st_mtime_ns}:{st.st_size}"

    def vocabulary(self) -> Vocabulary | None:
        """The vocabulary :meth:`put_vocabulary` published (``None``: none, or unreadable)."""
        from trierouter.registry.vocabulary import Vocabulary

        path = self.root / _VOCAB_FILE
        if not path.is_file():
            return None
        try:
            a, meta = load_arrays(path, "trierouter-vocabulary", mmap=False)
            buf, off = a["buffer"].tobytes(), a["offsets"].tolist()
            tokens = [buf[off[i] : off[i + 1]] for i in range(len(off) - 1)]
            ends, special = a["end_ids"].tolist(), a["special"].tolist()
            width, name = int(meta["width"]), str(meta["name"])
            vocab = Vocabulary(tokens, end_ids=ends, special_ids=special, width=width, name=name)
        except (CorruptFileError, KeyError, ValueError, TypeError) as exc:
            logger.warning("trierouter: ignoring the stored vocabulary: %s", exc)
            return None
        return vocab if vocab.hash == meta.get("hash") else None

    def _names_path(self, key: str, vocab: str, fmt: str, lead: str) -> Path:
        tag = hashlib.sha256(f"{vocab}\0{fmt}\0{lead}".encode()).hexdigest()[:16]
        return self._path(key).with_suffix(f".{tag}.trt")

    def put_names(
        self, key: str, fmt: str, lead: str, trie: ChoiceSet, tables: dict[str, Any]
    ) -> None:
        """Store the names trie of tool set ``key`` in call format ``fmt`` after ``lead`` and
        its turn-closing tables by variant (:data:`~trierouter.router.tool_calls.closing.
        NameTable`; the variant says how the arguments were sized)."""
        path = self._names_path(key, trie.vocabulary_hash, fmt, lead)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for variant, (at, cheapest, most) in tables.items():
            meta = {"most": int(most), "nodes": int(trie.n_nodes), "values": len(trie)}
            arrays = {"at": np.asarray(at, np.int64), "cheapest": np.asarray(cheapest, np.int64)}
            save_arrays(path.with_suffix(f".{variant}.cost"), _TABLE, arrays, meta)
        trie.save(path)
        self._trim()

    def get_trie(self, key: str, vocab: Vocabulary, fmt: str, lead: str) -> ChoiceSet | None:
        """The trie :meth:`put_names` stored for ``vocab`` (``None``: none, or it does not read
        back: checked like any set file)."""
        return _load_set(self._names_path(key, vocab.content_hash, fmt, lead), vocab, "names")

    def get_table(
        self, key: str, vocab: Vocabulary, fmt: str, lead: str, variant: str, trie: ChoiceSet
    ) -> tuple[Any, Any, int] | None:
        """The table :meth:`put_names` stored with ``trie`` (``None``: none, or it does not fit
        the trie)."""
        path = self._names_path(key, vocab.content_hash, fmt, lead).with_suffix(f".{variant}.cost")
        try:
            if not path.is_file():
                return None
            a, meta = load_arrays(path, _TABLE, mmap=False)
            at, cheapest, most = a["at"], a["cheapest"], meta.get("most")
            if not (
                type(most) is int
                and meta.get("nodes") == trie.n_nodes
                and meta.get("values") == len(trie)
                and at.ndim == cheapest.ndim == 1
                and len(at) == len(cheapest)
                and (not len(at) or (at.min() >= 0 and at.max() < trie.n_nodes))
                and bool(np.all(at[1:] > at[:-1]))
            ):
                raise CorruptFileError(f"{path}: the table does not fit its trie")
        except (CorruptFileError, OSError, ValueError, KeyError) as exc:
            logger.warning("trierouter: ignoring a stored names table: %s", exc)
            return None
        return at, cheapest, most

    def put_values(self, key: str, values: ChoiceSet) -> None:
        """Store a request's inline value set (``key``: the SHA-256 of its values' JSON)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        values.save(self._path(key).with_suffix(".trt"))
        self._trim()

    def has_values(self, key: str) -> bool:
        return self._path(key).with_suffix(".trt").is_file()

    def get_values(self, key: str, vocab: Vocabulary) -> ChoiceSet | None:
        """The value set :meth:`put_values` stored for ``vocab`` (``None``: none, or it does
        not read back: checked like any set file)."""
        return _load_set(self._path(key).with_suffix(".trt"), vocab, "value set")

    def _trim(self) -> None:
        try:
            files = [(p.stat(), p) for pat in _ENTRIES for p in self.root.glob(pat)]
        except OSError:
            return
        total = sum(st.st_size for st, _ in files)
        for st, p in sorted(files, key=lambda f: f[0].st_mtime)[:-1]:  # the newest stays
            if total <= self.max_bytes:
                break
            p.unlink(missing_ok=True)
            total -= st.st_size
