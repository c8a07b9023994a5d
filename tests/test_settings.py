"""trierouter/settings.py: every TRIEROUTER_* variable declared once, read when used, typed.

The declared list is checked against the sources (every ``TRIEROUTER_*`` name the package, the
benchmarks, scripts, examples and setup.py mention is declared), and each accessor against the
environment as a process would set it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trierouter import settings
from trierouter.errors import SettingError, TrieRouterError
from trierouter.registry.call_formats import CALL_FORMATS

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"\bTRIEROUTER_[A-Z][A-Z0-9_]*[A-Z0-9]\b")
NOT_VARIABLES = {"TRIEROUTER_SOURCE_HASH"}
"""``TRIEROUTER_``-named things that are no environment variable (a C macro setup.py defines)."""
INTS = [s for s in settings.SETTINGS if isinstance(s.default, int) and s.form == "an integer"]


def _mentioned() -> dict[str, str]:
    """Every ``TRIEROUTER_*`` name in the shipped sources, with a file that mentions it."""
    files = [ROOT / "setup.py"]
    for folder in ("trierouter", "benchmarks", "scripts", "examples"):
        files += sorted((ROOT / folder).rglob("*.py"))
    out: dict[str, str] = {}
    for path in files:
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            out.setdefault(name, str(path.relative_to(ROOT)))
    return out


def test_every_variable_mentioned_is_declared() -> None:
    declared = {s.name for s in settings.SETTINGS} | {s.alias for s in settings.SETTINGS if s.alias}
    mentioned = _mentioned()
    assert len(mentioned) >= 18, mentioned  # the scan reads the sources
    missing = {n: f for n, f in mentioned.items() if n not in declared | NOT_VARIABLES}
    assert not missing, f"declare these in trierouter/settings.py: {missing}"
    names = [s.name for s in settings.SETTINGS]
    assert len(names) == len(set(names))
    assert set(settings.__all__) >= {n.removeprefix("TRIEROUTER_") for n in names}
    for s in settings.SETTINGS:
        assert getattr(settings, s.name.removeprefix("TRIEROUTER_")) is s
        assert s.doc and s.form and s.section in ("library", "server", "build")


def test_read_when_called_not_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings.MAX_BODY_BYTES
    monkeypatch.delenv(s.name, raising=False)
    assert s.get() == s.default == 16 << 20 and not s.is_set()
    monkeypatch.setenv(s.name, "123")
    assert s.get() == 123 and s.is_set()
    monkeypatch.setenv(s.name, "  ")  # blank is unset
    assert s.get() == s.default and not s.is_set()


@pytest.mark.parametrize("s", INTS, ids=lambda s: s.name)
def test_integers_parse_like_int(s: settings.Setting[int], monkeypatch: pytest.MonkeyPatch) -> None:
    if s.alias:
        monkeypatch.delenv(s.alias, raising=False)
    for text in ("0", "12", " 7 ", "-3", "1_000"):
        monkeypatch.setenv(s.name, text)
        assert s.get() == int(text)
    for text in ("lots", "1.5", "0x10"):
        monkeypatch.setenv(s.name, text)
        with pytest.raises(SettingError, match=rf"^\${s.name}={text!r}: expected an integer$"):
            s.get()


def test_a_setting_error_is_a_value_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.INLINE_CACHE.name, "many")
    with pytest.raises(ValueError) as err:
        settings.INLINE_CACHE.get()
    assert isinstance(err.value, TrieRouterError)


def test_the_older_name_is_read_when_the_new_one_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings.MAX_INLINE_VALUES
    assert s.alias == "TRIEROUTER_MAX_INLINE"
    monkeypatch.delenv(s.name, raising=False)
    monkeypatch.setenv(s.alias, "7")
    assert s.get() == 7 and s.is_set()
    monkeypatch.setenv(s.name, "3")
    assert s.get() == 3
    monkeypatch.delenv(s.name)
    monkeypatch.setenv(s.alias, "seven")  # the error names the variable that holds the text
    with pytest.raises(SettingError, match=r"^\$TRIEROUTER_MAX_INLINE='seven'"):
        s.get()


def test_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIEROUTER_BACKEND", " NumPy ")
    assert settings.BACKEND.get() == "numpy"
    monkeypatch.setenv("TRIEROUTER_BACKEND", "fortran")
    with pytest.raises(SettingError, match=r"'fortran': expected .*one of native, numpy$"):
        settings.BACKEND.get()
    for fmt in CALL_FORMATS:
        monkeypatch.setenv("TRIEROUTER_TOOL_FORMAT", f" {fmt}\n")
        assert settings.TOOL_FORMAT.get() == fmt
    monkeypatch.setenv("TRIEROUTER_TOOL_FORMAT", "HERMES")  # formats are case-sensitive
    with pytest.raises(SettingError) as err:
        settings.TOOL_FORMAT.get()
    assert str(err.value).startswith("$TRIEROUTER_TOOL_FORMAT='HERMES': expected ")
    assert str(err.value).endswith("one of " + ", ".join(CALL_FORMATS))


def test_paths_and_text(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TRIEROUTER_CACHE_DIR", raising=False)
    assert settings.CACHE_DIR.get() is None
    monkeypatch.setenv("TRIEROUTER_CACHE_DIR", str(tmp_path))
    assert settings.CACHE_DIR.get() == tmp_path
    monkeypatch.setenv("TRIEROUTER_TOOLS", "tools.json")
    assert settings.TOOLS.get() == "tools.json"
    monkeypatch.delenv("TRIEROUTER_TOOLS")
    assert settings.TOOLS.get() == ""


def test_scoped_puts_the_old_value_back(monkeypatch: pytest.MonkeyPatch) -> None:
    name = settings.BACKEND.name
    monkeypatch.setenv(name, "native")
    with settings.BACKEND.scoped("numpy"):
        assert os.environ[name] == "numpy" and settings.BACKEND.get() == "numpy"
        with settings.BACKEND.scoped(None):
            assert name not in os.environ
        assert os.environ[name] == "numpy"
    assert os.environ[name] == "native"
    monkeypatch.delenv(name)
    with pytest.raises(RuntimeError), settings.BACKEND.scoped("numpy"):
        raise RuntimeError
    assert name not in os.environ


def test_export_reaches_a_child_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRIEROUTER_ANALYSIS_DIR", "before")  # put back after the test
    settings.ANALYSIS_DIR.export(str(tmp_path))
    code = "from trierouter import settings; print(settings.ANALYSIS_DIR.get())"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == str(tmp_path)


def test_the_build_switch_is_the_one_setup_py_reads() -> None:
    """setup.py cannot import the package: it reads the declared name itself."""
    source = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert f'os.environ.get("{settings.DEBUG_BUILD.name}"' in source
    assert settings.DEBUG_BUILD.section == "build"
