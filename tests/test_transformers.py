"""End to end on a tiny random-weight Llama with a real tokenizer (transformers, CPU).

Outputs through trierouter are compared token for token with an independent reference: a plain
decoding loop (full forward each step, no cache) that masks the logits to the allowed set computed
by brute force from the value strings and the tokenizer's own token bytes, and with XGrammar's
transformers integration on the same ``model.generate`` call.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
xgr = pytest.importorskip("xgrammar")

from xgrammar.contrib.hf import LogitsProcessor as XgrLogitsProcessor

from trierouter import TokenIndex, Vocabulary, compile_choices, shipped_vocabulary
from trierouter.data.synthetic import non_ascii_labels, tool_names
from trierouter.registry.trie import ChoiceSet
from trierouter.router.plan import Choice, FreeText, Plan, Text, compile_plan
from trierouter.router.transformers import TrieLogitsProcessor, generate
from trierouter.testing.oracle import ebnf_alternation, xgrammar_tokenizer_info
from trierouter.testing.tiny_model import build_tiny_model

HfTokens = tuple[dict[bytes, list[int]], list[int], dict[int, bytes]]
WORDS = "route the request to a tool that can handle billing shipment user repo icd code".split()


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny matmuls on a shared 2-core machine: one thread is 10x faster than two."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen2", tokenizer="qwen2")


@pytest.fixture(scope="session")
def tokenizer(tiny_dir: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(str(tiny_dir))


@pytest.fixture(scope="session")
def model(tiny_dir: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(str(tiny_dir)).eval()


@pytest.fixture(scope="session")
def vocab(tokenizer: Any, model: Any) -> Vocabulary:
    return Vocabulary.from_tokenizer(tokenizer, width=model.config.vocab_size)


@pytest.fixture(scope="session")
def index(vocab: Vocabulary) -> TokenIndex:
    return TokenIndex.get(vocab)


@pytest.fixture(scope="session")
def hf_tokens(tokenizer: Any) -> HfTokens:
    """Token bytes read from the tokenizer itself (GPT-2 byte map), independent of Vocabulary."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    decoder = {c: b for b, c in bytes_to_unicode().items()}
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    by_bytes: dict[bytes, list[int]] = {}
    for piece, i in tokenizer.get_vocab().items():
        if i in special:
            continue
        by_bytes.setdefault(bytes(decoder[c] for c in piece), []).append(i)
    ends = sorted({tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")})
    return by_bytes, ends, {i: b for b, ids in by_bytes.items() for i in ids}


def prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        f"Request {seed}-{i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9)))
        for i in range(n)
    ]


# -- the reference -------------------------------------------------------------------------------
def brute_allowed(
    values: Sequence[bytes], prefix: bytes, by_bytes: dict[bytes, list[int]], ends: list[int]
) -> list[int]:
    """Every token t with prefix + t a prefix of a value, plus the end ids on a whole value."""
    out: set[int] = set()
    for v in values:
        if v.startswith(prefix):
            rest = v[len(prefix) :]
            if not rest:
                out.update(ends)
            for k in range(1, len(rest) + 1):
                out.update(by_bytes.get(rest[:k], ()))
    return sorted(out)


def reference(
    model: Any,
    tokenizer: Any,
    prompt: str,
    values: Sequence[str],
    hf_tokens: HfTokens,
    *,
    rng: np.random.Generator | None = None,
    max_new_tokens: int = 64,
) -> list[int]:
    """Greedy (or sampled with ``rng``) decoding, masked to the brute-force allowed set."""
    by_bytes, ends, inv = hf_tokens
    encoded = [v.encode() for v in values]
    ids = list(tokenizer(prompt)["input_ids"])
    prefix = b""
    out: list[int] = []
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            logits = model(torch.tensor([ids])).logits[0, -1].double()
            allowed = brute_allowed(encoded, prefix, by_bytes, ends)
            sub = logits[allowed]
            if rng is None:
                tok = allowed[int(torch.argmax(sub))]
            else:
                p = np.exp((sub - sub.max()).numpy())
                cdf = np.cumsum(p)
                k = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
                tok = allowed[min(k, len(allowed) - 1)]
            out.append(tok)
            ids.append(tok)
            if tok in ends:
                break
            prefix += inv[tok]
    return out


def hf_generate(model: Any, tokenizer: Any, texts: list[str], processor: Any, **kw: Any) -> Any:
    enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
    with torch.inference_mode():
        out = model.generate(**enc, logits_processor=[processor], **kw)
    return out[:, enc["input_ids"].shape[1] :].tolist()


def until_end(tokens: list[int], ends: Sequence[int]) -> list[int]:
    for k, t in enumerate(tokens):
        if t in ends:
            return tokens[: k + 1]
    return tokens


# -- the tiny model ------------------------------------------------------------------------------
def test_tiny_model_is_cached_and_vllm_ready(tiny_dir: Path, model: Any) -> None:
    before = (tiny_dir / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(tiny_dir, tokenizer="qwen2") == tiny_dir
    assert (tiny_dir / "model.safetensors").stat().st_mtime_ns == before
    cfg = model.config
    assert cfg.architectures == ["LlamaForCausalLM"]
    assert cfg.max_position_embeddings >= 2048 and cfg.head_dim == 32
    assert cfg.vocab_size % 64 == 0
    with pytest.raises(FileExistsError):
        (tiny_dir.parent / "other").mkdir()
        (tiny_dir.parent / "other" / "notes.txt").write_text("mine")
        build_tiny_model(tiny_dir.parent / "other")


@pytest.mark.parametrize("name", ["qwen2", "gpt2"])
def test_tiny_tokenizer_matches_shipped_vocabulary(
    name: str, tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = (
        tiny_dir
        if name == "qwen2"
        else build_tiny_model(tmp_path_factory.mktemp("tiny") / name, tokenizer=name)
    )
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    width = transformers.AutoConfig.from_pretrained(str(path)).vocab_size
    ours = Vocabulary.from_tokenizer(tok, width=width)
    shipped = shipped_vocabulary(name)
    assert width > len(tok) == len(shipped) == len(ours)
    assert ours.special_ids == shipped.special_ids
    assert set(ours.end_ids) == set(shipped.end_ids)
    regular = [i for i in range(len(shipped)) if i not in shipped.special_ids]
    assert all(ours.tokens[i] == shipped.tokens[i] for i in regular)
    text = "Tokyo 東京 café, get_user_by_id()"
    assert tok.decode(tok(text)["input_ids"]) == text


# -- (a) greedy equivalence ----------------------------------------------------------------------
@pytest.mark.parametrize(("k", "n"), [(100, 50), (10_000, 6)])
def test_greedy_matches_reference_and_xgrammar(
    k: int, n: int, model: Any, tokenizer: Any, vocab: Vocabulary, index: TokenIndex, hf_tokens: Any
) -> None:
    values = tool_names(k, seed=k)
    plan = compile_plan(values, index)
    texts = prompts(n, seed=k)
    limit = max(len(v.encode()) for v in values) + 1
    ours = generate(model, tokenizer, texts, plan, max_new_tokens=limit, batch_size=16)
    ref = [reference(model, tokenizer, t, values, hf_tokens, max_new_tokens=limit) for t in texts]
    assert [r.token_ids for r in ours] == ref
    assert all(r.terminated and r.choices == {"choice0": r.text} for r in ours)
    assert all(r.text in set(values) for r in ours)
    assert len({r.text for r in ours}) > 1

    # the same model.generate call, constrained by trierouter and by XGrammar's HF integration
    compiled = xgr.GrammarCompiler(
        xgrammar_tokenizer_info(vocab), cache_enabled=False
    ).compile_grammar(ebnf_alternation(values))
    kw = {"max_new_tokens": limit, "do_sample": False}
    trie_out = hf_generate(model, tokenizer, texts, TrieLogitsProcessor(plan), **kw)
    xgr_out = hf_generate(model, tokenizer, texts, XgrLogitsProcessor(compiled), **kw)
    assert trie_out == xgr_out
    assert [until_end(t, vocab.end_ids) for t in trie_out] == ref


# -- (b) fixed-seed sampling ---------------------------------------------------------------------
def test_sampling_matches_reference_and_xgrammar(
    model: Any, tokenizer: Any, vocab: Vocabulary, index: TokenIndex, hf_tokens: Any
) -> None:
    values = non_ascii_labels(100, seed=3) + tool_names(200, seed=3)
    plan = compile_plan(values, index)
    texts = prompts(24, seed=7)
    limit = max(len(v.encode()) for v in values) + 1
    kw: dict[str, Any] = {"max_new_tokens": limit, "do_sample": True, "temperature": 1.0}
    ours = generate(model, tokenizer, texts, plan, seed=11, batch_size=8, **kw)
    again = generate(model, tokenizer, texts, plan, seed=11, batch_size=5, **kw)
    assert [r.token_ids for r in ours] == [r.token_ids for r in again]
    ref = [
        reference(
            model,
            tokenizer,
            t,
            values,
            hf_tokens,
            rng=np.random.default_rng([11, i]),
            max_new_tokens=limit,
        )
        for i, t in enumerate(texts)
    ]
    assert [r.token_ids for r in ours] == ref
    assert all(r.text in set(values) for r in ours)

    compiled = xgr.GrammarCompiler(
        xgrammar_tokenizer_info(vocab), cache_enabled=False
    ).compile_grammar(ebnf_alternation(values))
    torch.manual_seed(5)
    trie_out = hf_generate(model, tokenizer, texts, TrieLogitsProcessor(plan), **kw)
    torch.manual_seed(5)
    xgr_out = hf_generate(model, tokenizer, texts, XgrLogitsProcessor(compiled), **kw)
    assert trie_out == xgr_out
    decoded = [tokenizer.decode(until_end(t, vocab.end_ids)[:-1]) for t in trie_out]
    assert all(d in set(values) for d in decoded)


# -- (c) validity at temperature 1 ---------------------------------------------------------------
def test_every_sampled_output_is_a_member(model: Any, tokenizer: Any, index: TokenIndex) -> None:
    big = tool_names(10_000, seed=1)
    small = non_ascii_labels(300, seed=2)
    total = 0
    for values, n in ((big, 160), (small, 80)):
        limit = max(len(v.encode()) for v in values) + 1
        out = generate(
            model,
            tokenizer,
            prompts(n, seed=len(values)),
            compile_plan(values, index),
            max_new_tokens=limit,
            do_sample=True,
            temperature=1.0,
            seed=0,
            batch_size=32,
        )
        members = set(values)
        assert all(r.terminated and r.text in members for r in out)
        assert len({r.text for r in out}) > n // 2
        total += len(out)
    think = compile_plan(
        [FreeText(until="</think>", max_tokens=6), Text("\nAnswer: "), Choice(big, name="answer")],
        index,
    )
    assert think.single_choice is None
    out = generate(
        model,
        tokenizer,
        prompts(80, seed=9),
        think,
        max_new_tokens=6 + 20 + 52,
        do_sample=True,
        seed=1,
        batch_size=32,
    )
    for r in out:
        assert r.terminated
        assert r.choices["answer"] in set(big)
        assert r.text.endswith("</think>\nAnswer: " + r.choices["answer"])
    total += len(out)
    assert total >= 300


def test_processor_mixes_plans_in_one_batch(
    model: Any, tokenizer: Any, vocab: Vocabulary, index: TokenIndex
) -> None:
    a, b = tool_names(300, seed=4), non_ascii_labels(200, seed=4)
    sa = compile_choices(a, index)
    plan_a, plan_b = compile_plan(sa, index), compile_plan(b, index)
    think = compile_plan([FreeText(until="</think>", max_tokens=4), Choice(a, name="t")], index)
    rows: list[Plan | Any] = [plan_a, sa, plan_b, think, plan_a, plan_b, think, sa]
    texts = prompts(len(rows), seed=21)
    kw = {"max_new_tokens": 64, "do_sample": True}
    torch.manual_seed(0)
    out = hf_generate(model, tokenizer, texts, TrieLogitsProcessor(rows), **kw)
    proc = TrieLogitsProcessor(rows)
    torch.manual_seed(0)
    assert hf_generate(model, tokenizer, texts, proc, **kw) == out
    assert proc.rows is not None
    for i, c in enumerate(rows):
        toks = until_end(out[i], vocab.end_ids)
        # generate() stops without a last call, so the processor never sees the end id
        assert toks[-1] in vocab.end_ids
        text = tokenizer.decode(toks[:-1])
        if c is think:
            assert text.split("</think>")[-1] in set(a)
            assert proc.rows.choices(i)["t"] == text.split("</think>")[-1]
        else:
            assert text in set(a if c in (plan_a, sa) else b)
            assert proc.rows.choices(i) == {"choice0": text}


# -- (d) fast-forward ----------------------------------------------------------------------------
def test_fast_forward_outputs_members_with_fewer_forward_passes(
    model: Any, tokenizer: Any, index: TokenIndex
) -> None:
    values = tool_names(2_000, seed=6)
    plan = compile_plan(values, index)
    texts = prompts(48, seed=6)
    members = set(values)
    runs = {}
    for ff in (False, True):
        runs[ff] = out = generate(
            model,
            tokenizer,
            texts,
            plan,
            max_new_tokens=64,
            do_sample=True,
            seed=2,
            fast_forward=ff,
            batch_size=16,
        )
        assert all(r.terminated and r.text in members for r in out)
        assert all(r.forward_passes + r.forced_tokens == len(r.token_ids) for r in out)
    assert sum(r.forced_tokens for r in runs[False]) == 0
    plain = sum(r.forward_passes for r in runs[False])
    fast = sum(r.forward_passes for r in runs[True])
    assert fast < 0.8 * plain

    # a plan with literal text: the text costs no forward pass at all
    think = compile_plan(
        [FreeText(until="</think>", max_tokens=3), Text("\nThe answer is: "), Choice(values)],
        index,
    )
    out = generate(model, tokenizer, texts[:8], think, max_new_tokens=80, fast_forward=True)
    for r in out:
        assert r.terminated and r.choices["choice0"] in members
        assert "</think>\nThe answer is: " in r.text
        assert r.forced_tokens >= 3


def test_misuse_raises(model: Any, tokenizer: Any, index: TokenIndex) -> None:
    # a plan compiled at the tokenizer's width serves a wider model (issue 15: the width is an
    # apply-time fact, padding ids never allowed); its output is still one of the values
    narrow = compile_plan(["a", "b"], TokenIndex.get(index.vocabulary.with_width(151_851)))
    assert generate(model, tokenizer, ["x"], narrow)[0].text in ("a", "b")
    with pytest.raises(TypeError):
        generate(model, tokenizer, "x", ["a", "b"])
    with pytest.raises(ValueError, match="2 entries for 3 prompts"):
        plan = compile_plan(["a"], index)
        generate(model, tokenizer, ["x", "y", "z"], [plan, plan])
    with pytest.raises(ValueError, match="rows"):
        hf_generate(model, tokenizer, ["x"], TrieLogitsProcessor([plan, plan]), max_new_tokens=2)


def test_set_bound_to_tokenizer_serves_a_wider_model(
    tiny_dir: Path, tokenizer: Any, model: Any, tmp_path: Path
) -> None:
    """A set compiled for the tokenizer alone (width = its size) and saved is loaded and
    applied by a real model folder whose config width is larger: the width is an apply-time
    fact, and the model's padding ids are never chosen."""
    config = json.loads((tiny_dir / "config.json").read_text())
    plain = Vocabulary.from_tokenizer(tokenizer)
    assert config["vocab_size"] > plain.width == len(tokenizer)  # the folder pads its logits
    cs = compile_choices(["get_user", "list_orders", "café"], plain)
    cs.save(tmp_path / "set.trt")
    wide = Vocabulary.from_tokenizer(tokenizer, width=config["vocab_size"])
    loaded = ChoiceSet.load(tmp_path / "set.trt", wide)
    assert loaded.width == config["vocab_size"]
    for constraint in (cs, loaded):  # in memory at the tokenizer's width, or loaded
        results = generate(
            model, tokenizer, ["a", "b", "c", "d"], constraint, max_new_tokens=12,
            do_sample=True, temperature=1.0, seed=3,
        )  # fmt: skip
        for r in results:
            assert r.text in cs.values and r.terminated
            assert all(t < len(tokenizer) for t in r.token_ids)
