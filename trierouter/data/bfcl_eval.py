"""The Berkeley Function Calling Leaderboard (BFCL v4): questions, answers and the official judge.

Everything comes from the pinned wheel ``bfcl-eval==2026.3.23`` (``pip download --no-deps``;
its own dependencies conflict with trierouter's, so it is never installed). The wheel is
unpacked once into ``<cache>/bfcl/bfcl-eval-2026.3.23/``; questions are read from
``bfcl_eval/data/BFCL_v4_<category>.json`` and answers from ``possible_answer/``::

    entries = load_bfcl("simple_python")            # list[BfclEntry]
    judge = load_judge()                             # BFCL's own ast_checker, from the wheel
    verdict = judge.check(entries[0], [{"calculate_triangle_area": {"base": 10, "height": 5}}])

The judge is BFCL's ``eval_checker/ast_eval/ast_checker.py``, imported from the unpacked wheel
(the folder is on ``sys.path`` only while it is imported). Of its imports, only
``bfcl_eval.constants.model_config`` cannot be imported here (it imports every model handler and
their SDKs); the checker reads one field from it, ``underscore_to_dot`` of the model being
judged, so a small stand-in module is registered in its place, with that field read (by
parsing, not importing) from the wheel's own ``model_config.py`` for the model name given.
Irrelevance questions are judged as BFCL's ``eval_runner`` judges them: correct when the output
holds no function call (BFCL's ``is_empty_output``).
"""

from __future__ import annotations

import ast
import json
import sys
import types
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trierouter.data.pypi import PinnedWheel, fetch_wheel, file_lock
from trierouter.errors import CorruptFileError
from trierouter.registry.index import default_cache_dir

__all__ = [
    "BFCL_WHEEL",
    "CATEGORIES",
    "SINGLE_TURN",
    "BfclEntry",
    "BfclJudge",
    "Verdict",
    "bfcl_dir",
    "bfcl_functions",
    "load_bfcl",
    "load_judge",
]

BFCL_WHEEL = PinnedWheel(
    "bfcl-eval",
    "2026.3.23",
    "bfcl_eval-2026.3.23-py3-none-any.whl",
    "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
)
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
"""The non-live single-turn Python categories the benchmark runs."""
SINGLE_TURN = (
    *CATEGORIES,
    "simple_java",
    "simple_javascript",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
)
"""Every single-turn category (1,853 distinct function names among them)."""
_MARKER = ".trierouter-complete"
DEFAULT_JUDGE_MODEL = "Qwen/Qwen3-0.6B-FC"
"""The BFCL model entry whose checker settings are used (``underscore_to_dot=False``: names
compared as given, dots included, as for every local function-calling model)."""


@dataclass(frozen=True)
class BfclEntry:
    """One BFCL question with its function docs and acceptable answers."""

    id: str
    category: str
    messages: list[dict[str, str]]
    """The first (only) turn's chat messages."""
    functions: list[dict[str, Any]]
    """BFCL function docs as published (BFCL types; what the checker reads)."""
    answer: list[dict[str, Any]] | None = field(default=None)
    """``possible_answer``'s ground truth; ``None`` for (ir)relevance questions."""

    @property
    def language(self) -> str:
        if self.category == "simple_java":
            return "java"
        if self.category == "simple_javascript":
            return "javascript"
        return "python"


def bfcl_dir(cache_dir: Path | str | None = None) -> Path:
    """The unpacked wheel (downloaded and unpacked on first use)."""
    root = Path(cache_dir if cache_dir is not None else default_cache_dir()) / "bfcl"
    out = root / f"{BFCL_WHEEL.project}-{BFCL_WHEEL.version}"
    if (out / _MARKER).exists():
        return out
    with file_lock(root / ".lock"):
        if (out / _MARKER).exists():
            return out
        wheel = fetch_wheel(BFCL_WHEEL, cache_dir=cache_dir)
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                target = (out / info.filename).resolve()
                if not target.is_relative_to(out.resolve()):  # pragma: no cover - pinned bytes
                    raise CorruptFileError(f"{wheel}: member {info.filename!r} escapes the folder")
            z.extractall(out)
        (out / _MARKER).write_text(BFCL_WHEEL.sha256 + "\n", encoding="utf-8")
    return out


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not in bfcl-eval {BFCL_WHEEL.version}")
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
    return out


def load_bfcl(category: str, *, cache_dir: Path | str | None = None) -> list[BfclEntry]:
    """The questions of one single-turn category, with their answers, in file order."""
    if category not in SINGLE_TURN:
        raise ValueError(f"category={category!r}: expected one of {list(SINGLE_TURN)}")
    data = bfcl_dir(cache_dir) / "bfcl_eval" / "data"
    rows = _read_lines(data / f"BFCL_v4_{category}.json")
    answers: dict[str, Any] = {}
    if "relevance" not in category:
        answers = {
            a["id"]: a["ground_truth"]
            for a in _read_lines(data / "possible_answer" / f"BFCL_v4_{category}.json")
        }
    out = []
    for row in rows:
        turns = row["question"]
        if len(turns) != 1:
            raise CorruptFileError(f"{row['id']}: {len(turns)} turns in a single-turn category")
        answer = answers.get(row["id"]) if answers else None
        if answers and answer is None:
            raise CorruptFileError(f"{row['id']}: no possible answer")
        out.append(BfclEntry(row["id"], category, list(turns[0]), list(row["function"]), answer))
    return out


