"""√K grouped tool routing against brute-force oracles, on the tiny model.

Oracles: the partition is checked by counting every tool's memberships; the search's group
ranking by a loop over the tools; the router's two steps by a plain re-implementation (loop the
groups, keep the best, score each candidate with one forward call of its own, no tree, and
take the argmax), whose per-candidate scores come from ``tests/test_path_scores``'s
``oracle_canonical`` (``context + tokens + end id``, the constrained log-softmax by comparing
token bytes with the candidates' strings).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.test_classify import _one_thread
from tests.test_path_scores import oracle_canonical
from trierouter.router.grouped_tools import (
    GROUP_PROMPT,
    TOOL_PROMPT,
    GroupedRouter,
)
from trierouter.router.label_scorer import TransformersScorer
from trierouter.shortlist.bm25 import BM25Index
from trierouter.shortlist.tool_groups import ToolGroup, ToolGroups, tool_namespace
from trierouter.shortlist.tool_text import ToolIndex
from trierouter.tiny_model import build_tiny_model

__all__ = ["_one_thread"]  # one torch thread, as in test_classify

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORDS = "user order invoice weather forecast city stock price quote email send list get".split()


def _registry(seed: int = 0) -> tuple[list[str], list[str]]:
    """~120 tools: OpenAPI-style operations of several APIs (one large), dotted functions and
    bare names; a text per tool."""
    rng = random.Random(seed)
    names: list[str] = []
    for api, n in (("big.com", 40), ("alpha.io/v2", 12), ("beta.net", 5), ("gamma.org", 3)):
        for i in range(n):
            verb = rng.choice(["GET", "POST", "DELETE"])
            names.append(f"{api}:{verb} /{rng.choice(WORDS)}s/{i}")
    for ns, n in (("math", 6), ("geo", 4), ("weather", 3), ("x.y", 2)):
        names += [f"{ns}.{rng.choice(WORDS)}_{i}" for i in range(n)]
    names += [f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_{i}" for i in range(45)]
    texts = [f"{n} " + " ".join(rng.sample(WORDS, 4)) for n in names]
    return names, texts


def _groups(min_prefix: int = 1) -> tuple[ToolGroups, list[str], list[str]]:
    names, texts = _registry()
    bare = [n for n in names if not tool_namespace(n)]
    if min_prefix > 1:
        heads = Counter(tool_namespace(n)[0] for n in names if ":" not in n and tool_namespace(n))
        bare = [
            n
            for n in names
            if not tool_namespace(n) or (":" not in n and heads[tool_namespace(n)[0]] < min_prefix)
        ]
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(len(bare), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return ToolGroups.build(names, vectors=vecs, texts=texts, min_prefix=min_prefix), names, texts


def test_tool_namespace_levels() -> None:
    assert tool_namespace("googleapis.com/drive:files.list") == (
        "googleapis.com",
        "googleapis.com/drive",
        "googleapis.com/drive:files",
    )
    assert tool_namespace("1forge.com:GET /quotes") == ("1forge.com", "1forge.com:quotes")
    assert tool_namespace("a.b.c") == ("a", "a.b")
    assert tool_namespace("gcd") == ()


@pytest.mark.parametrize("min_prefix", [1, 7])
def test_groups_cover_every_tool_once_in_balanced_labelled_groups(min_prefix: int) -> None:
    g, names, _ = _groups(min_prefix)
    seen = Counter(m for grp in g.groups for m in grp.members)
    assert set(seen) == set(names) and set(seen.values()) == {1}  # a partition
    s = math.isqrt(len(names) - 1) + 1
    assert all(len(grp.members) <= 2 * s for grp in g.groups)
    assert len({grp.label for grp in g.groups}) == len(g.groups)
    for gi, grp in enumerate(g.groups):
        for m in grp.members:
            assert g.group_of(m) == gi and g.label_of(m) == grp.label
        # a group named after one namespace holds that namespace's tools only
        base = grp.label.split(" #")[0]
        if ";" not in base and any(base in tool_namespace(m) for m in grp.members):
            assert all(base in tool_namespace(m) for m in grp.members), grp
    big = {g.label_of(n) for n in names if n.startswith("big.com:")}
    assert len(big) >= 2  # 40 > 2s tools: the large API is split
    learned = {m for grp in g.groups if grp.learned for m in grp.members}
    assert {n for n in names if not tool_namespace(n)} <= learned
    assert any(n.startswith("math.") for n in learned) == (min_prefix > 1)


def test_partition_errors_name_the_tool() -> None:
    g, names, _ = _groups()
    groups = list(g.groups)
    with pytest.raises(ValueError, match="in no group"):
        ToolGroups(names, groups[1:])
    twice = [*groups, ToolGroup("again", groups[0].members[:1], False)]
    with pytest.raises(ValueError, match="more than one group"):
        ToolGroups(names, twice)


def test_group_ranking_equals_a_loop_over_the_tools() -> None:
    g, names, _ = _groups()
    rng = np.random.default_rng(1)
    for _ in range(5):
        scores = np.where(rng.random(len(names)) < 0.3, rng.random(len(names)) * 10, 0.0)
        best: dict[int, float] = {}
        for i, n in enumerate(names):
            gi = next(j for j, grp in enumerate(g.groups) if n in grp.members)
            best[gi] = max(best.get(gi, -math.inf), float(scores[i]))
        want = sorted(((gi, s) for gi, s in best.items() if s > 0), key=lambda x: (-x[1], x[0]))
        assert g.rank(scores) == want
        assert g.rank(scores, 3) == want[:3]


@pytest.fixture(scope="module")
def tiny_chat(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    d = build_tiny_model(tmp_path_factory.mktemp("grouped") / "qwen2")
    tok = transformers.AutoTokenizer.from_pretrained(str(d))
    tok.chat_template = TEMPLATE
    model = transformers.AutoModelForCausalLM.from_pretrained(str(d)).eval()
    return model, tok


def _oracle_route(
    model: Any,
    tok: Any,
    g: ToolGroups,
    index: ToolIndex,
    query: str,
    keep_groups: int,
    keep_tools: int,
    combine: float,
) -> tuple[str, str, dict[str, float], dict[str, float]]:
    scores = index.scores(query)
    best: dict[int, float] = {}
    for i, n in enumerate(g.names):
        gi = g.group_of(n)
        best[gi] = max(best.get(gi, -math.inf), float(scores[i]))
    ranked = sorted(((gi, s) for gi, s in best.items() if s > 0), key=lambda x: (-x[1], x[0]))
    ranked = ranked[:keep_groups]
    labels = [g.groups[gi].label for gi, _ in ranked]
    system = GROUP_PROMPT.format(listing="\n".join(f"- {lb}" for lb in labels))
    ctx = _chat_ids(tok, system, query)
    gs = {v: lp for v, (lp, _) in oracle_canonical(model, tok, ctx, labels).items()}
    pick = max(range(len(labels)), key=lambda j: (gs[labels[j]] - combine * math.log1p(j), -j))
    gi = ranked[pick][0]
    members = [(float(scores[i]), i) for i, n in enumerate(g.names) if g.group_of(n) == gi]
    top = [g.names[i] for _, i in sorted(members, key=lambda x: (-x[0], x[1]))[:keep_tools]]
    system = TOOL_PROMPT.format(listing="\n".join(f"- {n}" for n in top))
    ctx = _chat_ids(tok, system, query)
    ts = {v: lp for v, (lp, _) in oracle_canonical(model, tok, ctx, top).items()}
    tool = max(range(len(top)), key=lambda j: (ts[top[j]] - combine * math.log1p(j), -j))
    return labels[pick], top[tool], gs, ts


def _chat_ids(tok: Any, system: str, query: str) -> list[int]:
    """The oracle's prompt, written out here: the chat template over the system message and
    the query, the assistant's turn opened."""
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": query}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return [int(t) for t in tok(text)["input_ids"]]


