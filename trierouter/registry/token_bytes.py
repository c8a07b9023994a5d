"""What every tokenizer reader shares: the parts it returns, how pieces spell bytes, assembly.

A piece spells bytes in one of three ways (:mod:`trierouter.registry.loaders`): byte-level BPE
(the GPT-2 byte-to-unicode map), SentencePiece (``▁`` and ``<0xNN>`` pieces) or plain UTF-8.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, NamedTuple

from trierouter.errors import VocabularyError

__all__ = [
    "END_TOKEN_NAMES",
    "SPIECE_SPACE",
    "Scheme",
    "VocabularyParts",
    "build_parts",
    "guess_end_ids",
    "input_path",
    "need_end_ids",
    "piece_bytes",
    "read_json",
]


class VocabularyParts(NamedTuple):
    """What a reader found: the arguments of ``Vocabulary(...)`` and where they came from."""

    tokens: list[bytes]
    """The exact bytes of each token id."""
    special_ids: tuple[int, ...]
    """Control, added and special tokens: never part of a value."""
    end_ids: tuple[int, ...]
    """End-of-sequence / end-of-turn ids."""
    width: int
    """The model's logits width (at least ``len(tokens)``)."""
    name: str
    """A label for messages."""
    source: str
    """The file or object read, for error messages."""


Scheme = Literal["byte_level", "sentencepiece", "plain"]

END_TOKEN_NAMES: tuple[str, ...] = (
    "<|endoftext|>",
    "</s>",
    "<｜end▁of▁sentence｜>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<eos>",
    "<end_of_turn>",
    "<|end|>",
    "<|return|>",
)
"""Names of end-of-sequence / end-of-turn tokens, used when no ``end_ids`` are given."""

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
SPIECE_SPACE = "▁"


# -- byte-level map ------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _byte_level_table() -> dict[int, int]:
    """``str.translate`` table from GPT-2's byte-to-unicode characters back to latin-1 bytes.

    Printable latin-1 characters stand for themselves; the 68 others are shifted to 256+. The
    raw, unprintable ones are mapped to U+FFFF so that ``encode("latin-1")`` rejects them.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    kept = set(printable)
    table = {b: b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in kept:
            table[256 + shifted] = b
            table[b] = 0xFFFF
            shifted += 1
    return table


def _byte_level_bytes(piece: str, table: Mapping[int, int]) -> bytes | None:
    try:
        return piece.translate(table).encode("latin-1")
    except UnicodeEncodeError:
        return None


def _spiece_bytes(piece: str, space: str, byte_fallback: bool) -> bytes:
    if byte_fallback and len(piece) == 6 and piece.startswith("<0x"):
        m = _BYTE_PIECE.fullmatch(piece)
        if m is not None:
            return bytes((int(m.group(1), 16),))
    return piece.replace(space, " ").encode("utf-8")


def piece_bytes(
    pieces: Sequence[str | None],
    scheme: Scheme,
    *,
    space: str = SPIECE_SPACE,
    byte_fallback: bool = True,
    strip_prefix: str = "",
) -> tuple[list[bytes], set[int]]:
    """Bytes of every piece under ``scheme``; ids without bytes of their own come back special.

    ``None`` pieces are gaps in the id space (b"", special). Under byte-level a piece that is not
    in the byte alphabet (a special token stored in the vocabulary) keeps its UTF-8 and is special.
    """
    special = {i for i, p in enumerate(pieces) if p is None}
    if scheme == "byte_level":
        table = _byte_level_table()
        decoded = [None if p is None else _byte_level_bytes(p, table) for p in pieces]
        for i, d in enumerate(decoded):
            if d is None:
                special.add(i)
        out = [
            d if d is not None else (p or "").encode("utf-8")
            for d, p in zip(decoded, pieces, strict=True)
        ]
        return out, special
    if scheme == "sentencepiece":
        return [
            b"" if p is None else _spiece_bytes(p, space, byte_fallback) for p in pieces
        ], special
    n = len(strip_prefix)
    return [
        b""
        if p is None
        else (p[n:] if n and p.startswith(strip_prefix) and len(p) > n else p).encode("utf-8")
        for p in pieces
    ], special


# -- shared assembly -----------------------------------------------------------------------------
def guess_end_ids(named: Mapping[str, int]) -> list[int]:
    return [named[n] for n in END_TOKEN_NAMES if n in named]


def need_end_ids(source: str) -> VocabularyError:
    return VocabularyError(
        f"{source}: no end-of-sequence token found (looked for {', '.join(END_TOKEN_NAMES[:6])}, "
        "...); pass end_ids= explicitly"
    )


def build_parts(
    tokens: list[bytes],
    *,
    special: Iterable[int],
    end_ids: Iterable[int],
    width: int | None,
    source: str,
    name: str = "",
) -> VocabularyParts:
    return VocabularyParts(
        tokens,
        tuple(int(i) for i in special),
        tuple(int(i) for i in end_ids),
        len(tokens) if width is None else int(width),
        name,
        source,
    )


def input_path(path: str | os.PathLike[str], what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise VocabularyError(f"{p}: no such file; expected {what}")
    return p


def read_json(path: Path, what: str) -> Any:
    try:
        with path.open("rb") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VocabularyError(f"{path}: not a readable JSON file ({exc}); expected {what}") from exc
