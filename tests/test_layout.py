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
ONE_CONCEPT: dict[str, str] = {}
"""Modules allowed past MAX_LINES, with the reason (none today)."""


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


CALL_TEXT = "trierouter.registry.call_text"
"""The one module that scans tool-call text (where calls start, their JSON, name and arguments)."""
CALL_TEXT_ELSEWHERE = {
    "trierouter.router.vllm.server": "raw_decode measures how deep a request body nests",
}
"""Modules allowed a scanning primitive on text that is not a tool call, with the reason."""
CALL_TEXT_USERS = (
    "trierouter.registry.invoke",
    "trierouter.router.langchain",
    "trierouter.router.tool_calls.call",
    "trierouter.router.tool_calls.free_text",
    "trierouter.router.tool_calls.plan",
    "trierouter.router.tool_calls.native",
    "trierouter.router.vllm.tool_parser",
)
"""The places that used to scan call text themselves: each calls the one module now."""
SEARCHES = {"find", "rfind", "index", "rindex", "count", "split", "rsplit", "partition"}
SEARCHES |= {"rpartition"}
CALL_TEXT_MARKS = {"CALL_HEAD", "trigger", "triggers", "watch"}
"""Names that say an expression is a call opener or the head of a call object."""
REGEX_MARKS = {"name_key", "args_key", "arguments_key"}


def _names_in(nodes: list[ast.expr]) -> set[str]:
    out: set[str] = set()
    for arg in nodes:
        for n in ast.walk(arg):
            if isinstance(n, ast.Name):
                out.add(n.id)
            elif isinstance(n, ast.Attribute):
                out.add(n.attr)
    return out


def _strings_in(nodes: list[ast.expr]) -> list[str]:
    return [n.value for a in nodes for n in ast.walk(a) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]  # fmt: skip


def call_text_scans(source: str, scanner_names: set[str]) -> list[str]:
    """What in ``source`` scans tool-call text itself: a JSON decoder's ``raw_decode``; a search
    or split on a trigger or the call head (``find``/``split``/... of ``.trigger``, ``.watch``,
    ``CALL_HEAD``; ``startswith``/``endswith`` of ``CALL_HEAD``); a regex over a call's keys;
    a definition of one of the scanner's own names; a private name imported from it."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and node.attr == "raw_decode":
            found.append(f"line {line}: raw_decode")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            meth, receiver = node.func.attr, node.func.value
            args = [*node.args, *(k.value for k in node.keywords)]
            if meth in SEARCHES and CALL_TEXT_MARKS & _names_in([*args, receiver]):
                found.append(f"line {line}: {meth} of a trigger or the call head")
            elif meth in ("startswith", "endswith") and "CALL_HEAD" in _names_in(args):
                found.append(f"line {line}: {meth} of the call head")
            elif (
                isinstance(receiver, ast.Name)
                and receiver.id == "re"
                and (REGEX_MARKS & _names_in(args) or any('"name"' in s for s in _strings_in(args)))
            ):
                found.append(f"line {line}: a regex over a call's keys")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in scanner_names:
            found.append(f"line {line}: defines {node.name}, the scanner's")
        elif isinstance(node, ast.ImportFrom) and node.module == CALL_TEXT:
            private = [a.name for a in node.names if a.name.startswith("_")]
            if private:
                found.append(f"line {line}: imports {private} from {CALL_TEXT}")
    return found


def _scanner_names() -> set[str]:
    """The functions and classes call_text defines (a second one of them elsewhere is a copy)."""
    tree = ast.parse(MODULES[CALL_TEXT].read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def test_only_call_text_scans_tool_call_text() -> None:
    """One path reads a tool call's text: every other module calls registry/call_text.py."""
    names = _scanner_names()
    assert {"first_trigger", "split_calls", "scan_json_value", "CallEnvelope"} <= names
    for name, path in MODULES.items():
        if name == CALL_TEXT:
            continue
        found = call_text_scans(path.read_text(encoding="utf-8"), names)
        if name in CALL_TEXT_ELSEWHERE:
            assert found, f"{name} no longer scans text: drop it from CALL_TEXT_ELSEWHERE"
            continue
        assert not found, f"{name} scans tool-call text itself ({found}): call {CALL_TEXT}"
    for name in CALL_TEXT_USERS:
        assert CALL_TEXT in _internal(name), f"{name} no longer reads call text via {CALL_TEXT}"


