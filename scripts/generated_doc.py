"""The command line shared by the scripts that write a generated doc (``--check``: stale?)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def write_or_check(out: Path, render: Callable[[], str], argv: list[str], script: str) -> int:
    """Write ``render()`` to ``out``; with ``--check``, exit 1 when ``out`` differs from it."""
    text = render()
    if "--check" in argv:
        if not out.is_file() or out.read_text(encoding="utf-8") != text:
            print(f"{out} is stale: run python {script}", file=sys.stderr)
            return 1
        return 0
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")
    return 0
