"""√K grouping: Proposition 2 bounds, exact round trips, and two-level decoding in one trie."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from trierouter import Matcher, TokenIndex
from trierouter.data.synthetic import tool_names
from trierouter.shortlist import Hierarchy, build_hierarchy, kmeans_paths, namespace_path
from trierouter.shortlist.hierarchy import Group


def s_of(k: int) -> int:
    return math.isqrt(k - 1) + 1


def assert_prop2(h: Hierarchy, values: list[str]) -> None:
    """Every value in exactly one group, each group ≤ 2⌈√K⌉, G within 2x of ⌈√K⌉."""
    k = len(set(values))
    s = s_of(k)
    members = [m for g in h.groups for m in g.members]
    assert sorted(members) == sorted(set(values))
    assert max(h.sizes) <= 2 * s, (max(h.sizes), s)
    assert s / 2 <= h.n_groups <= 2 * s, (h.n_groups, s)
    assert len({g.label for g in h.groups}) == h.n_groups


def assert_round_trip(h: Hierarchy, values: list[str]) -> None:
    strings = h.strings()
    assert len(strings) == len(set(strings)) == len(set(values))
    for v in values:
        s = h.string_of(v)
        assert s.startswith(h.group_of(v) + h.sep) and s.endswith(v)
        assert h.value_of(s) == v
    assert h.value_of("not a member") is None


@pytest.fixture(scope="session")
def icd_hierarchy() -> tuple[Hierarchy, list[str]]:
    pytest.importorskip("simple_icd_10_cm")
    from trierouter.data.icd10cm import icd10cm_codes, icd10cm_path

    codes = icd10cm_codes()
    return build_hierarchy(codes, icd10cm_path), codes


def test_icd10cm_chapters_blocks_categories(icd_hierarchy: tuple[Hierarchy, list[str]]) -> None:
    h, codes = icd_hierarchy
    assert len(codes) == 74_731
    assert_prop2(h, codes)
    assert_round_trip(h, codes)
    label = h.group_of("S72.001A")
    assert "S72" in label or "femur" in label.lower() or "S70-S79" in label


@pytest.mark.parametrize(
    "k,seps", [(10, "._"), (1_000, "._"), (20_000, "._"), (20_000, ":")], ids=str
)
def test_tool_namespaces(k: int, seps: str) -> None:
    vals = tool_names(k, seed=k)
    h = build_hierarchy(vals, lambda v: namespace_path(v, seps=seps))
    assert_prop2(h, vals)
    assert_round_trip(h, vals)


def test_adversarial_group_structures() -> None:
    rng = random.Random(0)
    vals = [f"v{i:05d}" for i in range(5_000)]
    cases = {
        "one giant group": [("all",)] * len(vals),
        "all singletons": [(v,) for v in vals],
        "no path": None,
        "random sizes": [(f"g{min(int(rng.paretovariate(0.7)), 900)}",) for _ in vals],
        "deep chains": [(v[:2], v[:3], v[:4], v[:5]) for v in vals],
        "mixed depth": [(v[:3],) if i % 3 else (v[:3], v[:4]) for i, v in enumerate(vals)],
    }
    for name, paths in cases.items():
        h = build_hierarchy(vals, paths)
        assert_prop2(h, vals), name
        assert_round_trip(h, vals)
    for k in (1, 2, 3, 7, 50):
        h = build_hierarchy(vals[:k], [("x",)] * k)
        assert sorted(m for g in h.groups for m in g.members) == vals[:k]
        assert max(h.sizes) <= 2 * s_of(k)


def test_compiled_hierarchy_decodes_group_then_member(qwen2_index: TokenIndex) -> None:
    vals = tool_names(5_000, seed=1)
    h = build_hierarchy(vals, lambda v: namespace_path(v, seps="._"))
    cs = h.compile(qwen2_index)
    assert set(cs.values) == set(h.strings())
    rng = np.random.default_rng(0)
    labels = {g.label for g in h.groups}
    for _ in range(200):
        m = Matcher(cs)
        while not m.is_complete() or (m.allowed_token_ids().size > 1 and rng.random() < 0.5):
            ok = m.accept_token(int(rng.choice(m.allowed_token_ids())))
            assert ok
            if m.is_terminated():
                break
        text = m.value()
        assert text is not None
        v = h.value_of(text)
        assert v in set(vals)
        assert text.split(h.sep, 1)[0] in labels or text.startswith(h.group_of(v))


def test_sep_collisions_and_bad_input() -> None:
    with pytest.raises(ValueError, match="ambiguous"):
        Hierarchy([Group("a / b", ("c",)), Group("a", ("b / c",))])
    with pytest.raises(ValueError, match="more than one group"):
        Hierarchy([Group("a", ("x",)), Group("b", ("x",))])
    with pytest.raises(ValueError, match="unique"):
        Hierarchy([Group("a", ("x",)), Group("a", ("y",))])
    with pytest.raises(TypeError, match="single str"):
        build_hierarchy("abc")
    with pytest.raises(ValueError, match="empty"):
        build_hierarchy([])
    h = build_hierarchy(["b", "a", "b", "c"])
    assert len(h) == 3 and h.value_of(h.string_of("b")) == "b"


def test_namespace_path() -> None:
    assert namespace_path("github.com:repos/list") == ("github.com", "github.com:repos")
    assert namespace_path("get_user_by_id", seps="._") == ("get", "get_user", "get_user_by")
    assert namespace_path("plain") == ()


def test_kmeans_groups_are_balanced_and_labelled() -> None:
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((30, 16)).astype(np.float32)
    words = [f"topic{i} word{i}" for i in range(30)]
    which = rng.integers(0, 30, 3_000)
    x = centers[which] + 0.1 * rng.standard_normal((3_000, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    vals = [f"item{i}" for i in range(3_000)]
    texts = [f"{words[c]} item" for c in which]
    paths = kmeans_paths(x, texts=texts, seed=0)
    h = build_hierarchy(vals, paths)
    assert_prop2(h, vals)
    assert all("topic" in g.label or "word" in g.label for g in h.groups)
