"""trierouter command line: compile, inspect, route, classify, evaluate, benchmark, demo, serve.

    trierouter compile values.txt --tokenizer qwen2 -o labels.trt   # .txt / .json / .jsonl
    trierouter inspect labels.trt --tokenizer qwen2 --prefix S72
    trierouter route "what's the weather in Oslo" --registry tools.json [--model DIR]
    trierouter classify --labels labels.jsonl [--model DIR] < texts.txt
    trierouter eval --data data.jsonl --labels labels.jsonl [--model DIR] [--engine vllm]
    trierouter bench [--quick]
    trierouter demo
    trierouter serve MODEL [vllm serve flags]
    trierouter --version

Errors print one line with the fix (exit status 2), never a traceback. Each subcommand is one
:class:`Command` in :data:`COMMANDS` (its arguments and its ``run`` function): adding a
subcommand is adding one entry.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trierouter.errors import TrieRouterError
from trierouter.registry.index import TokenIndex, default_cache_dir
from trierouter.registry.shipped import SHIPPED, shipped_vocabulary
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["COMMANDS", "CliError", "Command", "main"]


class CliError(TrieRouterError, ValueError):
    """A command-line mistake; the message says how to fix it."""


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one-line help, argument setup and the function that runs it."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# -- helpers --------------------------------------------------------------------------------------
def _table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    """A plain aligned text table (numbers right-aligned)."""
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [
        all(_is_number(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(header))
    ]

    def fmt(row: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(row, widths, numeric, strict=True)
        ).rstrip()

    lines = [fmt(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells[1:]]
    return "\n".join(lines)


def _is_number(s: str) -> bool:
    try:
        float(s.replace(",", "").rstrip("%").removesuffix(" ms").removesuffix(" MB"))
    except ValueError:
        return False
    return True


@contextmanager
def _progress(total: int, desc: str) -> Iterator[Callable[[int], None]]:
    """A tqdm bar on stderr (if tqdm is installed) updated with the count done so far."""
    try:
        from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]
    except ImportError:  # pragma: no cover - tqdm comes with transformers

        def noop(done: int) -> None:
            pass

        yield noop
        return
    bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False, disable=total < 2)
    try:

        def update(done: int) -> None:
            bar.update(done - bar.n)

        yield update
    finally:
        bar.close()


def _read_values(path: Path) -> list[str]:
    """Values from a file (:func:`trierouter.registry.values.read_values`: ``.txt`` one per
    line, ``.json``, ``.jsonl``); what was dropped is reported on stderr."""
    from trierouter.registry.values import read_values

    read = read_values(path)
    if read.duplicates or read.skipped_blank:
        print(read.summary(), file=sys.stderr)
    return read.values


def _add_vocabulary(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tokenizer (one of)")
    g.add_argument(
        "--tokenizer",
        choices=SHIPPED,
        help="a shipped tokenizer (default: qwen2; for inspect, the one the set names)",
    )
    g.add_argument("--tokenizer-json", type=Path, help="a Hugging Face tokenizer.json")
    g.add_argument("--model", type=Path, help="a local model folder (its tokenizer and width)")
    p.add_argument("--width", type=int, help="model logits width (default: tokenizer size)")


def _vocabulary(args: argparse.Namespace) -> Vocabulary:
    if getattr(args, "model", None):
        model = Path(args.model)
        if not (model / "config.json").is_file():
            raise CliError(f"--model {model}: not a model folder (no config.json)")
        try:
            from transformers import AutoConfig, AutoTokenizer
        except ImportError as exc:
            raise CliError(
                "--model needs transformers: pip install 'trierouter[transformers]'"
            ) from exc
        tok = AutoTokenizer.from_pretrained(str(model))
        width = args.width or int(AutoConfig.from_pretrained(str(model)).vocab_size)
        return Vocabulary.from_tokenizer(tok, width=width)
    if args.tokenizer_json:
        return Vocabulary.from_tokenizer_json(args.tokenizer_json, width=args.width)
    return shipped_vocabulary(args.tokenizer or "qwen2", width=args.width)


def _vocab_name(args: argparse.Namespace, vocab: Vocabulary) -> str:
    given = getattr(args, "model", None) or args.tokenizer_json
    return str(given or vocab.name or args.tokenizer or "qwen2")


# -- compile --------------------------------------------------------------------------------------
def _compile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("values", type=Path, help="VALUES_FILE (.txt/.json/.jsonl) or a tool REGISTRY")
    p.add_argument("-o", "--output", type=Path, help="where to save (default: VALUES.trt)")
    p.add_argument("--terminator", help="string that must follow each value (default: end ids)")
    p.add_argument(
        "--skip-empty", action="store_true", help="no effect: blank lines are always skipped"
    )
    _add_vocabulary(p)


def _compile(args: argparse.Namespace) -> int:
    values = _read_values(args.values)
    output = args.output or args.values.with_suffix(".trt")
    vocab = _vocabulary(args)
    t = time.perf_counter()
    index = TokenIndex.get(vocab)
    t_index = time.perf_counter() - t
    cs = compile_choices(values, index, terminator=args.terminator)
    cs.save(output)
    rows = [
        ["values", f"{len(cs):,}"],
        ["trie nodes", f"{cs.n_nodes:,}"],
        ["(node, token) pairs", f"{cs.n_pairs:,}"],
        ["memory", f"{cs.nbytes / 1e6:.2f} MB"],
        ["compile", f"{cs.compile_seconds * 1e3:.1f} ms"],
        ["token index", f"{t_index * 1e3:.0f} ms ({index.source})"],
        ["tokenizer", f"{_vocab_name(args, vocab)} ({len(vocab):,} tokens, width {vocab.width:,})"],
        ["saved to", str(output)],
    ]
    print(_table(rows, ["compiled", ""]))
    return 0


# -- inspect --------------------------------------------------------------------------------------
def _inspect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path, help="a set saved by `trierouter compile` (.trt)")
    p.add_argument("--show", type=int, default=5, help="sample values shown with their tokens")
    p.add_argument("--prefix", help="show the tokens allowed after this prefix of a value")
    p.add_argument("--limit", type=int, default=20, help="allowed tokens shown at --prefix")
    _add_vocabulary(p)


def _longest_path(cs: ChoiceSet, vocab: Vocabulary, data: bytes) -> tuple[list[int], int]:
    """Walk ``data`` through the set with the longest allowed token at each step."""
    node, pos = cs.root, 0
    toks: list[int] = []
    while pos < len(data):
        best, best_len = -1, 0
        for t in cs.mask(node).tolist():
            tb = vocab.tokens[t] if t < len(vocab) else b""
            if len(tb) > best_len and data.startswith(tb, pos):
                best, best_len = t, len(tb)
        if best < 0:
            return toks, cs.DEAD
        toks.append(best)
        pos += best_len
        node = cs.advance(node, best)
    return toks, node


def _inspect(args: argparse.Namespace) -> int:
    if not args.path.is_file():
        raise CliError(
            f"{args.path}: no such file; save a set first: trierouter compile VALUES -o {args.path}"
        )
    if not (args.tokenizer or args.tokenizer_json or args.model):
        # no tokenizer given: the shipped one the set was compiled for, by the name it saved
        saved = ChoiceSet.saved_tokenizer(args.path)
        if saved not in SHIPPED:
            raise CliError(
                f"{args.path} was compiled for tokenizer {saved or '(unnamed)'!r}, which is not "
                "shipped: pass the same one with --tokenizer-json or --model"
            )
        args.tokenizer = saved
    vocab = _vocabulary(args)
    cs = ChoiceSet.load(args.path, vocab)
    depth = max((len(v.encode()) for v in cs.values), default=0)
    stats = [
        ["values", f"{len(cs):,}"],
        ["trie nodes", f"{cs.n_nodes:,}"],
        ["(node, token) pairs", f"{cs.n_pairs:,}"],
        ["memory", f"{cs.nbytes / 1e6:.2f} MB"],
        ["longest value", f"{depth} bytes"],
        ["root allows", f"{len(cs.mask(cs.root)):,} tokens"],
        ["terminator", repr(cs.terminator) if cs.terminator is not None else "end ids"],
    ]
    print(_table(stats, [str(args.path), ""]))
    if args.show > 0:
        rows = []
        step = max(1, len(cs) // args.show)
        for v in cs.values[::step][: args.show]:
            toks, _ = _longest_path(cs, vocab, v.encode())
            rows.append([repr(v), " | ".join(repr(vocab.tokens[t])[2:-1] for t in toks)])
        print()
        print(_table(rows, ["sample value", "tokens (longest-match path)"]))
    if args.prefix is not None:
        toks, node = _longest_path(cs, vocab, args.prefix.encode())
        if node in (cs.DEAD, cs.END):
            raise CliError(f"--prefix {args.prefix!r} is not a prefix of any value in the set")
        allowed = cs.mask(node)
        ends = set(vocab.end_ids)
        shown = [
            "<end>" if t in ends else repr(vocab.tokens[t])[2:-1]
            for t in allowed[: args.limit].tolist()
        ]
        more = f" ... {len(allowed) - args.limit:,} more" if len(allowed) > args.limit else ""
        print(f"\nafter {args.prefix!r}: {len(allowed):,} allowed tokens: {' '.join(shown)}{more}")
    return 0


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


def _route_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("request", help="the user's request, in words")
    p.add_argument(
        "--registry",
        type=Path,
        required=True,
        help="tools: a JSON list of OpenAI / Anthropic / MCP tools, or a saved ToolRegistry",
    )
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


# -- bench ----------------------------------------------------------------------------------------
def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="K <= 1,000 only (a few minutes)")
    p.add_argument("--ks", help="comma-separated set sizes (default: 10 .. 100,000)")
    p.add_argument("--engines", help="comma-separated, e.g. trierouter,xgrammar")
    p.add_argument("--budget", type=float, help="seconds of timing per measurement")
    p.add_argument("--out", type=Path, help="results folder (default: benchmarks/results)")
    p.add_argument(
        "--benchmarks", type=Path, help="the checkout's benchmarks/ folder (default: found)"
    )


def _bench(args: argparse.Namespace) -> int:
    folder = args.benchmarks or Path(__file__).resolve().parent.parent / "benchmarks"
    script = folder / "compile_and_step.py"
    if not script.is_file():
        raise CliError(
            f"{folder}: no benchmarks here; run from a source checkout or pass --benchmarks DIR"
        )
    out = args.out or folder / "results"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(script), "--out", str(out / "compile_and_step.json")]
    if args.quick:
        cmd.append("--quick")
    for flag in ("ks", "engines", "budget"):
        if getattr(args, flag) is not None:
            cmd += [f"--{flag}", str(getattr(args, flag))]
    if subprocess.call(cmd) != 0:
        raise CliError(f"{script.name} failed (output above); check the benchmark dependencies")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot skipped: pip install 'trierouter[bench]' for matplotlib", file=sys.stderr)
        return 0
    plot = [
        sys.executable,
        str(folder / "plot_compile_and_step.py"),
        "--json",
        str(out / "compile_and_step.json"),
        "--out",
        str(out / "compile_and_step.png"),
    ]
    if subprocess.call(plot) != 0:
        raise CliError("plotting failed (output above)")
    return 0


# -- demo -----------------------------------------------------------------------------------------
def _demo_args(p: argparse.ArgumentParser) -> None:
    p.epilog = "Other arguments go to the demo: trierouter demo --help-demo lists them."


def _demo(args: argparse.Namespace) -> int:
    script = Path(__file__).resolve().parent.parent / "examples" / "demo.py"
    if not script.is_file():
        raise CliError(f"{script}: no demo here; run from a source checkout (make demo)")
    rest = ["--help" if a == "--help-demo" else a for a in args.rest]
    return subprocess.call([sys.executable, str(script), *rest])


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="model folder or name, as for vllm serve")


def _serve(args: argparse.Namespace) -> int:
    from trierouter.router.vllm.launch import main as serve_main

    serve_main([args.model, *args.rest])
    return 0


COMMANDS: list[Command] = [
    Command("compile", "compile a file of values into a saved set (.trt)", _compile_args, _compile),
    Command(
        "inspect", "stats, sample paths and allowed tokens of a saved set", _inspect_args, _inspect
    ),
    Command("info", "same as inspect", _inspect_args, _inspect),
    Command(
        "classify", "classify texts (stdin, one a line) into labels", _classify_args, _classify
    ),
    Command("route", "turn a request into a valid tool call of a registry", _route_args, _route),
    Command(
        "eval", "validity and accuracy of three decodings on a labelled set", _eval_args, _eval
    ),
    Command(
        "bench", "run the compile/step benchmark against the peers and plot it", _bench_args, _bench
    ),
    Command("demo", "run examples/demo.py (from a source checkout)", _demo_args, _demo),
    Command(
        "serve",
        "vLLM's OpenAI server with trierouter tool calling (MODEL, then any vllm serve flag)",
        _serve_args,
        _serve,
    ),
]
"""The subcommands, in help order."""


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"{exc.filename}: no such file or directory; check the path"
    if isinstance(exc, IsADirectoryError) and exc.filename:
        return f"{exc.filename}: is a directory; give a file"
    if isinstance(exc, PermissionError) and exc.filename:
        return f"{exc.filename}: permission denied"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


class _Parser(argparse.ArgumentParser):
    """argparse with usage mistakes reported on one line, with where to look."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 error)."""
    from trierouter import __version__

    parser = _Parser(prog="trierouter", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"trierouter {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for c in COMMANDS:
        p = sub.add_parser(c.name, help=c.help, description=c.help)
        c.add_arguments(p)
        p.set_defaults(run=c.run)
    args, rest = parser.parse_known_args(argv)
    if args.command in ("demo", "serve"):
        args.rest = rest
    elif rest:
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print(f"trierouter {args.command}: interrupted", file=sys.stderr)
        return 130
    except (TrieRouterError, OSError, ValueError, ImportError, KeyError) as exc:
        print(f"trierouter {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
