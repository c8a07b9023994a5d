"""What a tool search indexes: a tool as text (its name in words, description, parameters).

A tool's name is an identifier (``weather.getForecastByCity``, ``get_user_v2``): a search over
words matches it only split into words. Its parameters say what it acts on (``city``,
``ticker``, ``patient_id``) often better than its one-line description, and a user's question
names those things. :func:`tool_text` renders the three into one text, bounded in length so a
huge API schema does not drown its own name; :func:`name_words` splits an identifier;
:class:`ToolIndex` searches tools by it (what ``trierouter serve`` does for a named registry).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "TOOL_TEXT_MAX_CHARS",
    "ToolIndex",
    "expanded_text",
    "name_words",
    "tool_fields",
    "tool_text",
    "twin_key",
]

TOOL_TEXT_MAX_CHARS = 1_500
"""Default bound on :func:`tool_text` (characters): name and description first, then the
parameters in schema order, cut at a parameter boundary."""

_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_]+")


def name_words(name: str) -> str:
    """An identifier as lower-case words: ``"weather.getForecastByCity_v2"`` ->
    ``"weather get forecast by city v 2"``."""
    return " ".join(p.lower() for p in _PARTS.findall(name))


def _param_lines(schema: Any, prefix: str, depth: int, out: list[str]) -> None:
    if not isinstance(schema, Mapping) or depth > 1:
        return
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return
    for pname, p in props.items():
        if not isinstance(pname, str):
            continue
        words = name_words(prefix + " " + pname if prefix else pname)
        line = words
        if isinstance(p, Mapping):
            desc = p.get("description")
            if isinstance(desc, str) and desc.strip():
                line += ": " + " ".join(desc.split())
            enum = p.get("enum")
            if isinstance(enum, list) and enum:
                line += " (" + ", ".join(str(v) for v in enum[:8]) + ")"
        out.append(line)
        if isinstance(p, Mapping):
            _param_lines(p, words, depth + 1, out)


def tool_text(
    name: str,
    description: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    *,
    max_chars: int = TOOL_TEXT_MAX_CHARS,
) -> str:
    """``name`` (as written and in words), ``description``, then one line per parameter
    (its name in words, description and first enum values; nested object properties one level
    down), at most ``max_chars`` characters (the name and description always whole)."""
    head = f"{name} ({name_words(name)})"
    desc = " ".join((description or "").split())
    text = f"{head}. {desc}" if desc else head
    lines: list[str] = []
    _param_lines(parameters, "", 0, lines)
    sep = ". Parameters: "
    for line in lines:
        if len(text) + len(sep) + len(line) > max_chars:
            break
        text += sep + line
        sep = "; "
    return text


def expanded_text(
    name: str,
    description: str | None,
    parameters: Mapping[str, Any] | None,
    requests: Sequence[str],
) -> str:
    """What the search indexes for a tool with requests written for it
    (:class:`~trierouter.router.tool_requests.QuestionWriter`): its :func:`tool_text`, then
    the requests."""
    text = tool_text(name, description, parameters)
    return f"{text}. Requests: {' '.join(requests)}" if requests else text


def tool_fields(tool: Any) -> tuple[str, str, Mapping[str, Any] | None]:
    """A tool's name, description and parameters, from a registry's tool or an OpenAI /
    Anthropic / MCP / BFCL dict (read as the registry reads it)."""
    if isinstance(tool, Mapping):  # OpenAI, Anthropic, MCP, BFCL: read as the registry reads it
        from trierouter.registry.forms import from_dict

        tool = from_dict(tool)
    return str(tool.name), str(getattr(tool, "description", "") or ""), tool.parameters


_NOT_ALNUM = re.compile(r"[^a-z0-9]+")


def twin_key(name: str) -> str:
    """What near-duplicate tools share: the name's last dotted segment, lower case, letters and
    digits only (``"number_theory.gcd"``, ``"math.gcd"`` and ``"gcd"`` -> ``"gcd"``;
    ``"calculate_BMI"`` and ``"calculateBmi"`` -> ``"calculatebmi"``). Tools with one key are
    *twins*: one API in several namespaces or spellings, which a question alone often cannot
    tell apart; a search shows them together and the routing record names them."""
    return _NOT_ALNUM.sub("", name.rsplit(".", 1)[-1].lower())


class ToolIndex:
    """The server's default tool search in the library: BM25 over each tool's
    :func:`tool_text`. Tools: a :class:`~trierouter.ToolRegistry`, its tools, or OpenAI /
    Anthropic / MCP tool dicts.

        index = ToolIndex.build(registry)
        index.search("weather in Oslo", k=16)       # [(name, BM25 score), ...], best first
    """

    def __init__(self, index: Any) -> None:
        self._index = index
        self._twins: dict[str, list[str]] | None = None

    @classmethod
    def build(
        cls,
        tools: Iterable[Any],
        *,
        document: Callable[[str, str, Mapping[str, Any] | None], str] | None = None,
        expansions: Mapping[str, Sequence[str]] | None = None,
    ) -> ToolIndex:
        """Index ``tools``, each under ``document(name, description, parameters)`` (default:
        :func:`tool_text`). ``expansions``: requests written for each tool by name
        (:class:`~trierouter.router.tool_requests.QuestionWriter`), indexed after its text
        (:func:`expanded_text`; a tool without any: its text)."""
        from trierouter.shortlist.bm25 import BM25Index

        fields = [tool_fields(t) for t in tools]
        if expansions is not None:
            if document is not None:
                raise ValueError("pass document= or expansions=, not both")
            texts = [expanded_text(n, d, p, expansions.get(n, ())) for n, d, p in fields]
        else:
            doc = tool_text if document is None else document
            texts = [doc(n, d, p) for n, d, p in fields]
        index = BM25Index.build([n for n, _, _ in fields], texts)
        index.search("warm up", 1)  # the first search finalizes the weights
        return cls(index)

    def __len__(self) -> int:
        return len(self._index.values)

    @property
    def names(self) -> list[str]:
        """The indexed tools' names, in index order (the order of :meth:`scores`)."""
        return list(self._index.values)

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """Every tool's BM25 score for ``query`` (a float array in :attr:`names` order; 0 for
        a tool that shares nothing with it): what a search restricted to some tools ranks."""
        return np.asarray(self._index.value_scores(query), np.float64)

    def twins(self, name: str) -> list[str]:
        """The other tools of the index with ``name``'s :func:`twin_key` (in index order)."""
        if self._twins is None:
            groups: dict[str, list[str]] = {}
            for value in self._index.values:
                groups.setdefault(twin_key(value), []).append(value)
            self._twins = {k: g for k, g in groups.items() if len(g) > 1}
        return [n for n in self._twins.get(twin_key(name), ()) if n != name]

    def search(self, query: str, k: int = 16) -> list[tuple[str, float]]:
        """Up to ``k`` ``(tool name, BM25 score)`` pairs, best first: only tools that share a
        word or character n-gram with ``query`` (never padded)."""
        if not query.strip():
            return []
        ids, scores = self._index.search_scored(query, k)
        values = self._index.values
        return [(values[int(i)], round(float(v), 4)) for i, v in zip(ids, scores, strict=True)]
