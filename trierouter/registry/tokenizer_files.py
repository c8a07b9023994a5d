"""Readers of tokenizer files outside Hugging Face's format: tiktoken, SentencePiece, Tekken.

Each returns :class:`~trierouter.registry.token_bytes.VocabularyParts`;
:mod:`trierouter.registry.loaders` exports them with the other readers.
"""

from __future__ import annotations

import binascii
import gzip
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trierouter.errors import VocabularyError, missing
from trierouter.registry.token_bytes import (
    SPIECE_SPACE,
    VocabularyParts,
    build_parts,
    guess_end_ids,
    input_path,
    need_end_ids,
    read_json,
)

__all__ = ["from_sentencepiece", "from_sp_processor", "from_tekken", "from_tiktoken"]

# Mistral's Tekken files before v7 carry no special-token list; mistral-common uses these names.
_TEKKEN_DEFAULT_SPECIALS: tuple[str, ...] = (
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
)


# -- tiktoken ------------------------------------------------------------------------------------
def _read_tiktoken(path: Path) -> tuple[list[bytes], list[int]]:
    what = "a tiktoken file ('base64-bytes rank' per line, optionally gzipped)"
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise VocabularyError(f"{path}: cannot read ({exc}); expected {what}") from exc
    try:
        pairs = [line.split() for line in raw.splitlines() if line.strip()]
        toks = [binascii.a2b_base64(t) for t, _ in pairs]
        ranks = [int(r) for _, r in pairs]
    except (ValueError, binascii.Error) as exc:
        raise VocabularyError(f"{path}: malformed line ({exc}); expected {what}") from exc
    if not toks:
        raise VocabularyError(f"{path}: no tokens; expected {what}")
    return toks, ranks


def from_tiktoken(
    path: str | os.PathLike[str],
    *,
    special_tokens: Mapping[str, int] | None = None,
    end_ids: Iterable[int] | None = None,
    width: int | None = None,
    name: str = "",
) -> VocabularyParts:
    """Read a tiktoken file (``base64-bytes rank`` per line; ``.gz`` read transparently).

    The rank is the token id; ids not covered by a rank or a special token are empty specials.
    ``special_tokens`` (name -> id) are special with their name's UTF-8 as bytes; the default end
    ids are those among them named like :data:`END_TOKEN_NAMES`.
    """
    p = input_path(path, "a tiktoken file ('base64-bytes rank' per line)")
    toks, ranks = _read_tiktoken(p)
    specials = dict(special_tokens or {})
    if min(ranks) < 0 or min(specials.values(), default=0) < 0:
        raise VocabularyError(f"{p}: negative token id")
    size = max(max(ranks), max(specials.values(), default=-1)) + 1
    if ranks[-1] == len(ranks) - 1 and ranks == list(range(len(ranks))):
        tokens = toks + [b""] * (size - len(toks))
        special = set(range(len(toks), size))
    else:
        if len(set(ranks)) != len(ranks):
            raise VocabularyError(f"{p}: a rank appears twice; expected one line per token id")
        tokens = [b""] * size
        for t, r in zip(toks, ranks, strict=True):
            tokens[r] = t
        special = set(range(size)).difference(ranks)
    for tname, i in specials.items():
        if i not in special or tokens[i]:
            raise VocabularyError(
                f"{p}: special token {tname!r} has id {i}, which is already taken"
            )
        tokens[i] = tname.encode("utf-8")
    if end_ids is None:
        ends = guess_end_ids(specials)
        if not ends:
            raise need_end_ids(str(p))
    else:
        ends = list(end_ids)
    return build_parts(tokens, special=special, end_ids=ends, width=width, source=str(p), name=name)


