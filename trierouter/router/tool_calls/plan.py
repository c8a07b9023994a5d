"""Tool-call decoding in the model's own syntax: ``<wrapper>{"name": <trie over tool names>,
"arguments": <that tool's constraint>}<wrapper>``, one call or several (parallel calls).

    tools = compile_tools(registry, index)
    plan = ToolCallPlan(tools, tool_choice="required")          # or "auto", "none", a tool name
    results = generate(model, tokenizer, prompts, plan)          # transformers, or vLLM extra_args
    call = plan.parse(results[0].text)                           # ToolCall, validated

The plan has the interface of :class:`~trierouter.router.plan.Plan` (``start``, ``advance``,
``fill_next_token_bitmask``, ``is_terminated``...), so the transformers and vLLM adapters run it
as they run any plan. Its state is a :class:`ToolState`; the only mutable part is the XGrammar
matcher of a slot being generated, so a state must not be advanced twice.

``tool_choice``:

- ``"required"``: the output is one tool call;
- a tool name: the call to that tool (its arguments constrained);
- ``"auto"``: free text, ending with an end id, or a call opener followed by a constrained
  call: the format's trigger (``<tool_call>``) and the triggers of the other syntaxes the model
  writes (``openers``, default :data:`~trierouter.registry.call_formats.AUTO_OPENERS`: a
  ```` ```json ```` fence, a bare ``{"name"`` or ``{{"name"``), each call constrained in its own
  syntax; the model's own probabilities decide whether and in which syntax a call starts;
- ``"none"``: free text in which the format's trigger never appears.

The syntax is the compiled tools' :class:`~trierouter.registry.call_formats.CallFormat`
(``compile_tools(..., format="hermes")``): Qwen / Hermes tags, Llama 3.x JSON, Mistral's
``[TOOL_CALLS][...]``, ... ``parallel_tool_calls=True`` lets a call be followed by the format's
separator and another call (up to ``max_calls``) instead of the end (or the turn's closing text).

``think=True`` puts free text up to ``think_end`` (at most ``think_max_tokens`` tokens, then the
rest of the delimiter is forced) before all of that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from trierouter.errors import ToolChoiceError
from trierouter.registry.call_formats import AUTO_OPENERS
from trierouter.registry.call_text import auto_formats, first_trigger, split_calls
from trierouter.registry.compiler import CompiledTools
from trierouter.registry.slots.masks import ToolAutomaton, pack_ids
from trierouter.registry.trie import ChoiceSet
from trierouter.router.bitmask import bitmask_to_ids
from trierouter.router.tool_calls.call import (
    ParsedOutput,
    ToolCall,
    ToolCallError,
    parse_tool_call,
    tool_choice_name,
)
from trierouter.router.tool_calls.closing import TurnCloser, narrow_slot
from trierouter.router.tool_calls.free_text import FreeStage
from trierouter.router.tool_calls.greedy import counter
from trierouter.router.tool_calls.turns import TurnEnd

__all__ = ["ToolCallPlan", "ToolState"]


class ToolState(NamedTuple):
    """``stage``: a free stage (``0..``), :attr:`ToolCallPlan.NAME`, ``ARGS``, ``XG``, or one of
    the special negative stages of :class:`~trierouter.router.plan.Plan`; ``node``: the trie
    node, automaton state, or delimiter progress; ``steps``: tokens in the stage; ``tool``: the
    chosen tool; ``aux``: the XGrammar matcher of the slot being generated."""

    stage: int
    node: int
    steps: int = 0
    tool: int = -1
    aux: Any = None
    calls: int = 0
    """Calls completed before this one (parallel calls)."""
    fmt: int = 0
    """Under ``auto``: the call syntax the call started in (0: the plan's own, ``j``: its
    ``j``-th other opener)."""


class ToolCallPlan:
    """A decoding plan for one tool call (see the module docstring)."""

    DONE = -3
    TERMINATED = -2
    DEAD = -1

    def __init__(
        self,
        tools: CompiledTools,
        *,
        tool_choice: str | dict[str, Any] = "required",
        allowed: Sequence[str] | None = None,
        think: bool = False,
        think_end: str = "</think>\n",
        think_max_tokens: int = 256,
        parallel_tool_calls: bool = False,
        max_calls: int = 8,
        string_max_tokens: int | None = None,
        slot_max_tokens: int | None = None,
        max_tokens: int | None = None,
        openers: Sequence[str] | None = None,
    ) -> None:
        self.tools = tools
        self.vocabulary = tools.vocabulary
        self.width = tools.width
        self.end_ids = tools.end_ids
        self.single_choice: ChoiceSet | None = None
        tool_choice = tool_choice_name(tool_choice)
        self.tool_choice = tool_choice
        self.string_max_tokens = string_max_tokens
        self.slot_max_tokens = slot_max_tokens
        self.max_tokens = max_tokens
        self.format = tools.format
        self._tokens = self.vocabulary.tokens
        self._singles: dict[int, int] | None = None
        self.parallel_tool_calls = bool(parallel_tool_calls)
        if max_calls < 1:
            raise ValueError(f"max_calls={max_calls}: at least 1 call")
        self.max_calls = max_calls if self.parallel_tool_calls else 1
        frees: list[FreeStage] = []
        if think:
            frees.append(FreeStage((think_end.encode(),), False, think_max_tokens))
        if allowed is not None:
            if isinstance(allowed, str):
                raise ToolChoiceError(f"allowed={allowed!r}: give a list of tool names")
            allowed = list(allowed)
            if not allowed:
                raise ToolChoiceError(
                    "allowed=[]: no tool could be called; pass None to allow every tool, or "
                    "at least one tool name"
                )
            unknown = [n for n in allowed if n not in tools._by_name]
            if unknown:
                raise ToolChoiceError(
                    f"allowed names {len(unknown)} unregistered tool(s): {unknown[:5]}; use "
                    "names of the compiled registry"
                )
        if tool_choice in ("required", "auto", "none"):
            subset = allowed
        else:
            if tool_choice not in tools._by_name:
                raise ToolChoiceError(
                    f"tool_choice={tool_choice!r} is no registered tool and none of "
                    '"required", "auto", "none"; give one of those or a tool name'
                )
            if allowed is not None and tool_choice not in allowed:
                raise ToolChoiceError(f"tool_choice={tool_choice!r} is not in allowed")
            subset = [tool_choice]
        self._alts: list[ToolCallPlan] = []
        if tool_choice == "auto":
            names = AUTO_OPENERS if openers is None else tuple(openers)
            opts: dict[str, Any] = dict(allowed=allowed, think=think, think_end=think_end,
                max_calls=max_calls, think_max_tokens=think_max_tokens, openers=(),
                parallel_tool_calls=parallel_tool_calls, string_max_tokens=string_max_tokens,
                slot_max_tokens=slot_max_tokens, max_tokens=max_tokens)  # fmt: skip
            for fmt in auto_formats(tools.format, names):
                self._alts.append(ToolCallPlan(tools.with_format(fmt), tool_choice="auto", **opts))
            triggers = [self.format.watch.encode()] + [a.format.watch.encode() for a in self._alts]
            frees.append(FreeStage(tuple(triggers), True, None))
        elif tool_choice == "none":
            frees.append(FreeStage((self.format.watch.encode(),), True, None, forbid=True))
        self._frees = frees
        self.NAME = len(frees)
        self.ARGS = self.NAME + 1
        self.XG = self.NAME + 2
        self.NEXT = self.NAME + 3
        lead = self.format.lead(after_trigger=tool_choice == "auto")
        self._subset = None if subset is None else list(subset)
        self.names: ChoiceSet = tools.names_for(self._subset, lead=lead)
        self._closer: TurnCloser | None = None
        self.next_names: ChoiceSet | None = None
        # a turn's closing text (``]``): tokens cross from a call's ``}`` into it (turns.py)
        self._hold = self.max_calls > 1 and not self.format.close
        held = self.format.held(hold=self._hold)
        self._next_end = self._fork = -1
        self._finish: ChoiceSet | None = None
        self._turn = TurnEnd(self) if self.format.close else None
        self.FINISH = self.NAME + 4
        if self.max_calls > 1:
            following = self.format.lead(following=True, held=held)
            self.next_names = tools.names_for(
                None if subset is None else list(subset), lead=following
            )
            self._next_end = self._walk_bytes(self.next_names, held.encode())
            if held:  # after the last call allowed: the held character, then the end
                from trierouter.registry.trie import compile_choices

                self._finish = compile_choices([held], tools.index)
        if self._turn is not None:  # another call or the close; the end only after it
            self._finish = self._turn.finish
            self._fork, self._next_end = self._next_end, -1
        self._end_row = pack_ids(list(self.end_ids), self.width)
        self._words = (self.width + 31) // 32
        self._free_rows: dict[tuple[int, int, bool, bool], npt.NDArray[np.int32]] = {}
        self._safe_row: npt.NDArray[np.int32] | None = None

    def _walk_bytes(self, names: ChoiceSet, data: bytes) -> int:
        """The node of ``names`` after ``data`` written one single-byte token at a time."""
        node = names.root
        for b in data:
            node = names.advance(node, self._single_bytes()[b])
        return node

    def __repr__(self) -> str:
        n, choice, free = len(self.names), self.tool_choice, len(self._frees)
        return f"ToolCallPlan({n} tools, tool_choice={choice!r}, free stages={free})"

    # -- states ----------------------------------------------------------------------------------
    def start(self) -> ToolState:
        if self._frees:
            return ToolState(0, self._frees[0].initial)
        return ToolState(self.NAME, self.names.root)

    def is_dead(self, state: Any) -> bool:
        return bool(state[0] == self.DEAD)

    def is_terminated(self, state: Any) -> bool:
        return bool(state[0] == self.TERMINATED)

    # -- stepping --------------------------------------------------------------------------------
    def advance(self, state: Any, token: int) -> ToolState:
        """The state after ``token``; the dead state if the plan does not allow it."""
        stage, node = int(state[0]), int(state[1])
        fmt = int(state[6]) if len(state) > 6 else 0
        if fmt and self._alts and stage >= self.NAME:  # a call in another syntax
            return self._alts[fmt - 1].advance(state, token)._replace(fmt=fmt)
        token = int(token)
        if stage < 0:
            if stage in (self.DONE, self.TERMINATED) and token in self.end_ids:
                return ToolState(self.TERMINATED, 0)
            return ToolState(self.DEAD, 0)
        steps = int(state[2]) if len(state) > 2 else 0
        if stage < self.NAME:
            return self._advance_free(stage, node, steps, token)
        calls = int(state[5]) if len(state) > 5 else 0
        if stage == self.FINISH:
            assert self._finish is not None
            nxt = self._finish.advance(node, token)
            if nxt == self._finish.END:
                return ToolState(self.TERMINATED, 0)
            if nxt == self._finish.DEAD:
                return ToolState(self.DEAD, 0)
            return ToolState(self.FINISH, nxt)
        if stage in (self.NAME, self.NEXT):
            names = self.names if stage == self.NAME else self.next_names
            assert names is not None
            if stage == self.NEXT and node == self._next_end and token in self.end_ids:
                return ToolState(self.TERMINATED, 0)
            mark = self._turn.marked(node, token) if self._turn and stage == self.NAME else -1
            nxt = names.advance(node, token) if mark < 0 else mark
            if stage == self.NEXT and node == self._fork and nxt in (names.DEAD, names.END):
                return ToolState(*self._turn.closing(token))  # type: ignore[union-attr]
            if nxt in (names.DEAD, names.END):
                return ToolState(self.DEAD, 0)
            if names.is_terminal(nxt):
                tool = self.tools.tool_of_node(names, nxt)
                return self._enter_args(tool, 0, calls=calls)
            return ToolState(stage, nxt, steps + 1, -1, None, calls)
        tool = int(state[3])
        a = self.tools.automaton(tool, hold=self._hold)
        if stage == self.ARGS:
            nxt = a.advance(node, token)
            if nxt < 0:
                if self._turn is not None:  # a token crossing into the next call or the close
                    after = self._turn.after(a, node, token, self._more(calls), calls)
                    if after is not None:
                        return ToolState(*after)
                return ToolState(self.DEAD, 0)
            # ``steps``: tokens since this free string opened (0 outside strings); ``aux``: tokens
            # in the arguments so far
            inside = a.klass[nxt] >= 0
            strs = (steps + 1 if a.klass[node] >= 0 else 1) if inside else 0
            return self._enter_args(tool, nxt, strs, int(state[4] or 0) + 1, calls)
        # XGrammar slot
        box = state[4]
        matcher = box[0]
        row = self._xg_row(state)
        if token not in self.end_ids and (int(row[token >> 5]) >> (token & 31)) & 1:
            if not matcher.accept_token(token):  # pragma: no cover - the mask allowed it
                return ToolState(self.DEAD, 0)
            return ToolState(self.XG, node, steps + 1, tool, [matcher, None, box[2] + 1], calls)
        if matcher.is_completed():
            nxt = a.advance(node, token)
            if nxt >= 0:
                strs = 1 if a.klass[nxt] >= 0 else 0
                return self._enter_args(tool, nxt, strs, box[2] + 1, calls)
        return ToolState(self.DEAD, 0)

    def _enter_args(
        self, tool: int, state: int, steps: int = 0, total: int = 0, calls: int = 0
    ) -> ToolState:
        a = self.tools.automaton(tool, hold=self._hold)
        ex = a.exits.get(state)
        if ex is not None:
            import xgrammar as xgr

            matcher = xgr.GrammarMatcher(self.tools.grammar(ex.key))
            return ToolState(self.XG, ex.reentry, 0, tool, [matcher, None, total], calls)
        if a.accept[state]:
            if self.next_names is not None and self._more(calls):
                return ToolState(self.NEXT, self.next_names.root, 0, -1, None, calls + 1)
            if self._finish is not None:
                return ToolState(self.FINISH, self._finish.root)
            return ToolState(self.DONE, 0)
        return ToolState(self.ARGS, state, steps, tool, total, calls)

    def _more(self, calls: int) -> bool:
        """Another call may follow the current one."""
        return self.next_names is not None and calls + 1 < self.max_calls

    def _xg_row(self, state: Any) -> npt.NDArray[np.int32]:
        box = state[4]
        if box[1] is None:
            import xgrammar as xgr

            bm = xgr.allocate_token_bitmask(1, self.width)
            box[0].fill_next_token_bitmask(bm, 0)
            box[1] = bm[0].numpy().copy()
        row: npt.NDArray[np.int32] = box[1]
        return row

    # -- free text -----------------------------------------------------------------------------
    def _syntax(self, j: int) -> ToolCallPlan:
        """The plan of call syntax ``j`` (0: this one, else the ``j``-th other opener's)."""
        return self._alts[j - 1] if j else self

    def _advance_free(self, stage: int, k: int, steps: int, token: int) -> ToolState:
        fr = self._frees[stage]
        if token in self.end_ids:
            if fr.allow_end:
                return ToolState(self.TERMINATED, 0)
            return ToolState(self.DEAD, 0)
        if not self._free_allows(stage, k, steps, token):
            return ToolState(self.DEAD, 0)
        data = self._tokens[token] if token < len(self._tokens) else b""
        k2, done, j = fr.step(k, data)
        if done >= 0:
            if stage + 1 < self.NAME:
                return ToolState(stage + 1, self._frees[stage + 1].initial)
            node = self._syntax(j)._walk_rest(data[done:])
            if node < 0:
                return ToolState(self.DEAD, 0)
            return ToolState(self.NAME, node, len(data) - done, fmt=j)
        return ToolState(stage, k2, steps + 1)

    def _enters(self, j: int, rest: bytes) -> bool:
        """``rest`` (a token's bytes past trigger ``j``) starts a call in syntax ``j``."""
        return self._syntax(j)._walk_rest(rest) >= 0

    def _walk_rest(self, rest: bytes) -> int:
        """The names-trie node after ``rest``, the part of a token past the ``auto`` trigger
        (``>\n`` crosses from ``<tool_call>`` into the call), or -1 if it leaves the trie."""
        node = self.names.root
        for b in rest:
            tok = self._single_bytes().get(b)
            if tok is None:
                return -1
            node = self.names.advance(node, tok)
            if node in (self.names.DEAD, self.names.END) or self.names.is_terminal(node):
                return -1
        return node

    def _single_bytes(self) -> dict[int, int]:
        if self._singles is None:
            self._singles = counter(self.vocabulary).singles  # one pass per vocabulary
        return self._singles

    def _free_allows(self, stage: int, k: int, steps: int, token: int) -> bool:
        row = self._free_row(stage, k, self._forcing(stage, steps))
        return bool((int(row[token >> 5]) >> (token & 31)) & 1)

    def _forcing(self, stage: int, steps: int) -> bool:
        fr = self._frees[stage]
        return fr.max_tokens is not None and steps >= fr.max_tokens

    def _free_row(
        self, stage: int, k: int, forcing: bool, forbid: bool = False
    ) -> npt.NDArray[np.int32]:
        """The free-text row at delimiter progress ``k``; ``forbid``: the trigger may not
        complete here even where the stage allows it (``auto`` once no call can close)."""
        key = (stage, k, forcing, forbid)
        row = self._free_rows.get(key)
        if row is not None:
            return row
        fr = self._frees[stage]
        forbid = forbid or fr.forbid
        matchable = self.vocabulary.matchable
        if forcing:  # only the rest of the delimiter, any split
            row = pack_ids(fr.spelling(k, self._tokens, matchable), self.width)
        else:
            crosses = fr.allow_end and stage + 1 == self.NAME  # the auto triggers
            enters = self._enters if crosses else None
            bad = fr.blocked(k, self._tokens, matchable, forbid=forbid, enters=enters)
            allowed = np.flatnonzero(matchable)
            row = pack_ids(allowed, self.width)
            if bad:
                clear = pack_ids(bad, self.width)
                row &= ~clear
            if fr.allow_end:
                row |= self._end_row
            if self._turn is not None and fr.allow_end and not forbid:
                row |= self._turn.marker_row  # the trigger as one special token ([TOOL_CALLS])
        self._free_rows[key] = row
        return row

    # -- masks -----------------------------------------------------------------------------------
    def fill_next_token_bitmask(
        self, state: Any, bitmask: npt.NDArray[np.int32], index: int = 0, *,
        remaining: int | None = None,
    ) -> None:  # fmt: skip
        """``remaining``: tokens the output may still have, this one included; given, only
        tokens after which the turn can still close (:class:`~.closing.TurnCloser`)."""
        fmt = int(state[6]) if len(state) > 6 else 0
        if fmt and self._alts and int(state[0]) >= self.NAME:
            sub = self._alts[fmt - 1]
            sub.fill_next_token_bitmask(state, bitmask, index, remaining=remaining)
            return
        self._fill(state, bitmask, index)
        if remaining is not None:
            self._closer = self._closer or TurnCloser(self, self._subset)
            self._closer.narrow(state, bitmask[index], remaining)

    def _fill(self, state: Any, bitmask: npt.NDArray[np.int32], index: int) -> None:
        row = bitmask[index]
        stage, node = int(state[0]), int(state[1])
        if stage < 0:
            row[:] = self._end_row
            return
        if stage < self.NAME:
            steps = int(state[2]) if len(state) > 2 else 0
            row[:] = self._free_row(stage, node, self._forcing(stage, steps))
            return
        if stage == self.NAME:
            self.names.fill_next_token_bitmask(node, bitmask, index)
            if self._turn is not None and self._turn.marker_node >= 0 and node == self.names.root:
                row |= self._turn.marker_row  # the opening's marker as one special token
            return
        if stage == self.NEXT:
            assert self.next_names is not None
            self.next_names.fill_next_token_bitmask(node, bitmask, index)
            if node == self._next_end:  # another call, or the end of the turn
                row |= self._end_row
            elif node == self._fork:  # another call, or the turn's closing text
                row |= self._turn.close_row  # type: ignore[union-attr]
            return
        if stage == self.FINISH:
            assert self._finish is not None
            self._finish.fill_next_token_bitmask(node, bitmask, index)
            return
        a: ToolAutomaton = self.tools.automaton(int(state[3]), hold=self._hold)
        steps = int(state[2])
        if stage == self.ARGS:
            over = self.string_max_tokens is not None and steps >= self.string_max_tokens
            over = over or (self.max_tokens is not None and int(state[4] or 0) >= self.max_tokens)
            if over:
                toward = a.toward_end(node)
                if toward is not None:
                    row[:] = pack_ids(toward, self.width)
                    return
            a.fill(node, row)
            if self._turn is not None:  # tokens crossing from the call's end into what follows
                self._turn.widen(a, node, self._more(int(state[5]) if len(state) > 5 else 0), row)
            return
        xrow = self._xg_row(state)
        row[:] = xrow & self._json_safe()
        if state[4][0].is_completed():
            row &= ~self._end_row
            tmp = np.empty_like(row)
            a.fill(node, tmp)
            row |= tmp
        budget, total, cap = self.slot_max_tokens, int(state[4][2]), self.max_tokens
        if (budget is not None and budget <= steps < 3 * budget) or (
            cap is not None and cap <= total < 3 * cap
        ):
            narrow_slot(self, state[4][0], row)

    def _json_safe(self) -> npt.NDArray[np.int32]:
        """Tokens without raw control characters (never valid in compact JSON; XGrammar 0.2's
        length-bounded strings let them through), plus the end ids."""
        if self._safe_row is None:
            vocab = self.vocabulary
            buf, off = vocab.buffer, vocab.offsets
            bad_pos = np.flatnonzero(buf < 0x20)
            bad = np.zeros(len(vocab), dtype=bool)
            if len(bad_pos):
                bad[np.searchsorted(off, bad_pos, side="right") - 1] = True
            ok = np.flatnonzero(~bad & vocab.matchable)
            self._safe_row = pack_ids(ok, self.width) | self._end_row
        return self._safe_row

    def allowed_token_ids(self, state: Any, remaining: int | None = None) -> npt.NDArray[np.int32]:
        row = np.zeros((1, self._words), dtype=np.int32)
        self.fill_next_token_bitmask(state, row, 0, remaining=remaining)
        return bitmask_to_ids(row[0], self.width).astype(np.int32)

    def forced_tokens(self, state: Any, *, limit: int = 64) -> list[int]:
        """No fast-forward for tool calls yet: always ``[]``."""
        return []

    def choices(self, token_ids: Sequence[int]) -> dict[str, str]:
        """``{"name": tool}`` once a tool name is complete in ``token_ids``."""
        state: Any = self.start()
        tool = -1
        for t in token_ids:
            state = self.advance(state, int(t))
            if state[0] in (self.ARGS, self.XG):
                tool = int(state[3])
                break
            elif state[0] == self.DEAD:
                break
            elif state[0] == self.DONE and tool < 0:  # arguments ended within the name's token
                tool = -2
        if tool == -2:
            return self._name_from_text(token_ids)
        return {"name": self.tools.specs[tool].name} if tool >= 0 else {}

    def _name_from_text(self, token_ids: Sequence[int]) -> dict[str, str]:
        text = self.vocabulary.decode(int(t) for t in token_ids).decode("utf-8", "replace")
        try:
            call = self.parse(text, validate=False)
        except ToolCallError:
            return {}
        return {} if call is None else {"name": call.name}

    # -- results ---------------------------------------------------------------------------------
    def parse(self, text: str, *, validate: bool = True) -> ToolCall | None:
        """The (first) tool call in ``text`` (an output of this plan), validated against the
        tool's schema; ``None`` when the output is text without a call (``"auto"`` / ``"none"``).
        Raises :class:`ToolCallError` naming the problem when a call is not valid."""
        calls = self.parse_calls(text, validate=validate).calls
        return calls[0] if calls else None

    def parse_calls(self, text: str, *, validate: bool = True) -> ParsedOutput:
        """Every call in ``text`` and the text around them (:class:`ParsedOutput`)."""
        reasoning = ""
        if self._frees and self._frees[0].max_tokens is not None:  # think
            end = self._frees[0].trigger.decode()
            cut = text.find(end)
            if cut < 0:
                raise ToolCallError(f"no {end!r} closes the thinking part: {text[-80:]!r}")
            reasoning, text = text[:cut], text[cut + len(end) :]
        if self.tool_choice == "none":
            return ParsedOutput(text, [], reasoning)
        syntax = self
        if self._alts:  # the syntax whose opener completes first, as in decoding
            j = first_trigger(text, [s.format.watch for s in (self, *self._alts)])[2]
            syntax = self._syntax(max(j, 0))
        content, objects = split_calls(syntax.format, text, auto=self.tool_choice == "auto")
        if not objects and self.tool_choice != "auto":
            raise ToolCallError(f"no {self.format.name} tool call in the output: {text[:80]!r}")
        calls = [parse_tool_call(o, syntax.tools, validate=validate) for o in objects]
        return ParsedOutput(content, calls, reasoning)
