"""OpenAI's convention for tool schemas: ``"strict": true`` on a function means exact or refused;
without it a tool is always served, each construct no engine serves exactly relaxed to the
nearest form served exactly, and the relaxation recorded.

Where the registry, the compiler and the server decide which applies, one rule
(:func:`strict_for`): a caller's ``strict=True`` / ``False`` forces it for every tool,
``strict=None`` (the default) leaves it to each function's own ``strict`` flag (absent: relaxed).
What a relaxed tool's calls are not held to is a list of
:class:`~trierouter.registry.slots.normalize.Problem` (kind and slot path), logged once per tool
and process on the ``trierouter`` logger (:func:`log_relaxed`), listed by ``explain`` and by
``relaxed(name)``; a finished call is still validated against the tool's original schema.
"""

from __future__ import annotations

import hashlib
import logging
import threading

from trierouter.errors import UnservedSchemaError
from trierouter.registry.slots.normalize import Problem

__all__ = ["LOUD", "log_relaxed", "relaxed_table", "strict_for", "unserved_error"]

logger = logging.getLogger("trierouter")

_logged: set[str] = set()
_lock = threading.Lock()
_MAX_LOGGED = 100_000
LOUD = 10
"""Tools logged at WARNING per :func:`log_relaxed` call; the rest at INFO, with one WARNING that
counts them (a 20,000-operation API registry would otherwise print thousands of lines)."""


def strict_for(flag: bool | None, tool_strict: bool | None) -> bool:
    """Whether a tool is held to exact-or-refused: ``flag`` when given, else the tool's own
    ``strict`` (OpenAI's default: not strict)."""
    return bool(tool_strict) if flag is None else flag


def log_relaxed(relaxed: dict[str, list[Problem]]) -> None:
    """Each tool of ``relaxed`` (name → its relaxations) logged once per process (a client that
    sends the same tools with every request is told once): the first :data:`LOUD` new ones at
    WARNING, any further ones at INFO under one WARNING that counts them."""
    new: list[tuple[str, str, int]] = []
    with _lock:
        for name, problems in relaxed.items():
            if not problems:
                continue
            text = "; ".join(str(p) for p in problems)
            key = hashlib.sha256(f"{name}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()
            if key in _logged:
                continue
            if len(_logged) >= _MAX_LOGGED:
                _logged.clear()
            _logged.add(key)
            new.append((name, text, len(problems)))
    for i, (name, text, n) in enumerate(new):
        logger.log(
            logging.WARNING if i < LOUD else logging.INFO,
            'tool %r is served relaxed (no "strict": true; %d construct(s) no engine serves '
            "exactly; its calls are validated against the original schema): %s",
            name,
            n,
            text,
        )
    if len(new) > LOUD:
        logger.warning(
            "%d more tools are served relaxed (logged at INFO; registry.relaxed(name) and "
            "explain(name) list each)",
            len(new) - LOUD,
        )


def relaxed_table(problems: list[Problem]) -> str:
    """The lines ``explain`` adds under a relaxed tool's slot table."""
    if not problems:
        return ""
    rows = [f"relaxed ({len(problems)}): served without what no engine serves exactly"]
    rows += [f"  {p.path or '$'}  {p.kind}: {p.why}" for p in problems]
    return "\n" + "\n".join(rows)


def unserved_error(relaxed: dict[str, list[Problem]]) -> UnservedSchemaError:
    """The error for tools whose schemas hold constructs no engine serves exactly."""
    lines = [f"tool {name!r}: {p}" for name, ps in relaxed.items() for p in ps]
    shown = "\n  ".join(lines[:10])
    more = f"\n  ... and {len(lines) - 10} more" if len(lines) > 10 else ""
    return UnservedSchemaError(
        f"{len(relaxed)} tool(s) held strict use constructs no engine serves exactly (fix each, "
        'or drop the function\'s "strict": true / pass strict=False to serve them relaxed, '
        f"listed in .relaxed):\n  {shown}{more}",
        problems=lines,
    )
