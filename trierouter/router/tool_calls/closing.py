"""A tool-call turn that always closes before the request's token limit.

A sampled call can run long (a model that keeps adding calls, or writes ``0, 0, 0, ...`` into an
array) and be cut by ``max_tokens`` mid-object. :class:`TurnCloser` narrows a
:class:`~trierouter.router.tool_calls.plan.ToolCallPlan` mask, given the tokens the output may still
have (``remaining``, the token being chosen included), to the tokens after which a completion of
the turn (the open value, the call, the format's suffix and the end id) still fits.

The completion counted from each point is one fixed text: the shortest byte path to the end of
the arguments automaton (a shortest-path tree, so the path from the next point on the path is
the rest of this one) cut into tokens greedily, longest token first. Its first token is always
allowed and leaves exactly one token less to go, so the narrowed mask is never empty once the
limit was reachable: the turn ends with its end id within ``max_tokens``.

- arguments: per automaton state, that completion's tokens (an XGrammar slot is costed
  :data:`SLOT_RESERVE` tokens plus the rest after it: a slot's JSON has no shortest length
  here, the plan steers it toward completion instead, so a slot is best effort);
- names: the rest of the call head and name, plus that tool's shortest arguments: a call opens
  only when it can close; after a call, the turn's end is always among the choices and another
  call is counted against what is left;
- free text (think, ``auto``): the think delimiter is forced early enough for the most expensive
  call; under ``auto``, once a call could no longer close, the text goes on but may not open
  one (the trigger is taken out of the mask).

A plan over more than :data:`EXACT_TOOLS` tools costs an unknown tool's arguments
:data:`ARGS_GUESS` tokens (building every automaton of a 100,000-tool registry to size them is
not worth it); the arguments of a chosen tool are always exact.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from trierouter.registry.analysis import STEP_WORK
from trierouter.registry.slots.masks import ToolAutomaton, pack_ids
from trierouter.router.bitmask import bitmask_to_ids
from trierouter.router.tool_calls.greedy import INF as _INF
from trierouter.router.tool_calls.greedy import GreedyCounter, flat_texts
from trierouter.router.tool_calls.greedy import counter as _counter

if TYPE_CHECKING:
    from trierouter.registry.trie import ChoiceSet

__all__ = [
    "ARGS_GUESS",
    "EXACT_TOOLS",
    "SLOT_RESERVE",
    "GreedyCounter",
    "NameTable",
    "TurnCloser",
    "narrow_slot",
    "plan_tables",
    "shortest_paths",
]

SLOT_RESERVE = 8
"""Tokens an XGrammar slot is costed when the shortest completion is counted."""
EXACT_TOOLS = 256
"""Plans over at most this many tools size every tool's arguments exactly."""
ARGS_GUESS = 32
"""Tokens of arguments assumed for a tool not sized exactly (plans over many tools)."""

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
NameTable = tuple[I64, I64, int]
"""A names trie's closing costs before the close: the nodes names pass (sorted), per node the
fewest tokens of a name's rest plus its arguments, and the most over every name and node."""
ToolCallPlan = Any
"""A :class:`~trierouter.router.tool_calls.plan.ToolCallPlan` (not imported: it imports this)."""


def shortest_paths(a: ToolAutomaton) -> tuple[I64, I64, I64]:
    """``(dist, toward, byte)``: per state of ``a`` the bytes to the nearest end (acceptance, or
    an exit: an XGrammar slot, costed :data:`SLOT_RESERVE` plus its re-entry state's distance),
    the next state on that path and the byte leading there (-1 at an end or unreachable)."""
    n = a.n_states
    rep = np.full(int(a.byte_class.max()) + 1, -1, dtype=np.int64)
    for b in [*range(0x20, 0x7F), *range(0x20), *range(0x7F, 0x100)]:  # printable first
        k = int(a.byte_class[b])
        if rep[k] < 0:
            rep[k] = b
    src, col = np.nonzero(a.table >= 0)
    dst = a.table[src, col].astype(np.int64)
    order = np.argsort(dst, kind="stable")
    rsrc, rcol, rdst = src[order], col[order], dst[order]
    start = np.searchsorted(rdst, np.arange(n + 1))
    dist = np.full(n, _INF, dtype=np.int64)
    for _ in range(len(a.exits) + 2):  # exits can lead to exits: iterate to a fixed point
        init = {int(x): 0 for x in np.flatnonzero(a.accept)}
        for e, ex in a.exits.items():
            via = int(dist[ex.reentry]) + SLOT_RESERVE
            if via < init.get(e, _INF):
                init[e] = via
        new = np.full(n, _INF, dtype=np.int64)
        toward = np.full(n, -1, dtype=np.int64)
        byte = np.full(n, -1, dtype=np.int64)
        buckets: dict[int, list[int]] = {}
        for s, d in init.items():
            new[s] = d
            buckets.setdefault(d, []).append(s)
        while buckets:  # unit-weight Dijkstra: one bucket per distance
            d = min(buckets)
            for x in buckets.pop(d):
                if new[x] != d:
                    continue
                lo, hi = start[x], start[x + 1]
                for y, k in zip(rsrc[lo:hi].tolist(), rcol[lo:hi].tolist(), strict=True):
                    if new[y] > d + 1 and rep[k] >= 0:
                        new[y], toward[y], byte[y] = d + 1, x, rep[k]
                        buckets.setdefault(d + 1, []).append(y)
        if np.array_equal(new, dist):
            break
        dist = new
    return dist, toward, byte


