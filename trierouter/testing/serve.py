"""A real ``trierouter serve`` (vLLM's OpenAI server) in a subprocess, for tests and benchmarks.

The tiny random-weight model of :mod:`trierouter.testing.tiny_model` gets Qwen2.5's chat
template (tools rendered in ``<tools>``, calls in ``<tool_call>``), the syntax real Qwen models
use; the server runs under vLLM's default multiprocessing engine core unless told otherwise.
"""

from __future__ import annotations

import itertools
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

__all__ = ["QWEN_TOOLS_TEMPLATE", "calling_tool_model", "free_port", "serve", "tiny_tool_model"]

QWEN_TOOLS_TEMPLATE = Path(__file__).with_name("qwen2_5_tools.jinja")
"""Qwen2.5-Instruct's chat template (as shipped in its GGUF): tools and ``<tool_call>``."""


def tiny_tool_model(directory: str | os.PathLike[str]) -> Path:
    """:func:`build_tiny_model` (Qwen2 tokenizer) with Qwen2.5's tool-calling chat template."""
    out = build_tiny_model(directory)
    target = out / "chat_template.jinja"
    if not target.is_file() or target.read_bytes() != QWEN_TOOLS_TEMPLATE.read_bytes():
        shutil.copyfile(QWEN_TOOLS_TEMPLATE, target)
    return out


def calling_tool_model(directory: str | os.PathLike[str], *, opener: str = "<tool_call>") -> Path:
    """A model that would call: :func:`tiny_tool_model` rewired into a bigram model (attention
    and MLP outputs zeroed, so a step's logits depend on the last token only) that, after the
    newline ending the assistant prompt, writes ``opener`` one token at a time, and after any
    other token ends its turn. Its files go to ``directory/model`` (the random base to
    ``directory/base``)."""
    import json

    import safetensors.torch
    import torch
    import transformers

    base = tiny_tool_model(Path(directory) / "base")
    out = Path(directory) / "model"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(base, out)
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    chain = tok.encode("\n" + opener, add_special_tokens=False)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    weights = safetensors.torch.load_file(str(out / "model.safetensors"))
    embed = weights["model.embed_tokens.weight"]
    hidden = embed.shape[1]
    if len(chain) >= hidden or len(set(chain)) != len(chain):
        raise ValueError(f"opener={opener!r}: {chain} does not fit a bigram model of {hidden}")
    embed.zero_()
    embed[:, 0] = 1.0  # every other token: direction 0, which predicts the end of the turn
    head = torch.zeros_like(embed)
    head[end, 0] = 4.0
    for k, (prev, nxt) in enumerate(itertools.pairwise(chain), 1):
        embed[prev] = 0.0
        embed[prev, k] = 1.0
        head[nxt, k] = 4.0  # after the RMS norm: a logit of 32 against 0
    for name, w in weights.items():
        if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            w.zero_()
    weights["lm_head.weight"] = head
    safetensors.torch.save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config["tie_word_embeddings"] = False
    (out / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
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
    launcher: Sequence[str] = (),
) -> Iterator[str]:
    """Run ``trierouter serve MODEL`` on a free loopback port; yield its base URL, stop it
    after. ``multiprocessing=True`` keeps vLLM's default engine core (a separate process).
    ``launcher``: the command that stands for ``trierouter serve`` (default: this interpreter's
    ``-m trierouter.router.vllm.launch``), e.g. another venv's ``[VENV/bin/trierouter, serve]``."""
    port = free_port()
    full = {**os.environ, **VLLM_CPU_ENV, **(env or {})}
    full["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocessing else "0"
    cmd = [
        *(launcher or (sys.executable, "-m", "trierouter.router.vllm.launch")), str(model),
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
