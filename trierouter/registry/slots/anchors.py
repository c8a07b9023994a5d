"""Regex anchors and escapes as XGrammar 0.2.8 reads them, next to Python's ``re``.

XGrammar ignores an anchor that is not at the start or end of a pattern (``re`` does not) and
matches an escape it does not know (``\\,``, ``\\_``...) as the character itself; it prints a
warning for both. :func:`inner_anchor` tells the first case (the slot analysis refuses or
relaxes such a pattern); :func:`xgrammar_pattern` writes a pattern without what XGrammar
would ignore and print.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["anchors", "inner_anchor", "xgrammar_pattern"]


def anchors(pattern: str) -> Iterator[int]:
    """Where ``pattern`` has an anchor: each ``^`` / ``$`` neither escaped nor in a class."""
    in_class = escaped = False
    for i, c in enumerate(pattern):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True  # a negated class's ``^`` is read inside it
        elif c in "^$":
            yield i


def inner_anchor(pattern: str) -> bool:
    """An anchor other than a leading ``^`` / trailing ``$`` (or one opening / closing a branch
    of the whole pattern): XGrammar ignores it, ``re`` does not."""
    last = len(pattern) - 1
    for i in anchors(pattern):
        if pattern[i] == "^" and i > 0 and pattern[i - 1] not in "|([":
            return True
        if pattern[i] == "$" and i < last and pattern[i + 1] not in "|)":
            return True
    return False


_UNKNOWN_ESCAPES = frozenset("!#%&,:;<=>@_`~ ")
"""Characters whose escape XGrammar 0.2.8 does not know: it matches the character itself and
prints a warning. Unescaped, each means itself to XGrammar and to ``re``, in a class or not."""


def xgrammar_pattern(pattern: str) -> str:
    """``pattern`` as XGrammar 0.2.8 reads it, less what it would report on stderr from its C++
    regex converter: without the anchors it ignores (a ``^`` after the start, a ``$`` before the
    end) and with the escapes it does not know (``\\,``, ``\\_``...) written as the plain
    character. The same language to XGrammar, and nothing printed; for a pattern that
    :func:`regex_problem` passes (its inner anchors only open or close a branch) also the
    same language as ``re`` gives it."""
    last = len(pattern) - 1
    drop = {i for i in anchors(pattern) if (i > 0 if pattern[i] == "^" else i < last)}
    out: list[str] = []
    i = 0
    while i <= last:
        c = pattern[i]
        if c == "\\" and i < last:
            nxt = pattern[i + 1]
            out.append(nxt if nxt in _UNKNOWN_ESCAPES else c + nxt)
            i += 2
            continue
        if i not in drop:
            out.append(c)
        i += 1
    return "".join(out)
