"""Matcher: one request decoding one value of a :class:`ChoiceSet`, with XGrammar's verbs.

The state is a node id; the matcher adds a history for ``rollback``. ``accept_token`` returns
``False`` for a token the set does not allow and leaves the state unchanged (XGrammar's policy),
so the hot path never raises for a model's choice.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from trierouter.registry.trie import ChoiceSet

__all__ = ["Matcher"]


class Matcher:
    """Per-request matcher over a compiled set."""

    __slots__ = ("_advance", "_ended_at", "_history", "_max_rollback", "choices", "state")

    def __init__(self, choices: ChoiceSet, *, max_rollback_tokens: int = -1) -> None:
        if not isinstance(choices, ChoiceSet):
            raise TypeError(f"choices must be a ChoiceSet, got {type(choices).__name__}")
        self.choices = choices
        self.state = choices.root
        self._history: list[int] = []
        self._max_rollback = max_rollback_tokens
        self._advance = choices.advance
        self._ended_at = -1  # the node an end id was accepted at (value() after termination)

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; ``False`` (state unchanged) if the token is not allowed, or
        the matcher is already terminated."""
        if self.state == self.choices.END:
            return False
        nxt = self._advance(self.state, token_id)
        if nxt == self.choices.DEAD:
            return False
        if nxt == self.choices.END:
            self._ended_at = self.state
        self._history.append(self.state)
        if 0 <= self._max_rollback < len(self._history):
            del self._history[0]
        self.state = nxt
        return True

    def accept_tokens(self, token_ids: list[int]) -> bool:
        """Accept all of ``token_ids``, or none: ``False`` (state unchanged) if one is refused."""
        state, end, dead = self.state, self.choices.END, self.choices.DEAD
        for t in token_ids:
            if state == end:
                return False
            state = self._advance(state, t)
            if state == dead:
                return False
        for t in token_ids:
            self.accept_token(t)
        return True

    def allowed_token_ids(self) -> npt.NDArray[np.int32]:
        """Sorted ids allowed next (end ids included where a value is complete)."""
        return self.choices.mask(self.state)

    def fill_next_token_bitmask(self, bitmask: npt.NDArray[np.int32], index: int = 0) -> None:
        """Write the next-token mask into ``bitmask[index]`` (int32, XGrammar layout)."""
        self.choices.fill_next_token_bitmask(self.state, bitmask, index)

    def is_terminated(self) -> bool:
        """An end id has been accepted."""
        return self.state == self.choices.END

    def is_complete(self) -> bool:
        """A whole value has been produced (an end id may follow, or has been accepted)."""
        return self.choices.is_terminal(self.state)

    def value(self) -> str | None:
        """The chosen value once complete, else ``None``."""
        if self.state == self.choices.END:
            return self.choices.value_at(self._ended_at)
        return self.choices.value_at(self.state)

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""
        if num_tokens < 0 or num_tokens > len(self._history):
            raise ValueError(
                f"num_tokens={num_tokens}: can roll back 0..{len(self._history)} tokens"
            )
        if num_tokens:
            self.state = self._history[-num_tokens]
            del self._history[-num_tokens:]

    def reset(self) -> None:
        """Back to the root, history cleared."""
        self.state = self.choices.root
        self._history.clear()
        self._ended_at = -1

    @property
    def num_accepted(self) -> int:
        """Tokens accepted and not rolled back (bounded by ``max_rollback_tokens``)."""
        return len(self._history)