def test_the_call_text_check_finds_each_primitive() -> None:
    """The check above is not vacuous: each primitive it names, written anywhere, is found."""
    source = """
import json, re
from trierouter.registry.call_text import _skip_ws
def first_trigger(text, triggers): ...
def f(text, fmt, CALL_HEAD):
    cut = text.find(fmt.trigger)
    head, _, rest = text.partition(fmt.watch)
    parts = text.split(CALL_HEAD)
    ok = text.startswith(CALL_HEAD[:1])
    obj, end = json.JSONDecoder().raw_decode(text, cut)
    m = re.compile(r'\\{\\s*"name"\\s*:').match(text)
    a = re.search(env.args_key, text)
    return text.startswith("<"), text.find("{"), fmt.open.startswith(fmt.trigger)
"""
    found = call_text_scans(source, {"first_trigger"})
    found.sort(key=lambda f: int(f.split()[1].rstrip(":")))  # ast.walk goes breadth first
    assert [f.split(": ", 1)[1] for f in found] == [
        "imports ['_skip_ws'] from trierouter.registry.call_text",
        "defines first_trigger, the scanner's",
        "find of a trigger or the call head",
        "partition of a trigger or the call head",
        "split of a trigger or the call head",
        "startswith of the call head",
        "raw_decode",
        "a regex over a call's keys",
        "a regex over a call's keys",
    ], found


def _reads_template_markers(source: str) -> bool:
    """Whether a module reads the markers that tell a call format, or a tokenizer's template."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id == "TEMPLATE_MARKERS":
            return True
        if isinstance(node, ast.alias) and node.name == "TEMPLATE_MARKERS":
            return True
        if isinstance(node, ast.Constant) and node.value == "chat_template":
            return True
    return False


def test_one_function_tells_a_models_call_format() -> None:
    """registry.call_formats.model_call_format is the only reader of the format markers and of a
    chat template's text (negative control: the detector the vLLM parser used to carry)."""
    readers = {
        name
        for name, path in MODULES.items()
        if _reads_template_markers(path.read_text(encoding="utf-8"))
    }
    assert readers == {"trierouter.registry.call_formats"}, readers
    assert _reads_template_markers(
        "from trierouter.registry.call_formats import TEMPLATE_MARKERS\n"
        "def detect(tok):\n"
        "    t = getattr(tok, 'chat_template', None)\n"
        "    return [f for m, f in TEMPLATE_MARKERS if m in t]\n"
    )


BACKEND_NAMES = {"native", "numpy", "torch", "onnx", "onnx-int8"}
"""The names of the set backends (trierouter/registry/backends/, one file each) and of the
embedder's (a table of encoders in trierouter/shortlist/embedder.py)."""
BACKEND_HOMES = ("trierouter.registry.backends", "trierouter.registry.core")
"""Where a backend name may be compared: the backends themselves, and the module that reads
``$TRIEROUTER_BACKEND`` and resolves a name (and says whether the default runs on the core)."""


def backend_branches(source: str, names: set[str]) -> list[str]:
    """Comparisons in ``source`` of something named ``*backend*`` (a variable, an attribute, a
    call such as ``default_backend()``) with one of the backend ``names`` (``==``, ``!=``,
    ``in``, ``not in`` a literal collection)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        literals = {
            n.value
            for side in sides
            for n in ast.walk(side)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        if literals & names and any("backend" in s.lower() for s in _names_in(sides)):
            found.append(f"line {node.lineno}: compares a backend with {sorted(literals & names)}")
    return found


def test_no_backend_branch_in_library_modules() -> None:
    """Library modules call the backend they were given; only the backends package (and the
    module that resolves a name) compares backend names."""
    for name, path in MODULES.items():
        if not name.startswith(LIBRARY) or name.startswith(BACKEND_HOMES):
            continue
        found = backend_branches(path.read_text(encoding="utf-8"), BACKEND_NAMES)
        assert not found, f"{name} branches on a backend name ({found}): call its Backend"
    homes = [n for n in MODULES if n.startswith(BACKEND_HOMES[0] + ".")]
    assert {n.rpartition(".")[2] for n in homes} >= {"native", "numpy_reference"}


def test_the_backend_check_finds_each_form() -> None:
    """The check above is not vacuous: each form of a backend branch is found, and a
    comparison of something else with the same words is not."""
    source = """
