"""The layout says what the system is: registry compiles, router decodes, shortlist retrieves.

Parsed from the sources (no imports executed), so a boundary broken by a lazy import inside a
function is caught too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "trierouter"
CSRC = PACKAGE.parent / "csrc"
CSRC_MAX_LINES = 800
"""A C++ source or header of the core: one concept, about 800 lines at most."""
CSRC_ONE_CONCEPT: dict[str, str] = {}
"""csrc/ files allowed past CSRC_MAX_LINES, with the reason (none today)."""
HEAVY = ("torch", "transformers", "vllm", "faiss", "sentence_transformers")
MAX_LINES = 560
"""About 500 lines; a longer module must be one concept, listed below with the reason."""
ONE_CONCEPT = {
    "trierouter.registry.loaders": "one reader per tokenizer format, sharing the byte maps",
    "trierouter.registry.slots.dispatch": "JSON Schema keyword → engine, one recursive walk",
    "trierouter.classify": "Classifier: exact label scores by best-first search, and evaluate()",
    "trierouter.cli": "the command line, one subcommand per function",
    "trierouter.registry.trie": "compile_choices and the ChoiceSet it returns",
    "trierouter.registry.openapi": "OpenAPI / Swagger parameters and bodies → JSON Schema",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(name: str, *, top_level_only: bool = False) -> set[str]:
    """Absolute names of the trierouter modules (and heavy packages) ``name`` imports."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Try) and top_level_only:
            nodes.extend(node.body)
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else base)
    return found


def _internal(name: str, **kw: bool) -> set[str]:
    return {m for m in _imports(name, **kw) if m in MODULES and m != name}


def test_registry_compiles_without_router_shortlist_or_engines() -> None:
    for name in MODULES:
        if not name.startswith("trierouter.registry"):
            continue
        bad = {
            m
            for m in _internal(name)
            if m.startswith(("trierouter.router", "trierouter.shortlist"))
        }
        assert not bad, f"{name} imports {bad}: registry must not depend on decoding or retrieval"
        heavy = {m for m in _imports(name, top_level_only=True) if m.split(".")[0] in HEAVY}
        assert not heavy, f"{name} imports {heavy} at module level: import it where it is used"


def test_shortlist_never_decodes() -> None:
    for name in MODULES:
        if name.startswith("trierouter.shortlist"):
            bad = {m for m in _internal(name) if m.startswith("trierouter.router")}
            assert not bad, f"{name} imports {bad}: a shortlist returns values, never decodes"


def test_no_private_module_of_another_package() -> None:
    for name in MODULES:
        for m in _internal(name):
            leaf = m.rpartition(".")[2]
            owner = m.rpartition(".")[0]
            if leaf.startswith("_") and leaf != "__init__" and not name.startswith(owner):
                pytest.fail(
                    f"{name} imports {m}, private to {owner}: give what is shared a public name"
                )


def test_no_import_cycles() -> None:
    packages = {n for n, p in MODULES.items() if p.name == "__init__.py"}
    graph = {n: {m for m in _internal(n) if m not in packages} for n in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycle = [*stack[stack.index(m) :], m]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)


def test_modules_hold_one_concept() -> None:
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    unexplained = {name: n for name, n in long.items() if name not in ONE_CONCEPT}
    assert not unexplained, f"modules over {MAX_LINES} lines: {unexplained}; split them"


def _csrc_files() -> list[Path]:
    return sorted(p for p in CSRC.rglob("*") if p.suffix in (".cpp", ".h"))


def test_csrc_files_hold_one_concept() -> None:
    files = _csrc_files()
    assert files, f"no C++ sources under {CSRC}"
    long = {
        p.relative_to(CSRC).as_posix(): n
        for p in files
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > CSRC_MAX_LINES
    }
    unexplained = {name: n for name, n in long.items() if name not in CSRC_ONE_CONCEPT}
    assert not unexplained, f"csrc/ files over {CSRC_MAX_LINES} lines: {unexplained}; split them"


PYTHON_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](Python\.h|numpy/[^>"]*)[>"]', re.M)
PYTHON_API = re.compile(r"\b(Py[A-Z][A-Za-z]*_?\w*|Py_\w+|npy_\w+|NPY_\w+)\b")


def test_only_the_binding_layer_touches_python() -> None:
    """Python.h and numpy's C API are included, and the CPython API named, in csrc/bindings/ alone:
    the algorithms take spans and structs (and tests/cpp/ tests them without an interpreter)."""
    for path in _csrc_files():
        rel = path.relative_to(CSRC).as_posix()
        if rel.startswith("bindings/"):
            continue
        text = path.read_text(encoding="utf-8")
        code = re.sub(r"//[^\n]*", "", text)  # comments may say "Python"
        assert not PYTHON_INCLUDE.search(text), (
            f"csrc/{rel} includes a Python header: move it to bindings/"
        )
        used = sorted(set(PYTHON_API.findall(code)))
        assert not used, (
            f"csrc/{rel} uses the CPython / numpy API ({used[:5]}): move it to bindings/"
        )


def test_faces_are_importable_from_the_top() -> None:
    from trierouter import Classifier, Matcher, ToolCallPlan, ToolRegistry, compile_choices
    from trierouter.registry import ToolRegistry as FromRegistry

    assert FromRegistry is ToolRegistry
    assert all(callable(x) for x in (Classifier, Matcher, ToolCallPlan, compile_choices))


LIBRARY = (
    "trierouter.registry",
    "trierouter.router",
    "trierouter.shortlist",
    "trierouter.classify",
)
"""The library proper: what an application imports to compile, decode, retrieve and classify."""


def test_library_imports_no_data_set() -> None:
    """Data sets are inputs a caller passes in; the library never loads one by itself."""
    for name in MODULES:
        if name.startswith(LIBRARY):
            bad = {m for m in _internal(name) if m.startswith("trierouter.data")}
            assert not bad, f"{name} imports {bad}: take the values (or a path function) as input"


def test_only_tests_import_test_helpers() -> None:
    """``trierouter.testing`` holds oracles and fixtures for the tests; nothing else uses it."""
    for name in MODULES:
        if not name.startswith("trierouter.testing"):
            bad = {m for m in _internal(name) if m.startswith("trierouter.testing")}
            assert not bad, f"{name} imports {bad}: give what it needs a public home"


def test_no_demo_or_script_inside_the_package() -> None:
    """Runnable demos and scripts live in examples/ and benchmarks/, not in the import package."""
    stray = [n for n in MODULES if n.rpartition(".")[2].startswith("_demo")]
    assert not stray, f"{stray}: move it to examples/"


def _private_names_from_other_packages(name: str) -> set[str]:
    """``from trierouter.X import _name`` where X is outside ``name``'s own package."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = ".".join(package.split(".")[:2])  # trierouter.registry, trierouter.data, ...
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            owner = ".".join(node.module.split(".")[:2])
            if node.module.startswith("trierouter") and owner != top:
                found |= {
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                }
    return found


def test_no_private_name_of_another_package() -> None:
    for name in MODULES:
        if not name.startswith("trierouter.testing"):  # oracles may reach inside
            bad = _private_names_from_other_packages(name)
            assert not bad, f"{name} imports {bad}, private to another package: name it publicly"
