"""A regular-expression subset for JSON Schema ``pattern``: ASCII patterns whose every match
needs no JSON escaping, compiled to a byte-automaton node.
"""

from __future__ import annotations

import re

from trierouter.registry.core import native_core
from trierouter.registry.slots.fragment import Fragment
from trierouter.registry.slots.nfa import (
    MAX_NFA_STATES,
    TooManyStates,
    _Node,
    alt,
    cls,
    lit,
    nfa_fragment,
    opt,
    rep,
    seq,
)

__all__ = ["MAX_GROUP_DEPTH", "pattern_fragment", "pattern_node"]

# -- a regular-expression subset for ``pattern`` ---------------------------------------------

_SAFE = frozenset(range(0x20, 0x7F)) - {0x22, 0x5C}
"""Characters that appear as themselves inside a JSON string."""


_CLASSES = {
    "d": frozenset(range(0x30, 0x3A)),
    "w": frozenset(range(0x30, 0x3A)) | set(range(0x41, 0x5B)) | set(range(0x61, 0x7B)) | {0x5F},
}
"""The class escapes of the subset."""


_QUANTIFIER = re.compile(r"\{(\d+)(,(\d*))?\}")
"""A counted repeat (at the start of the text matched)."""


MAX_GROUP_DEPTH = 64
"""Groups nested deeper are outside the subset (the parsers and the NFA's construction
recurse per group)."""


class _Unsupported(Exception):
    pass


