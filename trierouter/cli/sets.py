"""``trierouter compile``, ``inspect`` and ``bench``: saved sets of values and their benchmark."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from trierouter.cli.common import (
    CliError,
    _add_vocabulary,
    _read_values,
    _table,
    _vocab_name,
    _vocabulary,
)
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import SHIPPED
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary


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
    folder = args.benchmarks or Path(__file__).resolve().parents[2] / "benchmarks"
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
