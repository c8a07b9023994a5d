"""Reading a values file: one reader, one meaning, for ``compile``, ``classify`` and vLLM sets.

- ``.txt``: one value per line (``\\n`` or ``\\r\\n``); ``value<TAB>description`` gives a
  description; a UTF-8 byte order mark at the start is removed; empty and whitespace-only lines
  are skipped (the empty value can be given in JSON only); otherwise a line is its value,
  spaces included.
- ``.json``: a list of strings, a ``{value: description}`` object, or a list of tool specs
  (their ``name``, or ``function.name``).
- ``.jsonl``: one ``{"label": ..., "description": ...}`` object per line (blank lines skipped).

A value given again is dropped and counted (:attr:`ValuesFile.duplicates`); the first keeps its
position and description. A file that is not UTF-8 is refused with its name, the position of the
first bad byte and the fix.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trierouter.errors import InputFileError

__all__ = ["ValuesFile", "read_values"]


@dataclass(frozen=True)
class ValuesFile:
    """What :func:`read_values` read."""

    path: Path
    values: list[str]
    """The distinct values, in file order."""
    descriptions: list[str] | None
    """One per value where the file gives any (the value itself where a line has none)."""
    duplicates: int
    """Entries dropped because the same value came earlier."""
    skipped_blank: int
    """Empty or whitespace-only lines skipped (``.txt`` and ``.jsonl``)."""
    duplicate_examples: tuple[str, ...] = ()
    """Up to five of the repeated values."""

    def summary(self) -> str:
        """One line for a CLI: counts, and what was dropped."""
        out = f"{self.path}: {len(self.values):,} values"
        if self.duplicates:
            shown = ", ".join(repr(v) for v in self.duplicate_examples)
            out += f"; {self.duplicates:,} duplicates dropped (e.g. {shown})"
        if self.skipped_blank:
            out += f"; {self.skipped_blank:,} blank lines skipped"
        return out


def _text(p: Path) -> str:
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputFileError(f"{p}: cannot be read ({exc.strerror or exc})") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputFileError(
            f"{p}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}, line {line}); "
            f"convert it, e.g. `iconv -f latin1 -t utf-8 {p} > {p.stem}.utf8{p.suffix}`"
        ) from None
    return text.removeprefix("\ufeff")


def _json_entries(p: Path, text: str) -> list[tuple[str, str | None]]:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{p}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if isinstance(data, dict):
        return [(str(k), v if isinstance(v, str) else None) for k, v in data.items()]
    if not isinstance(data, list):
        raise InputFileError(
            f"{p}: expected a JSON list of strings or a {{value: description}} object"
        )
    out: list[tuple[str, str | None]] = []
    for i, x in enumerate(data):
        if isinstance(x, str):
            out.append((x, None))
        elif isinstance(x, dict) and isinstance(x.get("name"), str):
            out.append(
                (x["name"], x.get("description") if isinstance(x.get("description"), str) else None)
            )
        elif (
            isinstance(x, dict)
            and isinstance(x.get("function"), dict)
            and isinstance(x["function"].get("name"), str)
        ):
            out.append((x["function"]["name"], None))
        else:
            raise InputFileError(
                f"{p}: item {i} is neither a string nor a tool spec with a name; give a JSON "
                "list of strings"
            )
    return out


def read_values(path: str | os.PathLike[str]) -> ValuesFile:
    """Read a values file (see the module docstring for its meaning)."""
    p = Path(path)
    text = _text(p)
    blank = 0
    entries: list[tuple[str, str | None]] = []
    if p.suffix == ".json":
        entries = _json_entries(p, text)
    elif p.suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                blank += 1
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputFileError(f"{p}:{n}: not valid JSON ({exc.msg})") from exc
            if not isinstance(obj, dict) or not isinstance(obj.get("label"), str):
                raise InputFileError(f'{p}:{n}: expected {{"label": ..., "description": ...}}')
            about = obj.get("description")
            entries.append((obj["label"], about if isinstance(about, str) else None))
    else:
        for raw in text.split("\n"):
            line = raw.removesuffix("\r")
            if not line.strip():
                blank += 1
                continue
            label, tab, text_ = line.partition("\t")
            entries.append((label, text_ if tab and text_ else None))
        if text.endswith("\n"):
            blank -= 1  # the end of the last line is no blank line
    seen: dict[str, int] = {}
    values: list[str] = []
    descs: list[str | None] = []
    dups: list[str] = []
    for value, desc in entries:
        if value in seen:
            dups.append(value)
            continue
        seen[value] = len(values)
        values.append(value)
        descs.append(desc)
    if not values:
        raise InputFileError(
            f"{p}: no values (the file is empty or blank); give one value per line, or a JSON list"
        )
    has_desc = any(d is not None for d in descs)
    return ValuesFile(
        p,
        values,
        [d if d is not None else v for d, v in zip(descs, values, strict=True)]
        if has_desc
        else None,
        len(dups),
        max(blank, 0),
        tuple(dict.fromkeys(dups))[:5],
    )
