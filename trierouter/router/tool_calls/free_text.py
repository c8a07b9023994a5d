"""Free text that ends where one of its triggers completes.

A :class:`FreeStage` is a stretch of unconstrained text watched for delimiters: ``</think>``
(think-then-answer), or under ``tool_choice="auto"`` every text that starts a call in a syntax
the model writes (``<tool_call>``, a ```` ```json ```` fence, a bare ``{"name"`` or ``{{"name"``
at a line's start, watched as ``\n{"name"`` from a newline pending at the start). Its state is
one integer: which *pending* text, the longest end of the output so far that is a proper prefix
of a trigger, has been written (for a single trigger, the number of its bytes matched, as in
KMP). A token that completes a trigger ends the stage; the bytes of that token after the
trigger start what follows.

Which tokens complete a trigger from a pending text is found without a pass over the vocabulary:
a completion either lies whole inside the token (the tokens containing each trigger, found once
per vocabulary) or starts in the pending text, and then the token starts with the trigger's
rest (a range of the vocabulary sorted by bytes).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trierouter.registry.call_text import first_trigger

__all__ = ["FreeStage"]

_lock = threading.Lock()
_sorted: dict[int, tuple[Any, list[bytes], list[int]]] = {}
_containing: dict[tuple[int, bytes], tuple[Any, tuple[int, ...]]] = {}
_KEEP = 8


def _by_bytes(tokens: Any) -> tuple[list[bytes], list[int]]:
    """``tokens`` (a vocabulary's token bytes) sorted by bytes, and their ids."""
    key = id(tokens)
    with _lock:
        hit = _sorted.get(key)
        if hit is not None and hit[0] is tokens:
            return hit[1], hit[2]
    ids = sorted(range(len(tokens)), key=tokens.__getitem__)
    keys = [tokens[i] for i in ids]
    with _lock:
        if len(_sorted) >= _KEEP:
            _sorted.pop(next(iter(_sorted)))
        _sorted[key] = (tokens, keys, ids)
    return keys, ids


def _holding(tokens: Any, trigger: bytes) -> tuple[int, ...]:
    """The ids of the tokens that contain ``trigger`` whole."""
    key = (id(tokens), trigger)
    with _lock:
        hit = _containing.get(key)
        if hit is not None and hit[0] is tokens:
            return hit[1]
    found = tuple(i for i, t in enumerate(tokens) if trigger in t)
    with _lock:
        if len(_containing) >= 4 * _KEEP:
            _containing.pop(next(iter(_containing)))
        _containing[key] = (tokens, found)
    return found


@dataclass(frozen=True)
class FreeStage:
    """Free text until one of ``triggers`` completes (see the module docstring)."""

    triggers: tuple[bytes, ...]
    """What ends the stage; under ``auto`` trigger ``j`` starts a call in the plan's ``j``-th
    call syntax."""
    allow_end: bool
    """The output may end here (an end id), without any trigger."""
    max_tokens: int | None
    """After this many tokens only the rest of the (first) trigger (think-then-answer)."""
    forbid: bool = False
    """``"none"``: no trigger may complete."""
    prefixes: tuple[bytes, ...] = field(init=False, repr=False)
    """The pending texts by state: the first trigger's proper prefixes first, so that for a
    single trigger the state is the number of its bytes matched."""
    _ids: dict[bytes, int] = field(init=False, repr=False, compare=False)
    _longest: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.triggers or any(not t for t in self.triggers):
            raise ValueError(f"triggers={self.triggers!r}: give non-empty texts")
        seen: dict[bytes, int] = {}
        for t in self.triggers:
            for n in range(len(t)):
                seen.setdefault(t[:n], len(seen))
        object.__setattr__(self, "prefixes", tuple(seen))
        object.__setattr__(self, "_ids", seen)
        object.__setattr__(self, "_longest", max(len(t) for t in self.triggers) - 1)

    @property
    def initial(self) -> int:
        """The state the stage starts in: a newline pending when a trigger is anchored at a
        line's start (it begins with one), so that it completes at the output's start too."""
        anchored = any(t.startswith(b"\n") for t in self.triggers)
        return self._ids[b"\n"] if anchored else 0

    @property
    def trigger(self) -> bytes:
        """The first trigger (the model's own call opener, or the think delimiter)."""
        return self.triggers[0]

    def rest(self, k: int) -> bytes:
        """The shortest text that completes a trigger from state ``k``."""
        p = self.prefixes[k]
        return min((t[len(p) :] for t in self.triggers if t.startswith(p)), key=len)

    def step(self, k: int, data: bytes) -> tuple[int, int, int]:
        """``(state, cut, j)`` after ``data`` from state ``k``: where a trigger completes (the
        earliest end), ``cut`` is the index in ``data`` just after it and ``j`` the trigger's
        index; otherwise ``cut = j = -1``."""
        p = self.prefixes[k]
        text = p + data
        _, best, which = first_trigger(text, self.triggers, line_start=False)
        if which >= 0:
            return 0, best - len(p), which
        for n in range(min(self._longest, len(text)), 0, -1):
            hit = self._ids.get(text[len(text) - n :])
            if hit is not None:
                return hit, -1, -1
        return 0, -1, -1

    def completions(self, k: int, tokens: Any) -> list[tuple[int, int, int]]:
        """``(token id, cut, j)`` for every token of ``tokens`` (a vocabulary's token bytes) that
        completes a trigger from state ``k`` (as :meth:`step` finds it)."""
        p = self.prefixes[k]
        candidates: set[int] = set()
        for t in self.triggers:
            candidates.update(_holding(tokens, t))
            for n in range(1, len(t)):
                if p.endswith(t[:n]):
                    keys, ids = _by_bytes(tokens)
                    rest = t[n:]
                    lo = bisect.bisect_left(keys, rest)
                    hi = lo
                    while hi < len(keys) and keys[hi].startswith(rest):
                        hi += 1
                    candidates.update(ids[lo:hi])
        out = []
        for i in sorted(candidates):
            _, cut, j = self.step(k, tokens[i])
            if j >= 0:
                out.append((i, cut, j))
        return out

    def blocked(
        self,
        k: int,
        tokens: Any,
        matchable: Any,
        *,
        forbid: bool,
        enters: Callable[[int, bytes], bool] | None,
    ) -> list[int]:
        """The matchable tokens not allowed at state ``k``: every completing one (``forbid``),
        else those that go on past their trigger into what ``enters(j, rest)`` refuses (all of
        them without ``enters``: a delimiter's token may not cross it)."""
        bad = []
        for i, cut, j in self.completions(k, tokens):
            if not matchable[i]:
                continue
            t = tokens[i]
            if forbid or (cut != len(t) and (enters is None or not enters(j, t[cut:]))):
                bad.append(i)
        return bad

    def spelling(self, k: int, tokens: Any, matchable: Any) -> list[int]:
        """The matchable tokens that spell a start of :meth:`rest` from state ``k`` (one per
        distinct bytes): the delimiter forced, any split."""
        rest = self.rest(k)
        by_bytes = {t: i for i, t in enumerate(tokens) if matchable[i] and rest.startswith(t)}
        return sorted(by_bytes.values())