_TIERS: dict[tuple[str, int], list[I32]] = {}


def _tiers(plan: ToolCallPlan) -> list[I32]:
    vocab = plan.vocabulary
    key = (vocab.hash, plan.width)
    rows = _TIERS.get(key)
    if rows is None:
        rows = []
        by_bytes = {t: i for i, t in enumerate(vocab.tokens) if vocab.matchable[i]}
        for chars in (b'"]}', b": 0"):
            ids = [by_bytes[bytes([c])] for c in chars if bytes([c]) in by_bytes]
            rows.append(pack_ids(ids, plan.width))
        rows = _TIERS[key] = rows
        while len(_TIERS) > 8:
            _TIERS.pop(next(iter(_TIERS)))
    return rows


def narrow_slot(plan: ToolCallPlan, matcher: Any, row: I32) -> None:
    """Over budget in an XGrammar slot: prefer a token that completes the value, then one of
    ``"``, ``]``, ``}``, then one of ``:``, space, ``0`` (a random model would otherwise wander
    inside free JSON for ever)."""
    tiers = _tiers(plan)
    cand = bitmask_to_ids(row & (tiers[0] | tiers[1]), plan.width).tolist()
    done = []
    for t in cand:
        f = matcher.fork()
        if f.accept_token(int(t)) and f.is_completed():
            done.append(int(t))
    if done:
        row[:] = pack_ids(done, plan.width)
        return
    for tier in tiers:
        narrowed = row & tier
        if narrowed.any():
            row[:] = narrowed
            return


def _next_states(a: ToolAutomaton, state: int, ids: npt.NDArray[Any]) -> I64:
    """The state of ``a`` after each token of ``ids`` from ``state`` (-1: refused), vectorized
    over the tokens' bytes (each byte position over the tokens long enough and still alive: a
    state allowing the whole vocabulary costs its bytes, not its longest token times its size)."""
    t = a.t
    ids = np.asarray(ids, dtype=np.int64)
    lo, ln = t.start[ids].astype(np.int64), t.lengths[ids].astype(np.int64)
    cur = np.full(len(ids), state, dtype=np.int64)
    live = np.arange(len(ids))  # the tokens still walking: most are short, so few go on
    for p in range(int(ln.max()) if len(ln) else 0):
        live = live[ln[live] > p]
        if not len(live):
            break
        nxt = a.table[cur[live], a.byte_class[t.buffer[lo[live] + p]]]
        cur[live] = nxt
        live = live[nxt >= 0]
    return cur


