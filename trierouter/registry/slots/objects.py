"""The key automaton of a JSON object: properties in schema order, optional ones skippable.

XGrammar's layout (``any_whitespace=False``): ``{"a": 1, "b": 2}``. After value ``i - 1`` (or
after ``{``, ``i = 0``) the next key is one of the *window* ``i .. r``, ``r`` the first required
key from ``i`` on (the last key if none is), and ``}`` may close the object when no key from
``i`` on is required.

One trie per window would copy every key's text once per window that can reach it: O(n²) bytes
(and token masks) for n optional properties. Here a state is a node of one trie over all the key
texts together with the keys of the window still possible there, and a state is named by
``(node, first, last)``, the first and last of those keys in schema order (the keys through the
node between those two are exactly the window's there). Two windows that reach a node with the
same keys left are one state: they accept the same rest (that key's text, its value, what
follows it); in particular once a key is determined the state is that key's own. The states are
O(total key bytes + n): for a window starting at ``i``, only the nodes where key ``i`` is still
possible are new.

Built in two passes: the windows walk a trie of the keys' prefixes up to where each key is the
only one left (its first byte past the longest prefix it shares); then each key's own chain, from
the shallowest depth any window reaches it alone, is laid out as one run of states.
"""

from __future__ import annotations

import functools
import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Sequence
from json.encoder import encode_basestring

import numpy as np

from trierouter.registry import core as _backend
from trierouter.registry.slots.fragment import Fragment

__all__ = ["key_automaton"]


def key_automaton(
    keys: Sequence[str], required: Collection[str]
) -> tuple[Fragment, tuple[int, ...]]:
    """The keys of an object and its braces, values left out: ``(fragment, entries)``.

    State 0 is before ``{``. The state after key ``j``'s text (``"key": ``) is an exit labelled
    ``("v", j)``: value ``j`` goes there. ``entries[i]`` (``1 <= i <= n``) is the state after
    value ``i - 1``: what may follow it (``, `` and the next key, or ``}``). After ``}`` is an
    exit labelled ``("end",)``. Cached (objects of one key list recur across tools); the
    fragment is shared, as every fragment is: the builder copies it."""
    return _key_automaton(tuple(keys), tuple(k in required for k in keys))


@functools.lru_cache(maxsize=4096)
def _key_automaton(
    keys: tuple[str, ...], required: tuple[bool, ...]
) -> tuple[Fragment, tuple[int, ...]]:
    # json.dumps(k, ensure_ascii=False) of a string is this encoder's result
    texts = [encode_basestring(k).encode() + b": " for k in keys]
    if _backend.default_core() is not None:  # the same fragment, built in one core call
        src, byte, dst, count, at, key = _backend.native_core().key_automaton(
            texts, bytes(required)
        )
        labels = [("end",) if j < 0 else ("v", j) for j in key.tolist()]
        exits: dict[int, object] = dict(zip(at.tolist(), labels, strict=True))
        frag = Fragment(src, byte, dst, count, np.zeros(count, dtype=bool), exits=exits)
        return frag, (0, *range(3, 3 + len(keys)))
    return _reference(texts, required)


def _reference(texts: list[bytes], required: tuple[bool, ...]) -> tuple[Fragment, tuple[int, ...]]:
    """:func:`key_automaton` in Python (the numpy backend, and the tests' reference)."""
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
