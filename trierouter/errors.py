"""The one exception tree of trierouter.

Every error the library raises on purpose derives from :class:`TrieRouterError`, and each
subclass also inherits the builtin it resembles, so ``except ValueError`` keeps working::

    TrieRouterError(Exception)
    ├── VocabularyError(ValueError)          a tokenizer could not be read into exact token bytes
    ├── VocabularyMismatchError(ValueError)  a saved set / cache belongs to another vocabulary
    ├── CompileError(ValueError)             a set of values cannot be compiled
    │   ├── EmptySetError                    no values at all
    │   ├── InvalidValueError(TypeError)     a value is not a str (or bytes)
    │   └── UnreachableValueError            no sequence of tokens spells a value
    ├── CorruptFileError(ValueError)         a saved file is truncated, altered or foreign
    │   └── IntegrityError                   downloaded bytes differ from their pinned SHA-256
    ├── DownloadError(ConnectionError)       a pinned package could not be downloaded
    ├── ToolError(ValueError)                a tool cannot be registered (message names the tool)
    │   ├── DuplicateToolError               its name is taken (in the batch or the registry)
    │   ├── InvalidToolError                 bad name, unknown form or not a valid JSON Schema
    │   └── UnservedSchemaError              a schema construct no engine serves exactly
    ├── ToolChoiceError(ValueError)          tool_choice / allowed name no registered tool
    ├── ToolCallError(ValueError)            an output is no valid call of a registered tool
    ├── UnknownToolError(KeyError)           a name is no tool of the compiled registry
    ├── InputFileError(ValueError)           a values / labels file cannot be read (names fix)
    ├── SettingError(ValueError)             a TRIEROUTER_* variable holds a malformed value
    ├── McpServerError(ConnectionError)      an MCP server failed before listing all its tools
    ├── IndexMismatchError(ValueError)       a saved shortlist index is for other values / model
    ├── NoCandidatesError(LookupError)       a shortlist found no value for a query
    ├── MissingDependencyError(ImportError)  an optional dependency is not installed
    └── CoreBuildError(ImportError)          the compiled core is not built, or built from
                                             other sources (the message says how to rebuild)

The hot path (``advance``, ``accept_token``, bitmask fills) never raises for a model's choice:
an invalid token gives a dead state or ``False``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "CompileError",
    "CoreBuildError",
    "CorruptFileError",
    "DownloadError",
    "DuplicateToolError",
    "EmptySetError",
    "IndexMismatchError",
    "InputFileError",
    "IntegrityError",
    "InvalidToolError",
    "InvalidValueError",
    "McpServerError",
    "MissingDependencyError",
    "NoCandidatesError",
    "SettingError",
    "ToolCallError",
    "ToolChoiceError",
    "ToolError",
    "TrieRouterError",
    "UnknownToolError",
    "UnreachableValueError",
    "UnservedSchemaError",
    "VocabularyError",
    "VocabularyMismatchError",
]


class TrieRouterError(Exception):
    """Root of every error raised by trierouter."""


class VocabularyError(TrieRouterError, ValueError):
    """A tokenizer or tokenizer file could not be turned into exact token bytes."""


class VocabularyMismatchError(TrieRouterError, ValueError):
    """An object compiled for one vocabulary was used with another."""


class CompileError(TrieRouterError, ValueError):
    """A set of values cannot be compiled into a choice set."""


class EmptySetError(CompileError):
    """The set of values is empty."""


class InvalidValueError(CompileError, TypeError):
    """A value is neither ``str`` nor ``bytes``."""


class UnreachableValueError(CompileError):
    """Some values cannot be spelled by any sequence of the vocabulary's tokens.

    ``values`` holds the offending values, ``reasons`` one explanation per value.
    """

    def __init__(self, message: str, *, values: Sequence[str | bytes], reasons: Sequence[str]):
        super().__init__(message)
        self.values = list(values)
        self.reasons = list(reasons)


class CorruptFileError(TrieRouterError, ValueError):
    """A file written by trierouter is truncated, altered or was written by something else."""


class IntegrityError(CorruptFileError):
    """Downloaded bytes (a wheel, a model file) do not have the SHA-256 pinned in trierouter.

    ``path`` is the offending file, ``expected`` and ``actual`` the two hex digests.
    """

    def __init__(self, message: str, *, path: str, expected: str, actual: str):
        super().__init__(message)
        self.path = path
        self.expected = expected
        self.actual = actual


class DownloadError(TrieRouterError, ConnectionError):
    """A pinned package could not be fetched from the package index (the message has the
    command that failed and its output)."""


class ToolError(TrieRouterError, ValueError):
    """A tool cannot be registered; nothing of the call that raised it was registered.

    ``problems`` holds one line per offending tool of the batch (position, name, what is wrong).
    """

    def __init__(self, message: str, *, problems: Sequence[str] = ()):
        super().__init__(message)
        self.problems = list(problems) or [message]


class UnservedSchemaError(ToolError):
    """A tool held strict (its function's ``"strict": true``, or ``strict=True``) holds a
    construct no engine serves exactly (each problem names the tool, the slot, the keyword and
    the fix); without the flag the tool is served relaxed and the relaxation recorded."""


class DuplicateToolError(ToolError):
    """A tool's name is already registered, or appears twice in one batch."""


class InvalidToolError(ToolError):
    """A tool is in no supported form, has a bad name, or its parameters are not a valid JSON
    Schema for an object."""


class ToolChoiceError(TrieRouterError, ValueError):
    """A decoding plan's ``tool_choice`` or ``allowed`` names no registered tool, or is in no
    known form."""


class ToolCallError(TrieRouterError, ValueError):
    """An output is not a valid call of a registered tool (names the problem)."""


class UnknownToolError(TrieRouterError, KeyError):
    """A name that is no tool of the compiled registry."""

    def __str__(self) -> str:  # a KeyError would show its message quoted
        return str(self.args[0]) if self.args else ""


class InputFileError(TrieRouterError, ValueError):
    """An input file (values, labels) cannot be read: names the file and the fix."""


class SettingError(TrieRouterError, ValueError):
    """A ``TRIEROUTER_*`` environment variable holds a malformed value: names the variable, the
    value and the form expected (:mod:`trierouter.settings`)."""


class McpServerError(TrieRouterError, ConnectionError):
    """An MCP server could not be started, or ended or timed out before listing all its tools."""


class IndexMismatchError(TrieRouterError, ValueError):
    """A saved shortlist index belongs to other values or another embedding model."""


class NoCandidatesError(TrieRouterError, LookupError):
    """A shortlist retriever found no value at all for a query (BM25: no indexed word or
    character n-gram matches it), so there is nothing to decode from. Raised rather than
    decoding from arbitrary values; ``query`` is the query."""

    def __init__(self, message: str, *, query: str):
        super().__init__(message)
        self.query = query


class MissingDependencyError(TrieRouterError, ImportError):
    """An optional dependency is needed; the message names the extra to install."""


class CoreBuildError(TrieRouterError, ImportError):
    """The compiled core (``trierouter.registry._core``) cannot be imported or is stale."""


def missing(package: str, extra: str) -> MissingDependencyError:
    """Build the error for a lazily imported optional dependency."""
    return MissingDependencyError(
        f"{package} is required for this feature: pip install 'trierouter[{extra}]'"
    )
