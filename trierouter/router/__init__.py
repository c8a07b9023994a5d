"""Everything that decodes: matchers, packed bitmasks, decoding plans, tool calls
(:mod:`.tool_calls`: the plan, the OpenAI form, streaming).

Engine adapters live in submodules and import their engine only when used:
:mod:`.transformers` (``generate``, logits processors) and :mod:`.vllm` (the v1 logits processor,
request arguments, named sets and registries).
"""

from trierouter.router.bitmask import (
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_to_ids,
    ids_to_bitmask,
)
from trierouter.router.matcher import Matcher
from trierouter.router.tool_calls import (
    FunctionCall,
    ParsedOutput,
    ToolCall,
    ToolCallError,
    ToolCallPlan,
    parse_tool_call,
)

__all__ = [
    "FunctionCall",
    "Matcher",
    "ParsedOutput",
    "ToolCall",
    "ToolCallError",
    "ToolCallPlan",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_to_ids",
    "ids_to_bitmask",
    "parse_tool_call",
]
