"""The public surface is pinned; the demo runs end to end (the CLI: tests/test_cli.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trierouter

ROOT = Path(__file__).resolve().parent.parent


def test_public_api_is_pinned() -> None:
    assert trierouter.__all__ == [  # isort-style order, kept by ruff's RUF022
        "SHIPPED",
        "ChoiceSet",
        "Classifier",
        "CompileError",
        "CompiledTools",
        "CorruptFileError",
        "DuplicateToolError",
        "EmptySetError",
        "InvalidToolError",
        "InvalidValueError",
        "Matcher",
        "McpServerError",
        "MissingDependencyError",
        "TokenIndex",
        "Tool",
        "ToolCall",
        "ToolCallError",
        "ToolCallPlan",
        "ToolError",
        "ToolRegistry",
        "TrieRouterError",
        "UnreachableValueError",
        "Vocabulary",
        "VocabularyError",
        "VocabularyMismatchError",
        "__version__",
        "allocate_token_bitmask",
        "apply_token_bitmask_inplace",
        "compile_choices",
        "compile_tools",
        "parse_tool_call",
        "shipped_vocabulary",
    ]
    for name in trierouter.__all__:
        assert hasattr(trierouter, name), name


def test_error_tree() -> None:
    assert issubclass(trierouter.UnreachableValueError, trierouter.CompileError)
    assert issubclass(trierouter.CompileError, ValueError)
    assert issubclass(trierouter.InvalidValueError, TypeError)
    assert issubclass(trierouter.MissingDependencyError, ImportError)
    for name in trierouter.__all__:
        obj = getattr(trierouter, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, trierouter.TrieRouterError)


def test_demo_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert "ICD-10-CM codes" in out and "tool registry" in out
    assert "All outputs were members of their sets." in out
