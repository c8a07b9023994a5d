"""Command line: compile a set of values, inspect a compiled set, run the demo.

trierouter compile values.txt --tokenizer qwen2 -o tools.trt   # one value per line
trierouter info tools.trt --tokenizer qwen2
trierouter demo
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from trierouter.errors import TrieRouterError
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import SHIPPED, shipped_vocabulary
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary


def _vocabulary(args: argparse.Namespace) -> Vocabulary:
    if args.tokenizer_json:
        return Vocabulary.from_tokenizer_json(args.tokenizer_json, width=args.width)
    return shipped_vocabulary(args.tokenizer, width=args.width)


def _add_tokenizer(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokenizer", default="qwen2", choices=SHIPPED, help="a shipped tokenizer")
    p.add_argument("--tokenizer-json", type=Path, help="a Hugging Face tokenizer.json instead")
    p.add_argument("--width", type=int, help="model logits width (default: tokenizer size)")


def _compile(args: argparse.Namespace) -> int:
    text = args.values.read_text(encoding="utf-8")
    values = [line for line in text.split("\n") if line or not args.skip_empty]
    if text.endswith("\n") and values and values[-1] == "":
        values.pop()
    vocab = _vocabulary(args)
    t = time.perf_counter()
    index = TokenIndex.get(vocab)
    t_index = time.perf_counter() - t
    cs = compile_choices(values, index, terminator=args.terminator)
    cs.save(args.output)
    print(
        f"{cs}\n  tokenizer {vocab.name or args.tokenizer_json} ({len(vocab):,} tokens), "
        f"index {t_index * 1e3:.0f} ms ({index.source}), compile {cs.compile_seconds * 1e3:.1f} ms"
        f"\n  written to {args.output}"
    )
    return 0


def _info(args: argparse.Namespace) -> int:
    cs = ChoiceSet.load(args.path, _vocabulary(args))
    print(cs)
    for v in cs.values[: args.show]:
        print(f"  {v!r}")
    if len(cs) > args.show:
        print(f"  ... {len(cs) - args.show:,} more")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trierouter", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compile", help="compile a file of values (one per line) into a .trt set")
    p.add_argument("values", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True)
    p.add_argument("--terminator", help="string that must follow each value (default: end ids)")
    p.add_argument("--skip-empty", action="store_true", help="ignore empty lines")
    _add_tokenizer(p)
    p.set_defaults(run=_compile)
    p = sub.add_parser("info", help="load a compiled set and describe it")
    p.add_argument("path", type=Path)
    p.add_argument("--show", type=int, default=10)
    _add_tokenizer(p)
    p.set_defaults(run=_info)
    p = sub.add_parser("demo", help="run the demo on the embedded defaults")
    p.set_defaults(run=None)
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from trierouter._demo import main as demo

        return demo(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return int(args.run(args))
    except (TrieRouterError, OSError) as exc:
        print(f"trierouter {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
