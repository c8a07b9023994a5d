"""A real ``trierouter serve`` (vLLM's OpenAI server) in a subprocess, for tests and benchmarks.

The tiny random-weight model of :mod:`trierouter.testing.tiny_model` gets Qwen2.5's chat
template (tools rendered in ``<tools>``, calls in ``<tool_call>``), the syntax real Qwen models
use; the server runs under vLLM's default multiprocessing engine core unless told otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from trierouter.testing.tiny_model import VLLM_CPU_ENV, build_tiny_model

__all__ = ["QWEN_TOOLS_TEMPLATE", "free_port", "serve", "tiny_tool_model"]

QWEN_TOOLS_TEMPLATE = Path(__file__).with_name("qwen2_5_tools.jinja")
"""Qwen2.5-Instruct's chat template (as shipped in its GGUF): tools and ``<tool_call>``."""


def tiny_tool_model(directory: str | os.PathLike[str]) -> Path:
    """:func:`build_tiny_model` (Qwen2 tokenizer) with Qwen2.5's tool-calling chat template."""
    out = build_tiny_model(directory)
    target = out / "chat_template.jinja"
    if not target.is_file() or target.read_bytes() != QWEN_TOOLS_TEMPLATE.read_bytes():
        shutil.copyfile(QWEN_TOOLS_TEMPLATE, target)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(
    model: str | os.PathLike[str],
    *,
    log: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    multiprocessing: bool = True,
    timeout: float = 600.0,
) -> Iterator[str]:
    """Run ``trierouter serve MODEL`` on a free loopback port; yield its base URL, stop it
    after. ``multiprocessing=True`` keeps vLLM's default engine core (a separate process)."""
    port = free_port()
    full = {**os.environ, **VLLM_CPU_ENV, **(env or {})}
    full["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocessing else "0"
    cmd = [
        sys.executable, "-m", "trierouter.router.vllm.server", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "tiny",
        "--dtype", "float32", "--enforce-eager", *args,
    ]  # fmt: skip
    logf = Path(log)
    with open(logf, "wb") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=full, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                tail = logf.read_text(errors="replace")[-4000:]
                raise RuntimeError(f"trierouter serve exited with {proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                tail = logf.read_text(errors="replace")[-4000:]
                raise RuntimeError(f"trierouter serve not healthy in {timeout:.0f} s:\n{tail}")
            time.sleep(0.5)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