# -- SentencePiece -------------------------------------------------------------------------------
def from_sp_processor(
    sp: Any,
    *,
    source: str,
    width: int | None,
    end_ids: Iterable[int] | None,
    extra_special: Mapping[int, str] | None = None,
    name: str = "",
) -> VocabularyParts:
    n = int(sp.get_piece_size())
    if n <= 0:
        raise VocabularyError(f"{source}: the SentencePiece model has no pieces")
    ids = list(range(n))
    pieces: list[str] = sp.id_to_piece(ids)
    silent = [
        c or u or x
        for c, u, x in zip(sp.is_control(ids), sp.is_unknown(ids), sp.is_unused(ids), strict=True)
    ]
    is_byte: list[bool] = sp.is_byte(ids)
    tokens = [
        b""
        if s
        else (bytes((int(p[3:5], 16),)) if b else p.replace(SPIECE_SPACE, " ").encode("utf-8"))
        for p, s, b in zip(pieces, silent, is_byte, strict=True)
    ]
    special = {i for i, s in enumerate(silent) if s}
    extra = dict(extra_special or {})
    if extra:
        top = max(extra) + 1
        if top > n:
            tokens.extend([b""] * (top - n))
            special.update(range(n, top))
        for i, content in extra.items():
            if i >= n:
                tokens[i] = content.encode("utf-8")
            special.add(i)
    if end_ids is None:
        eos = int(sp.eos_id())
        if eos < 0:
            raise need_end_ids(source)
        ends = [eos]
    else:
        ends = list(end_ids)
    return build_parts(tokens, special=special, end_ids=ends, width=width, source=source, name=name)


def from_sentencepiece(
    path: str | os.PathLike[str],
    *,
    width: int | None = None,
    end_ids: Iterable[int] | None = None,
    name: str = "",
) -> VocabularyParts:
    """Read a SentencePiece ``.model`` with the ``sentencepiece`` package.

    ``▁`` is a space, ``<0xNN>`` byte pieces are one byte, control / unknown / unused pieces are
    special and spell nothing. The default end id is the model's ``eos_id()``.
    """
    p = input_path(path, "a SentencePiece .model file")
    try:
        import sentencepiece as spm
    except ImportError as exc:
        raise missing("sentencepiece", "tokenizers") from exc
    sp = spm.SentencePieceProcessor()
    try:
        sp.Load(str(p))
    except (OSError, RuntimeError) as exc:
        raise VocabularyError(
            f"{p}: not a SentencePiece model ({exc}); expected a SentencePiece .model file"
        ) from exc
    return from_sp_processor(sp, source=str(p), width=width, end_ids=end_ids, name=name)


# -- Mistral Tekken ------------------------------------------------------------------------------
def from_tekken(
    path: str | os.PathLike[str],
    *,
    width: int | None = None,
    end_ids: Iterable[int] | None = None,
    name: str = "",
) -> VocabularyParts:
    """Read a Mistral Tekken ``tekken*.json`` with the ``json`` module.

    Ids ``0..num_special-1`` are special tokens (named ones spell their name, the rest nothing);
    regular token ``rank`` has id ``rank + num_special``. Size and width default to the file's
    ``default_vocab_size``; the default end id is ``</s>``.
    """
    what = "a Mistral Tekken JSON file (config, vocab of token_bytes/rank)"
    p = input_path(path, what)
    data = read_json(p, what)
    try:
        config = data["config"]
        vocab = data["vocab"]
        num_special = int(config["default_num_special_tokens"])
        size = int(config.get("default_vocab_size") or num_special + len(vocab))
        inner = size - num_special
        if not 0 <= inner <= len(vocab):
            raise VocabularyError(
                f"{p}: default_vocab_size {size} does not fit {len(vocab)} tokens and "
                f"{num_special} special tokens"
            )
        entries = vocab[:inner]
        if any(e["rank"] != i for i, e in enumerate(entries)):
            raise VocabularyError(f"{p}: vocab ranks are not 0, 1, 2, ... in order")
        regular = [binascii.a2b_base64(e["token_bytes"]) for e in entries]
        listed = data.get("special_tokens")
        if listed is None:
            named = dict(enumerate(_TEKKEN_DEFAULT_SPECIALS))
        else:
            named = {int(s["rank"]): str(s["token_str"]) for s in listed}
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        if isinstance(exc, VocabularyError):
            raise
        raise VocabularyError(f"{p}: malformed ({exc!r}); expected {what}") from exc
    if any(not 0 <= i < num_special for i in named):
        raise VocabularyError(f"{p}: a special token rank is outside 0..{num_special - 1}")
    head = [named[i].encode("utf-8") if i in named else b"" for i in range(num_special)]
    if end_ids is None:
        by_name = {s: i for i, s in named.items()}
        if "</s>" not in by_name:
            raise need_end_ids(str(p))
        ends = [by_name["</s>"]]
    else:
        ends = list(end_ids)
    return build_parts(
        head + regular,
        special=range(num_special),
        end_ids=ends,
        width=width,
        source=str(p),
        name=name,
    )