def bfcl_functions(
    categories: Iterable[str] = SINGLE_TURN, *, cache_dir: Path | str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """Distinct function docs by name across ``categories``, first occurrence kept, as
    ``(language, doc)`` pairs (1,853 over all single-turn categories)."""
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    for cat in categories:
        for e in load_bfcl(cat, cache_dir=cache_dir):
            for f in e.functions:
                seen.setdefault(f["name"], (e.language, f))
    return list(seen.values())


# -- the judge -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """BFCL's verdict on one output: ``valid`` (correct), its errors and error type."""

    valid: bool
    error_type: str = ""
    errors: tuple[str, ...] = ()


def _underscore_to_dot(model_config: Path) -> dict[str, bool]:
    """``underscore_to_dot`` of every ``ModelConfig(...)`` in BFCL's ``model_config.py``,
    read by parsing the file (importing it would import every model handler)."""
    tree = ast.parse(model_config.read_text(encoding="utf-8"))
    out: dict[str, bool] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            if not (isinstance(value, ast.Call) and getattr(value.func, "id", "") == "ModelConfig"):
                continue
            flag = False  # the dataclass default
            for kw in value.keywords:
                if kw.arg == "underscore_to_dot" and isinstance(kw.value, ast.Constant):
                    flag = bool(kw.value.value)
            out[key.value] = flag
    return out


class BfclJudge:
    """BFCL's official AST checker for one model entry (see the module docstring)."""

    def __init__(self, checker: Any, utils: Any, language: Any, model_name: str) -> None:
        self._checker = checker
        self._utils = utils
        self._language = language
        self.model_name = model_name

    @property
    def checker_file(self) -> Path:
        """Where the checker was imported from (inside the unpacked pinned wheel)."""
        return Path(self._checker.__file__)

    def check(self, entry: BfclEntry, calls: Sequence[dict[str, Any]] | None) -> Verdict:
        """Judges the decoded calls ``[{name: {arg: value}}, ...]`` of an answer to ``entry``;
        ``None``: the output could not be decoded as calls (invalid, or no call at all for an
        irrelevance question, which is then correct)."""
        if "relevance" in entry.category:
            has_call = calls is not None and not self._utils.is_empty_output(list(calls))
            ok = not has_call if "irrelevance" in entry.category else has_call
            kind = (
                ""
                if ok
                else (
                    "irrelevance_error:decoder_success"
                    if "irrelevance" in entry.category
                    else "relevance_error:decoder_failed"
                )
            )
            return Verdict(ok, kind)
        if calls is None:
            return Verdict(False, "ast_decoder:decoder_failed", ("no decodable function call",))
        out = list(calls)
        if not self._utils.is_function_calling_format_output(out):
            return Verdict(False, "ast_decoder:decoder_wrong_output_format")
        lang = {
            "python": self._language.PYTHON,
            "java": self._language.JAVA,
            "javascript": self._language.JAVASCRIPT,
        }[entry.language]
        res = self._checker.ast_checker(
            entry.functions, out, entry.answer, lang, entry.category, self.model_name
        )
        if res["valid"]:
            return Verdict(True)
        return Verdict(False, str(res.get("error_type", "")), tuple(map(str, res.get("error", []))))


_JUDGES: dict[tuple[str, str], BfclJudge] = {}


def load_judge(
    *, model_name: str = DEFAULT_JUDGE_MODEL, cache_dir: Path | str | None = None
) -> BfclJudge:
    """BFCL's ``ast_checker`` imported from the unpacked wheel (once per process)."""
    root = bfcl_dir(cache_dir)
    key = (str(root), model_name)
    if key in _JUDGES:
        return _JUDGES[key]
    pkg = root / "bfcl_eval"
    flags = _underscore_to_dot(pkg / "constants" / "model_config.py")
    if model_name not in flags:
        raise KeyError(f"model_name={model_name!r} is not a model of bfcl-eval's model_config")
    loaded = sys.modules.get("bfcl_eval")
    if loaded is not None and not str(getattr(loaded, "__file__", "")).startswith(str(root)):
        raise ImportError(
            f"another bfcl_eval is already imported ({loaded.__file__}): the judge must be the "
            f"pinned {BFCL_WHEEL.requirement}"
        )
    stand_in = types.ModuleType("bfcl_eval.constants.model_config")
    stand_in.__doc__ = "trierouter's stand-in: underscore_to_dot per model, parsed from the wheel"
    stand_in.MODEL_CONFIG_MAPPING = {  # type: ignore[attr-defined]
        name: types.SimpleNamespace(underscore_to_dot=flag) for name, flag in flags.items()
    }
    sys.path.insert(0, str(root))
    try:
        import importlib

        sys.modules.setdefault("bfcl_eval.constants.model_config", stand_in)
        checker = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
        utils = importlib.import_module("bfcl_eval.utils")
        enums = importlib.import_module("bfcl_eval.constants.enums")
    finally:
        sys.path.remove(str(root))
    for mod in (checker, utils, enums):
        if not str(mod.__file__).startswith(str(pkg)):  # pragma: no cover - checked above
            raise ImportError(f"{mod.__name__} came from {mod.__file__}, not the pinned wheel")
    judge = BfclJudge(checker, utils, enums.Language, model_name)
    _JUDGES[key] = judge
    return judge
