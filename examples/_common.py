"""Shared by the examples: the model folder to use (``--model DIR``, else a tiny local one)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", type=Path, help="a local model folder (default: a tiny random-weight model)"
    )


def model_dir(given: Path | None) -> Path:
    """``given``, or the tiny random-weight Qwen2-tokenizer model built once in the cache."""
    if given is not None:
        return given
    import torch

    from trierouter.registry.index import default_cache_dir
    from trierouter.testing.tiny_model import build_tiny_model

    torch.set_num_threads(1)  # tiny matmuls: one thread is fastest
    path = build_tiny_model(default_cache_dir() / "tiny-qwen2")
    print(
        f"(tiny random-weight model at {path}: outputs are valid, not meaningful)", file=sys.stderr
    )
    return path
