"""Hostile tool schemas: the compiled core's argument automata against the references.

Hypothesis drives :func:`trierouter.testing.fuzz_tools.check_tool_case` (random schemas, small
vocabularies, random byte walks): the native automaton is the numpy / Python reference's up to
state numbering, every mask equals the reference's and brute force, and every accepted walk is
JSON that ``jsonschema`` with its format checker accepts. The atheris target
(``fuzz/fuzz_tools.py``) runs the same check; a short run of it is part of the suite. The
oracles are checked to catch what they are there for (a flipped mask bit, an invalid walk).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.masks import ToolAutomaton
from trierouter.registry.slots.nfa import TooManyStates, nfa_fragment
from trierouter.registry.slots.regex import pattern_node
from trierouter.registry.slots.schema_fragments import MAX_PATTERN_STATES
from trierouter.registry.slots.slot_records import SchemaRefused
from trierouter.testing import fuzz_tools
from trierouter.testing.fuzz import atheris_run
from trierouter.testing.fuzz_tools import HEAD, TAIL, ToolCase, check_tool_case, tool_case
from trierouter.testing.slots_reference import subset_fragment

ROOT = Path(__file__).resolve().parent.parent


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_tool_schemas(data: st.DataObject) -> None:
    case = tool_case(lambda lo, hi: data.draw(st.integers(lo, hi)))
    check_tool_case(case)


def _accepts(schema: dict[str, Any], text: bytes) -> bool:
    frag, _ = SlotCompiler().tool(schema, TAIL, HEAD)
    table, state = frag.table, 0
    for b in HEAD + text + TAIL:
        state = int(table[state, b])
        if state < 0:
            return False
    return bool(frag.accept[state])


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string", "minLength": 4}, "maxItems": 0},
        {
            "type": "array",
            "items": {"type": "array", "items": {"enum": [1]}, "maxItems": 0},
            "minItems": 2,
        },
    ],
)
def test_found_by_fuzzing_max_items_zero(schema: dict[str, Any]) -> None:
    """``maxItems: 0`` accepted ``[`` alone as the whole array (``{"a": [}``); nested in
    another array, the same open state clashed with the outer separator (ValueError)."""
    obj = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    out = check_tool_case(ToolCase(obj, [bytes([b]) for b in range(256)], [[1, 2, 3], [7]]))
    assert out.result == "compiled" and out.walks_valid == 2
    inner = b"[]" if "minItems" not in schema else b"[[], []]"
    assert _accepts(obj, b'{"a": ' + inner + b"}")
    assert not _accepts(obj, b'{"a": [}')


def test_oracles_catch_a_wrong_mask_and_an_invalid_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check fails when one native mask bit flips, when the automaton wired with its masks
    has another table type, and when a walk's JSON breaks the
    schema (here: the schema the validator sees is stricter than the compiled one)."""
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^[a-z]{2,6}-[0-9]{1,3}$"},
            "n": {"type": "integer", "minimum": -5, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["x", 'q"q']}, "maxItems": 2},
        },
        "required": ["id"],
    }
    pieces = [b'"', b"a", b"ab", b"-", b"1", b"12", b", ", b'": ', b"[", b"]", b"}", b"q"]
    case = ToolCase(schema, [*(bytes([b]) for b in range(256)), *pieces], [[1, 5, 9], [2]])
    assert check_tool_case(case).result == "compiled"
    real_fill = ToolAutomaton.fill

    def flipped(self: ToolAutomaton, state: int, row: np.ndarray[Any, Any]) -> None:
        real_fill(self, state, row)
        if state == 0:
            row[0] ^= 1

    monkeypatch.setattr(ToolAutomaton, "fill", flipped)
    with pytest.raises(AssertionError, match="mask differs"):
        check_tool_case(case)
    monkeypatch.undo()
    real_finish = ToolAutomaton._finish

    def wider(self: ToolAutomaton, *args: Any) -> None:  # the late-wired table as int32
        late = self._wire is not None
        real_finish(self, *args)
        if late:
            self.table = self.table.astype(np.int32)

    monkeypatch.setattr(ToolAutomaton, "_finish", wider)
    with pytest.raises(AssertionError, match="wired with its masks differs"):
        check_tool_case(case)
    monkeypatch.undo()
    loose = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    real_validator = jsonschema.Draft202012Validator

    def strict(schema: Any, **kw: Any) -> Any:
        tight = json.loads(json.dumps(schema))
        tight["properties"]["n"]["maximum"] = -(10**30)
        return real_validator(tight, **kw)

    monkeypatch.setattr(fuzz_tools.jsonschema, "Draft202012Validator", strict)
    monkeypatch.setattr(strict, "FORMAT_CHECKER", real_validator.FORMAT_CHECKER, raising=False)
    with pytest.raises(AssertionError, match="violate the schema"):
        check_tool_case(ToolCase(loose, [bytes([b]) for b in range(256)], [[5]]))


