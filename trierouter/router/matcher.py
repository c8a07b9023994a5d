"""Matcher: one request decoding one value of a :class:`ChoiceSet`, with XGrammar's verbs.

The state is a node id; the matcher adds a history for ``rollback``. ``accept_token`` returns
``False`` for a token the set does not allow and leaves the state unchanged (XGrammar's policy),
so the hot path never raises for a model's choice.

The per-token verbs (``accept_token``, ``rollback``, ``allowed_token_ids``, ...) live in the
compiled core's ``MatcherBase``: over a native set a step is one C call with no Python frame;
over a numpy-backend set the same base calls the set's Python ``advance``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from trierouter.errors import CoreBuildError
from trierouter.registry.core import native_core
from trierouter.registry.trie import ChoiceSet

__all__ = ["Matcher"]


class _PyMatcherBase:
    """The same verbs in Python, for numpy-backend sets when the core is not built."""

    def __init__(self) -> None:
        self.state = 0
        self._hist: list[int] = []
        self._max = -1
        self._adv: object = None
        self._ended_at = -1

    def _init_core(
        self, core: object, advance: object, mask: object, root: int, end: int, dead: int, m: int
    ) -> None:
        self._adv, self._msk = advance, mask
        self._root, self._end, self._dead, self._max = root, end, dead, m
        self.state = root
        self._hist = []
        self._ended_at = -1

    def _next(self, state: int, token_id: int) -> int:
        if state == self._end:  # nothing follows an accepted end id
            return self._dead
        return self._adv(state, token_id)  # type: ignore[no-any-return,operator]

    def _push(self, nxt: int) -> None:
        if nxt == self._end:
            self._ended_at = self.state
        self._hist.append(self.state)
        if 0 <= self._max < len(self._hist):
            del self._hist[0]
        self.state = nxt

    def accept_token(self, token_id: int) -> bool:
        nxt = self._next(self.state, token_id)
        if nxt == self._dead:
            return False
        self._push(nxt)
        return True

    def accept_tokens(self, token_ids: list[int]) -> bool:
        states, s = [], self.state
        for t in token_ids:
            s = self._next(s, t)
            if s == self._dead:
                return False
            states.append(s)
        for nxt in states:
            self._push(nxt)
        return True

    def rollback(self, num_tokens: int) -> None:
        if num_tokens < 0 or num_tokens > len(self._hist):
            raise ValueError(f"num_tokens={num_tokens}: can roll back 0..{len(self._hist)} tokens")
        if num_tokens:
            self.state = self._hist[-num_tokens]
            del self._hist[-num_tokens:]

    def reset(self) -> None:
        self.state = self._root
        self._hist.clear()
        self._ended_at = -1

    def is_terminated(self) -> bool:
        return bool(self.state == self._end)

    def allowed_token_ids(self) -> npt.NDArray[np.int32]:
        return self._msk(self.state)  # type: ignore[no-any-return,operator]

    @property
    def num_accepted(self) -> int:
        return len(self._hist)


if TYPE_CHECKING:
    from trierouter.registry.core import MatcherBase as _Base
else:
    try:
        _Base = native_core().MatcherBase
    except CoreBuildError:  # numpy-backend sets still decode; native ones cannot exist
        _Base = _PyMatcherBase


class Matcher(_Base):
    """Per-request matcher over a compiled set.

    ``accept_token(token_id) -> bool``: advance by one token; ``False`` (state unchanged) if the
    token is not allowed or the matcher is terminated. ``accept_tokens(ids)``: all of them, or
    none (``False``, state unchanged). ``rollback(n)``: undo the last ``n`` accepted tokens.
    ``reset()``: back to the root. ``is_terminated()``: an end id has been accepted.
    ``allowed_token_ids()``: sorted ids allowed next (end ids included where a value is
    complete). ``state``: the current node id; ``num_accepted``: tokens accepted and not rolled
    back (bounded by ``max_rollback_tokens``).
    """

    def __init__(self, choices: ChoiceSet, *, max_rollback_tokens: int = -1) -> None:
        if not isinstance(choices, ChoiceSet):
            raise TypeError(f"choices must be a ChoiceSet, got {type(choices).__name__}")
        super().__init__()
        self.choices = choices
        self._init_core(
            choices._core,
            choices._advance,
            choices._mask,
            choices.root,
            choices.END,
            choices.DEAD,
            max_rollback_tokens,
        )

    def fill_next_token_bitmask(self, bitmask: npt.NDArray[np.int32], index: int = 0) -> None:
        """Write the next-token mask into ``bitmask[index]`` (int32, XGrammar layout)."""
        self.choices.fill_next_token_bitmask(self.state, bitmask, index)

    def is_complete(self) -> bool:
        """A whole value has been produced (an end id may follow, or has been accepted)."""
        return self.choices.is_terminal(self.state)

    def value(self) -> str | None:
        """The chosen value once complete, else ``None``."""
        if self.state == self.choices.END:
            return self.choices.value_at(self._ended_at)
        return self.choices.value_at(self.state)
