"""One-file array store: a checked header, then raw little-endian arrays, memory-mappable.

Layout: ``MAGIC`` (8 bytes), header length (8 bytes, little endian), a JSON header (kind,
format version, metadata, array table, SHA-256 of the payload), zero padding to 64 bytes, then
each array at a 64-byte aligned offset. Files are written to a temporary name and renamed, so a
reader never sees half a file; a truncated, altered or foreign file raises ``CorruptFileError``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import CorruptFileError

MAGIC = b"TRIERTR\x01"
_ALIGN = 64


def _pad(n: int) -> int:
    return (-n) % _ALIGN


def save_arrays(
    path: str | os.PathLike[str],
    kind: str,
    arrays: dict[str, npt.NDArray[Any]],
    meta: dict[str, Any],
) -> None:
    """Write ``arrays`` and ``meta`` to ``path`` atomically."""
    path = Path(path)
    table = []
    offset = 0
    digest = hashlib.sha256()
    chunks: list[bytes | memoryview] = []
    for name, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        data = a.data.cast("B") if a.size else memoryview(b"")
        table.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset})
        digest.update(data)
        chunks.append(data)
        pad = _pad(len(data))
        digest.update(b"\0" * pad)
        chunks.append(b"\0" * pad)
        offset += len(data) + pad
    header = json.dumps(
        {
            "kind": kind,
            "meta": meta,
            "arrays": table,
            "payload": offset,
            "sha256": digest.hexdigest(),
        },
        sort_keys=True,
    ).encode()
    head = MAGIC + len(header).to_bytes(8, "little") + header
    head += b"\0" * _pad(len(head))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head)
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_arrays(
    path: str | os.PathLike[str], kind: str, *, mmap: bool = True, verify: bool = True
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
    """Read a file written by :func:`save_arrays`; refuse anything else."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(8)
            if magic != MAGIC:
                raise CorruptFileError(f"{path}: not a trierouter file (bad magic {magic!r})")
            n = int.from_bytes(f.read(8), "little")
            if not 0 < n < 1 << 26:
                raise CorruptFileError(f"{path}: header length {n} is not plausible")
            raw = f.read(n)
            header = json.loads(raw)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, CorruptFileError):
            raise
        raise CorruptFileError(f"{path}: unreadable header ({exc})") from exc
    if not isinstance(header, dict) or header.get("kind") != kind:
        found = header.get("kind") if isinstance(header, dict) else None
        raise CorruptFileError(f"{path}: holds {found!r}, expected {kind!r}")
    start = 16 + n + _pad(16 + n)
    size = path.stat().st_size
    payload = int(header["payload"])
    if size != start + payload:
        raise CorruptFileError(f"{path}: {size} bytes, expected {start + payload} (truncated?)")
    if mmap and payload:
        blob: npt.NDArray[np.uint8] = np.memmap(path, dtype=np.uint8, mode="r", offset=start)
    else:
        with open(path, "rb") as f:
            f.seek(start)
            blob = np.frombuffer(f.read(), dtype=np.uint8)
    if verify and hashlib.sha256(blob.data).hexdigest() != header["sha256"]:
        raise CorruptFileError(f"{path}: payload checksum mismatch (file altered or damaged)")
    arrays: dict[str, npt.NDArray[Any]] = {}
    try:
        for entry in header["arrays"]:
            dt = np.dtype(entry["dtype"])
            shape = tuple(int(s) for s in entry["shape"])
            count = int(np.prod(shape)) if shape else 1
            off = int(entry["offset"])
            arrays[entry["name"]] = blob[off : off + count * dt.itemsize].view(dt).reshape(shape)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptFileError(f"{path}: malformed array table ({exc})") from exc
    meta = header.get("meta")
    if not isinstance(meta, dict):
        raise CorruptFileError(f"{path}: malformed metadata")
    return arrays, meta
