"""One-file array store: a checked header, then raw little-endian arrays, memory-mappable.

Layout: ``MAGIC`` (8 bytes), header length (8 bytes, little endian), a JSON header (kind,
format version, metadata, array table, SHA-256 of the payload, SHA-256 of those header
fields), zero padding to 64 bytes, then
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
    fields = {
        "kind": kind,
        "meta": meta,
        "arrays": table,
        "payload": offset,
        "sha256": digest.hexdigest(),
    }
    fields["header_sha256"] = _header_digest(fields)
    header = json.dumps(fields, sort_keys=True).encode()
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


# dtypes a file may hold: plain little-endian numbers and booleans, never objects or records
_KINDS = frozenset("biuf")
_MAX_DIMS = 4


_HEADER_KEYS = frozenset({"kind", "meta", "arrays", "payload", "sha256"})


def _header_digest(fields: dict[str, Any]) -> str:
    """SHA-256 of the header fields (metadata and array table), so that they are checked too."""
    body = {k: fields[k] for k in _HEADER_KEYS}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _bad(path: Path, what: str) -> CorruptFileError:
    return CorruptFileError(f"{path}: {what}")


def _parse_header(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _bad(path, f"unreadable header ({exc})") from exc
    if not isinstance(header, dict):
        raise _bad(path, "header is not an object")
    for key, typ in (("kind", str), ("meta", dict), ("arrays", list), ("sha256", str)):
        if not isinstance(header.get(key), typ):
            raise _bad(path, f"header field {key!r} missing or not a {typ.__name__}")
    extra = set(header) - _HEADER_KEYS - {"header_sha256"}
    if extra:
        raise _bad(path, f"unknown header fields {sorted(extra)!r:.80}")
    # files written before the header digest existed have none; any written since must match
    if "header_sha256" in header and header["header_sha256"] != _header_digest(header):
        raise _bad(path, "header checksum mismatch (metadata altered or damaged)")
    payload = header.get("payload")
    if isinstance(payload, bool) or not isinstance(payload, int) or payload < 0:
        raise _bad(path, f"header field 'payload' = {payload!r:.40} is not a size")
    return header


def _array_table(
    path: Path, header: dict[str, Any]
) -> list[tuple[str, np.dtype[Any], tuple[int, ...], int]]:
    """Check every array entry: a unique name, a plain numeric dtype, a shape, an aligned offset
    inside the payload, entries in order and not overlapping."""
    payload: int = header["payload"]
    out: list[tuple[str, np.dtype[Any], tuple[int, ...], int]] = []
    seen: set[str] = set()
    end = 0
    for i, entry in enumerate(header["arrays"]):
        if not isinstance(entry, dict):
            raise _bad(path, f"array entry {i} is not an object")
        name, dts, shape, off = (entry.get(k) for k in ("name", "dtype", "shape", "offset"))
        if not isinstance(name, str) or not name or name in seen:
            raise _bad(path, f"array entry {i}: name {name!r:.40} missing or repeated")
        seen.add(name)
        if not isinstance(dts, str) or len(dts) > 8:
            raise _bad(path, f"array {name!r}: dtype {dts!r:.40} is not a dtype string")
        try:
            dt = np.dtype(dts)
        except (TypeError, ValueError) as exc:
            raise _bad(path, f"array {name!r}: dtype {dts!r} ({exc})") from exc
        if dt.kind not in _KINDS or dt.byteorder == ">" or dt.hasobject or dt.fields:
            raise _bad(path, f"array {name!r}: dtype {dts!r} is not a little-endian number")
        if (
            not isinstance(shape, list)
            or len(shape) > _MAX_DIMS
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise _bad(path, f"array {name!r}: shape {shape!r:.60} is not a list of sizes")
        if isinstance(off, bool) or not isinstance(off, int) or off < end or off % _ALIGN:
            raise _bad(path, f"array {name!r}: offset {off!r:.40} out of order or misaligned")
        nbytes = dt.itemsize
        for d in shape:
            nbytes *= d
        if off + nbytes > payload:
            raise _bad(path, f"array {name!r}: {nbytes} bytes at {off} overrun the payload")
        end = off + nbytes
        out.append((name, dt, tuple(shape), off))
    return out


def _read(
    path: Path, f: Any, kind: str, mmap: bool
) -> tuple[dict[str, Any], list[tuple[str, np.dtype[Any], tuple[int, ...], int]], Any]:
    magic = f.read(8)
    if magic != MAGIC:
        raise _bad(path, f"not a trierouter file (bad magic {magic!r})")
    n = int.from_bytes(f.read(8), "little")
    if not 0 < n < 1 << 26:
        raise _bad(path, f"header length {n} is not plausible")
    raw = f.read(n)
    if len(raw) != n:
        raise _bad(path, f"header cut short ({len(raw)} of {n} bytes)")
    size = os.fstat(f.fileno()).st_size
    header = _parse_header(path, raw)
    if header["kind"] != kind:
        raise _bad(path, f"holds {header['kind']!r:.60}, expected {kind!r}")
    table = _array_table(path, header)
    start = 16 + n + _pad(16 + n)
    payload = header["payload"]
    if size != start + payload:
        raise _bad(path, f"{size} bytes, expected {start + payload} (truncated?)")
    try:
        if mmap and payload:
            blob: npt.NDArray[np.uint8] = np.memmap(f, dtype=np.uint8, mode="r", offset=start)
        else:
            f.seek(start)
            blob = np.frombuffer(f.read(payload + 1), dtype=np.uint8)
    except ValueError as exc:
        raise _bad(path, f"unreadable payload ({exc})") from exc
    if len(blob) != payload:
        raise _bad(path, f"payload changed while reading ({len(blob)} of {payload} bytes)")
    return header, table, blob


def load_arrays(
    path: str | os.PathLike[str], kind: str, *, mmap: bool = True, verify: bool = True
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
    """Read a file written by :func:`save_arrays`; refuse anything else.

    Only JSON and raw numbers are read (nothing is unpickled or executed). The header and its
    array table are checked before any array is built (plain little-endian numeric dtypes,
    shapes, aligned, ordered and non-overlapping extents inside the payload, exact file size);
    the payload checksum is checked unless ``verify=False``. What the arrays *mean* (ids in
    range, monotone offsets) is checked by each loader with :mod:`trierouter.registry.validate`.
    """
    path = Path(path)
    # one open file for the header and the payload: a writer that renames a new file over
    # ``path`` meanwhile cannot pair this header with another file's payload
    try:
        with open(path, "rb") as f:
            header, table, blob = _read(path, f, kind, mmap)
    except OSError as exc:
        raise _bad(path, f"unreadable ({exc})") from exc
    if verify and hashlib.sha256(blob.data).hexdigest() != header["sha256"]:
        raise _bad(path, "payload checksum mismatch (file altered or damaged)")
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name, dt, shape, off in table:
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        arrays[name] = blob[off : off + count * dt.itemsize].view(dt).reshape(shape)
    return arrays, header["meta"]
