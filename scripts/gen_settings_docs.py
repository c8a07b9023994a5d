"""Write docs/settings.md from trierouter/settings.py (``--check``: fail if it is stale)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generated_doc import write_or_check  # noqa: E402

from trierouter.settings import SETTINGS, Setting  # noqa: E402

OUT = ROOT / "docs" / "settings.md"
SECTIONS = {
    "library": "The library",
    "server": "The server (`trierouter serve`, the vLLM logits processor and tool parser)",
    "build": "The build (read by `setup.py`, not by the package)",
}


def _bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n:,} ({n >> shift} {unit})"
    return f"{n:,}"


def _default(s: Setting[Any]) -> str:
    if s.default_doc:
        return s.default_doc.replace("``", "`")
    if isinstance(s.default, bool):
        return f"`{int(s.default)}`"
    if isinstance(s.default, int):
        return _bytes(s.default) if s.name.endswith("BYTES") else f"{s.default:,}"
    return f"`{s.default}`"


def _cell(text: str) -> str:
    return " ".join(text.replace("``", "`").replace("|", "\\|").split())


def render() -> str:
    out = [
        "# Settings",
        "",
        "Every environment variable trierouter reads, generated from `trierouter/settings.py` by",
        "`python scripts/gen_settings_docs.py`; the tests check it is current. Each is read when",
        "it is used, not at import; an empty value is the same as unset, and a malformed one stops",
        "the reader with an error naming the variable and the form expected.",
        "",
    ]
    for section, title in SECTIONS.items():
        rows = [s for s in SETTINGS if s.section == section]
        out += [f"## {title}", "", "| variable | value | default | meaning |", "|---|---|---|---|"]
        for s in rows:
            name = f"`{s.name}`" + (f" (older name: `{s.alias}`)" if s.alias else "")
            out.append(f"| {name} | {_cell(s.expected())} | {_default(s)} | {_cell(s.doc)} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    return write_or_check(OUT, render, argv, "scripts/gen_settings_docs.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
