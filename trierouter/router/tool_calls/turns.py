"""The end of a call in a format that wraps the whole turn (``[TOOL_CALLS][...]``, a JSON array):
after a call's ``}`` comes the next call (``, {"name": ...``) or the turn's closing text (``]``),
then only the end of the output.

A tokenizer writes these joints as single tokens (``}}]``, ``},``, ``}}],``): a token may start
inside a call's arguments automaton, reach its accepting state part-way, and go on into the next
call's names trie or into the closing text. :class:`TurnEnd` finds those crossing tokens (per
automaton state, cached) and the state they lead to, so a
:class:`~trierouter.router.tool_calls.plan.ToolCallPlan` allows exactly the tokens a grammar
over the whole turn allows at a call's end.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.registry.slots.masks import ToolAutomaton, pack_ids
from trierouter.registry.trie import ChoiceSet, compile_choices

__all__ = ["TurnEnd"]

_CACHE = 4096
I32 = npt.NDArray[np.int32]
ToolCallPlan = Any
"""A :class:`~trierouter.router.tool_calls.plan.ToolCallPlan` (not imported: it imports this)."""
State = tuple[int, int, int, int, None, int]
"""The fields of a :class:`~trierouter.router.tool_calls.plan.ToolState`."""


class TurnEnd:
    """The closing text of a turn (``finish``: the held characters, the format's ``close``, then
    the end ids) and the tokens that cross into it or into a next call."""

    def __init__(self, plan: ToolCallPlan) -> None:
        self.plan = plan
        fmt = plan.format
        self.finish: ChoiceSet = compile_choices([fmt.ending()], plan.tools.index)
        self.tail = fmt.tail().encode()
        self._cands: dict[bool, dict[int, list[tuple[int, int]]]] = {}
        self._cache: OrderedDict[tuple[int, int, bool], list[tuple[int, int]]] = OrderedDict()
        row = np.zeros((1, (plan.width + 31) // 32), dtype=np.int32)
        self.finish.fill_next_token_bitmask(self.finish.root, row, 0)
        self.close_row: I32 = row[0]
        """The tokens that start the closing text (where a next call could start too)."""
        # the opening's marker as the model writes it: one special token ([TOOL_CALLS])
        vocab, trig = plan.vocabulary, fmt.trigger.encode()
        opens = bool(trig) and fmt.open.startswith(fmt.trigger)
        special = sorted(vocab.special_ids - set(plan.end_ids)) if opens else []
        self.markers = [i for i in special if vocab.tokens[i] == trig]
        """Special ids whose text is the trigger that opens the turn (Mistral's control token
        ``[TOOL_CALLS]``; a SentencePiece file read directly gives control pieces no text)."""
        self.marker_row: I32 = np.zeros_like(row[0])
        if self.markers:
            self.marker_row = pack_ids(self.markers, plan.width)
        self.marker_node = -1
        """Names-trie node after the marker (the whole head is in the trie: not ``auto``)."""
        if self.marker_row.any() and plan.tool_choice != "auto":
            self.marker_node = plan._walk_bytes(plan.names, trig)

    def marked(self, node: int, token: int) -> int:
        """The names-trie node after ``token`` when it is the marker written at the root."""
        if node == self.plan.names.root and token in self.markers:
            return self.marker_node
        return -1

    def closing(self, token: int) -> State:
        """The plan state after ``token`` starts the closing text (dead when it does not)."""
        nxt = self.finish.advance(self.finish.root, token)
        if nxt in (self.finish.DEAD, self.finish.END):
            return (self.plan.DEAD, 0, 0, -1, None, 0)
        return (self.plan.FINISH, nxt, 0, -1, None, 0)

    def walk(self, names: ChoiceSet | None, data: bytes) -> int:
        """The node of ``names`` after ``data`` (single-byte steps from the root), or -1 when it
        leaves the trie or completes a value (a crossing token never reaches a tool's name
        end)."""
        if names is None:
            return -1
        singles = self.plan._single_bytes()
        node = names.root
        for b in data:
            tok = singles.get(b)
            if tok is None:
                return -1
            node = names.advance(node, tok)
            if node in (names.DEAD, names.END):
                return -1
        if names is not self.finish and names.is_terminal(node):
            return -1
        return node

    def _candidates(self, more: bool) -> dict[int, list[tuple[int, int]]]:
        """By first byte: ``(token, cut)`` where ``token[:cut]`` ends with a call's tail and the
        rest starts the closing text (or, ``more``, a next call)."""
        hit = self._cands.get(more)
        if hit is not None:
            return hit
        vocab = self.plan.vocabulary
        matchable = vocab.matchable
        nxt = self.plan.next_names if more else None
        out: dict[int, list[tuple[int, int]]] = {}
        # tokens with the tail's last byte before their own last byte (numpy: a few thousand)
        pos = np.flatnonzero(vocab.buffer == self.tail[-1])
        ids = np.searchsorted(vocab.offsets, pos, side="right") - 1
        ids = np.unique(ids[pos + 1 < vocab.offsets[ids + 1]])
        for i in ids.tolist():
            t = vocab.tokens[i]
            if not matchable[i]:
                continue
            for cut in range(1, len(t)):
                if not t[:cut].endswith(self.tail[-cut:] if cut < len(self.tail) else self.tail):
                    continue
                rest = t[cut:]
                if self.walk(self.finish, rest) >= 0 or self.walk(nxt, rest) >= 0:
                    out.setdefault(t[0], []).append((i, cut))
        self._cands[more] = out
        return out

    def crossing(self, a: ToolAutomaton, state: int, more: bool) -> list[tuple[int, int]]:
        """``(token, cut)`` allowed at automaton ``state``: ``token[:cut]`` ends the call
        exactly (the automaton accepts there), the rest starts what follows."""
        key = (id(a), state, more)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        out: list[tuple[int, int]] = []
        toks = self.plan.vocabulary.tokens
        for first, cands in self._candidates(more).items():
            if a.step_bytes(state, bytes([first])) < 0:
                continue
            for i, cut in cands:
                s = a.step_bytes(state, toks[i][:cut])
                if s >= 0 and a.accept[s]:
                    out.append((i, cut))
        self._cache[key] = out
        while len(self._cache) > _CACHE:
            self._cache.popitem(last=False)
        return out

    def widen(self, a: ToolAutomaton, state: int, more: bool, row: I32) -> None:
        """Add :meth:`crossing`'s tokens to the packed ``row``."""
        for i, _ in self.crossing(a, state, more):
            row[i >> 5] |= np.array(1 << (i & 31), dtype=np.uint32).view(np.int32)

    def after(
        self, a: ToolAutomaton, state: int, token: int, more: bool, calls: int
    ) -> State | None:
        """The plan state after crossing ``token`` from automaton ``state`` (``None``: it does
        not cross)."""
        plan = self.plan
        for i, cut in self.crossing(a, state, more):
            if i != token:
                continue
            rest = plan.vocabulary.tokens[i][cut:]
            node = self.walk(self.finish, rest)
            if node >= 0:
                return (plan.FINISH, node, 0, -1, None, 0)
            node = self.walk(plan.next_names if more else None, rest)
            if node >= 0:
                return (plan.NEXT, node, len(rest), -1, None, calls + 1)
        return None
