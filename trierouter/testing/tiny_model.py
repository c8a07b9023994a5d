"""The tiny random-weight model, for the tests: :mod:`trierouter.tiny_model` under its old name,
and its tokenizer builders (``TOKENIZER_BUILDERS[name]()`` -> the Hugging Face tokenizer and its
special ids), which the equivalence tests feed XGrammar with."""

from trierouter.tiny_model import _BUILDERS as TOKENIZER_BUILDERS
from trierouter.tiny_model import TINY_TOKENIZERS, VLLM_CPU_ENV, build_tiny_model

__all__ = ["TINY_TOKENIZERS", "TOKENIZER_BUILDERS", "VLLM_CPU_ENV", "build_tiny_model"]