class _Regex:
    """``pattern`` → node, for ASCII patterns whose every match needs no JSON escaping."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.depth = 0  # groups open

    def parse(self) -> _Node:
        s = self.s
        if s.startswith("^"):
            self.i = 1
        end = len(s) - 1 if s.endswith("$") and not s.endswith("\\$") else len(s)
        self.end = end
        node = self._alt()
        if self.i != end:
            raise _Unsupported(f"unexpected {s[self.i]!r}")
        return node

    def _peek(self) -> str | None:
        return self.s[self.i] if self.i < self.end else None

    def _alt(self) -> _Node:
        parts = [self._seq()]
        while self._peek() == "|":
            self.i += 1
            parts.append(self._seq())
        return parts[0] if len(parts) == 1 else alt(*parts)

    def _seq(self) -> _Node:
        items: list[_Node] = []
        while (c := self._peek()) is not None and c not in "|)":
            items.append(self._quant(self._atom()))
        return seq(*items)

    def _quant(self, node: _Node) -> _Node:
        out = self._quant1(node)
        if out is not node:
            nxt = self._peek()
            if nxt == "?":  # lazy: the same language under a full match
                self.i += 1
            elif nxt is not None and nxt in "*+{":
                raise _Unsupported("possessive or stacked quantifier")
        return out

    def _quant1(self, node: _Node) -> _Node:
        c = self._peek()
        if c == "?":
            self.i += 1
            return opt(node)
        if c == "*":
            self.i += 1
            return rep(node, 0, None)
        if c == "+":
            self.i += 1
            return rep(node, 1, None)
        if c == "{":
            m = _QUANTIFIER.match(self.s, self.i, self.end)
            if not m:
                raise _Unsupported("bad quantifier")
            self.i = m.end()
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
            if lo > 64 or (hi is not None and hi > 64):
                raise _Unsupported("large repeat")
            if hi is not None and hi < lo:
                raise _Unsupported("min repeat greater than max repeat")
            return rep(node, lo, hi)
        return node

    def _atom(self) -> _Node:
        c = self.s[self.i]
        self.i += 1
        if c == "(":
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.s.startswith("?", self.i):
                raise _Unsupported("group flags")
            self.depth += 1
            if self.depth > MAX_GROUP_DEPTH:
                raise _Unsupported("groups nested too deep")
            node = self._alt()
            if self._peek() != ")":
                raise _Unsupported("unclosed group")
            self.i += 1
            self.depth -= 1
            return node
        if c == "[":
            return cls(self._class())
        if c == "\\":
            return cls(self._escape(in_class=False))
        if c == ".":
            raise _Unsupported("'.' matches non-ASCII")
        if c in "^$":
            raise _Unsupported("inner anchor")
        if c in "*+?" or (c == "{" and _QUANTIFIER.match(self.s, self.i - 1, self.end)):
            raise _Unsupported("nothing to repeat")
        return cls(self._safe({ord(c)}))

    def _safe(self, chars: set[int]) -> set[int]:
        if not chars or not chars <= _SAFE:
            raise _Unsupported("characters that need JSON escaping or are not ASCII")
        return chars

    def _escape(self, *, in_class: bool) -> set[int]:
        c = self.s[self.i]
        self.i += 1
        if c in _CLASSES:
            return set(_CLASSES[c])
        if c.isalnum():
            raise _Unsupported(f"escape \\{c}")
        return self._safe({ord(c)})

    def _class(self) -> set[int]:
        negate = self._peek() == "^"
        if negate:
            self.i += 1
        chars: set[int] = set()
        first = True
        while True:
            if self.i >= self.end:
                raise _Unsupported("unclosed class")
            c = self.s[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            self.i += 1
            lo_set = self._escape(in_class=True) if c == "\\" else {ord(c)}
            if (
                len(lo_set) != 1
                and self._peek() == "-"
                and self.i + 1 < self.end
                and self.s[self.i + 1] != "]"
            ):
                raise _Unsupported("a class escape begins a range")
            if (
                len(lo_set) == 1
                and self._peek() == "-"
                and self.i + 1 < self.end
                and self.s[self.i + 1] != "]"
            ):
                self.i += 1
                hi_c = self.s[self.i]
                self.i += 1
                if hi_c == "\\":
                    hi_set = self._escape(in_class=True)
                    if len(hi_set) != 1:
                        raise _Unsupported("bad range")
                    hi = hi_set.pop()
                else:
                    hi = ord(hi_c)
                lo = lo_set.pop()
                if hi < lo:
                    raise _Unsupported("bad character range")
                chars |= set(range(lo, hi + 1))
            else:
                chars |= lo_set
        if negate:
            chars = set(_SAFE) - chars  # ASCII only: other characters are not generated
        return self._safe(chars)


def pattern_node(pattern: str) -> _Node | None:
    """The node for a ``pattern`` in the supported subset (full match), or None."""
    try:
        return _Regex(pattern).parse()
    except (_Unsupported, IndexError):
        return None


def pattern_fragment(pattern: str, *, max_states: int | None = None) -> Fragment | None:
    """The quoted full matches of ``pattern``: the automaton of ``"``, a full match, ``"``
    (states numbered in discovery order), or None outside the supported subset. Raises
    :class:`~trierouter.registry.slots.nfa.TooManyStates` past ``max_states`` states, or
    past :data:`~trierouter.registry.slots.nfa.MAX_NFA_STATES` in its NFA.

    An ASCII pattern is parsed, built and determinized in one core call (``regex_dfa``),
    which mirrors :func:`pattern_node` and the Python subset construction
    (:func:`trierouter.testing.slots_reference.pattern_fragment`) step for step: the same
    automaton, state for state (a test and the tool fuzzer compare them). Other text is parsed
    here and determinized by :func:`~trierouter.registry.slots.nfa.nfa_fragment` (a non-ASCII
    character is in the subset only inside a negated class)."""
    if pattern.isascii():
        core = native_core()
        out = core.regex_dfa(
            pattern.encode(), True, max_states or 0, MAX_NFA_STATES, MAX_GROUP_DEPTH
        )
        if isinstance(out, int):
            if out == 0:
                return None
            if out == 1:
                raise TooManyStates(f"the automaton has more than {max_states} states")
            raise TooManyStates(f"the expression's NFA has more than {MAX_NFA_STATES:,} states")
        src, byte, dst, accept = out
        return Fragment(src, byte, dst, len(accept), accept)
    node = pattern_node(pattern)
    if node is None:
        return None
    return nfa_fragment(seq(lit('"'), node, lit('"')), max_states)
