"""The inputs of a set compile, checked the same way by both backends: values, terminator, and
the error for values no token sequence spells."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from trierouter.errors import InvalidValueError, UnreachableValueError
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["Spelling", "check_terminator", "encode_values", "unreachable_error"]


class Spelling(Protocol):
    """What the error below reads of a tokenizer index: the bytes single tokens spell."""

    def can_spell_bytes(self) -> npt.NDArray[np.bool_]: ...


def encode_values(values: Iterable[str]) -> list[bytes]:
    if isinstance(values, (str, bytes)):
        raise InvalidValueError(
            f"values must be an iterable of strings, got a single {type(values).__name__}: "
            f"{values!r:.60}; wrap it in a list"
        )
    items = values if isinstance(values, (list, tuple)) else list(values)
    try:
        return [v.encode("utf-8") for v in items]
    except (AttributeError, UnicodeEncodeError):
        pass
    for i, v in enumerate(items):
        if not isinstance(v, str):
            raise InvalidValueError(f"values[{i}] = {v!r:.80} is {type(v).__name__}, expected str")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidValueError(
                f"values[{i}] = {v!r:.80} is not encodable as UTF-8 ({exc.reason}); "
                "lone surrogates cannot be produced by a tokenizer"
            ) from exc
    raise AssertionError("unreachable")  # pragma: no cover


def check_terminator(terminator: object) -> None:
    if terminator is not None and not isinstance(terminator, str):
        raise InvalidValueError(
            f"terminator={terminator!r} must be a str (e.g. '\"') or None for the end ids"
        )


def unreachable_error(
    uniq: list[bytes], term: bytes, bad: list[int], index: Spelling, vocab: Vocabulary
) -> UnreachableValueError:
    """The error for values no sequence of non-special tokens spells (``bad``: their indices
    in ``uniq``, the distinct values in the order of ``value + term``)."""
    used = np.zeros(256, dtype=bool)
    for i in bad:
        used[np.frombuffer(uniq[i] + term, dtype=np.uint8)] = True
    missing = np.flatnonzero(used & ~index.can_spell_bytes())
    shown = [uniq[i].decode("utf-8", "replace") for i in bad[:20]]
    reasons = [
        "no sequence of non-special tokens spells "
        + repr(uniq[i] + term)
        + "; bytes with no single-byte token: "
        + ", ".join(f"0x{b:02x}" for b in missing if b in uniq[i] + term)
        for i in bad
    ]
    return UnreachableValueError(
        f"{len(bad)} of {len(uniq)} values cannot be produced by "
        f"{vocab.name or 'this vocabulary'}"
        f" (first: {shown}); {reasons[0]}",
        values=[uniq[i].decode("utf-8", "replace") for i in bad],
        reasons=reasons,
    )
