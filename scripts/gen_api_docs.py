"""Write docs/api.md from the docstrings of the public API (``--check``: fail if it is stale)."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

from generated_doc import write_or_check

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "api.md"
MODULES = [
    "trierouter",
    "trierouter.classify",
    "trierouter.classify_combine",
    "trierouter.router.plan",
    "trierouter.router.transformers",
    "trierouter.registry",
    "trierouter.router",
    "trierouter.router.vllm",
    "trierouter.router.grouped_tools",
    "trierouter.shortlist",
    "trierouter.data",
    "trierouter.data.bfcl_eval",
    "trierouter.models",
    "trierouter.errors",
]


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""


def _doc(obj: object) -> str:
    return inspect.getdoc(obj) or ""


def render() -> str:
    out = [
        "# API reference",
        "",
        "Generated from the docstrings by `python scripts/gen_api_docs.py`; the tests check it"
        " is current.",
        "",
    ]
    seen: set[int] = set()
    for name in MODULES:
        mod = importlib.import_module(name)
        out += [f"## `{name}`", "", _doc(mod).split("\n\n")[0], ""]
        for attr in getattr(mod, "__all__", []):
            obj = getattr(mod, attr)
            if attr.startswith("__") or id(obj) in seen:
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj):
                seen.add(id(obj))
                kind = "class" if inspect.isclass(obj) else "def"
                home = getattr(obj, "__module__", name)
                out += [f"### `{kind} {attr}{_signature(obj)}`", ""]
                if home != name:
                    out += [f"*Defined in `{home}`.*", ""]
                out += [_doc(obj), ""]
                if inspect.isclass(obj) and not issubclass(obj, BaseException):
                    for mname, member in sorted(vars(obj).items()):
                        if mname.startswith("_") or not (
                            inspect.isfunction(member)
                            or isinstance(member, (classmethod, property))
                        ):
                            continue
                        target = member.__func__ if isinstance(member, classmethod) else member
                        sig = "" if isinstance(member, property) else _signature(target)
                        first = _doc(target).split("\n\n")[0].replace("\n", " ")
                        out.append(f"- `{mname}{sig}` — {first}" if first else f"- `{mname}{sig}`")
                    out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    return write_or_check(OUT, render, argv, "scripts/gen_api_docs.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
