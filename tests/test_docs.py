"""The docs' code runs as written: every ```python and ```sh block of README.md and docs/*.md.

Blocks of one file run in order in one namespace (a fresh interpreter per file, in a temporary
folder); ``sh`` blocks run with bash, the ``trierouter`` console script on PATH. A block is
skipped only when its fence says ``no-run`` (the README's ``make`` commands, which start this
test suite, and the vLLM snippets that need a server: examples/vllm_serve_openai.py runs those).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)

DRIVER = """
import sys, traceback
blocks = sys.stdin.read().split("\\n#<<BLOCK>>\\n")
ns = {"__name__": "__main__"}
for i, code in enumerate(blocks):
    try:
        exec(compile(code, f"{sys.argv[1]} block {i + 1}", "exec"), ns)
    except BaseException:
        traceback.print_exc()
        print(f"FAILED: {sys.argv[1]} python block {i + 1}:\\n{code}", file=sys.stderr)
        sys.exit(1)
"""


def blocks(path: Path, lang: str) -> list[str]:
    return [
        code
        for kind, info, code in FENCE.findall(path.read_text(encoding="utf-8"))
        if kind == lang and "no-run" not in info
    ]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def test_every_doc_has_code_and_no_unknown_fences() -> None:
    for path in DOCS:
        for kind, info, _ in FENCE.findall(path.read_text(encoding="utf-8")):
            assert kind in ("python", "sh", "text"), f"{path.name}: fence {kind!r}"
            assert info.strip() in ("", "no-run"), f"{path.name}: fence info {info!r}"
    generated = ("api.md", "benchmarks.md", "settings.md")  # written by scripts, checked below
    assert all(blocks(p, "python") or blocks(p, "sh") for p in DOCS if p.name not in generated)


@pytest.mark.parametrize("path", [p for p in DOCS if blocks(p, "python")], ids=lambda p: p.name)
def test_python_blocks_run(path: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    code = "\n#<<BLOCK>>\n".join(blocks(path, "python"))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, path.name],
        input=code,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.mark.parametrize("path", [p for p in DOCS if blocks(p, "sh")], ids=lambda p: p.name)
def test_sh_blocks_run(path: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    for code in blocks(path, "sh"):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", code],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=_env(),
            timeout=900,
        )
        assert done.returncode == 0, f"{code}\n{done.stderr[-4000:]}"


def _generator_check(script: Path) -> None:
    """``script --check`` exits 0: the file it generates is current."""
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, env=_env()
    )
    assert done.returncode == 0, done.stderr


def test_api_reference_is_current() -> None:
    pytest.importorskip("torch")
    _generator_check(ROOT / "scripts" / "gen_api_docs.py")


def test_settings_reference_is_current() -> None:
    """docs/settings.md is what scripts/gen_settings_docs.py writes from trierouter/settings.py."""
    _generator_check(ROOT / "scripts" / "gen_settings_docs.py")


def test_benchmark_figures_match_their_results() -> None:
    """docs/benchmarks.md and README's headline table are what report.py writes from the JSON.

    A figure edited by hand, or a result file rerun without regenerating, fails here."""
    _generator_check(ROOT / "benchmarks" / "report.py")


def test_every_result_file_has_its_rerun_command() -> None:
    """Each committed ``benchmarks/results/*.json`` (answers files aside) is rerun by one entry of
    ``report.py``'s ``RERUN`` table (what ``make bench-all`` runs), whose script exists."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from report import RERUN
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    results = {
        p.name for p in (ROOT / "benchmarks" / "results").glob("*.json")
        if not p.stem.endswith("_texts")
    }  # fmt: skip
    listed = [name for name, _, _ in RERUN]
    assert len(listed) == len(set(listed))
    assert results == set(listed), (results - set(listed), set(listed) - results)
    for _, command, _ in RERUN:
        for word in command.split():
            if word.endswith(".py"):
                assert (ROOT / word).is_file(), command
