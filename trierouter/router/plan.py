"""Decoding plans: a short sequence of segments, each with its own constraint.

    plan = compile_plan(
        [FreeText(until="</think>", max_tokens=256), Text("\\nAnswer: "), Choice(codes)],
        index,
    )

Segments:

- :class:`Text` — literal text, forced.
- :class:`Choice` — one value out of a finite set (a :class:`ChoiceSet`).
- :class:`FreeText` — anything until a delimiter (think-then-answer), at most ``max_tokens``
  tokens, after which the rest of the delimiter is forced.

Compilation merges each ``Choice`` with the ``Text`` around it into one trie over
``prefix + value + suffix``, so tokens that cross from a value into the following text are allowed
exactly as an FSM over the whole string allows them; a plan that is a single ``Choice`` is just
its :class:`ChoiceSet` (see :attr:`Plan.single_choice`).

A request's state is a :class:`PlanState` ``(stage, node, steps)``: three integers, so a server
can hold one per request and serialise it. ``advance`` never raises: a refused token gives the
dead state, whose mask allows only the end ids, so the request is steered to stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from trierouter.errors import CompileError
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.bitmask import bitmask_to_ids, ids_to_bitmask

__all__ = ["Choice", "FreeText", "Plan", "PlanState", "Segment", "Text", "compile_plan"]

I32 = npt.NDArray[np.int32]


@dataclass(frozen=True, slots=True)
class Text:
    """Literal text the model must produce (forced)."""

    text: str
    """The text, non-empty."""


@dataclass(frozen=True, slots=True)
class Choice:
    """One value out of a finite set."""

    values: Sequence[str] | ChoiceSet
    """The values, or a set compiled without terminator for the same vocabulary."""
    name: str | None = None
    """Key of the chosen value in :meth:`Plan.choices` (default ``choice0``, ``choice1`` ...)."""


@dataclass(frozen=True, slots=True)
class FreeText:
    """Free text until a delimiter (which is part of the output)."""

    until: str
    """The delimiter that ends the free text, non-empty (e.g. ``"</think>"``)."""
    max_tokens: int = 256
    """Free tokens allowed before the rest of the delimiter is forced."""


Segment = Text | Choice | FreeText


class PlanState(NamedTuple):
    """Where a request is: ``stage`` index, ``node`` inside it, ``steps`` taken in the stage.

    Special stages: :attr:`Plan.DONE` (all segments produced, only end ids allowed),
    :attr:`Plan.TERMINATED` (an end id was accepted), :attr:`Plan.DEAD` (a refused token).
    """

    stage: int
    node: int
    steps: int = 0


@dataclass
class _TrieStage:
    choices: ChoiceSet
    name: str | None
    prefix: str
    suffix: str
    last: bool
    is_text: bool = False  # forced text only, not a Choice


@dataclass
class _FreeStage:
    until: bytes
    max_tokens: int
    forced: ChoiceSet  # the delimiter alone: node j is the delimiter's first j bytes
    free_rows: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros((0, 0), np.int32))


class Plan:
    """A compiled decoding plan (see the module docstring)."""

    DONE = -3
    TERMINATED = -2
    DEAD = -1

    def __init__(self, stages: list[_TrieStage | _FreeStage], index: TokenIndex) -> None:
        self._stages = stages
        self.index = index
        self.vocabulary: Vocabulary = index.vocabulary
        self.width = self.vocabulary.width
        self.end_ids = self.vocabulary.end_ids
        vocab = self.vocabulary
        # the first non-special single-byte token of each byte (-1: none)
        ones = np.flatnonzero((np.diff(vocab.offsets) == 1) & vocab.matchable)
        heads, first = np.unique(vocab.buffer[vocab.offsets[ones]], return_index=True)
        byte_token = np.full(256, -1, dtype=np.int64)
        byte_token[heads] = ones[first]
        self._byte_token: list[int] = byte_token.tolist()
        self._end_row = ids_to_bitmask(np.asarray(self.end_ids, dtype=np.int64), self.width)
        for k, stage in enumerate(stages):
            if isinstance(stage, _FreeStage):
                stage.free_rows = self._free_rows(k, stage)

    # -- introspection ------------------------------------------------------------------------
    @property
    def single_choice(self) -> ChoiceSet | None:
        """The set, when the plan is exactly one :class:`Choice` ending with the end ids."""
        if len(self._stages) == 1:
            st = self._stages[0]
            if isinstance(st, _TrieStage) and not st.prefix and not st.suffix:
                return st.choices
        return None

    @property
    def n_stages(self) -> int:
        return len(self._stages)

    def __repr__(self) -> str:
        parts = []
        for st in self._stages:
            if isinstance(st, _TrieStage):
                parts.append(f"trie({len(st.choices)} values)")
            else:
                parts.append(f"free(until={st.until!r}, max={st.max_tokens})")
        return f"Plan({', '.join(parts)})"

    # -- serving -------------------------------------------------------------------------------
    def start(self) -> PlanState:
        """The initial state."""
        return self._enter(0, b"")

    def is_dead(self, state: PlanState) -> bool:
        return state.stage == self.DEAD

    def is_terminated(self, state: PlanState) -> bool:
        """An end id was accepted after the last segment."""
        return state.stage == self.TERMINATED

    def advance(self, state: PlanState, token: int) -> PlanState:
        """The state after ``token``; the dead state if the plan does not allow it."""
        stage, node, count = state
        if stage < 0:
            if stage == self.DONE and token in self.end_ids:
                return PlanState(self.TERMINATED, 0)
            if stage == self.TERMINATED and token in self.end_ids:
                return state
            return PlanState(self.DEAD, 0)
        st = self._stages[stage]
        if isinstance(st, _TrieStage):
            cs = st.choices
            nxt = cs.advance(node, token)
            if nxt == cs.END:
                return PlanState(self.TERMINATED, 0)
            if nxt != cs.DEAD:
                return PlanState(stage, nxt, count + 1)
            if not st.last and cs.is_terminal(node):
                return self._advance_new(stage + 1, token)
            return PlanState(self.DEAD, 0)
        return self._advance_free(stage, st, node, count, token)

    def fill_next_token_bitmask(
        self, state: PlanState, bitmask: npt.NDArray[np.int32], index: int = 0
    ) -> None:
        """Write the packed mask of ``state`` into ``bitmask[index]`` (XGrammar layout)."""
        row = bitmask[index]
        stage, node, count = state
        if stage < 0:
            row[:] = self._end_row
            return
        st = self._stages[stage]
        if isinstance(st, _TrieStage):
            st.choices.fill_next_token_bitmask(node, bitmask, index)
            if not st.last and st.choices.is_terminal(node):
                nxt = self._enter(stage + 1, b"")
                tmp = np.zeros_like(row)[None, :]
                self.fill_next_token_bitmask(nxt, tmp, 0)
                row |= tmp[0]
            return
        if count >= st.max_tokens:
            st.forced.fill_next_token_bitmask(node, bitmask, index)
        else:
            row[:] = st.free_rows[node]

    def allowed_token_ids(self, state: PlanState) -> I32:
        """Sorted ids allowed next."""
        stage, node, _ = state
        if stage >= 0:
            st = self._stages[stage]
            if isinstance(st, _TrieStage) and (st.last or not st.choices.is_terminal(node)):
                return st.choices.mask(node)
        row = np.zeros((1, (self.width + 31) // 32), dtype=np.int32)
        self.fill_next_token_bitmask(state, row, 0)
        return bitmask_to_ids(row[0], self.width).astype(np.int32)

    def forced_tokens(self, state: PlanState, *, limit: int = 64) -> list[int]:
        """Tokens for the only possible continuation text, greedy longest first; ``[]`` if none.

        The continuation is forced while the current trie (a value, forced text, or the rest of
        a delimiter after ``max_tokens``) has exactly one way on and no value ends; it is
        tokenized with the longest allowed token at each step, so every token is allowed.
        """
        stage, node, count = state
        if stage < 0:
            return []
        st = self._stages[stage]
        if isinstance(st, _TrieStage):
            cs = st.choices
        elif count >= st.max_tokens:
            cs = st.forced
        else:
            return []
        text = bytearray()
        probe = node
        first = self._first_bytes
        while len(text) < 4 * limit and not cs.is_terminal(probe):
            ids = cs.mask(probe)
            if len(ids) == 0:
                break
            b = int(first[ids[0]])
            if b < 0 or int(first[ids[-1]]) != b or np.any(first[ids] != b):
                break
            bt = self._byte_token[b]
            if bt < 0:
                break
            nxt = cs.advance(probe, bt)
            if nxt in (cs.DEAD, cs.END):
                break
            text.append(b)
            probe = nxt
        out: list[int] = []
        pos = 0
        tokens = self.vocabulary.tokens
        while pos < len(text) and len(out) < limit:
            best, best_len = -1, 0
            for t in cs.mask(node).tolist():
                tb = tokens[t] if t < len(tokens) else b""
                if len(tb) > best_len and text.startswith(tb, pos):
                    best, best_len = t, len(tb)
            if best < 0:
                break
            out.append(best)
            pos += best_len
            node = cs.advance(node, best)
        return out

    def choices(self, token_ids: Sequence[int]) -> dict[str, str]:
        """The value chosen in each :class:`Choice`, replaying ``token_ids`` from the start."""
        out: dict[str, str] = {}
        state = self.start()
        last: dict[int, int] = {}
        for t in token_ids:
            if state.stage >= 0:
                last[state.stage] = state.node
            state = self.advance(state, int(t))
            if state.stage == self.DEAD:
                break
        if state.stage >= 0:
            last[state.stage] = state.node
        k = 0
        for i, st in enumerate(self._stages):
            if not isinstance(st, _TrieStage) or st.is_text:
                continue
            key = st.name or f"choice{k}"
            k += 1
            if i in last:
                v = st.choices.value_at(last[i])
                if v is not None:
                    end = len(v) - len(st.suffix) if st.suffix else len(v)
                    out[key] = v[len(st.prefix) : end]
        return out

    # -- internals --------------------------------------------------------------------------
    @cached_property
    def _first_bytes(self) -> npt.NDArray[np.int16]:
        vocab = self.vocabulary
        first = np.full(self.width, -1, dtype=np.int16)
        lengths = np.diff(vocab.offsets)
        has = np.flatnonzero((lengths > 0) & vocab.matchable)
        first[has] = vocab.buffer[vocab.offsets[has]]
        return first

    def _enter(self, stage: int, data: bytes) -> PlanState:
        """State after entering ``stage`` and reading ``data`` bytes."""
        if stage >= len(self._stages):
            return PlanState(self.DONE, 0) if not data else PlanState(self.DEAD, 0)
        st = self._stages[stage]
        if isinstance(st, _TrieStage):
            cs = st.choices
            node = cs.root
            for i, b in enumerate(data):
                bt = self._byte_token[b]
                nxt = cs.advance(node, bt) if bt >= 0 else cs.DEAD
                if nxt == cs.DEAD or nxt == cs.END:
                    if not st.last and cs.is_terminal(node):
                        return self._enter(stage + 1, data[i:])
                    return PlanState(self.DEAD, 0)
                node = nxt
            return PlanState(stage, node, 0)
        return self._free_bytes(stage, st, 0, 0, data)

    def _advance_new(self, stage: int, token: int) -> PlanState:
        """Advance by ``token`` from the start of ``stage``."""
        start = self._enter(stage, b"")
        if start.stage == self.DONE:
            return self.advance(start, token)
        return self.advance(start, token) if start.stage >= 0 else PlanState(self.DEAD, 0)

    def _advance_free(
        self, stage: int, st: _FreeStage, j: int, count: int, token: int
    ) -> PlanState:
        if count >= st.max_tokens:
            nxt = st.forced.advance(j, token)
            if nxt == st.forced.DEAD or nxt == st.forced.END:
                return PlanState(self.DEAD, 0)
            if st.forced.is_terminal(nxt):
                return self._enter(stage + 1, b"")
            return PlanState(stage, nxt, count + 1)
        vocab = self.vocabulary
        if not 0 <= token < len(vocab) or not vocab.matchable[token]:
            return PlanState(self.DEAD, 0)
        return self._free_bytes(stage, st, j, count + 1, vocab.tokens[token])

    def _free_bytes(self, stage: int, st: _FreeStage, j: int, count: int, data: bytes) -> PlanState:
        delim = st.until
        text = delim[:j] + data
        k = text.find(delim)
        if k >= 0:
            return self._enter(stage + 1, text[k + len(delim) :])
        for n in range(min(len(text), len(delim) - 1), 0, -1):
            if text.endswith(delim[:n]):
                return PlanState(stage, n, count)
        return PlanState(stage, 0, count)

    def _free_rows(self, stage: int, st: _FreeStage) -> npt.NDArray[np.int32]:
        """Per matched-delimiter length ``j``: every regular token, minus those that complete the
        delimiter followed by bytes the next stage cannot start with."""
        vocab = self.vocabulary
        delim = st.until
        regular = np.zeros(((self.width + 31) // 32) * 32, dtype=bool)
        regular[: len(vocab)] = vocab.matchable
        for e in self.end_ids:
            regular[e] = False
        base = np.packbits(regular, bitorder="little").view(np.uint32)
        rows = np.repeat(base[None, :], len(delim), axis=0)
        hits = np.flatnonzero(vocab.buffer == delim[-1])
        candidates = np.unique(np.searchsorted(vocab.offsets, hits, side="right") - 1)
        for t in candidates.tolist():
            if not vocab.matchable[t]:
                continue
            tb = vocab.tokens[t]
            for j in range(len(delim)):
                text = delim[:j] + tb
                k = text.find(delim)
                if (
                    k >= 0
                    and k + len(delim) < len(text)
                    and self._enter(stage + 1, text[k + len(delim) :]).stage == self.DEAD
                ):
                    rows[j, t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)
        return rows.view(np.int32)


def compile_plan(
    plan: Sequence[Segment] | Sequence[str] | ChoiceSet,
    index: TokenIndex | Vocabulary,
) -> Plan:
    """Compile segments (or a single set of values / a ChoiceSet) into a :class:`Plan`."""
    if isinstance(index, Vocabulary):
        index = TokenIndex.get(index)
    if isinstance(plan, ChoiceSet):
        segments: list[Segment] = [Choice(plan)]
    elif isinstance(plan, str):
        raise CompileError(f"plan={plan!r:.60}: expected segments or a list of values, not a str")
    else:
        items = list(plan)
        if items and all(isinstance(x, str) for x in items):
            segments = [Choice([str(x) for x in items])]
        else:
            segments = []
            for i, seg in enumerate(items):
                if not isinstance(seg, Text | Choice | FreeText):
                    raise CompileError(
                        f"plan[{i}] = {seg!r:.60} is {type(seg).__name__}; expected Text, Choice "
                        "or FreeText"
                    )
                segments.append(seg)
    if not segments:
        raise CompileError("plan: no segments")
    # group: [Text*] Choice [Text*] -> one trie; leading text before FreeText -> forced trie
    groups: list[tuple[str, Choice | FreeText | None, str]] = []
    prefix = ""
    open_suffix = False
    for i, seg in enumerate(segments):
        if isinstance(seg, Text):
            if not seg.text:
                raise CompileError(f"plan[{i}]: Text must not be empty")
            if open_suffix:
                p, c, s = groups[-1]
                groups[-1] = (p, c, s + seg.text)
            else:
                prefix += seg.text
        elif isinstance(seg, Choice):
            groups.append((prefix, seg, ""))
            prefix, open_suffix = "", True
        else:
            if not seg.until:
                raise CompileError(f"plan[{i}]: FreeText.until must not be empty")
            if seg.max_tokens < 0:
                raise CompileError(f"plan[{i}]: FreeText.max_tokens={seg.max_tokens} must be >= 0")
            if prefix:
                groups.append((prefix, None, ""))
            groups.append(("", seg, ""))
            prefix, open_suffix = "", False
    if prefix:
        groups.append((prefix, None, ""))
    stages: list[_TrieStage | _FreeStage] = []
    for g, (pre, part, suf) in enumerate(groups):
        last = g == len(groups) - 1
        if isinstance(part, FreeText):
            until = part.until.encode("utf-8")
            forced = compile_choices([part.until], index, allow_end=False)
            stages.append(_FreeStage(until, part.max_tokens, forced))
            continue
        if part is None:
            cs = compile_choices([pre], index, allow_end=last)
            stages.append(_TrieStage(cs, None, "", "", last, is_text=True))
            continue
        given = part.values
        if isinstance(given, ChoiceSet):
            if given.vocabulary_hash != index.vocabulary.content_hash:
                raise CompileError("Choice: the ChoiceSet was compiled for another vocabulary")
            if given.terminator is not None:
                raise CompileError("Choice: a ChoiceSet with a terminator cannot be in a plan")
            if not pre and not suf and last:
                stages.append(_TrieStage(given, part.name, "", "", True))
                continue
            values: Sequence[str] = given.values
        else:
            values = given
        texts = [pre + v + suf for v in values] if (pre or suf) else list(values)
        cs = compile_choices(texts, index, allow_end=last)
        stages.append(_TrieStage(cs, part.name, pre, suf, last))
    return Plan(stages, index)