class _Sized:
    """One automaton's completions: per state the tokens of its shortest completion, and per
    visited state the worst count one allowed token leads to."""

    def __init__(self, a: ToolAutomaton, counter: GreedyCounter) -> None:
        self.a = a
        self.counter = counter
        self.dist, self.toward, self.byte = shortest_paths(a)
        finite = self.dist[self.dist < _INF]
        self.top = int(finite.max()) if len(finite) else 0
        """Most bytes of any completion: no completion has more tokens."""
        self._tokens: dict[int, int] = {}
        self.reach: dict[int, int] = {}
        self.after: OrderedDict[int, tuple[I64, I64]] = OrderedDict()

    def tokens(self, state: int) -> int:
        """Tokens of the completion from ``state`` (an upper bound of the fewest)."""
        hit = self._tokens.get(state)
        if hit is not None:
            return hit
        if self.dist[state] >= _INF:
            return _INF
        path, s = bytearray(), state
        while self.toward[s] >= 0:
            path.append(int(self.byte[s]))
            s = int(self.toward[s])
        n = self.counter.count(bytes(path))
        ex = self.a.exits.get(s)
        if ex is not None:
            n += SLOT_RESERVE + self.tokens(ex.reentry)
        self._tokens[state] = n
        return n

    def _after(self, state: int) -> tuple[I64, I64]:
        hit = self.after.get(state)
        if hit is None:
            ids = self.a.allowed(state).astype(np.int64)
            nxt = _next_states(self.a, state, ids)
            uniq, inv = np.unique(nxt, return_inverse=True)
            per = np.asarray([self.tokens(int(u)) if u >= 0 else _INF for u in uniq.tolist()])
            d = per[inv].astype(np.int64) if len(uniq) else np.zeros(0, dtype=np.int64)
            hit = self.after[state] = (ids, d)
            self.reach[state] = int(d.max()) if len(d) else 0
            while len(self.after) > 16:
                self.after.popitem(last=False)
        else:
            self.after.move_to_end(state)
        return hit

    def within(self, state: int, budget: int, width: int) -> I32 | None:
        """Packed row of the tokens after which the completion has at most ``budget`` tokens;
        ``None`` when every allowed token is (nothing to narrow)."""
        if budget >= self.top:
            return None
        reach = self.reach.get(state)
        if reach is not None and reach <= budget:
            return None
        ids, d = self._after(state)
        if self.reach[state] <= budget:
            return None
        return pack_ids(ids[d <= budget], width)


