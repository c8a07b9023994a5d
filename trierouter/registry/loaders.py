"""Readers that turn tokenizer objects and files into the parts of a vocabulary (exact bytes).

:class:`~trierouter.registry.vocabulary.Vocabulary`'s ``from_*`` constructors call them and
build the vocabulary from :class:`VocabularyParts`; this module does not import it.

Three ways a tokenizer spells bytes, detected from the tokenizer's own description:

- *byte-level* BPE (GPT-2, Llama-3, Qwen, DeepSeek): every byte is one printable character of the
  GPT-2 byte-to-unicode map, so a token string maps back to its exact bytes;
- *SentencePiece* style (Mistral v1-v3, Llama-2, Gemma): ``▁`` is a space and ``<0xNN>``
  byte-fallback pieces are one byte each; control and unknown pieces spell nothing;
- *plain* (WordPiece, word-level): the token string's UTF-8, an approximation.

Added and special tokens keep their ids and literal text but are special: never part of a value.
Every reader runs one comprehension over the tokens; no per-token Python beyond that.
"""

from __future__ import annotations

import binascii
import gzip
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, NamedTuple

from trierouter.errors import VocabularyError, missing

__all__ = [
    "END_TOKEN_NAMES",
    "VocabularyParts",
    "from_sentencepiece",
    "from_tekken",
    "from_tiktoken",
    "from_tokenizer_json",
    "from_transformers",
    "from_vocab_json",
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
_SPIECE_SPACE = "▁"

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


def _piece_bytes(
    pieces: Sequence[str | None],
    scheme: Scheme,
    *,
    space: str = _SPIECE_SPACE,
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
def _guess_end_ids(named: Mapping[str, int]) -> list[int]:
    return [named[n] for n in END_TOKEN_NAMES if n in named]


def _need_end_ids(source: str) -> VocabularyError:
    return VocabularyError(
        f"{source}: no end-of-sequence token found (looked for {', '.join(END_TOKEN_NAMES[:6])}, "
        "...); pass end_ids= explicitly"
    )


def _build(
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


def _path(path: str | os.PathLike[str], what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise VocabularyError(f"{p}: no such file; expected {what}")
    return p


def _read_json(path: Path, what: str) -> Any:
    try:
        with path.open("rb") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VocabularyError(f"{path}: not a readable JSON file ({exc}); expected {what}") from exc


# -- tokenizer.json (and fast transformers tokenizers) -------------------------------------------
def _components(node: object) -> Iterator[Mapping[str, Any]]:
    """A normalizer / pre-tokenizer / decoder and, for ``Sequence``, its members."""
    if isinstance(node, Mapping):
        yield node
        for key in ("decoders", "pretokenizers", "pre_tokenizers", "normalizers"):
            for child in node.get(key) or ():
                yield from _components(child)


def _detect_scheme(data: Mapping[str, Any]) -> tuple[Scheme, str]:
    """The scheme of a tokenizer.json and, for SentencePiece style, the space replacement."""
    decoder = list(_components(data.get("decoder")))
    pre = list(_components(data.get("pre_tokenizer")))
    norm = list(_components(data.get("normalizer")))
    model = data.get("model") or {}
    if any(c.get("type") == "ByteLevel" for c in decoder + pre):
        return "byte_level", _SPIECE_SPACE
    for c in decoder + pre:
        if c.get("type") == "Metaspace":
            return "sentencepiece", str(c.get("replacement") or _SPIECE_SPACE)
    for c in decoder + norm:
        if c.get("type") == "Replace" and (c.get("pattern") or {}).get("String") == _SPIECE_SPACE:
            return "sentencepiece", _SPIECE_SPACE
        if c.get("type") == "Replace" and c.get("content") == _SPIECE_SPACE:
            return "sentencepiece", _SPIECE_SPACE
        if c.get("type") == "Prepend" and c.get("prepend") == _SPIECE_SPACE:
            return "sentencepiece", _SPIECE_SPACE
    if any(c.get("type") == "ByteFallback" for c in decoder):
        return "sentencepiece", _SPIECE_SPACE
    if model.get("type") == "Unigram" or model.get("byte_fallback"):
        return "sentencepiece", _SPIECE_SPACE
    return "plain", _SPIECE_SPACE


def _from_tokenizer_data(
    data: object,
    *,
    source: str,
    width: int | None,
    end_ids: Iterable[int] | None,
    extra_special: Mapping[int, str] | None = None,
    extra_end_ids: Sequence[int] = (),
    name: str = "",
) -> VocabularyParts:
    """The shared core of :func:`from_tokenizer_json` and :func:`from_transformers`."""
    what = "a Hugging Face tokenizer.json (with a 'model' holding a 'vocab')"
    if not isinstance(data, Mapping) or not isinstance(data.get("model"), Mapping):
        raise VocabularyError(f"{source}: no 'model' object; expected {what}")
    model: Mapping[str, Any] = data["model"]
    vocab = model.get("vocab")
    kind = model.get("type") or ("Unigram" if isinstance(vocab, list) else "BPE")
    if isinstance(vocab, list):
        try:
            by_id: dict[int, str] = {i: str(entry[0]) for i, entry in enumerate(vocab)}
        except (TypeError, IndexError) as exc:
            raise VocabularyError(
                f"{source}: Unigram vocab entries must be [piece, score]"
            ) from exc
    elif isinstance(vocab, Mapping):
        by_id = {int(i): str(t) for t, i in vocab.items()}
    else:
        raise VocabularyError(f"{source}: model.vocab is missing; expected {what}")

    added: dict[int, str] = {}
    for entry in data.get("added_tokens") or ():
        try:
            added[int(entry["id"])] = str(entry["content"])
        except (TypeError, KeyError, ValueError) as exc:
            raise VocabularyError(
                f"{source}: added_tokens entries need 'id' and 'content'"
            ) from exc
    added.update(extra_special or {})
    ids = by_id.keys() | added.keys()
    if not ids:
        raise VocabularyError(f"{source}: the vocabulary is empty; expected {what}")
    if min(ids) < 0:
        raise VocabularyError(f"{source}: negative token id {min(ids)}")
    size = max(ids) + 1

    scheme, space = _detect_scheme(data)
    pieces: list[str | None] = [by_id.get(i) for i in range(size)]
    for i in added:
        pieces[i] = None  # spelled below as literal text
    prefix = str(model.get("continuing_subword_prefix") or "") if kind == "WordPiece" else ""
    tokens, special = _piece_bytes(
        pieces,
        scheme,
        space=space,
        byte_fallback=bool(model.get("byte_fallback", True)) or kind == "Unigram",
        strip_prefix=prefix,
    )
    for i, content in added.items():
        tokens[i] = content.encode("utf-8")
        special.add(i)
    if scheme == "sentencepiece":
        unk = model.get("unk_id") if kind == "Unigram" else None
        unk_piece = model.get("unk_token")
        for i, piece in by_id.items():
            if i == unk or (unk_piece is not None and piece == unk_piece and i not in added):
                tokens[i] = b""
                special.add(i)

    if end_ids is None:
        named = {content: i for i, content in added.items()}
        ends = list(extra_end_ids) or _guess_end_ids(named)
        if not ends:
            ends = _guess_end_ids({p: i for i, p in by_id.items() if p in END_TOKEN_NAMES})
        if not ends:
            raise _need_end_ids(source)
    else:
        ends = list(end_ids)
    return _build(tokens, special=special, end_ids=ends, width=width, source=source, name=name)


def _sibling_end_ids(directory: Path, named: Mapping[str, int]) -> list[int]:
    """End ids declared next to a tokenizer: tokenizer_config.json and generation_config.json."""
    ends: list[int] = []
    config = directory / "tokenizer_config.json"
    if config.is_file():
        try:
            eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token")
        except (OSError, ValueError, AttributeError):
            eos = None
        if isinstance(eos, Mapping):
            eos = eos.get("content")
        if isinstance(eos, str) and eos in named:
            ends.append(named[eos])
    ends.extend(_generation_end_ids(directory))
    return ends


def _generation_end_ids(directory: Path) -> list[int]:
    config = directory / "generation_config.json"
    if not config.is_file():
        return []
    try:
        eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return []
    if isinstance(eos, int):
        return [eos]
    if isinstance(eos, list):
        return [e for e in eos if isinstance(e, int)]
    return []


def from_tokenizer_json(
    path: str | os.PathLike[str],
    *,
    width: int | None = None,
    end_ids: Iterable[int] | None = None,
    name: str = "",
) -> VocabularyParts:
    """Read a Hugging Face ``tokenizer.json`` with the ``json`` module (no ``tokenizers`` needed).

    End ids, unless given: the ``eos_token`` of a ``tokenizer_config.json`` and the
    ``eos_token_id`` of a ``generation_config.json`` next to the file, else added tokens named
    like :data:`END_TOKEN_NAMES`.
    """
    p = _path(path, "a Hugging Face tokenizer.json")
    data = _read_json(p, "a Hugging Face tokenizer.json")
    extra: list[int] = []
    if end_ids is None and isinstance(data, Mapping):
        named = {
            str(a.get("content")): int(a.get("id", -1))
            for a in data.get("added_tokens") or ()
            if isinstance(a, Mapping)
        }
        extra = _sibling_end_ids(p.parent, named)
    return _from_tokenizer_data(
        data, source=str(p), width=width, end_ids=end_ids, extra_end_ids=extra, name=name
    )


def from_vocab_json(
    path: str | os.PathLike[str],
    *,
    special_tokens: Iterable[str] | None = None,
    width: int | None = None,
    end_ids: Iterable[int] | None = None,
    name: str = "",
) -> VocabularyParts:
    """Read a byte-level ``vocab.json`` / GPT-2 ``encoder.json`` (token string -> id).

    ``special_tokens`` names the entries that are special; by default those named like
    :data:`END_TOKEN_NAMES` (GPT-2's ``<|endoftext|>``), which are also the default end ids.
    """
    p = _path(path, "a byte-level vocab.json (token string -> id)")
    data = _read_json(p, "a byte-level vocab.json (token string -> id)")
    if not isinstance(data, Mapping) or not all(isinstance(v, int) for v in data.values()):
        raise VocabularyError(f"{p}: expected a JSON object mapping token strings to integer ids")
    names = (
        [n for n in END_TOKEN_NAMES if n in data]
        if special_tokens is None
        else list(special_tokens)
    )
    for n in names:
        if n not in data:
            raise VocabularyError(f"{p}: special token {n!r} is not in the vocabulary")
    added = {int(data[n]): n for n in names}
    doc = {"model": {"type": "BPE", "vocab": data}, "decoder": {"type": "ByteLevel"}}
    return _from_tokenizer_data(
        doc, source=str(p), width=width, end_ids=end_ids, extra_special=added, name=name
    )


# -- transformers tokenizer objects --------------------------------------------------------------
def _transformers_end_ids(tokenizer: Any) -> list[int]:
    ends: list[int] = []
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ends.append(eos)
    elif isinstance(eos, list):
        ends.extend(e for e in eos if isinstance(e, int))
    source = getattr(tokenizer, "name_or_path", None)
    if isinstance(source, str) and source and Path(source).is_dir():
        ends.extend(_generation_end_ids(Path(source)))
    return ends


def _transformers_added(tokenizer: Any) -> dict[int, str]:
    added: dict[int, str] = {}
    decoder = getattr(tokenizer, "added_tokens_decoder", None)
    if isinstance(decoder, Mapping):
        added.update({int(i): str(t) for i, t in decoder.items()})
    special_ids = getattr(tokenizer, "all_special_ids", None) or ()
    convert = getattr(tokenizer, "convert_ids_to_tokens", None)
    for i in special_ids:
        if int(i) not in added and convert is not None:
            added[int(i)] = str(convert(int(i)))
    return added


def _mistral_common_inner(tokenizer: Any) -> tuple[Any, Path] | None:
    """The mistral-common Tekkenizer / SentencePieceTokenizer inside a wrapper, and its file."""
    node = tokenizer
    for attr in ("tokenizer", "instruct_tokenizer", "tokenizer", ""):
        if type(node).__module__.startswith("mistral_common.tokens.tokenizers.") and type(
            node
        ).__name__ in ("Tekkenizer", "SentencePieceTokenizer"):
            path = getattr(node, "file_path", None)
            return (node, Path(path)) if isinstance(path, (str, Path)) else None
        node = getattr(node, attr, node) if attr else None
    return None


def from_transformers(
    tokenizer: object,
    *,
    width: int | None = None,
    end_ids: Iterable[int] | None = None,
    name: str = "",
) -> VocabularyParts:
    """Read a ``transformers`` tokenizer object (fast, SentencePiece or other slow tokenizer).

    Fast tokenizers are read from their backend's JSON (as :func:`from_tokenizer_json`);
    SentencePiece-backed slow ones from their ``sp_model``; mistral-common backed ones from their
    Tekken / SentencePiece file; any other from ``get_vocab()`` (plain strings, approximate).
    Added and special tokens are special. Width defaults to ``len(tokenizer)``.
    """
    tok: Any = tokenizer
    source = f"{type(tokenizer).__name__}({getattr(tok, 'name_or_path', '') or ''!r})"
    added = _transformers_added(tok)
    found_ends = _transformers_end_ids(tok) if end_ids is None else []
    try:
        n_tok = len(tok)
    except TypeError:
        n_tok = 0
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        data = json.loads(backend.to_str())
        vocab = _from_tokenizer_data(
            data,
            source=source,
            width=None,
            end_ids=end_ids,
            extra_special=added,
            extra_end_ids=found_ends,
            name=name,
        )
    elif getattr(tok, "sp_model", None) is not None:
        vocab = _from_sp_processor(
            tok.sp_model,
            source=source,
            width=None,
            end_ids=end_ids if end_ids is not None else (found_ends or None),
            extra_special=added,
            name=name,
        )
    elif (mistral := _mistral_common_inner(tok)) is not None:
        inner, path = mistral
        read = from_tekken if type(inner).__name__ == "Tekkenizer" else from_sentencepiece
        vocab = read(path, end_ids=end_ids, name=name)
    elif hasattr(tok, "get_vocab"):
        pieces = {str(t): int(i) for t, i in tok.get_vocab().items()}
        if hasattr(tok, "byte_decoder") or (
            any("Ġ" in t for t in pieces) and not any(" " in t for t in pieces)
        ):
            decoder: dict[str, Any] = {"type": "ByteLevel"}
        elif any(_SPIECE_SPACE in t for t in pieces):
            decoder = {"type": "Metaspace", "replacement": _SPIECE_SPACE}
        else:
            decoder = {}
        doc = {"model": {"type": "BPE", "vocab": pieces}, "decoder": decoder}
        vocab = _from_tokenizer_data(
            doc,
            source=source,
            width=None,
            end_ids=end_ids,
            extra_special=added,
            extra_end_ids=found_ends,
            name=name,
        )
    else:
        raise VocabularyError(
            f"{source}: expected a transformers tokenizer (with backend_tokenizer, sp_model or "
            "get_vocab())"
        )
    w = max(n_tok, len(vocab.tokens)) if width is None else int(width)
    return vocab._replace(width=w, source=source)


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
    p = _path(path, "a tiktoken file ('base64-bytes rank' per line)")
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
        ends = _guess_end_ids(specials)
        if not ends:
            raise _need_end_ids(str(p))
    else:
        ends = list(end_ids)
    return _build(tokens, special=special, end_ids=ends, width=width, source=str(p), name=name)


# -- SentencePiece -------------------------------------------------------------------------------
def _from_sp_processor(
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
        else (bytes((int(p[3:5], 16),)) if b else p.replace(_SPIECE_SPACE, " ").encode("utf-8"))
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
            raise _need_end_ids(source)
        ends = [eos]
    else:
        ends = list(end_ids)
    return _build(tokens, special=special, end_ids=ends, width=width, source=source, name=name)


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
    p = _path(path, "a SentencePiece .model file")
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
    return _from_sp_processor(sp, source=str(p), width=width, end_ids=end_ids, name=name)


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
    p = _path(path, what)
    data = _read_json(p, what)
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
            raise _need_end_ids(str(p))
        ends = [by_name["</s>"]]
    else:
        ends = list(end_ids)
    return _build(
        head + regular,
        special=range(num_special),
        end_ids=ends,
        width=width,
        source=str(p),
        name=name,
    )
