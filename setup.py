"""Build of trierouter's compiled core (``trierouter.registry._core``); metadata is in pyproject.

Release flags by default (-O3). ``TRIEROUTER_DEBUG_BUILD=1`` builds with AddressSanitizer and
UndefinedBehaviorSanitizer for the fuzzers (load it with ``LD_PRELOAD="$(gcc
-print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"``; see fuzz/fuzz_compile.py).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
from setuptools import Extension, setup

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
else:
    flags = ["-O3", "-DNDEBUG"]
    link = ["-pthread"]

setup(
    ext_modules=[
        Extension(
            "trierouter.registry._core",
            sources=SOURCES,
            include_dirs=["csrc", np.get_include()],
            define_macros=[("TRIEROUTER_SOURCE_HASH", f'"{SOURCE_HASH}"')],
            extra_compile_args=["-std=c++17", "-pthread", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-missing-field-initializers", *flags],
            extra_link_args=link,
            language="c++",
        )
    ]
)
