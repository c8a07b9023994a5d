"""Every example in ``examples/`` runs (tiny local model; the vLLM ones only where vLLM is)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_OPENAI = importlib.util.find_spec("openai") is not None
needs_vllm = pytest.mark.skipif(
    not (HAS_VLLM and HAS_OPENAI), reason="vllm and openai not installed (trierouter[vllm])"
)

pytest.importorskip("transformers")


def run_example(name: str, *args: str, timeout: float = 900) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("HF_HUB_OFFLINE", "1")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=EXAMPLES,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_every_example_has_a_test() -> None:
    tested = {
        "demo.py",  # tests/test_surface.py
        "transformers_quickstart.py",
        "icd10cm_coding.py",
        "hierarchical_taxonomy.py",
        "vllm_serve_openai.py",
        "agent_loop.py",
    }
    present = {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
    assert present <= tested, f"untested examples: {sorted(present - tested)}"


def test_agent_loop() -> None:
    out = run_example("agent_loop.py")
    assert out.count("assistant tool call:") == 3 and "tool result:" in out
    assert "validated against its tool's JSON Schema" in out


def test_transformers_quickstart() -> None:
    out = run_example("transformers_quickstart.py")
    assert "constrained generation:" in out and "->" in out


def test_icd10cm_coding() -> None:
    out = run_example("icd10cm_coding.py")
    assert "74731 labels" in out and out.count("log p =") == 9


def test_icd10cm_coding_shortlist() -> None:
    out = run_example("icd10cm_coding.py", "--policy", "shortlist")
    assert "policy='shortlist'" in out


def test_hierarchical_taxonomy() -> None:
    pytest.importorskip("pycountry")
    out = run_example("hierarchical_taxonomy.py")
    assert "Hierarchy(" in out and "(group" in out


@needs_vllm
def test_icd10cm_coding_vllm_engine() -> None:
    out = run_example("icd10cm_coding.py", "--engine", "vllm")
    assert "engine='vllm'" in out and out.count("->") == 3


@needs_vllm
def test_vllm_serve_openai() -> None:
    out = run_example("vllm_serve_openai.py")
    assert "code:" in out and "think, then answer:" in out
