"""What the subcommands share: the error, the :class:`Command` record, table / progress output,
value files and the ``--tokenizer`` arguments."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trierouter.errors import TrieRouterError
from trierouter.registry.shipped import SHIPPED, shipped_vocabulary
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["CliError", "Command"]


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
