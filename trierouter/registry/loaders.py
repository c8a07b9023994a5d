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
Every reader runs one comprehension over the tokens; no per-token Python beyond that. The byte
maps and the assembly the readers share are in :mod:`~trierouter.registry.token_bytes`; the
tiktoken, SentencePiece and Tekken readers in :mod:`~trierouter.registry.tokenizer_files`
(exported here with the others).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from trierouter.errors import VocabularyError
from trierouter.registry.token_bytes import (
    END_TOKEN_NAMES,
    SPIECE_SPACE,
    Scheme,
    VocabularyParts,
    build_parts,
    guess_end_ids,
    input_path,
    need_end_ids,
    piece_bytes,
    read_json,
)
from trierouter.registry.tokenizer_files import (
    from_sentencepiece,
    from_sp_processor,
    from_tekken,
    from_tiktoken,
)

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
        return "byte_level", SPIECE_SPACE
    for c in decoder + pre:
        if c.get("type") == "Metaspace":
            return "sentencepiece", str(c.get("replacement") or SPIECE_SPACE)
    for c in decoder + norm:
        if c.get("type") == "Replace" and (c.get("pattern") or {}).get("String") == SPIECE_SPACE:
            return "sentencepiece", SPIECE_SPACE
        if c.get("type") == "Replace" and c.get("content") == SPIECE_SPACE:
            return "sentencepiece", SPIECE_SPACE
        if c.get("type") == "Prepend" and c.get("prepend") == SPIECE_SPACE:
            return "sentencepiece", SPIECE_SPACE
    if any(c.get("type") == "ByteFallback" for c in decoder):
        return "sentencepiece", SPIECE_SPACE
    if model.get("type") == "Unigram" or model.get("byte_fallback"):
        return "sentencepiece", SPIECE_SPACE
    return "plain", SPIECE_SPACE


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
    tokens, special = piece_bytes(
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
        ends = list(extra_end_ids) or guess_end_ids(named)
        if not ends:
            ends = guess_end_ids({p: i for i, p in by_id.items() if p in END_TOKEN_NAMES})
        if not ends:
            raise need_end_ids(source)
    else:
        ends = list(end_ids)
    return build_parts(tokens, special=special, end_ids=ends, width=width, source=source, name=name)


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
    p = input_path(path, "a Hugging Face tokenizer.json")
    data = read_json(p, "a Hugging Face tokenizer.json")
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
    p = input_path(path, "a byte-level vocab.json (token string -> id)")
    data = read_json(p, "a byte-level vocab.json (token string -> id)")
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
        vocab = from_sp_processor(
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
        elif any(SPIECE_SPACE in t for t in pieces):
            decoder = {"type": "Metaspace", "replacement": SPIECE_SPACE}
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