if backend == "native": ...
if cs.backend != "numpy": ...
if default_backend() == "native": ...
if self.backend in ("native",): ...
if self.backend != "torch" and device != "cpu": ...
ok = layout == "compact" or mode == "numpy" or backend_count == 3 or backend == "auto"
"""
    found = backend_branches(source, BACKEND_NAMES)
    assert [int(f.split()[1].rstrip(":")) for f in found] == [2, 3, 4, 5, 6], found


CORE_CALLS = ("core", "kernels")
"""How the name of a function that returns the compiled core (or, once, ``None`` for the numpy
backend) ends, as a word: ``default_core``, ``native_core``, ``native_kernels``; or it is
``_native`` (``self._score(...)`` ends in the letters, not the word)."""


def _core_call(node: ast.expr) -> bool:
    """A call of a function whose name says it returns the compiled core."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    low = name.lower()
    return (
        low in CORE_CALLS
        or low.endswith(tuple("_" + c for c in CORE_CALLS))
        or name in ("native", "_native")
    )


def _tests_native(node: ast.expr) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == "native")
        or (isinstance(n, ast.Attribute) and n.attr == "native")
        for n in ast.walk(node)
    )


def core_branches(source: str) -> list[str]:
    """Places in ``source`` that choose between the compiled core and a Python path: a read of
    ``default_core`` (the core, or ``None`` for the numpy backend); ``is None`` / ``is not
    None`` of a call that returns the core, or of a name assigned one; a ``native`` switch (a
    parameter of that name, or a test of a ``native`` name or attribute)."""
    tree = ast.parse(source)
    held = {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and _core_call(n.value)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if (isinstance(node, ast.Name) and node.id == "default_core") or (
            isinstance(node, ast.Attribute) and node.attr == "default_core"
        ):
            found.append(f"line {line}: reads default_core")
        elif isinstance(node, ast.Compare) and any(
            isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops
        ):
            sides = [node.left, *node.comparators]
            if any(isinstance(x, ast.Constant) and x.value is None for x in sides) and any(
                _core_call(x) or (isinstance(x, ast.Name) and x.id in held) for x in sides
            ):
                found.append(f"line {line}: tests whether the core is there")
        elif isinstance(node, ast.arg) and node.arg == "native":
            found.append(f"line {line}: a native= switch")
        elif isinstance(node, (ast.If, ast.IfExp, ast.While)) and _tests_native(node.test):
            found.append(f"line {line}: branches on a native flag")
    return found


def test_no_core_or_python_branch_in_library_modules() -> None:
    """One code path per concept: a library module runs the compiled core (or, for value sets,
    the Backend it was given); the Python forms of the core's work live in trierouter.testing
    as the tests' oracles. Only the backends (and the module that imports the core) may ask
    whether it is there."""
    for name, path in MODULES.items():
        if not name.startswith(LIBRARY) or name.startswith(BACKEND_HOMES):
            continue
        found = core_branches(path.read_text(encoding="utf-8"))
        assert not found, f"{name} chooses between the core and Python ({found}): one path"
    for oracle in ("kernels", "slots_reference", "masks_reference"):
        assert f"trierouter.testing.{oracle}" in MODULES, f"the oracle {oracle} is gone"


def test_the_core_branch_check_finds_each_form() -> None:
    """The check above is not vacuous: each form the slot automata, the vocabulary and the
    shortlist kernels used is found; a cache tested for ``None`` and a core used without a test
    are not, nor a name that ends in the letters ``core`` only (``self._score``)."""
    source = """
self.native = _backend.default_core() is not None
if tables.native and masks: ...
def nfa_fragment(node, native=None, max_states=None): ...
core = native_kernels()
if core is not None: ...
def _native(): return _backend.default_core()
core = _native()
x = core.pack_tokens(t) if core is None else None
builder = NativeBuilder() if _backend.default_core() is not None else Builder()
while native: ...
if self._trie is None: ...
out = native_core().top_positive(scores, k)
cached = self._cache.get(key)
if cached is None: ...
model = self._score(prompt, query, labels)
if model is None: ...
"""
    found = core_branches(source)
    found.sort(key=lambda f: int(f.split()[1].rstrip(":")))
    assert [f.split(": ", 1)[0] for f in found] == [
        "line 2", "line 2", "line 3", "line 4", "line 6", "line 7", "line 9", "line 10",
        "line 10", "line 11",
    ], found  # fmt: skip


SETTINGS = "trierouter.settings"
"""The one module that reads and writes ``TRIEROUTER_*`` environment variables."""


def _is_environ(node: ast.expr) -> bool:
    """``os.environ`` (or ``environ`` imported from os)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id == "environ"


def _is_os_env_function(node: ast.expr) -> bool:
    """``os.getenv`` / ``os.putenv`` / ``os.unsetenv`` (or the bare names imported from os)."""
    names = ("getenv", "putenv", "unsetenv")
    if isinstance(node, ast.Attribute):
        return node.attr in names and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id in names


def environment_uses(source: str) -> list[str]:
    """Each access to one environment variable in ``source`` whose name is a ``TRIEROUTER_*``
    string or is not a literal (a constant or a parameter may hold a ``TRIEROUTER_*`` name):
    ``os.environ[k]`` (read, write or ``del``), ``os.environ.get / pop / setdefault (k)``,
    ``k in os.environ``, ``os.getenv / putenv / unsetenv (k)``. A copy of the whole environment
    (``{**os.environ}``) names no variable and is not one."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        key: ast.expr | None = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if _is_os_env_function(func) or (
                isinstance(func, ast.Attribute)
                and func.attr in ("get", "pop", "setdefault")
                and _is_environ(func.value)
            ):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Compare) and any(
            isinstance(op, (ast.In, ast.NotIn)) and _is_environ(c)
            for op, c in zip(node.ops, node.comparators, strict=True)
        ):
            key = node.left
        if key is None:
            continue
        text = key.value if isinstance(key, ast.Constant) else None
        if isinstance(text, str) and not text.startswith("TRIEROUTER_"):
            continue  # another program's variable (VLLM_API_KEY, XDG_CACHE_HOME)
        found.append(f"line {getattr(node, 'lineno', 0)}: {ast.unparse(node)[:60]}")
    return found


