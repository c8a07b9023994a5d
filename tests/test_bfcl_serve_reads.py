"""How ``benchmarks/bfcl_serve.py`` reads a free answer as a call: ``called_lenient`` (a JSON
call parsed from the text) and ``called_attempt`` (also a call the model began but cut or
closed wrongly), against ``json`` on the committed answers (no server)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
RESULT = BENCHMARKS / "results" / "bfcl_serve.json"


@pytest.fixture(scope="module")
def serve_mod() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("bfcl_serve")
    finally:
        sys.path.remove(str(BENCHMARKS))


def _texts() -> dict[str, Any]:
    out: dict[str, Any] = json.loads(RESULT.with_name("bfcl_serve_texts.json").read_text())
    return out


def test_every_parsed_call_and_each_of_its_cuts_is_an_attempt(serve_mod: Any) -> None:
    """Each committed answer whose text parses as a call with arguments: the text, every
    prefix that reaches past ``"arguments":``, and the text with its last ``}`` made ``)``
    all count as attempts; the prefixes that stop before it do not."""
    bo = sys.modules["bfcl_offline"]
    checked = 0
    for answer in _texts().values():
        text = answer.get("content") or ""
        calls = bo.lenient_calls(text)
        if not calls or '"arguments"' not in text:
            continue
        head = text.index('"arguments"') + len('"arguments"')
        colon = text.index(":", head) + 1
        assert bo.call_started(text)
        for cut in range(0, len(text) + 1, 7):
            if '"name"' in text[:cut] and cut < text.index('"name"') + 6:
                continue
            assert bo.call_started(text[:cut]) == (cut >= colon), (text[:cut],)
        closed = text.rstrip().rstrip("`").rstrip()
        assert bo.call_started(closed[: closed.rindex("}")] + ")")
        checked += 1
    assert checked >= 50


def test_text_and_echoed_definitions_are_not_attempts(serve_mod: Any) -> None:
    bo = sys.modules["bfcl_offline"]
    assert not bo.call_started("The largest planet is Jupiter.")
    echo = '<tools>\n{"type": "function", "function": {"name": "f", "description": "x"}}'
    assert not bo.call_started(echo)
    assert serve_mod._read({"calls": [], "content": "No tool fits."}) == (False, False)
    assert serve_mod._read({"calls": [{"name": "f", "arguments": {}}], "content": None}) == (
        True,
        True,
    )


def test_committed_attempt_counts_match_the_committed_answers(serve_mod: Any) -> None:
    """``called_attempt`` in the result equals a recount over ``_texts.json`` with ``json``:
    a parsed call, or a ``{"name": str, "arguments":`` object head in the text."""
    result = json.loads(RESULT.read_text())
    counts: dict[tuple[str, str], int] = {}
    for key, answer in _texts().items():
        qid, arm = key.rsplit(":", 1)
        if "error" in answer:
            continue
        text = answer.get("content") or ""
        began = bool(answer.get("calls"))
        dec = json.JSONDecoder()
        for i, ch in enumerate(text):
            if ch != "{" or began:
                continue
            rest = text[i + 1 :].lstrip()
            try:  # the key and its string value decode as JSON, then `, "arguments":`
                key1, end = dec.raw_decode(rest)
                rest = rest[end:].lstrip()
                assert key1 == "name" and rest[0] == ":"
                value, end = dec.raw_decode(rest[1:].lstrip())
                rest = rest[1:].lstrip()[end:].lstrip()
                assert isinstance(value, str) and rest[0] == ","
                key2, end = dec.raw_decode(rest[1:].lstrip())
                rest = rest[1:].lstrip()[end:].lstrip()
                began = key2 in ("arguments", "parameters") and rest[:1] == ":"
            except (ValueError, AssertionError, IndexError):
                continue
        began = began or bool(sys.modules["bfcl_offline"].lenient_calls(text))
        cat = qid.rsplit("_", 1)[0]
        counts[arm, cat] = counts.get((arm, cat), 0) + began
    for arm, rows in result["arms"].items():
        for cat, agg in rows.items():
            assert agg["called_attempt"] == counts.get((arm, cat), 0), (arm, cat)
