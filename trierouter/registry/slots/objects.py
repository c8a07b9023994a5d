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
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Sequence

import numpy as np

from trierouter.registry.slots.fragment import Fragment

__all__ = ["key_automaton"]


def key_automaton(keys: Sequence[str], required: Collection[str]) -> tuple[Fragment, list[int]]:
    """The keys of an object and its braces, values left out: ``(fragment, entries)``.

    State 0 is before ``{``. The state after key ``j``'s text (``"key": ``) is an exit labelled
    ``("v", j)``: value ``j`` goes there. ``entries[i]`` (``1 <= i <= n``) is the state after
    value ``i - 1``: what may follow it (``, `` and the next key, or ``}``). After ``}`` is an
    exit labelled ``("end",)``."""
    n = len(keys)
    texts = [json.dumps(k, ensure_ascii=False).encode() + b": " for k in keys]
    # one trie over the key texts; through[node]: the keys through the node, in schema order
    children: list[dict[int, int]] = [{}]
    through: list[list[int]] = [[]]
    depth = [0]
    for j, text in enumerate(texts):
        node = 0
        through[0].append(j)
        for b in text:
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
        if keys[i] in required:
            r = i
        last[i] = min(r, n - 1)
        optional_from[i] = r == n
    src: list[int] = []
    byte: list[int] = []
    dst: list[int] = []
    exits: dict[int, object] = {}
    count = 0

    def new() -> int:
        nonlocal count
        count += 1
        return count - 1

    def edge(a: int, b: int, c: int) -> None:
        src.append(a)
        byte.append(b)
        dst.append(c)

    start, opened, end = new(), new(), new()
    exits[end] = ("end",)
    edge(start, ord("{"), opened)
    entries = [start] + [new() for _ in range(n)]
    ids: dict[tuple[int, int, int], int] = {}
    todo: list[tuple[int, int, int]] = []

    def state(node: int, a: int, b: int) -> int:
        s = ids.get((node, a, b))
        if s is None:
            s = ids[(node, a, b)] = new()
            todo.append((node, a, b))
        return s

    for i in range(n + 1):
        at = opened if i == 0 else entries[i]
        if optional_from[i]:
            edge(at, ord("}"), end)
        if i == n:
            continue
        if i == 0:
            ids[(0, 0, last[0])] = opened  # after "{": the keys of window 0 (and "}" above)
            todo.append((0, 0, last[0]))
        else:
            comma = new()
            edge(at, ord(","), comma)
            edge(comma, ord(" "), state(0, i, last[i]))
    while todo:
        node, a, b = todo.pop()
        s = ids[(node, a, b)]
        if a == b:  # key a is determined: its own chain to the end of its text
            text = texts[a]
            for k in range(depth[node], len(text)):
                node = children[node][text[k]]
                t = ids.get((node, a, a))
                if t is not None:
                    edge(s, text[k], t)
                    break
                t = ids[(node, a, a)] = new()
                edge(s, text[k], t)
                s = t
            else:
                exits[s] = ("v", a)
            continue
        for c, child in children[node].items():
            keys_here = through[child]
            lo = bisect_left(keys_here, a)
            hi = bisect_right(keys_here, b)
            if lo < hi:
                edge(s, c, state(child, keys_here[lo], keys_here[hi - 1]))
    frag = Fragment(
        np.asarray(src, dtype=np.int32),
        np.asarray(byte, dtype=np.int32),
        np.asarray(dst, dtype=np.int32),
        count,
        np.zeros(count, dtype=bool),
        exits=exits,
    )
    return frag, entries
