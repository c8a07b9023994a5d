"""Build of trierouter's compiled core (``trierouter.registry._core``); metadata is in pyproject.

The bindings (csrc/bindings/) use nanobind: its runtime (nb_combined.cpp, from the nanobind
package of [build-system] requires) is compiled into a static library of its own flags (NB_BUILD,
-fno-strict-aliasing, as nanobind's CMake build does) and linked into the one extension. On
Python >= 3.12 the extension targets the stable ABI (Py_LIMITED_API 3.12, an ``abi3`` module and
wheel: one build for every later CPython), as nanobind's linked mode supports it from 3.12.

Release flags by default (-O3, no debug info). ``TRIEROUTER_DEBUG_BUILD=1`` builds with
AddressSanitizer and UndefinedBehaviorSanitizer for the fuzzers (load it with ``LD_PRELOAD="$(gcc
-print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"``; see fuzz/fuzz_compile.py).
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from pathlib import Path

import nanobind
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# every .cpp and .h under csrc/ (the C++ unit tests live in tests/cpp/); the hash is the one
# trierouter.registry.core.source_hash checks on import (path and bytes of each, sorted by path)
FILES = sorted(f for f in (ROOT / "csrc").rglob("*") if f.suffix in (".cpp", ".h") and f.is_file())
SOURCES = [f.relative_to(ROOT).as_posix() for f in FILES if f.suffix == ".cpp"]
_digest = hashlib.sha256()
for _f in FILES:
    _digest.update(_f.relative_to(ROOT).as_posix().encode() + b"\0" + _f.read_bytes())
SOURCE_HASH = _digest.hexdigest()

debug = os.environ.get("TRIEROUTER_DEBUG_BUILD", "") not in ("", "0")
if debug:
    flags = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]
    link = ["-fsanitize=address,undefined", "-pthread"]
else:  # no debug info: it was 93% of the extension (11.6 MB of the abi3 .so; 0.8 MB without)
    flags = ["-O3", "-DNDEBUG", "-g0"]
    link = ["-pthread"]

# nanobind's runtime; NB_COMPACT_ASSERTIONS in release builds only (debug keeps the messages)
NB_DIR = Path(nanobind.source_dir()).parent
NB_INCLUDE = [nanobind.include_dir(), str(NB_DIR / "ext" / "robin_map" / "include")]
stable_abi = sys.version_info >= (3, 12) and not sysconfig.get_config_var("Py_GIL_DISABLED")
limited = [("Py_LIMITED_API", "0x030C0000")] if stable_abi else []
nb_macros = [("NB_BUILD", "1"), *limited, *([] if debug else [("NB_COMPACT_ASSERTIONS", "1")])]
nb_flags = ["-std=c++17", "-fvisibility=hidden", "-fno-strict-aliasing"]
nb_flags += ["-ffunction-sections", "-fdata-sections"]  # the unused parts dropped at link
nanobind_lib = (
    "nanobind",
    {
        "sources": [str(Path(nanobind.source_dir()) / "nb_combined.cpp")],
        "include_dirs": [*NB_INCLUDE, sysconfig.get_paths()["include"]],
        "macros": nb_macros,
        "cflags": [*nb_flags, *flags],
    },
)


class BuildExt(build_ext):
    """build_ext that builds nanobind's library first (``setup.py build_ext --inplace`` alone, as
    ``make ext`` runs it, would not: only ``build`` runs build_clib)."""

    def run(self) -> None:
        self.run_command("build_clib")
        super().run()


setup(
    cmdclass={"build_ext": BuildExt},
    libraries=[nanobind_lib],
    ext_modules=[
        Extension(
            "trierouter.registry._core",
            sources=SOURCES,
            include_dirs=["csrc", *NB_INCLUDE],
            define_macros=[("TRIEROUTER_SOURCE_HASH", f'"{SOURCE_HASH}"'), *limited],
            extra_compile_args=[
                *["-std=c++17", "-pthread", "-fvisibility=hidden"],
                *["-Wall", "-Wextra", "-Wno-missing-field-initializers", *flags],
            ],
            extra_link_args=[*link, "-Wl,--gc-sections"],
            language="c++",
            py_limited_api=stable_abi,
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp312"}} if stable_abi else {},
)
