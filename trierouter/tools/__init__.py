"""Tools for agents: a registry that reads every form agent frameworks use.

    from trierouter.tools import Tool, ToolRegistry

    registry = ToolRegistry(openai_tools)                  # or Anthropic / MCP dicts, functions,
    registry.add(get_weather, WeatherQuery, langchain_tool) # pydantic models, LangChain tools
    registry = ToolRegistry.from_mcp_server("python", ["-m", "my_mcp_server"])
    tools = registry.compile(index)                         # names trie + an engine per slot
    plan = ToolCallPlan(tools, tool_choice="required")      # run with generate() or vLLM
    call = plan.parse(output_text)                          # ToolCall (OpenAI format), validated

Needs ``pip install 'trierouter[tools]'`` (jsonschema, pydantic); ``from_mcp_server`` also needs
``trierouter[mcp]``. LangChain is duck-typed and never imported.
"""

from trierouter.errors import DuplicateToolError, InvalidToolError, McpServerError, ToolError
from trierouter.tools.compiler import CompiledTools, compile_tools
from trierouter.tools.decode import (
    FunctionCall,
    ToolCall,
    ToolCallError,
    ToolCallPlan,
    parse_tool_call,
)
from trierouter.tools.registry import MAX_NAME_LENGTH, NAMESPACE_SEPARATOR, Tool, ToolRegistry

__all__ = [
    "MAX_NAME_LENGTH",
    "NAMESPACE_SEPARATOR",
    "CompiledTools",
    "DuplicateToolError",
    "FunctionCall",
    "InvalidToolError",
    "McpServerError",
    "Tool",
    "ToolCall",
    "ToolCallError",
    "ToolCallPlan",
    "ToolError",
    "ToolRegistry",
    "compile_tools",
    "parse_tool_call",
]