def test_only_the_settings_module_reads_trierouter_variables() -> None:
    """Every ``TRIEROUTER_*`` variable is read (and written) through trierouter/settings.py,
    where it is declared with its type, default and doc: no other module touches it in
    ``os.environ``."""
    assert environment_uses(MODULES[SETTINGS].read_text(encoding="utf-8")), (
        f"{SETTINGS} no longer reads the environment"
    )
    for name, path in MODULES.items():
        if name == SETTINGS:
            continue
        found = environment_uses(path.read_text(encoding="utf-8"))
        assert not found, f"{name} touches a TRIEROUTER_* variable itself ({found}): use {SETTINGS}"


def test_the_environment_check_finds_each_access() -> None:
    """The check above is not vacuous: each way to read or write one variable is found, and
    what is allowed (another program's variable, a copy of the environment) is not."""
    source = """
import os
from os import environ, getenv
ENV = "TRIEROUTER_X"
a = os.environ.get("TRIEROUTER_CACHE_DIR")
b = os.environ["TRIEROUTER_SETS"]
os.environ[ENV] = "1"
del os.environ[name]
c = os.getenv("TRIEROUTER_TOOLS", "")
d = "TRIEROUTER_BACKEND" in os.environ
e = environ.pop(ENV, None)
f = getenv(name)
os.environ.setdefault("TRIEROUTER_BACKEND", "numpy")
ok = os.environ.get("XDG_CACHE_HOME"), os.environ["VLLM_API_KEY"], "HOME" in os.environ
copy = {**os.environ, "PYTHONPATH": "."}
"""
    found = environment_uses(source)
    assert sorted(int(f.split()[1].rstrip(":")) for f in found) == list(range(5, 14)), found
