"""The tiny random-weight model, for the tests: :mod:`trierouter.tiny_model` under its old name."""

from trierouter.tiny_model import TINY_TOKENIZERS, VLLM_CPU_ENV, build_tiny_model

__all__ = ["TINY_TOKENIZERS", "VLLM_CPU_ENV", "build_tiny_model"]
