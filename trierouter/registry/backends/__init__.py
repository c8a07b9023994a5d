"""The backends that compile and serve a ChoiceSet, one file each, behind one interface.

* ``"native"`` (:mod:`.native`, the default): the C++ core, ``trierouter.registry._core``.
* ``"numpy"`` (:mod:`.numpy_reference`): the whole-array reference the tests compare it with.

A backend is chosen once by name, :func:`get_backend` (``None``:
:func:`~trierouter.registry.core.default_backend`, ``$TRIEROUTER_BACKEND``);
:class:`~trierouter.registry.trie.ChoiceSet` and :class:`~trierouter.registry.index.TokenIndex`
call the :class:`Backend` they were given and never ask which one it is.
"""

from __future__ import annotations

from trierouter.registry.backends.interface import (
    Arrays,
    Backend,
    BackendName,
    Serving,
    TokenForms,
)
from trierouter.registry.backends.native import NativeBackend
from trierouter.registry.backends.numpy_reference import NumpyReference
from trierouter.registry.core import resolve_backend

__all__ = ["Arrays", "Backend", "BackendName", "Serving", "TokenForms", "get_backend"]

_BY_NAME: dict[str, Backend] = {"native": NativeBackend(), "numpy": NumpyReference()}


def get_backend(name: str | None = None) -> Backend:
    """The backend called ``name`` (``"native"`` or ``"numpy"``; ``None``: the default)."""
    return _BY_NAME[resolve_backend(name)]
