"""trierouter command line: compile, inspect, route, classify, evaluate, benchmark, demo, serve.

    trierouter compile values.txt --tokenizer qwen2 -o labels.trt   # .txt / .json / .jsonl
    trierouter inspect labels.trt --tokenizer qwen2 --prefix S72
    trierouter route "what's the weather in Oslo" --registry tools.json [--model DIR]
    trierouter write-requests --registry tools.json --model DIR -o requests.json
    trierouter classify --labels labels.jsonl [--model DIR] < texts.txt
    trierouter eval --data data.jsonl --labels labels.jsonl [--model DIR] [--engine vllm]
    trierouter bench [--quick]
    trierouter demo
    trierouter serve MODEL [vllm serve flags]
    trierouter --version

Errors print one line with the fix (exit status 2), never a traceback. Each subcommand is one
:class:`Command` in :data:`COMMANDS` (its arguments and its ``run`` function): adding a
subcommand is adding one entry. The subcommands live by what they work on: saved sets
(:mod:`.sets`: compile, inspect, bench), a language model (:mod:`.models`: route, classify,
eval), and here demo and serve; :mod:`.common` holds what they share.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

from trierouter.cli.common import CliError, Command
from trierouter.cli.models import (
    _classify,
    _classify_args,
    _eval,
    _eval_args,
    _requests,
    _requests_args,
    _route,
    _route_args,
)
from trierouter.cli.sets import (
    _bench,
    _bench_args,
    _compile,
    _compile_args,
    _inspect,
    _inspect_args,
)
from trierouter.errors import TrieRouterError

__all__ = ["COMMANDS", "CliError", "Command", "main"]


# -- demo -----------------------------------------------------------------------------------------
def _demo_args(p: argparse.ArgumentParser) -> None:
    p.epilog = "Other arguments go to the demo: trierouter demo --help-demo lists them."


def _demo(args: argparse.Namespace) -> int:
    script = Path(__file__).resolve().parents[2] / "examples" / "demo.py"
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
        "write-requests",
        "have the served model write a few requests per tool, for the tool search",
        _requests_args,
        _requests,
    ),
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
