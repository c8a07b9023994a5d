"""``trierouter route``, ``classify`` and ``eval``: the subcommands that run a language model."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from trierouter.cli.common import CliError, _progress, _table
from trierouter.registry.index import TokenIndex, default_cache_dir
from trierouter.registry.vocabulary import Vocabulary


# -- classify / eval ------------------------------------------------------------------------------
def _add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("--labels", type=Path, required=True, help="labels: .txt, .json or .jsonl")
    p.add_argument(
        "--model",
        type=Path,
        help="a local model folder (default: a tiny random-weight model built locally)",
    )
    p.add_argument("--engine", choices=("transformers", "vllm"), default="transformers")
    p.add_argument("--policy", choices=("auto", "trie", "shortlist", "hierarchy"), default="auto")
    p.add_argument("--k", type=int, default=64, help="shortlist size for large label sets")
    p.add_argument("--think-tokens", type=int, default=64, help="free tokens in think mode")


def _model_dir(given: Path | None, what: str) -> Path:
    """``--model`` checked, or the tiny random-weight model (built once, and said so)."""
    if given is None:
        from trierouter.tiny_model import build_tiny_model

        model = build_tiny_model(default_cache_dir() / "tiny-qwen2")
        print(
            f"(no --model: using a tiny random-weight model built locally at {model}; "
            f"its {what} are valid but meaningless)",
            file=sys.stderr,
        )
        return model
    if not (Path(given) / "config.json").is_file():
        raise CliError(f"--model {given}: not a model folder (no config.json); pass a local path")
    return Path(given)


def _classifier(args: argparse.Namespace, labels_read: Any = None) -> Any:
    from trierouter.classify import Classifier, load_labels

    labels, descriptions = labels_read or load_labels(args.labels)
    model = _model_dir(args.model, "labels")
    try:
        import torch
        import transformers

        transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        if args.model is None:  # tiny matmuls: one thread is much faster on small machines
            torch.set_num_threads(1)
    except ImportError:
        pass
    path = None
    if args.policy == "hierarchy" and all(_looks_icd(v) for v in labels[:50]):
        from trierouter.data.icd10cm import icd10cm_path

        path = icd10cm_path
    return Classifier(
        labels,
        descriptions=descriptions,
        model=model,
        engine=args.engine,
        policy=args.policy,
        k=args.k,
        path=path,
        think_tokens=args.think_tokens,
    )


def _add_registry(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--registry",
        type=Path,
        required=True,
        help="tools: a JSON list of OpenAI / Anthropic / MCP tools, or a saved ToolRegistry",
    )


def _route_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("request", help="the user's request, in words")
    _add_registry(p)
    p.add_argument(
        "--model",
        type=Path,
        help="a local model folder (default: a tiny random-weight model built locally)",
    )
    p.add_argument("--tool-choice", default="required", help="required | auto | none | a tool name")
    p.add_argument(
        "--k",
        type=int,
        default=32,
        help="tools shortlisted (BM25 over name, description, parameters) into the prompt",
    )
    p.add_argument(
        "--budget",
        type=int,
        default=24,
        help="tokens before a free string is steered to its end (x2 per XGrammar slot, x6 for "
        "all arguments)",
    )
    p.add_argument("--max-tokens", type=int, default=384)


def _load_registry(path: Path) -> Any:
    from trierouter.registry.tool_registry import ToolRegistry

    text = path.read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CliError(f"--registry {path}: not JSON ({exc}); give a JSON list of tools") from exc
    if isinstance(doc, dict) and "format" in doc and "tools" in doc:
        return ToolRegistry.load(path)
    if isinstance(doc, dict) and isinstance(doc.get("tools"), list):
        doc = doc["tools"]
    if not isinstance(doc, list) or not doc:
        raise CliError(f"--registry {path}: expected a non-empty JSON list of tools")
    return ToolRegistry(doc)


def _route(args: argparse.Namespace) -> int:
    from trierouter.router.tool_calls.plan import ToolCallPlan
    from trierouter.shortlist.tool_text import ToolIndex

    registry = _load_registry(args.registry)
    names = registry.names()
    if args.tool_choice not in ("required", "auto", "none") and args.tool_choice not in names:
        raise CliError(
            f"--tool-choice {args.tool_choice!r}: not a tool in {args.registry}; give required, "
            "auto, none or one of its tool names"
        )
    if args.k < 1:
        raise CliError(f"--k {args.k}: give at least 1")
    # the server's tool search: name (also in words), description, parameters
    found = ToolIndex.build(registry).search(args.request, k=min(args.k, len(names)))
    shortlist = [name for name, _ in found]
    model_dir = _model_dir(args.model, "calls")
    import torch
    import transformers

    from trierouter.router.transformers import generate

    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if args.model is None:
        torch.set_num_threads(1)
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()  # type: ignore[no-untyped-call]
    width = int(model.get_output_embeddings().weight.shape[0])
    tools = registry.compile(TokenIndex.get(Vocabulary.from_tokenizer(tok, width=width)))
    b = args.budget
    plan = ToolCallPlan(
        tools,
        tool_choice=args.tool_choice,
        allowed=shortlist if args.tool_choice in ("required", "auto") else None,
        string_max_tokens=b,
        slot_max_tokens=2 * b,
        max_tokens=6 * b,
    )
    listing = "\n".join(f"- {registry[n].name}: {registry[n].description}" for n in shortlist)
    prompt = f"Tools:\n{listing}\n\nRequest: {args.request}\nCall one tool as JSON.\n"
    t0 = time.perf_counter()
    (res,) = generate(model, tok, [prompt], plan, max_new_tokens=args.max_tokens)
    ms = (time.perf_counter() - t0) * 1e3
    call = plan.parse(res.text) if res.terminated else None
    if not res.terminated:
        raise CliError(
            f"the output did not finish within --max-tokens {args.max_tokens}; raise it or "
            "lower --budget"
        )
    if call is None:
        print(json.dumps({"role": "assistant", "content": res.text}, ensure_ascii=False))
    else:
        msg = {"role": "assistant", "tool_calls": [call.model_dump()]}
        print(json.dumps(msg, ensure_ascii=False))
    print(
        f"({len(names)} tools, {len(shortlist)} shortlisted, {len(res.token_ids)} tokens, "
        f"{ms:.0f} ms)",
        file=sys.stderr,
    )
    return 0


def _requests_args(p: argparse.ArgumentParser) -> None:
    _add_registry(p)
    p.add_argument(
        "--model",
        type=Path,
        required=True,
        help="the served model's local folder (its chat template prompts it)",
    )
    p.add_argument(
        "-o",
        "--out",
        type=Path,
        required=True,
        help='the requests file, {tool name: [request, ...]}: name it as "requests" beside '
        '"tools" in $TRIEROUTER_TOOLS (OUT.cache keeps what was written, to resume)',
    )
    p.add_argument("--n", type=int, default=3, help="requests per tool")
    p.add_argument("--batch-size", type=int, default=8, help="tools per generate call")


def _requests(args: argparse.Namespace) -> int:
    from trierouter.router.tool_requests import QuestionWriter

    registry = _load_registry(args.registry)
    if not (args.model / "config.json").is_file():
        raise CliError(f"--model {args.model}: not a local model folder (no config.json)")
    if args.n < 1 or args.batch_size < 1:
        raise CliError("--n and --batch-size: give at least 1")
    writer = QuestionWriter(args.model, n=args.n, batch_size=args.batch_size)
    cache = args.out.with_name(args.out.name + ".cache")
    got = writer.write(list(registry), cache=cache)
    args.out.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(
        f"requests for {len(got):,} tools -> {args.out} ({writer.generated:,} written now, "
        f"the rest read from {cache})",
        file=sys.stderr,
    )
    return 0


def _looks_icd(v: str) -> bool:
    return len(v) >= 3 and v[0].isalpha() and v[1:3].isdigit()


def _classify_args(p: argparse.ArgumentParser) -> None:
    _add_model(p)
    p.add_argument("--text", action="append", help="a text to classify (else stdin, one a line)")
    p.add_argument("--top-n", type=int, default=1, help="labels scored per text")
    p.add_argument("--think", action="store_true", help="think, then answer")
    p.add_argument("--json", action="store_true", help="one JSON object per text")


def _classify(args: argparse.Namespace) -> int:
    texts = args.text
    if not texts:
        if sys.stdin.isatty():
            raise CliError("no texts: pipe one text per line on stdin or pass --text TEXT")
        texts = [line.rstrip("\n") for line in sys.stdin if line.strip()]
        if not texts:
            raise CliError("stdin held no texts; give one text per line")
    clf = _classifier(args)
    with _progress(len(texts), "classify") as update:
        preds = clf.classify(texts, top_n=args.top_n, think=args.think, progress=update)
    if args.json:
        for p in preds:
            obj = {
                "text": p.text,
                "label": p.label,
                "scores": [{"label": s.label, "logprob": s.logprob} for s in p.scores],
                "exact": p.exact,
            }
            if p.thought is not None:
                obj["thought"] = p.thought
            print(json.dumps(obj, ensure_ascii=False))
        return 0
    rows = []
    for p in preds:
        short = p.text if len(p.text) <= 50 else p.text[:47] + "..."
        top = p.scores[0].logprob if p.scores else float("nan")
        others = ", ".join(f"{s.label} ({s.logprob:.2f})" for s in p.scores[1:])
        rows.append([short, p.label, f"{top:.3f}", others])
    print(_table(rows, ["text", "label", "log-prob", "next labels"]))
    return 0


def _eval_args(p: argparse.ArgumentParser) -> None:
    _add_model(p)
    p.add_argument("--data", type=Path, required=True, help='JSONL: {"text": ..., "label": ...}')
    p.add_argument(
        "--modes",
        default="unconstrained,constrained,think",
        help="comma-separated: unconstrained, constrained, think",
    )
    p.add_argument("--limit", type=int, help="evaluate only the first N examples")
    p.add_argument("--json", type=Path, help="also write the results here")


def _eval(args: argparse.Namespace) -> int:
    from trierouter.classify import MODES, evaluate, load_examples, load_labels

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise CliError(f"--modes {args.modes!r}: expected a comma-separated subset of {MODES}")
    examples = load_examples(args.data)[: args.limit]
    labels_read = load_labels(args.labels)
    unknown = sorted({g for _, g in examples} - set(labels_read[0]))
    if unknown:
        raise CliError(
            f"{args.data}: {len(unknown)} gold labels are not in {args.labels} "
            f"(first: {unknown[0]!r}); add them to the label file"
        )
    clf = _classifier(args, labels_read)
    results = []
    for mode in modes:
        with _progress(len(examples), mode) as update:
            results += evaluate(clf, examples, modes=[mode], progress=lambda _m, i: update(i))
    rows = [
        [r.mode, r.n, f"{100 * r.validity:.1f}%", f"{100 * r.accuracy:.1f}%", f"{r.seconds:.1f}"]
        for r in results
    ]
    print(f"{len(examples)} examples, {len(clf.labels):,} labels, engine {clf.engine}")
    print(_table(rows, ["decoding", "n", "valid", "accuracy", "seconds"]))
    if args.json:
        doc = [
            {
                "mode": r.mode,
                "n": r.n,
                "valid": r.valid,
                "correct": r.correct,
                "validity": r.validity,
                "accuracy": r.accuracy,
                "seconds": r.seconds,
            }
            for r in results
        ]
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0