def _name_nodes(
    names: ChoiceSet, flat: tuple[npt.NDArray[np.uint8], I64, I64], singles: dict[int, int]
) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Per slot of ``flat`` (:func:`~.greedy.flat_texts` of the names' byte paths), the node of
    ``names`` after the path's bytes before it, each byte as its one-byte token (all paths one
    depth at a time); and per path whether it stays in the trie to its end (never ``DEAD`` or
    ``END``)."""
    data, offsets, _ = flat
    sizes = np.diff(offsets) - 1
    byte_token = np.full(256, -1, dtype=np.int64)
    for b, t in singles.items():
        byte_token[b] = t
    nodes = np.full(len(data), names.root, dtype=np.int64)
    walked = np.ones(len(sizes), dtype=bool)
    live = np.arange(len(sizes))
    cur = np.full(len(sizes), names.root, dtype=np.int64)
    for d in range(int(sizes.max(initial=0))):
        live = live[sizes[live] > d]
        tok = byte_token[data[offsets[live] + d]]
        spelt = tok >= 0
        nxt = np.full(len(live), names.DEAD, dtype=np.int64)
        if spelt.any():
            nxt[spelt] = names.advance_batch(cur[live[spelt]], tok[spelt])
        gone = (nxt == names.DEAD) | (nxt == names.END)
        walked[live[gone]] = False
        live, nxt = live[~gone], nxt[~gone]
        cur[live] = nxt
        nodes[offsets[live] + d + 1] = nxt
    return nodes, walked


class TurnCloser:
    """Narrows a :class:`~trierouter.router.tool_calls.plan.ToolCallPlan`'s masks so that the turn
    can close within the tokens left (module docstring)."""

    def __init__(self, plan: ToolCallPlan, subset: list[str] | None) -> None:
        self.plan = plan
        self.counter = _counter(plan.vocabulary)
        self.held = plan.format.held(hold=plan._hold).encode()
        self.ending = plan.format.ending(held=self.held.decode()).encode()
        self.close = self.counter.count(self.ending) + 1
        """Tokens after an accepted call: the held characters, the turn's closing text (``]``)
        and the end id."""
        names = subset if subset is not None else [s.name for s in plan.tools.specs]
        self.exact = len(names) <= EXACT_TOOLS
        self.whole = subset is None
        """Every tool of the plan's registry: a prepared table may serve (:meth:`name_table`)."""
        self._names = names
        self._sized: OrderedDict[int, _Sized] = OrderedDict()
        self._costs: dict[int, tuple[dict[int, int], int]] = {}

    # -- sizes -----------------------------------------------------------------------------------
    def sized(self, tool: int) -> _Sized:
        a = self.plan.tools.automaton(tool, hold=self.plan._hold)
        s = self._sized.get(tool)
        if s is None or s.a is not a:
            s = self._sized[tool] = _Sized(a, self.counter)
            while len(self._sized) > EXACT_TOOLS:
                self._sized.popitem(last=False)
        return s

    def lead_of(self, names: ChoiceSet) -> str:
        """The text before each name in ``names`` (the plan's first or following call)."""
        plan = self.plan
        if names is plan.next_names:
            return str(plan.format.lead(following=True, held=self.held.decode()))
        return str(plan.format.lead(after_trigger=plan.tool_choice == "auto"))

    @property
    def variant(self) -> str:
        """How :meth:`name_table` sizes arguments: guessed (``g``), or exactly with or without
        the held suffix (``h1``, ``h0``); a prepared table is kept per variant."""
        return f"h{int(self.plan._hold)}" if self.exact else "g"

    def name_table(self, names: ChoiceSet, lead: str | None = None) -> NameTable:
        """``names``' :data:`NameTable` over every name of the plan (after ``lead``, default
        :meth:`lead_of`): prepared with the trie (:meth:`CompiledTools.names_for`, e.g. by a
        server's worker process) or computed now."""
        lead = self.lead_of(names) if lead is None else lead
        if self.whole:
            hit = self.plan.tools.prepared_table(lead, names, self.variant)
            if hit is not None:
                return cast(NameTable, hit)
            STEP_WORK["closer_table"] += 1
        plan, tools = self.plan, self.plan.tools
        tail = plan.format.name_tail
        paths = [(tools.name_text(name, lead) + tail).encode() for name in self._names]
        args = np.full(len(paths), ARGS_GUESS, dtype=np.int64)
        if self.exact:
            args[:] = [self.sized(tools.tool_index(name)).tokens(0) for name in self._names]
        flat = flat_texts(paths)
        nodes, walked = _name_nodes(names, flat, plan._single_bytes())
        rests = self.counter.suffix_counts_many(paths, flat)
        owner = np.repeat(np.arange(len(paths)), np.diff(flat[1]))
        keep = walked[owner]
        at, c = nodes[keep], rests[keep] + args[owner[keep]]
        most = int(c.max()) if len(c) else 0
        order = np.lexsort((c, at))
        at, c = at[order], c[order]
        first = np.flatnonzero(np.r_[True, at[1:] != at[:-1]]) if len(at) else at
        table: NameTable = (at[first], c[first], most)
        if self.whole:  # kept with the tools: the next plan over them (another budget) reuses it
            tools.keep_table(lead, names, self.variant, table)
        return table

    def node_costs(self, names: ChoiceSet) -> tuple[dict[int, int], int]:
        """Per node of ``names``, the tokens of the cheapest completion of the turn from there
        (the rest of a call head and name, that tool's shortest arguments and the close; in the
        trie of a following call, also the held characters then the end id), and the most
        expensive call from the root."""
        key = id(names)
        hit = self._costs.get(key)
        if hit is not None:
            return hit
        at, cheapest, most = self.name_table(names)
        close, count = self.close, self.counter.count
        costs: dict[int, int] = dict(
            zip(at.tolist(), np.minimum(cheapest + close, _INF).tolist(), strict=True)
        )
        if names is self.plan.next_names:  # the held characters (the closing text), the end id
            singles = self.plan._single_bytes()
            node = names.root
            for depth in range(len(self.held) + 1):
                costs[node] = min(count(self.ending[depth:]) + 1, costs.get(node, _INF))
                if depth < len(self.held):
                    node = names.advance(node, singles[self.held[depth]])
        hit = self._costs[key] = (costs, most + close if len(at) else 0)
        return hit

    # -- masks -----------------------------------------------------------------------------------
    def narrow(self, state: Any, row: I32, remaining: int) -> None:
        """Narrow ``row`` (the plan's mask at ``state``) in place to tokens after which the turn
        still closes within ``remaining - 1`` further tokens; left as is when none does
        (``remaining`` below the cheapest completion: the limit was unreachable)."""
        plan = self.plan
        stage = int(state[0])
        left = remaining - 1
        if stage < 0 or stage == plan.FINISH:  # the end id, or the held characters then it
            return
        keep: I32 | None = None
        if stage < plan.NAME:
            keep = self._free(stage, int(state[1]), left)
        elif stage in (plan.NAME, plan.NEXT):
            names = plan.names if stage == plan.NAME else plan.next_names
            assert names is not None
            keep = self._names_row(names, int(state[1]), row, left)
        elif stage == plan.ARGS:
            keep = self.sized(int(state[3])).within(int(state[1]), left - self.close, plan.width)
            if plan._turn is not None:
                keep = self._crossing(state, left, keep)
        elif stage == plan.XG:
            rest = self.sized(int(state[3])).tokens(int(state[1])) + self.close + SLOT_RESERVE
            if left < rest:
                narrow_slot(plan, state[4][0], row)
            return
        if keep is None:
            return
        narrowed = row & keep
        if narrowed.any():
            row[:] = narrowed
        elif keep.any():  # the plan's own steering went elsewhere: closing wins
            row[:] = keep

    def _crossing(self, state: Any, left: int, keep: I32 | None) -> I32 | None:
        """``keep`` with the tokens crossing from a call's end (``}},``, ``}]``) kept only where
        the turn still closes after them."""
        plan, tool, node = self.plan, int(state[3]), int(state[1])
        turn = plan._turn
        assert turn is not None
        calls = int(state[5]) if len(state) > 5 else 0
        a = plan.tools.automaton(tool, hold=plan._hold)
        cross = turn.crossing(a, node, plan._more(calls))
        if not cross:
            return keep
        costs = self.node_costs(plan.next_names)[0] if plan.next_names is not None else {}
        fits = []
        for t, cut in cross:
            after = turn.after(a, node, t, plan._more(calls), calls)
            if after is None:  # pragma: no cover - crossing() listed it
                continue
            if after[0] == plan.FINISH:
                rest = plan.vocabulary.tokens[t][cut:]
                cost = self.counter.count(self.ending[len(rest) :]) + 1
            else:
                cost = costs.get(int(after[1]), _INF)
            if cost <= left:
                fits.append(t)
        if keep is None:
            if len(fits) == len(cross):
                return None
            keep = np.zeros_like(turn.close_row)
            a.fill(node, keep)
        return keep | pack_ids(fits, plan.width)

    def _names_row(self, names: ChoiceSet, node: int, row: I32, left: int) -> I32 | None:
        costs, most = self.node_costs(names)
        if most <= left:
            return None
        plan = self.plan
        ends = set(plan.end_ids)
        fork = plan._finish if names is plan.next_names and node == plan._fork else None
        turn = plan._turn if names is plan.names else None
        ok = []
        for t in bitmask_to_ids(row, plan.width).tolist():
            mark = turn.marked(node, t) if turn is not None else -1  # [TOOL_CALLS] as one token
            if t in ends or costs.get(names.advance(node, t) if mark < 0 else mark, _INF) <= left:
                ok.append(t)
            elif fork is not None and fork.advance(fork.root, t) != fork.DEAD:  # the close
                rest = self.ending[len(plan.vocabulary.tokens[t]) :]
                if self.counter.count(rest) + 1 <= left:
                    ok.append(t)
        return pack_ids(ok, self.plan.width)

    def _free(self, stage: int, k: int, left: int) -> I32 | None:
        plan = self.plan
        fr = plan._frees[stage]
        need = self.counter.count(fr.rest(k)) + self.node_costs(plan.names)[1]
        if fr.forbid or left >= need:
            return None
        if fr.allow_end:  # auto: a call could no longer close; the text goes on without one
            without: I32 = plan._free_row(stage, k, False, forbid=True)
            return without
        forced: I32 = plan._free_row(stage, k, True)  # think: the rest of the delimiter now
        return forced


def plan_tables(plan: ToolCallPlan) -> list[tuple[str, str, ChoiceSet, dict[str, NameTable]]]:
    """Every names trie over all tools that ``plan`` compiled (its first and following calls,
    the tools' own call head, in its own syntax and its other openers'), each as
    ``(call format, lead, trie, {variant: table})``: what a server's worker compiles for the
    engine (:meth:`AnalysisStore.put_names`)."""
    out = []
    for p in [plan, *plan._alts]:
        if p._subset is not None:
            continue
        closer = TurnCloser(p, None)
        for lead, names in list(p.tools._tries.items()):
            out.append(
                (p.format.name, lead, names, {closer.variant: closer.name_table(names, lead)})
            )
    return out
