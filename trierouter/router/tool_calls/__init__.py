"""Tool calls in the model's own syntax: decoded, parsed, streamed, checked.

:mod:`.plan` (:class:`ToolCallPlan`, the decoding plan) with its stages :mod:`.free_text` (text
until a call opener), :mod:`.turns` (a turn's closing text) and :mod:`.closing` (closing within
``max_tokens``); :mod:`.call` (:class:`ToolCall`, OpenAI's form, and a call checked against the
registry); :mod:`.serving` (what a server needs: streaming deltas, a call checked against a
request's schemas, the plan with budgets). The call text itself (where calls start, the JSON
objects, names and arguments) is read by one module, :mod:`trierouter.registry.call_text`.
"""

from trierouter.router.tool_calls.call import (
    FunctionCall,
    ParsedOutput,
    ToolCall,
    ToolCallError,
    parse_tool_call,
    tool_choice_name,
)
from trierouter.router.tool_calls.native import (
    StreamDelta,
    ToolCallStream,
    call_problem,
    native_plan,
)
from trierouter.router.tool_calls.plan import ToolCallPlan, ToolState

__all__ = [
    "FunctionCall",
    "ParsedOutput",
    "StreamDelta",
    "ToolCall",
    "ToolCallError",
    "ToolCallPlan",
    "ToolCallStream",
    "ToolState",
    "call_problem",
    "native_plan",
    "parse_tool_call",
    "tool_choice_name",
]
