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
from collections.abc import Collection, Sequence
from json.encoder import encode_basestring

import numpy as np

from trierouter.registry.core import native_core
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
    src, byte, dst, count, at, key = native_core().key_automaton(texts, bytes(required))
    labels = [("end",) if j < 0 else ("v", j) for j in key.tolist()]
    exits: dict[int, object] = dict(zip(at.tolist(), labels, strict=True))
    frag = Fragment(src, byte, dst, count, np.zeros(count, dtype=bool), exits=exits)
    return frag, (0, *range(3, 3 + len(keys)))
