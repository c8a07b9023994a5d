"""vLLM plugin entry point (``vllm.general_plugins``): names trierouter's tool parsers in every
vLLM process, so ``--tool-call-parser trierouter`` works after ``pip install trierouter``.

Registration is lazy (a module path and a class name); nothing heavy is imported until a server
asks for the parser.
"""

from __future__ import annotations

__all__ = ["PARSERS", "register"]

PARSERS: dict[str, str] = {
    "trierouter": "TrieRouterToolParser",
    "trierouter_hermes": "TrieRouterHermesToolParser",
    "trierouter_llama3_json": "TrieRouterLlama3ToolParser",
    "trierouter_json": "TrieRouterJsonToolParser",
    "trierouter_mistral": "TrieRouterMistralToolParser",
    "trierouter_json_array": "TrieRouterJsonArrayToolParser",
}
"""``--tool-call-parser`` name -> class in :mod:`trierouter.router.vllm.tool_parser`."""


def register() -> None:
    """Register :data:`PARSERS` with vLLM's ``ToolParserManager`` (idempotent)."""
    try:
        from vllm.tool_parsers import ToolParserManager
    except ImportError:  # a vLLM without tool parsers: nothing to register
        return
    for name, cls in PARSERS.items():
        ToolParserManager.register_lazy_module(name, "trierouter.router.vllm.tool_parser", cls)
