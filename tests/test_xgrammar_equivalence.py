"""Proposition 1 as a test: the trie's masks equal XGrammar's at every step of random paths.

Real tokenizers from five+ families (32K to 248K tokens), K = 1, 10, 1,000 and 10,000 mixed
values (tool names, ICD-10-CM codes, non-ASCII labels, prefix chains), end ids and a closing-quote
terminator. ``benchmarks/equivalence_sweep.py`` runs the same with 1,000 paths per setting.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import pytest

from trierouter.data.synthetic import mixed_values
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import shipped_vocabulary
from trierouter.registry.trie import compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.testing.oracle import (
    compare_with_xgrammar,
    ebnf_alternation,
    xgrammar_tokenizer_info,
)

FAMILIES = ["mistral-v3", "gpt2", "deepseek-v4", "qwen2", "tekken", "o200k", "qwen3.6"]
KS = [1, 10, 1000, 10000]
PATHS = 100


@lru_cache(maxsize=2)
def _setup(family: str) -> tuple[Vocabulary, TokenIndex, Any]:
    import xgrammar

    vocab = shipped_vocabulary(family)
    compiler = xgrammar.GrammarCompiler(xgrammar_tokenizer_info(vocab), cache_enabled=False)
    return vocab, TokenIndex.get(vocab), compiler


@pytest.mark.parametrize("terminator", [None, '"'])
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("family", FAMILIES)
def test_masks_identical_to_xgrammar(family: str, k: int, terminator: str | None) -> None:
    vocab, index, compiler = _setup(family)
    values = mixed_values(k, seed=k + len(family))
    if terminator:  # a JSON string: opening quote in the value, closing quote as terminator
        values = ['"' + v.replace("\\", "\\\\").replace('"', '\\"') for v in values]
    cs = compile_choices(values, index, terminator=terminator)
    compiled = compiler.compile_grammar(ebnf_alternation(values, terminator))
    report = compare_with_xgrammar(cs, vocab, compiled, n_paths=PATHS, seed=k)
    assert report.paths == PATHS and report.end_steps == PATHS
    assert report.non_canonical_paths > PATHS // 4  # random tokenizations, not only canonical


def test_oracle_detects_a_wrong_mask() -> None:
    """Negative control: a set missing one value must be caught by the comparison."""
    vocab, index, compiler = _setup("qwen2")
    values = ["get_user", "get_users", "list_orders"]
    cs = compile_choices(values, index)
    compiled = compiler.compile_grammar(ebnf_alternation(values[:2]))
    with pytest.raises(AssertionError, match="mask differs"):
        compare_with_xgrammar(cs, vocab, compiled, n_paths=5)
