"""Inputs and errors (issue 15): one values-file reader with one meaning, errors from the
project's tree that name the argument or file and the fix, bounded process-wide caches."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from trierouter.classify import load_labels
from trierouter.errors import InputFileError, ToolChoiceError, TrieRouterError
from trierouter.registry.index import TokenIndex
from trierouter.registry.values import read_values
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.vllm.named import _read_values as vllm_read_values

from .conftest import toy_vocabulary


def test_one_reader_one_meaning(tmp_path: Path) -> None:
    f = tmp_path / "values.txt"
    f.write_bytes("\ufeffget_user\r\n\nlist_orders\t lists orders\n  \nget_user\ncafé\n".encode())
    read = read_values(f)
    # the BOM is not part of the first value; blank lines are skipped, duplicates counted
    assert read.values == ["get_user", "list_orders", "café"]
    assert read.duplicates == 1 and read.duplicate_examples == ("get_user",)
    assert read.skipped_blank == 2
    assert read.descriptions == ["get_user", " lists orders", "café"]
    assert "1 duplicates dropped" in read.summary() and "2 blank lines" in read.summary()
    # compile (CLI), classify and vLLM named sets read the same file the same way
    assert load_labels(f) == (read.values, read.descriptions)
    assert vllm_read_values(f) == read.values


def test_cli_compile_reports_dropped_lines(tmp_path: Path) -> None:
    from tests.test_cli import run

    f = tmp_path / "values.txt"
    f.write_text("a\n\nb\na\n", encoding="utf-8")
    done = run("compile", str(f), "--tokenizer", "gpt2")
    assert done.returncode == 0, done.stderr
    assert "1 duplicates dropped" in done.stderr and "1 blank lines skipped" in done.stderr


def test_not_utf8_names_file_and_fix(tmp_path: Path) -> None:
    f = tmp_path / "labels.txt"
    f.write_bytes("caf\xe9\nthé\n".encode("latin-1"))
    with pytest.raises(InputFileError, match=r"labels\.txt: not UTF-8 .*0xe9.*line 1.*iconv"):
        read_values(f)
    with pytest.raises(InputFileError, match=r"labels\.txt"):
        load_labels(f)


@pytest.fixture(scope="module")
def small_tools() -> Any:
    from tests.test_tool_calls import SMALL
    from trierouter.registry.compiler import compile_tools

    return compile_tools(SMALL, TokenIndex.get(toy_vocabulary()))


def test_tool_choice_errors(small_tools: Any) -> None:
    from trierouter.router.tool_calls.plan import ToolCallPlan

    with pytest.raises(ToolChoiceError, match=r"tool_choice='unknown'.*required"):
        ToolCallPlan(small_tools, tool_choice="unknown")
    with pytest.raises(ToolChoiceError, match=r"allowed=\[\].*None"):
        ToolCallPlan(small_tools, allowed=[])
    with pytest.raises(ToolChoiceError, match="nope"):
        ToolCallPlan(small_tools, allowed=["ping", "nope"])
    # OpenAI's forced-function form, and the Responses API's
    for form in (
        {"type": "function", "function": {"name": "ping"}},
        {"type": "function", "name": "ping"},
    ):
        plan = ToolCallPlan(small_tools, tool_choice=form)
        assert plan.tool_choice == "ping" and len(plan.names) == 1
    with pytest.raises(ToolChoiceError, match="expected"):
        ToolCallPlan(small_tools, tool_choice={"type": "weird"})
    assert issubclass(ToolChoiceError, TrieRouterError)


def test_caches_are_bounded() -> None:
    from trierouter.registry.slots.masks import VocabTables

    TokenIndex._memory.clear()
    vocabs = [toy_vocabulary([f"x{i}".encode()]) for i in range(TokenIndex.memory_size + 2)]
    for v in vocabs:
        TokenIndex.get(v, disk_cache=False)
        VocabTables.get(v)
    assert len(TokenIndex._memory) == TokenIndex.memory_size
    assert len(VocabTables._cache) <= VocabTables.cache_size
    # the most recently used stay
    assert vocabs[-1].hash in TokenIndex._memory


def test_thread_settings_never_stick() -> None:
    """Concurrent searches that each set faiss's process-wide thread count leave it as found."""
    faiss = pytest.importorskip("faiss")
    from trierouter.shortlist.faiss_index import _omp_threads

    before = faiss.omp_get_max_threads()
    barrier = threading.Barrier(8)

    def search(n: int) -> None:
        barrier.wait()
        for _ in range(200):
            with _omp_threads(n):
                assert faiss.omp_get_max_threads() == n

    threads = [threading.Thread(target=search, args=(1 + i % 3,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert faiss.omp_get_max_threads() == before


def test_vocabulary_content_hash_ignores_width() -> None:
    v = toy_vocabulary()
    assert v.with_width(v.width + 64).content_hash == v.content_hash
    assert v.with_width(v.width + 64).hash != v.hash
    other = Vocabulary(list(v.tokens), end_ids=[0], special_ids=v.special_ids - {v.end_ids[0]})
    assert other.content_hash != v.content_hash


def test_a_slow_xgrammar_compile_blocks_no_other_caller(small_tools: Any) -> None:
    """One slot's XGrammar compile (about a second) holds no lock that automata or other
    slots need; the same slot asked twice compiles once."""
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    class SlowCompiler:
        def compile_json_schema(self, schema: str, **kw: Any) -> str:
            calls.append(schema)
            started.set()
            release.wait(10)
            return "grammar"

    small_tools._xgr_compiler = SlowCompiler()
    key = next(iter(small_tools.xgrammar_schemas))
    small_tools._grammars.pop(key, None)
    got: list[Any] = []
    workers = [threading.Thread(target=lambda: got.append(small_tools.grammar(key))) for _ in "ab"]
    for w in workers:
        w.start()
    assert started.wait(10)
    done = threading.Event()
    threading.Thread(target=lambda: (small_tools.automaton(1), done.set())).start()
    assert done.wait(10), "the automaton waited for an XGrammar compile"
    release.set()
    for w in workers:
        w.join(10)
    assert got == ["grammar", "grammar"] and len(calls) == 1
    small_tools._grammars.pop(key, None)
    small_tools._xgr_compiler = None
