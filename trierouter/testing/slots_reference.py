"""The slot automata's Python constructions: the oracles the compiled core is tested against.

The library builds every argument automaton in the core alone (subset construction, integer
ranges, an object's key automaton, the wiring of fragments, byte classes). These are the
independent Python forms of the same constructions, state for state where the core mirrors them
(integer ranges, key automata, wiring) and up to state numbering where it does not (the subset
construction). :func:`reference_slots` runs the whole slot compiler on them, so a tool's
automaton can be built both ways and compared (:mod:`trierouter.testing.fuzz_tools`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Iterator, Sequence
from json.encoder import encode_basestring
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.registry.slots import (
    dispatch,
    formats,
    fragment,
    nfa,
    objects,
    ranges,
    regex,
    schema_fragments,
)
from trierouter.registry.slots.fragment import I32, NO_EDGE, Exit, Fragment
from trierouter.registry.slots.nfa import TooManyStates, _Nfa, _Node, lit, seq
from trierouter.registry.slots.packing import narrow_table
from trierouter.registry.slots.regex import pattern_node

__all__ = [
    "Builder",
    "compress",
    "integer_range_fragment",
    "key_automaton",
    "pattern_fragment",
    "reference_slots",
    "subset_fragment",
]


# -- subset construction ---------------------------------------------------------------------


def _closure(nfa: _Nfa, states: Iterable[int]) -> frozenset[int]:
    seen = set(states)
    todo = list(seen)
    while todo:
        s = todo.pop()
        for t in nfa.eps[s]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return frozenset(seen)


def subset_fragment(node: _Node, max_states: int | None = None) -> Fragment:
    """:func:`~trierouter.registry.slots.nfa.nfa_fragment` in Python: the same automaton,
    states numbered in discovery order (the core numbers them its own way)."""
    nfa = _Nfa()
    start = nfa.state()
    final = nfa.build(node, start)
    first = _closure(nfa, [start])
    ids = {first: 0}
    order = [first]
    rows: list[npt.NDArray[np.int32]] = []
    i = 0
    while i < len(order):
        cur = order[i]
        i += 1
        targets: dict[int, set[int]] = {}
        for s in cur:
            for chars, t in nfa.edges[s]:
                for c in chars:
                    targets.setdefault(c, set()).add(t)
        row = np.full(256, NO_EDGE, dtype=np.int32)
        for c, ts in targets.items():
            key = _closure(nfa, ts)
            if key not in ids:
                ids[key] = len(order)
                order.append(key)
            row[c] = ids[key]
        rows.append(row)
        if max_states is not None and len(order) > max_states:
            raise TooManyStates(f"the automaton has more than {max_states} states")
    table = np.stack(rows)
    accept = np.array([final in s for s in order], dtype=bool)
    return Fragment.dense(table, accept)


def pattern_fragment(pattern: str, *, max_states: int | None = None) -> Fragment | None:
    """:func:`~trierouter.registry.slots.regex.pattern_fragment` in Python: the pattern parsed
    by :func:`~trierouter.registry.slots.regex.pattern_node`, then :func:`subset_fragment`."""
    node = pattern_node(pattern)
    if node is None:
        return None
    return subset_fragment(seq(lit('"'), node, lit('"')), max_states)


# -- integer ranges --------------------------------------------------------------------------


# A digits state of integer_range_fragment: a set of (digits left, lowest and highest allowed
# rest of the digits, None: any) for the values of one length, and ("tail", t): at least t more
# digits, any (a range without upper bound); ("tail0", t): the same, the first one not 0.
_Elem = tuple[int | str, object, object]


def _digits_start(lo: int, hi: int | None) -> frozenset[_Elem]:
    """The digits state before a canonical decimal in ``[max(lo, 1), hi]`` (hi None: any)."""
    a = max(lo, 1)
    if hi is not None and hi < a:
        return frozenset()
    n_a = len(str(a))
    out: set[_Elem] = set()
    for n in range(n_a, (len(str(hi)) if hi is not None else n_a) + 1):
        first, last = max(a, 10 ** (n - 1)), 10**n - 1 if hi is None else min(hi, 10**n - 1)
        if first <= last:
            out.add((n, str(first), str(last)))
    if hi is None:
        out.add(("tail0", n_a + 1, None))
    return frozenset(out)


def _digit_step(state: frozenset[_Elem], d: str) -> frozenset[_Elem]:
    out: set[_Elem] = set()
    for elem in state:
        r, low, high = elem
        if r.__class__ is str:  # a tail: ("tail" | "tail0", digits still needed, None)
            if r == "tail" or d != "0":
                out.add(("tail", max(low - 1, 0), None))  # type: ignore[operator]
            continue
        if not r:
            continue
        if low is not None:
            c = low[0]  # type: ignore[index]
            if d < c:
                continue
            low = low[1:] if d == c and low[1:].strip("0") else None  # type: ignore[index]
        if high is not None:
            c = high[0]  # type: ignore[index]
            if d > c:
                continue
            high = high[1:] if d == c and high[1:].strip("9") else None  # type: ignore[index]
        out.add((r - 1, low, high))  # type: ignore[operator]
    return frozenset(out)


def integer_range_fragment(lo: int | None, hi: int | None) -> Fragment | None:
    """:func:`~trierouter.registry.slots.ranges.integer_range_fragment` in Python: each state
    the set of digit constraints still open, the same states in the same order as the core."""
    zero = (lo is None or lo <= 0) and (hi is None or hi >= 0)
    pos = _digits_start(max(lo, 0) if lo is not None else 0, hi) if hi is None or hi > 0 else None
    neg = None
    if lo is None or lo < 0:  # "-" then 1..(-lo), never "-0"
        neg = _digits_start(1 if hi is None or hi >= 0 else -hi, None if lo is None else -lo)
    if not zero and not pos and not neg:
        return None
    done: frozenset[_Elem] = frozenset({(0, None, None)})
    ids: dict[frozenset[_Elem], int] = {}
    order: list[frozenset[_Elem]] = []
    src: list[int] = []
    byte: list[int] = []
    dst: list[int] = []

    def state(key: frozenset[_Elem]) -> int:
        if key not in ids:
            ids[key] = len(order) + 1
            order.append(key)
        return ids[key]

    for d in "-0123456789":  # the start state (0): a sign, a lone zero, or a first digit
        if d == "-":
            nxt = neg
        elif d == "0":
            nxt = done if zero else None
        else:
            nxt = _digit_step(pos, d) if pos else None
        if nxt:
            src.append(0)
            byte.append(ord(d))
            dst.append(state(nxt))
    i = 0
    while i < len(order):
        key = order[i]
        i += 1
        # the step changes only at a digit some bound of ``key`` starts with (or at 0): one
        # step per run of digits between those, its edges added together
        cuts = {0}.union(*((ord(b[0]) - 48 for b in e[1:] if isinstance(b, str)) for e in key))
        edges = sorted(cuts | {c + 1 for c in cuts if c < 9})
        for a, b in zip(edges, [*edges[1:], 10], strict=True):
            nxt = _digit_step(key, chr(48 + a))
            if nxt:
                src += [i] * (b - a)
                byte += range(48 + a, 48 + b)
                dst += [state(nxt)] * (b - a)
    accept = np.zeros(len(order) + 1, dtype=bool)
    accept[1:] = [any(r == 0 or (r == "tail" and t == 0) for r, t, _ in k) for k in order]
    return Fragment(
        np.asarray(src, dtype=np.int32),
        np.asarray(byte, dtype=np.int32),
        np.asarray(dst, dtype=np.int32),
        len(order) + 1,
        accept,
    )


# -- an object's key automaton ---------------------------------------------------------------


def key_automaton(keys: Sequence[str], required: Iterable[str]) -> tuple[Fragment, tuple[int, ...]]:
    """:func:`~trierouter.registry.slots.objects.key_automaton` in Python."""
    need = set(required)
    texts = [encode_basestring(k).encode() + b": " for k in keys]
    return _key_automaton(texts, tuple(k in need for k in keys))


def _key_automaton(
    texts: list[bytes], required: tuple[bool, ...]
) -> tuple[Fragment, tuple[int, ...]]:
    n = len(texts)
    # unique[j]: the depth where key j is the only key left (one past its longest shared prefix;
    # no text is a prefix of another: each ends with the closing quote and ": ")
    unique = [1] * n
    order = sorted(range(n), key=texts.__getitem__)
    for x, y in itertools.pairwise(order):
        k = 0
        while texts[x][k] == texts[y][k]:
            k += 1
        unique[x] = max(unique[x], k + 1)
        unique[y] = max(unique[y], k + 1)
    # a trie of those prefixes; through[node]: the keys through the node, in schema order
    children: list[dict[int, int]] = [{}]
    through: list[list[int]] = [list(range(n))]
    depth = [0]
    for j, text in enumerate(texts):
        node = 0
        for b in text[: unique[j]]:
            nxt = children[node].get(b)
            if nxt is None:
                nxt = len(children)
                children[node][b] = nxt
                children.append({})
                through.append([])
                depth.append(depth[node] + 1)
            node = nxt
            through[node].append(j)
    # the window of each i: keys i .. last[i]; ``}`` is allowed where optional_from[i]
    last = [n - 1] * (n + 1)
    optional_from = [True] * (n + 1)
    r = n
    for i in range(n - 1, -1, -1):
        if required[i]:
            r = i
        last[i] = min(r, n - 1)
        optional_from[i] = r == n
    src: list[int] = []
    byte: list[int] = []
    dst: list[int] = []
    count = 3
    start, opened, end = 0, 1, 2
    src.append(start)
    byte.append(ord("{"))
    dst.append(opened)
    entries = (start, *range(count, count + n))
    count += n
    ids: dict[tuple[int, int, int], int] = {}
    todo: list[tuple[int, int, int]] = []
    alone: list[tuple[int, int, int, int]] = []  # (from, byte, key, depth): into a key's chain
    for i in range(n + 1):
        at = opened if i == 0 else entries[i]
        if optional_from[i]:
            src.append(at)
            byte.append(ord("}"))
            dst.append(end)
        if i == n:
            continue
        if i == 0:
            ids[(0, 0, last[0])] = opened  # after "{": the keys of window 0 (and "}" above)
            todo.append((0, 0, last[0]))
            continue
        comma = count
        count += 1
        src.append(at)
        byte.append(ord(","))
        dst.append(comma)
        if i == last[i]:
            alone.append((comma, ord(" "), i, 0))
            continue
        s = ids[(0, i, last[i])] = count  # a = i: no other window starts here
        count += 1
        todo.append((0, i, last[i]))
        src.append(comma)
        byte.append(ord(" "))
        dst.append(s)
    while todo:
        node, a, b = todo.pop()
        s = ids[(node, a, b)]
        for c, child in children[node].items():
            here = through[child]
            lo = bisect_left(here, a)
            hi = bisect_right(here, b) - 1
            if lo > hi:
                continue
            if here[lo] == here[hi]:
                alone.append((s, c, here[lo], depth[child]))
                continue
            t = ids.get((child, here[lo], here[hi]))
            if t is None:
                t = ids[(child, here[lo], here[hi])] = count
                count += 1
                todo.append((child, here[lo], here[hi]))
            src.append(s)
            byte.append(c)
            dst.append(t)
    # each key's chain, from the shallowest depth a window reaches it alone, as one run
    shallow = [1 << 30] * n
    for _, _, j, d in alone:
        shallow[j] = min(shallow[j], d)
    base = [0] * n
    exits: dict[int, object] = {end: ("end",)}
    for j in range(n):
        d = shallow[j]
        if d > len(texts[j]):
            continue
        base[j] = count - d  # the state at depth x of key j's chain is base[j] + x
        tail = texts[j][d:]
        src += range(count, count + len(tail))
        byte += tail
        dst += range(count + 1, count + len(tail) + 1)
        count += len(tail) + 1
        exits[count - 1] = ("v", j)
    for s, c, j, d in alone:
        src.append(s)
        byte.append(c)
        dst.append(base[j] + d)
    frag = Fragment(
        np.asarray(src, dtype=np.int32),
        np.asarray(byte, dtype=np.int32),
        np.asarray(dst, dtype=np.int32),
        count,
        np.zeros(count, dtype=bool),
        exits=exits,
    )
    return frag, entries


# -- wiring and byte classes -----------------------------------------------------------------


class Builder:
    """Concatenate fragments into one edge list; link accepting states to a fragment's start.

    Edges are only ever added at accepting states and exits (``link``; ``edge`` is only used
    at the accepting state of a literal): a copied fragment's other states keep exactly their
    own edges, which the shared piece masks (:mod:`~trierouter.registry.slots.pieces`) rely
    on."""

    def __init__(self) -> None:
        self._src: list[I32] = []
        self._byte: list[I32] = []
        self._dst: list[I32] = []
        self._accept: list[npt.NDArray[np.bool_]] = []
        self._klass: list[npt.NDArray[np.int16]] = []
        self._origin: list[npt.NDArray[np.int64]] = []
        self._starts: dict[int, tuple[I32, I32]] = {}
        self.exits: dict[int, Any] = {}
        self.n = 0

    def add(self, frag: Fragment, entries: Sequence[int] = ()) -> int:
        """Copy ``frag`` in; return the offset of its state 0. ``link`` may target its state 0
        and the states ``entries`` (plus the offset)."""
        off = self.n
        self._src.append(frag.edges().src + off)
        self._byte.append(frag.byte)
        self._dst.append(frag.dst + off)
        self._accept.append(frag.accept.copy())
        self._klass.append(frag.klass)
        self._origin.append(frag.origin)
        b, d = frag.start_edges()
        self._starts[off] = (b, d + off)
        if len(entries):
            order = np.argsort(frag.src, kind="stable")
            at = np.asarray(entries, dtype=np.int32)
            lo = np.searchsorted(frag.src[order], at)
            hi = np.searchsorted(frag.src[order], at + 1)
            for e, a, z in zip(at.tolist(), lo.tolist(), hi.tolist(), strict=True):
                edges = order[a:z]
                self._starts[off + e] = (frag.byte[edges], frag.dst[edges] + off)
        for s, label in frag.exits.items():
            self.exits[s + off] = label.shifted(off) if isinstance(label, Exit) else label
        self.n += frag.n
        return off

    def _flat_accept(self) -> npt.NDArray[np.bool_]:
        if len(self._accept) > 1:
            self._accept = [np.concatenate(self._accept)]
        return self._accept[0]

    def accepting(self, off: int, frag: Fragment) -> list[int]:
        return [s + off for s in frag.accepting_states()]

    def link(self, states: Iterable[int], target: int) -> None:
        """From each of ``states`` (accepting, or an exit), continue as from fragment start
        ``target``: its edges are copied and the state takes its acceptance and exit."""
        b, d = self._starts[target]
        accept = self._flat_accept()
        for s in states:
            if len(b):
                self._src.append(np.full(len(b), s, dtype=np.int32))
                self._byte.append(b)
                self._dst.append(d)
            accept[s] = bool(accept[target])
            self.exits.pop(s, None)
            if target in self.exits:
                self.exits[s] = self.exits[target]

    def edge(self, state: int, byte: int, target: int) -> None:
        self._src.append(np.array([state], dtype=np.int32))
        self._byte.append(np.array([byte], dtype=np.int32))
        self._dst.append(np.array([target], dtype=np.int32))

    def finish(self, defer: bool = False) -> Fragment:
        """The wired fragment; ``ValueError`` if two edges leave a state on the same byte
        (``defer``: the library's builder only; this reference wires now)."""
        src = np.concatenate(self._src) if self._src else np.zeros(0, dtype=np.int32)
        byte = np.concatenate(self._byte) if self._byte else np.zeros(0, dtype=np.int32)
        dst = np.concatenate(self._dst) if self._dst else np.zeros(0, dtype=np.int32)
        key = src.astype(np.int64) * 256 + byte
        order = np.argsort(key, kind="stable")
        key, src, byte, dst = key[order], src[order], byte[order], dst[order]
        same = key[1:] == key[:-1]
        if same.any():
            if (dst[1:][same] != dst[:-1][same]).any():
                i = int(np.flatnonzero(same & (dst[1:] != dst[:-1]))[0])
                raise ValueError(f"ambiguous continuation on byte {int(byte[i])} at state {src[i]}")
            keep = np.concatenate([[True], ~same])
            src, byte, dst = src[keep], byte[keep], dst[keep]
        return Fragment(
            src,
            byte,
            dst,
            self.n,
            self._flat_accept(),
            np.concatenate(self._klass),
            dict(self.exits),
            np.concatenate(self._origin),
        )


_MIX = np.random.default_rng(0x5EED).integers(1, 2**62, size=1 << 16, dtype=np.int64) | 1


def compress(
    frag: Fragment, narrow: bool = False
) -> tuple[npt.NDArray[np.signedinteger[Any]], I32]:
    """:func:`~trierouter.registry.slots.packing.compress` in numpy (columns grouped by a hash,
    the grouping checked)."""
    frag = frag.edges()
    n = frag.n
    dense = np.full((256, n), NO_EDGE, dtype=np.int64)  # one row per byte
    dense[frag.byte, frag.src] = frag.dst
    if n <= len(_MIX):  # group bytes by a hash of their column, then check the grouping
        h = (dense + 1) @ _MIX[:n]
        _, first, byte_class = np.unique(h, return_index=True, return_inverse=True)
        exact = np.array_equal(dense, dense[first][byte_class.ravel()])
    else:
        exact = False
    if not exact:  # a hash collision (never seen) or a huge automaton: compare columns
        cols = np.ascontiguousarray(dense).view(np.dtype((np.void, 8 * n))).ravel()
        _, first, byte_class = np.unique(cols, return_index=True, return_inverse=True)
    table = np.ascontiguousarray(dense[first].T, dtype=np.int32)
    return (narrow_table(table) if narrow else table), byte_class.astype(np.int32).ravel()


# -- the slot compiler on these constructions ------------------------------------------------

_MODULES = (dispatch, formats, fragment, nfa, objects, ranges, regex, schema_fragments)
"""The slot compiler's modules: where a construction is looked up by name."""


def _nfa_fragment(node: _Node, max_states: int | None = None) -> Fragment:
    return subset_fragment(node, max_states)


def clear_caches() -> None:
    """Empty the slot modules' caches (a fragment cached by one construction would hide a
    difference from the other)."""
    for mod in _MODULES:
        for obj in vars(mod).values():
            if isinstance(obj, functools._lru_cache_wrapper):
                obj.cache_clear()


@contextlib.contextmanager
def reference_slots(only: Collection[str] | None = None) -> Iterator[dict[str, int]]:
    """Within the block, the slot compiler (:class:`~trierouter.registry.slots.dispatch.
    SlotCompiler`) builds with the Python constructions above instead of the core's: every
    module-level name bound to a core construction is rebound to its reference, caches emptied
    before and after (``only``: those constructions alone, by name: ``"Builder"``,
    ``"key_automaton"``, ``"integer_range_fragment"``, ``"pattern_fragment"``,
    ``"nfa_fragment"``). Yields the number of names rebound per construction (a test checks
    each is reached)."""
    swaps: dict[int, tuple[str, Any]] = {
        id(nfa.nfa_fragment): ("nfa_fragment", _nfa_fragment),
        id(regex.pattern_fragment): ("pattern_fragment", pattern_fragment),
        id(ranges.integer_range_fragment): ("integer_range_fragment", integer_range_fragment),
        id(objects.key_automaton): ("key_automaton", key_automaton),
        id(fragment.Builder): ("Builder", Builder),
    }
    if only is not None:
        unknown = set(only) - {name for name, _ in swaps.values()}
        if unknown:
            raise ValueError(f"only={sorted(unknown)}: not a construction of the slot compiler")
        swaps = {k: v for k, v in swaps.items() if v[0] in only}
    done: list[tuple[Any, str, Any]] = []
    counts = dict.fromkeys((name for name, _ in swaps.values()), 0)
    for mod in _MODULES:
        for attr, obj in list(vars(mod).items()):
            hit = swaps.get(id(obj))
            if hit is not None:
                done.append((mod, attr, obj))
                setattr(mod, attr, hit[1])
                counts[hit[0]] += 1
    clear_caches()
    try:
        yield counts
    finally:
        for mod, attr, obj in done:
            setattr(mod, attr, obj)
        clear_caches()
