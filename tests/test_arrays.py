"""Whole-array building blocks against brute force: common prefixes and the preorder trie."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trierouter.registry.arrays import build_trie, common_prefix_lengths, pack_strings

strings_st = st.lists(
    st.lists(st.sampled_from(b"ab\x00\xff"), max_size=40).map(bytes), min_size=1, max_size=40
).map(lambda xs: sorted(set(xs)))


def _lcp(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=300, deadline=None)
@given(strings_st)
def test_common_prefix_lengths(strings: list[bytes]) -> None:
    buf, starts, lengths = pack_strings(strings)
    expected = [0] + [_lcp(strings[i - 1], strings[i]) for i in range(1, len(strings))]
    assert common_prefix_lengths(buf, starts, lengths).tolist() == expected


@settings(max_examples=300, deadline=None)
@given(strings_st)
def test_trie_is_the_prefix_closure_in_preorder(strings: list[bytes]) -> None:
    trie = build_trie(*pack_strings(strings))
    prefixes = sorted({s[:i] for s in strings for i in range(len(s) + 1)})
    ids = {p: i for i, p in enumerate(prefixes)}  # sorted prefixes = preorder
    assert trie.size == len(prefixes)
    for p, i in ids.items():
        if i:
            assert trie.parent[i] == ids[p[:-1]] and trie.byte[i] == p[-1]
            assert trie.depth[i] == len(p)
    assert [int(e) for e in trie.ends] == [ids[s] for s in strings]
