"""Checks that a loaded file's arrays are safe to use: dtypes, shapes, ids in range, offsets.

A checksum only proves a file was not damaged; whoever writes a file can recompute it. Loaders
therefore check what their arrays *mean* before using them, so that a crafted file is refused
with :class:`CorruptFileError` instead of reading out of bounds, looping or answering nonsense.
Every check is a whole-array numpy operation (a few ms for a 100,000-value set).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import CorruptFileError

__all__ = ["Checker", "meta_float", "meta_int"]


class Checker:
    """Raises :class:`CorruptFileError` naming the file and the array that is wrong."""

    def __init__(self, path: str | os.PathLike[str], arrays: dict[str, npt.NDArray[Any]]):
        self.path = path
        self.arrays = arrays

    def fail(self, what: str) -> CorruptFileError:
        return CorruptFileError(f"{self.path}: {what} (crafted or damaged file)")

    def names(self, need: set[str], optional: frozenset[str] = frozenset()) -> None:
        have = set(self.arrays)
        if not need <= have or not have <= need | optional:
            raise self.fail(f"arrays {sorted(have)}, expected {sorted(need)}")

    def array(
        self, name: str, dtype: Any, *, ndim: int = 1, size: int | None = None
    ) -> npt.NDArray[Any]:
        a = self.arrays[name]
        if a.dtype != np.dtype(dtype) or a.ndim != ndim:
            raise self.fail(f"array {name!r} is {a.dtype}[{a.ndim}d], expected {np.dtype(dtype)}")
        if size is not None and len(a) != size:
            raise self.fail(f"array {name!r} has {len(a)} entries, expected {size}")
        return a

    def within(self, name: str, a: npt.NDArray[Any], lo: int, hi: int) -> None:
        """Every entry in ``lo <= x < hi``."""
        if len(a) and (int(a.min()) < lo or int(a.max()) >= hi):
            raise self.fail(f"array {name!r} holds ids outside {lo}..{hi - 1}")

    def offsets(self, name: str, a: npt.NDArray[Any], total: int) -> None:
        """CSR offsets: start at 0, never decrease, end at ``total``."""
        if len(a) == 0 or int(a[0]) != 0 or int(a[-1]) != total:
            raise self.fail(f"offsets {name!r} do not run from 0 to {total}")
        # in int64: an int32 difference wraps (2**31 - 1 then -2**31 read as a step of 1)
        if len(a) > 1 and bool((np.diff(a.astype(np.int64)) < 0).any()):
            raise self.fail(f"offsets {name!r} decrease")

    def increasing(self, name: str, a: npt.NDArray[Any]) -> None:
        """Strictly increasing (sorted, no repeats)."""
        if len(a) > 1 and bool((np.diff(a.astype(np.int64)) <= 0).any()):
            raise self.fail(f"array {name!r} is not strictly increasing")

    def finite(self, name: str, a: npt.NDArray[Any]) -> None:
        if a.size and not bool(np.isfinite(a).all()):
            raise self.fail(f"array {name!r} holds NaN or infinity")

    def strings(self, name: str, *, errors: str = "strict") -> list[str]:
        """``NAME_bytes`` / ``NAME_offsets`` (or ``value_bytes`` / ``value_offsets``) as text."""
        data = self.array(f"{name}_bytes", np.uint8)
        off = self.array(f"{name}_offsets", np.int64)
        self.offsets(f"{name}_offsets", off, len(data))
        buf = data.tobytes()
        o = off.tolist()
        try:
            return [buf[o[i] : o[i + 1]].decode("utf-8", errors) for i in range(len(o) - 1)]
        except UnicodeDecodeError as exc:
            raise self.fail(f"array {name + '_bytes'!r} holds invalid UTF-8 ({exc})") from exc


def meta_int(path: str | os.PathLike[str], meta: dict[str, Any], key: str, lo: int, hi: int) -> int:
    """An integer metadata field within ``lo..hi``."""
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise CorruptFileError(f"{path}: metadata {key}={v!r:.40} is not an int in {lo}..{hi}")
    return v


def meta_float(path: str | os.PathLike[str], meta: dict[str, Any], key: str) -> float:
    """A finite float metadata field."""
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise CorruptFileError(f"{path}: metadata {key}={v!r:.40} is not a finite number")
    return float(v)
