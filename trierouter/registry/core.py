"""The compiled core: which backend compiles and serves sets, and the import of the C++ extension.

Two backends implement :func:`~trierouter.registry.trie.compile_choices` and the serving methods
of :class:`~trierouter.registry.trie.ChoiceSet` with identical results:

* ``"native"`` (the default): ``trierouter.registry._core``, a C++ extension built by
  ``pip install`` (or ``make ext`` / ``python setup.py build_ext --inplace`` in a checkout).
  Compile is one pass from the values to the serving arrays (Aho-Corasick over the token bytes),
  nothing is built lazily, and a step or a bitmask fill is one call into C++.
* ``"numpy"``: the whole-array reference implementation; the tests compare the two.

Each backend is one file of :mod:`trierouter.registry.backends`, behind one interface. Choose per
call (``compile_choices(..., backend="numpy")``, ``ChoiceSet.load(..., backend=...)``)
or for the process with ``TRIEROUTER_BACKEND=numpy``. The backend is a choice for sets alone:
everything else that runs in the core (the vocabulary's byte layout, the tool argument automata
and their masks, the shortlist kernels) has that one path, and their Python forms live in
:mod:`trierouter.testing` as the tests' oracles. When the extension is missing or was built from
other sources, :func:`native_core` refuses with :class:`CoreBuildError` saying how to rebuild;
nothing falls back to Python silently.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal, cast

from trierouter import settings
from trierouter.errors import CoreBuildError

if TYPE_CHECKING:  # the compiled matcher base, for type checkers (router/matcher.py)
    from trierouter.registry._core import MatcherBase as MatcherBase

__all__ = [
    "BACKENDS",
    "Backend",
    "default_backend",
    "native_core",
    "resolve_backend",
]

Backend = Literal["native", "numpy"]
BACKENDS: tuple[Backend, ...] = ("native", "numpy")
ENV = "TRIEROUTER_BACKEND"
_SOURCES = "csrc"
"""The core's sources: every ``.cpp`` and ``.h`` under it (setup.py hashes the same files)."""
_REBUILD = (
    "rebuild it with `pip install -e .` (or `make ext`, or `python setup.py build_ext --inplace`) "
    "in the trierouter checkout (`pip install trierouter` builds it: every install has it)"
)


def default_backend() -> Backend:
    """``$TRIEROUTER_BACKEND`` if set (``native`` or ``numpy``), else ``native``."""
    return cast(Backend, settings.BACKEND.get())  # the setting accepts BACKENDS alone


def resolve_backend(backend: str | None) -> Backend:
    """``backend`` checked, or the default when ``None``."""
    if backend is None:
        return default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {', '.join(BACKENDS)} or None")
    return backend


def _source_hash(root: Path) -> str:
    """SHA-256 over the core's sources under ``root`` (path and bytes of each, sorted by path)."""
    files = sorted(
        f for f in (root / _SOURCES).rglob("*") if f.suffix in (".cpp", ".h") and f.is_file()
    )
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


@cache
def native_core() -> ModuleType:
    """The C++ extension module; :class:`CoreBuildError` when missing or stale."""
    try:
        from trierouter.registry import _core
    except ImportError as exc:
        raise CoreBuildError(
            f"trierouter's compiled core (trierouter.registry._core) cannot be imported ({exc}); "
            + _REBUILD
        ) from exc
    root = Path(__file__).resolve().parents[2]
    # a source checkout: the build must match the sources
    if (root / _SOURCES).is_dir() and _source_hash(root) != _core.SOURCE_HASH:
        raise CoreBuildError(
            f"trierouter's compiled core {Path(_core.__file__ or '').name} was built from "
            f"other sources than {_SOURCES}/ (stale build); " + _REBUILD
        )
    return _core