@pytest.mark.parametrize("combine", [0.0, 2.0])
def test_two_steps_equal_a_brute_force_argmax_of_per_candidate_forward_calls(
    tiny_chat: tuple[Any, Any], combine: float
) -> None:
    model, tok = tiny_chat
    g, names, texts = _groups()
    index = ToolIndex(BM25Index.build(names, texts))
    scorer = TransformersScorer((model, tok))
    router = GroupedRouter(g, index, scorer, keep_groups=4, keep_tools=4, combine=combine)
    for query in ("send the invoice email to a user", "weather forecast for a city"):
        top = index.search(query, 5)
        assert [round(float(index.scores(query)[names.index(n)]), 4) for n, _ in top] == [
            s for _, s in top
        ]
        route = router.route(query)
        group, tool, gs, ts = _oracle_route(model, tok, g, index, query, 4, 4, combine)
        assert (route.group, route.tool) == (group, tool)
        assert route.forward_calls == 2  # one tree per step
        assert {c.name for c in route.groups} == set(gs)
        for c in route.groups:
            assert c.model is not None and abs(c.model - gs[c.name]) < 1e-5
        assert {c.name for c in route.tools} == set(ts)
        for c in route.tools:
            assert c.model is not None and abs(c.model - ts[c.name]) < 1e-5
        assert route.ranking[0] == tool and route.tool in g.groups[g.group_of(tool)].members
        # explain(): each step's candidates in the search's order, the oracle's scores, the
        # chosen one marked
        text = route.explain().splitlines()
        assert text[0] == f"group: {group} of {len(gs)} candidates"
        rows = [ln for ln in text if ln[:2] in ("* ", "  ")]
        assert [ln[2:].split("  ")[0] for ln in rows] == [
            c.name for c in [*route.groups, *route.tools]
        ]
        assert [ln[0] for ln in rows].count("*") == 2
        assert f"* {tool}  search " in route.explain()
        for ln, c in zip(rows, route.groups, strict=False):
            assert abs(float(ln.split("model ")[1].split()[0]) - gs[c.name]) < 1e-3


def test_negative_control_scores_of_another_query_do_not_pass(
    tiny_chat: tuple[Any, Any],
) -> None:
    """The comparison above can fail: the same candidates after another query's prompt score
    differently by far more than its tolerance, and the search-only router uses no model."""
    model, tok = tiny_chat
    g, names, texts = _groups()
    index = ToolIndex(BM25Index.build(names, texts))
    router = GroupedRouter(g, index, TransformersScorer((model, tok)), keep_groups=4)
    a = router.route("send the invoice email to a user")
    _, _, gs, _ = _oracle_route(
        model, tok, g, index, "list stock price quote", 4, 4, 0.0
    )  # other query, other candidates or other scores
    mine = {c.name: c.model for c in a.groups}
    common = set(mine) & set(gs)
    assert set(mine) != set(gs) or any(abs((mine[k] or 0.0) - gs[k]) > 1e-3 for k in common)
    plain = GroupedRouter(g, index, None, keep_groups=4).route("send the invoice email")
    assert plain.forward_calls == 0 and all(c.model is None for c in plain.groups)
    assert plain.group == plain.groups[0].name and plain.tool == plain.tools[0].name
