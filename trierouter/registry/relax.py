"""OpenAI's convention for tool schemas: ``"strict": true`` on a function means exact or refused;
without it a tool is always served, each construct no engine serves exactly relaxed to the
nearest form served exactly, and the relaxation recorded.

Where the registry, the compiler and the server decide which applies, one rule
(:func:`strict_for`): a caller's ``strict=True`` / ``False`` forces it for every tool,
``strict=None`` (the default) leaves it to each function's own ``strict`` flag (absent: relaxed).
What a relaxed tool's calls are not held to is a list of
:class:`~trierouter.registry.slots.normalize.Problem` (kind and slot path), logged once per tool
and process on the ``trierouter`` logger, listed by ``explain`` and by ``relaxed(name)``; a
finished call is still validated against the tool's original schema.
"""

from __future__ import annotations

import hashlib
import logging
import threading

from trierouter.registry.slots.normalize import Problem

__all__ = ["log_relaxed", "relaxed_table", "strict_for"]

logger = logging.getLogger("trierouter")

_logged: set[str] = set()
_lock = threading.Lock()
_MAX_LOGGED = 100_000


def strict_for(flag: bool | None, tool_strict: bool | None) -> bool:
    """Whether a tool is held to exact-or-refused: ``flag`` when given, else the tool's own
    ``strict`` (OpenAI's default: not strict)."""
    return bool(tool_strict) if flag is None else flag


def log_relaxed(name: str, problems: list[Problem]) -> None:
    """One warning per tool (name and relaxations) and process: a client that sends the same
    tools with every request is told once."""
    if not problems:
        return
    text = "; ".join(str(p) for p in problems)
    key = hashlib.sha256(f"{name}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()
    with _lock:
        if key in _logged:
            return
        if len(_logged) >= _MAX_LOGGED:
            _logged.clear()
        _logged.add(key)
    logger.warning(
        'tool %r is served relaxed (it has no "strict": true; %d construct(s) no engine '
        "serves exactly; its calls are validated against the original schema): %s",
        name,
        len(problems),
        text,
    )


def relaxed_table(problems: list[Problem]) -> str:
    """The lines ``explain`` adds under a relaxed tool's slot table."""
    if not problems:
        return ""
    rows = [f"relaxed ({len(problems)}): served without what no engine serves exactly"]
    rows += [f"  {p.path or '$'}  {p.kind}: {p.why}" for p in problems]
    return "\n" + "\n".join(rows)
