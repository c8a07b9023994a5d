"""Vocabulary: token id -> exact bytes, plus end ids and the model's logits width.

Everything downstream works on bytes: a byte-level BPE token can end in the middle of a UTF-8
character, so decoding token strings to text would lose information. Special and added tokens
keep their ids but are *special*: never part of a value. A model's logits may be wider than the
tokenizer (Qwen2 pads 151,643 to 151,936): ``width`` covers it and padding ids are never allowed.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import VocabularyError, missing
from trierouter.registry import loaders
from trierouter.registry.core import native_core

__all__ = ["Vocabulary", "xgrammar_tokenizer_info"]


class Vocabulary:
    """Exact bytes of every token id, the end-of-sequence ids and the logits width.

    ``tokens[i]`` are the bytes token ``i`` appends to the output; special ids (control, added
    and special tokens) are excluded from every value. Ids in ``range(len(tokens), width)`` are
    padding. Build one with a ``from_*`` constructor, or directly from a list of bytes.
    """

    __slots__ = ("__dict__", "_end_ids", "_name", "_special", "_tokens", "_width")

    def __init__(
        self,
        tokens: Sequence[bytes],
        *,
        end_ids: Iterable[int],
        special_ids: Iterable[int] = (),
        width: int | None = None,
        name: str = "",
    ) -> None:
        toks = tuple(tokens)
        if not toks:
            raise VocabularyError("tokens: a vocabulary needs at least one token")
        for i, t in enumerate(toks):
            if not isinstance(t, bytes):
                raise VocabularyError(
                    f"tokens[{i}] is {type(t).__name__}, expected bytes (the token's exact bytes)"
                )
        size = len(toks)
        w = size if width is None else int(width)
        if w < size:
            raise VocabularyError(
                f"width={w} is smaller than the tokenizer's {size} tokens; width is the model's "
                "logits width, at least the number of tokens"
            )
        ends = tuple(sorted({int(e) for e in end_ids}))
        for e in ends:
            if not 0 <= e < size:
                raise VocabularyError(f"end_ids: {e} is not a token id (0..{size - 1})")
        special = frozenset(int(s) for s in special_ids)
        for s in special:
            if not 0 <= s < size:
                raise VocabularyError(f"special_ids: {s} is not a token id (0..{size - 1})")
        self._tokens = toks
        self._end_ids = ends
        self._special = special | frozenset(ends)
        self._width = w
        self._name = name

    # -- plain accessors ---------------------------------------------------------------------
    @property
    def tokens(self) -> tuple[bytes, ...]:
        """Bytes of every token id (special tokens included, as their literal text)."""
        return self._tokens

    @property
    def end_ids(self) -> tuple[int, ...]:
        """Ids that end a sequence (EOS, end-of-turn), sorted."""
        return self._end_ids

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids that are never part of a value (special, added, control tokens, end ids)."""
        return self._special

    @property
    def width(self) -> int:
        """The model's logits width (>= ``len(self)``); masks cover it."""
        return self._width

    @property
    def name(self) -> str:
        """A label for messages and reports; not part of the hash."""
        return self._name

    def __len__(self) -> int:
        return len(self._tokens)

    def __repr__(self) -> str:
        label = f"{self._name!r}, " if self._name else ""
        return (
            f"Vocabulary({label}size={len(self)}, width={self._width}, "
            f"end_ids={list(self._end_ids)}, special={len(self._special)}, "
            f"hash={self.hash[:12]})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and other.hash == self.hash

    def __hash__(self) -> int:
        return hash(self.hash)

    # -- derived arrays ------------------------------------------------------------------------
    @cached_property
    def hash(self) -> str:
        """Stable SHA-256 over token bytes, special ids, end ids and width (hex)."""
        h = hashlib.sha256(b"trierouter-vocabulary-v1\0")
        h.update(np.array([len(self._tokens), self._width], dtype="<i8").tobytes())
        h.update(self.offsets.astype("<i8").tobytes())
        h.update(self.buffer.tobytes())
        h.update(np.array(sorted(self._special), dtype="<i8").tobytes())
        h.update(np.array(self._end_ids, dtype="<i8").tobytes())
        return h.hexdigest()

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 over what decides a compiled set's masks (hex): the ids and bytes of the
        tokens a value may use (:attr:`matchable`) and the end ids. Not the width (a fact of
        the model a set is applied to) nor the text of special tokens (never allowed in a
        value): a set compiled for a tokenizer serves any model with the same tokens."""
        h = hashlib.sha256(b"trierouter-vocabulary-content-v1\0")
        ids = np.flatnonzero(self.matchable).astype("<i8")
        h.update(np.array([len(ids)], dtype="<i8").tobytes())
        h.update(ids.tobytes())
        # the bytes of those tokens joined by b"\0"
        lengths = np.diff(self.offsets)
        # (trierouter.testing.kernels.join_tokens: the numpy reference)
        h.update(native_core().join_tokens(self._tokens, self.matchable.view(np.uint8)))
        h.update(lengths[ids].astype("<i8").tobytes())
        h.update(np.array(self._end_ids, dtype="<i8").tobytes())
        return h.hexdigest()

    @cached_property
    def buffer(self) -> npt.NDArray[np.uint8]:
        """All token bytes concatenated (use with :attr:`offsets`; read-only)."""
        # one pass in the core, which gives the offsets too (trierouter.testing.kernels.
        # pack_tokens: the numpy reference)
        packed: tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]
        packed = native_core().pack_tokens(self._tokens)
        buf, offsets = packed
        buf.flags.writeable = False
        self.__dict__.setdefault("offsets", offsets)
        return buf

    @cached_property
    def offsets(self) -> npt.NDArray[np.int64]:
        """``offsets[i]:offsets[i+1]`` slices token ``i`` out of :attr:`buffer`."""
        _ = self.buffer  # sets the offsets
        got: npt.NDArray[np.int64] = self.__dict__["offsets"]
        return got

    @cached_property
    def matchable(self) -> npt.NDArray[np.bool_]:
        """Tokens that may appear inside a value: not special and not empty."""
        ok = np.diff(self.offsets) > 0
        if self._special:
            ok[np.fromiter(self._special, dtype=np.int64)] = False
        return ok

    def token_bytes(self, token_id: int) -> bytes:
        """Bytes of one token id; padding ids (``len(self) <= id < width``) have none."""
        if 0 <= token_id < len(self._tokens):
            return self._tokens[token_id]
        if len(self._tokens) <= token_id < self._width:
            return b""
        raise IndexError(f"token id {token_id} outside 0..{self._width - 1}")

    def decode(self, token_ids: Iterable[int]) -> bytes:
        """Concatenate the bytes of non-special tokens (what a value spells)."""
        return b"".join(
            self._tokens[t] for t in token_ids if t < len(self._tokens) and t not in self._special
        )

    def with_width(self, width: int) -> Vocabulary:
        """The same tokens under a (wider) model logits width."""
        return Vocabulary(
            self._tokens,
            end_ids=self._end_ids,
            special_ids=self._special,
            width=width,
            name=self._name,
        )

    # -- constructors (the readers are in trierouter.registry.loaders) --------------------------
    @classmethod
    def from_parts(cls, parts: loaders.VocabularyParts) -> Vocabulary:
        """From what a reader of :mod:`trierouter.registry.loaders` found (errors name it)."""
        try:
            return cls(
                parts.tokens,
                end_ids=parts.end_ids,
                special_ids=parts.special_ids,
                width=parts.width,
                name=parts.name,
            )
        except VocabularyError as exc:
            raise VocabularyError(f"{parts.source}: {exc}") from exc

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: object,
        *,
        width: int | None = None,
        end_ids: Iterable[int] | None = None,
        name: str = "",
    ) -> Vocabulary:
        """From a ``transformers`` tokenizer object (fast or slow), or a mistral-common one."""
        return cls.from_parts(
            loaders.from_transformers(tokenizer, width=width, end_ids=end_ids, name=name)
        )

    @classmethod
    def from_tokenizer_json(
        cls,
        path: str | os.PathLike[str],
        *,
        width: int | None = None,
        end_ids: Iterable[int] | None = None,
        name: str = "",
    ) -> Vocabulary:
        """From a Hugging Face ``tokenizer.json`` file (byte-level BPE or SentencePiece-style)."""
        return cls.from_parts(
            loaders.from_tokenizer_json(path, width=width, end_ids=end_ids, name=name)
        )

    @classmethod
    def from_vocab_json(
        cls,
        path: str | os.PathLike[str],
        *,
        special_tokens: Iterable[str] | None = None,
        width: int | None = None,
        end_ids: Iterable[int] | None = None,
        name: str = "",
    ) -> Vocabulary:
        """From a byte-level ``vocab.json`` / GPT-2 ``encoder.json`` (token string -> id)."""
        return cls.from_parts(
            loaders.from_vocab_json(
                path, special_tokens=special_tokens, width=width, end_ids=end_ids, name=name
            )
        )

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike[str],
        *,
        special_tokens: Mapping[str, int] | None = None,
        end_ids: Iterable[int] | None = None,
        width: int | None = None,
        name: str = "",
    ) -> Vocabulary:
        """From a tiktoken-format file (``base64-bytes rank`` per line, optionally gzipped)."""
        return cls.from_parts(
            loaders.from_tiktoken(
                path, special_tokens=special_tokens, end_ids=end_ids, width=width, name=name
            )
        )

    @classmethod
    def from_sentencepiece(
        cls,
        path: str | os.PathLike[str],
        *,
        width: int | None = None,
        end_ids: Iterable[int] | None = None,
        name: str = "",
    ) -> Vocabulary:
        """From a SentencePiece ``.model`` file (``▁`` is a space, ``<0xNN>`` one byte)."""
        return cls.from_parts(
            loaders.from_sentencepiece(path, width=width, end_ids=end_ids, name=name)
        )

    @classmethod
    def from_tekken(
        cls,
        path: str | os.PathLike[str],
        *,
        width: int | None = None,
        end_ids: Iterable[int] | None = None,
        name: str = "",
    ) -> Vocabulary:
        """From a Mistral Tekken ``tekken*.json`` file (special tokens first)."""
        return cls.from_parts(loaders.from_tekken(path, width=width, end_ids=end_ids, name=name))


_INFOS: OrderedDict[tuple[str, int, tuple[int, ...]], Any] = OrderedDict()
_INFOS_LOCK = threading.Lock()


def xgrammar_tokenizer_info(vocab: Vocabulary) -> Any:
    """XGrammar's TokenizerInfo for ``vocab``: raw bytes, special ids empty, same width (built
    once per vocabulary, ~0.1 s at Qwen2 size; the last 4 are kept)."""
    try:
        import xgrammar as xgr
    except ImportError as exc:  # pragma: no cover - xgrammar is in the tools extra
        raise missing("xgrammar", "tools") from exc
    key = (vocab.hash, vocab.width, tuple(vocab.end_ids))
    with _INFOS_LOCK:
        info = _INFOS.get(key)
        if info is not None:
            _INFOS.move_to_end(key)
            return info
    special = vocab.special_ids
    enc = [b"" if i in special else t for i, t in enumerate(vocab.tokens)]
    info = xgr.TokenizerInfo(
        enc, xgr.VocabType.RAW, vocab_size=vocab.width, stop_token_ids=list(vocab.end_ids)
    )
    with _INFOS_LOCK:
        _INFOS[key] = info
        while len(_INFOS) > 4:
            _INFOS.popitem(last=False)
    return info