def test_atheris_tools_target_short_run(tmp_path: Path) -> None:
    """The coverage-guided tools target runs (bounded in runs) without a finding."""
    pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris)")
    stats = atheris_run(ROOT / "fuzz" / "fuzz_tools.py", 200, tmp_path)
    assert stats["executions"] >= 200 and stats["outcomes"]["compiled"] > 0


def test_atheris_memory_limit_counts_the_target_alone(tmp_path: Path) -> None:
    """libFuzzer's -rss_limit_mb holds the target's own peak, not the test process's: with
    400 MB held here, a short run under a 300 MB limit passes (the target peaks near 100 MB),
    and a target started straight from here is charged this process's peak."""
    pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris)")
    held = np.ones(400 << 20, dtype=np.uint8)  # touched: resident
    probe = "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10)"
    direct = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert int(direct.stdout) >= 400  # why the target is not started straight from here
    stats = atheris_run(ROOT / "fuzz" / "fuzz_tools.py", 200, tmp_path, "-rss_limit_mb=300")
    assert stats["executions"] >= 200
    assert held[-1] == 1


def test_found_by_fuzzing_patterns_past_the_state_budget() -> None:
    """A pattern whose automaton grows exponentially (``([A-Za-z_]{3,40}){3,40}$`` timed the
    fuzzer out in the Python reference; ``(a|b)*a(a|b){19}`` took 43 s and 1M states natively)
    goes to XGrammar past MAX_PATTERN_STATES, decided alike by analysis and by the build; one
    XGrammar reads differently is refused, saying why; both backends stop at the budget."""

    def obj(pattern: str) -> dict[str, Any]:
        p = {"type": "string", "pattern": pattern}
        return {"type": "object", "properties": {"p": p}, "required": ["p"]}

    big, small = "^[ab]*a[ab]{15}$", "^[ab]*a[ab]{10}$"  # 2**16 + 15 and 2**11 + 15 states
    slots, _ = SlotCompiler().analyze(obj(big))
    assert [s.engine for s in slots] == ["xgrammar"]
    frag, _ = SlotCompiler().tool(obj(big), TAIL, HEAD)
    assert frag.exits and frag.n < 100
    slots, _ = SlotCompiler().analyze(obj(small))
    assert [s.engine for s in slots] == ["format"]
    assert SlotCompiler().tool(obj(small), TAIL, HEAD)[0].n > 2_000
    with pytest.raises(SchemaRefused, match="more than 20,000 states"):
        SlotCompiler().tool(obj("^(a|b)*a(a|b){19}$"), TAIL, HEAD)
    node = pattern_node(big)
    assert node is not None
    for determinize in (nfa_fragment, subset_fragment):
        with pytest.raises(TooManyStates):
            determinize(node, MAX_PATTERN_STATES)
    node = pattern_node(small)
    assert node is not None
    under = [f(node, 2**11 + 1) for f in (nfa_fragment, subset_fragment)]
    assert under[0].n == under[1].n == 2**11 + 1  # exactly at the budget: built
