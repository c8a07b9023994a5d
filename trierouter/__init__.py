"""trierouter: make an LLM choose one value out of a huge finite set.

A set of strings compiles into a byte-level trie whose per-node token masks are precomputed
against the tokenizer's vocabulary, so every decoding step is a lookup; the masks are identical
to an FSM engine's (XGrammar's) for the same set.

    vocab = Vocabulary.from_tokenizer(tokenizer)      # or shipped_vocabulary("qwen2")
    index = TokenIndex.get(vocab)                     # once per tokenizer, cached on disk
    choices = compile_choices(values, index)          # once per set
    matcher = Matcher(choices)                        # per request
    Classifier(labels, model="path/to/model").classify(texts)   # labels with exact scores

    tools = ToolRegistry(openai_tools).compile(index) # tool name + every argument slot
    plan = ToolCallPlan(tools, tool_choice="required")# decode with transformers or vLLM

Three packages, one direction of the data flow each: :mod:`trierouter.registry` compiles,
:mod:`trierouter.router` decodes, :mod:`trierouter.shortlist` retrieves.
"""

from trierouter.classify import Classifier
from trierouter.errors import (
    CompileError,
    CorruptFileError,
    DuplicateToolError,
    EmptySetError,
    InvalidToolError,
    InvalidValueError,
    McpServerError,
    MissingDependencyError,
    ToolError,
    TrieRouterError,
    UnreachableValueError,
    VocabularyError,
    VocabularyMismatchError,
)
from trierouter.registry import (
    SHIPPED,
    ChoiceSet,
    CompiledTools,
    TokenIndex,
    Tool,
    ToolRegistry,
    Vocabulary,
    compile_choices,
    compile_tools,
    shipped_vocabulary,
)
from trierouter.router import (
    Matcher,
    ToolCall,
    ToolCallError,
    ToolCallPlan,
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    parse_tool_call,
)

__version__ = "0.1.0"

__all__ = [
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
