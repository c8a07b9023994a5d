"""Named sets and tool registries, loaded once at engine start from ``TRIEROUTER_SETS`` and
``TRIEROUTER_TOOLS`` and referred to by name in requests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trierouter import settings
from trierouter.errors import TrieRouterError
from trierouter.registry.analysis import STEP_WORK
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.router.vllm.args import _SET_SUFFIXES, ENV_SETS, ENV_TOOLS, logger

__all__ = ["list_named_sets", "load_named_sets", "load_registry_requests", "step_work"]


def _load_tools_file(path: Path) -> list[Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(doc, dict) and isinstance(doc.get("tools"), list):
        doc = doc["tools"]
    if not isinstance(doc, list):
        raise ValueError(f"{path}: expected a JSON list of tools (or {{'tools': [...]}})")
    return doc


def load_tool_registries(config: str) -> dict[str, list[Any]]:
    """``name -> tools`` from ``$TRIEROUTER_TOOLS`` (see the module docstring)."""
    path = Path(config).expanduser()
    if not path.is_file():
        raise ValueError(f"${ENV_TOOLS}={config}: no such JSON file")
    doc = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(doc, list) or (isinstance(doc, dict) and "tools" in doc):
        return {path.stem: _load_tools_file(path)}
    if not isinstance(doc, dict):
        raise ValueError(f"${ENV_TOOLS}={config}: expected {{name: file or tools}} or a tools list")
    out: dict[str, list[Any]] = {}
    for name, item in doc.items():
        if isinstance(item, dict):  # {"tools": path or [tools], "requests": path}
            extra = set(item) - {"tools", "requests"}
            if "tools" not in item or extra:
                raise ValueError(
                    f"${ENV_TOOLS}: registry {name!r}: expected {{'tools': path or [tools], "
                    f"'requests': path}} (got keys {sorted(item)})"
                )
            item = item["tools"]
        if isinstance(item, str):
            out[name] = _load_tools_file(_relative(item, path))
        elif isinstance(item, list):
            out[name] = item
        else:
            raise ValueError(f"${ENV_TOOLS}: registry {name!r} must be a path or a list of tools")
    return out


def _relative(item: str, config: Path) -> Path:
    f = Path(item).expanduser()
    return f if f.is_absolute() else config.parent / f


def load_registry_requests(config: str, name: str) -> dict[str, list[str]] | None:
    """The requests written for registry ``name``'s tools (``{tool name: [request, ...]}``,
    :class:`~trierouter.router.tool_requests.QuestionWriter`), when ``$TRIEROUTER_TOOLS`` gives
    its entry as ``{"tools": ..., "requests": "requests.json"}``; ``None`` otherwise. The file
    holds that mapping, or ``{"requests": mapping, ...}``."""
    path = Path(config).expanduser()
    doc = json.loads(path.read_text(encoding="utf-8"))
    item = doc.get(name) if isinstance(doc, dict) and "tools" not in doc else None
    if not isinstance(item, dict) or "requests" not in item:
        return None
    where = item["requests"]
    if not isinstance(where, str):
        raise ValueError(f"${ENV_TOOLS}: registry {name!r}: 'requests' must be a file path")
    f = _relative(where, path)
    got = json.loads(f.read_text(encoding="utf-8"))
    if isinstance(got, dict) and isinstance(got.get("requests"), dict):
        got = got["requests"]
    if not isinstance(got, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(q, str) for q in v)
        for k, v in got.items()
    ):
        raise ValueError(f"{f}: expected {{tool name: [request, ...]}}")
    return {k: list(v) for k, v in got.items()}


_registry_names: dict[tuple[str, int, int], frozenset[str]] = {}


def list_tool_registries(config: str | None = None) -> frozenset[str]:
    """Registry names configured by ``config`` (default ``$TRIEROUTER_TOOLS``): the file is read
    again only when it changes (a request naming an unknown registry costs a ``stat``)."""
    cfg = settings.TOOLS.get() if config is None else config
    if not cfg:
        return frozenset()
    path = Path(cfg).expanduser()
    try:
        st = path.stat()
        key = (cfg, st.st_mtime_ns, st.st_size)
        hit = _registry_names.get(key)
        if hit is not None:
            return hit
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return frozenset()
    names: frozenset[str] = frozenset()
    if isinstance(doc, list) or (isinstance(doc, dict) and "tools" in doc):
        names = frozenset([path.stem])
    elif isinstance(doc, dict):
        names = frozenset(doc)
    if len(_registry_names) >= 64:  # bounded: a server sees few distinct configurations
        _registry_names.pop(next(iter(_registry_names)))
    _registry_names[key] = names
    return names


def _set_sources(config: str) -> dict[str, Path | list[str]]:
    """``name -> file or values`` from a directory or a JSON file (see the module docstring)."""
    path = Path(config).expanduser()
    if path.is_dir():
        out: dict[str, Path | list[str]] = {}
        for f in sorted(path.iterdir()):
            if f.suffix in _SET_SUFFIXES and f.is_file():
                if f.stem in out:
                    raise ValueError(f"${ENV_SETS}={config}: set {f.stem!r} is given twice")
                out[f.stem] = f
        return out
    if not path.is_file():
        raise ValueError(f"${ENV_SETS}={config}: no such directory or JSON file")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"${ENV_SETS}={config}: not readable JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"${ENV_SETS}={config}: expected an object {{name: file or values}}")
    out = {}
    for name, item in doc.items():
        if isinstance(item, str):
            f = Path(item).expanduser()
            out[name] = f if f.is_absolute() else path.parent / f
        elif isinstance(item, list) and all(isinstance(v, str) for v in item):
            out[name] = list(item)
        else:
            raise ValueError(f"${ENV_SETS}={config}: set {name!r} must be a path or a list of str")
    return out


_names_cache: dict[str, frozenset[str]] = {}


def list_named_sets(config: str | None = None) -> frozenset[str]:
    """Names configured by ``config`` (default ``$TRIEROUTER_SETS``), without loading them."""
    cfg = settings.SETS.get() if config is None else config
    if not cfg:
        return frozenset()
    names = _names_cache.get(cfg)
    if names is None:
        names = frozenset(_set_sources(cfg))
        if len(_names_cache) >= 64:  # bounded: a server sees few distinct configurations
            _names_cache.pop(next(iter(_names_cache)))
        _names_cache[cfg] = names
    return names


def _read_values(path: Path) -> list[str]:
    from trierouter.registry.values import read_values

    return read_values(path).values


def load_named_sets(config: str, index: TokenIndex) -> dict[str, ChoiceSet]:
    """Load or compile every set named by ``config`` for ``index``'s vocabulary."""
    sets: dict[str, ChoiceSet] = {}
    for name, src in _set_sources(config).items():
        try:
            if isinstance(src, Path) and src.suffix == ".trt":
                # read into memory and checked once: a file rewritten in place later (``cp
                # new.trt served.trt``) cannot change or unmap what the server serves
                sets[name] = ChoiceSet.load(src, index.vocabulary, mmap=False)
            else:
                values = src if isinstance(src, list) else _read_values(src)
                sets[name] = compile_choices(values, index)
        except (OSError, ValueError, TrieRouterError) as exc:
            raise ValueError(
                f"${ENV_SETS}: set {name!r} ({src if isinstance(src, Path) else 'inline'}): {exc}"
            ) from exc
    return sets


def step_work(source: str) -> None:
    """Log that a request compiled a set inside the engine's step (:data:`~trierouter.registry.
    analysis.STEP_WORK` grew): nothing prepared it (an inline set or value set the API
    process's worker did not prepare, or a named registry's first use in a call format)."""
    counts = ", ".join(f"{k} {v}" for k, v in sorted(STEP_WORK.items()))
    logger.warning(
        "trierouter: %s: compiled inside the engine's step (so far in this engine: %s)",
        source or "inline tools",
        counts,
    )


# -- per-request state --------------------------------------------------------------------------
