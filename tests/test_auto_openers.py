"""``tool_choice="auto"`` with every opener the model writes: the template's ``<tool_call>``, a
```` ```json ```` fence, a bare ``{"name"`` object.

Oracles: the free-text rows against a brute-force scan of the whole vocabulary (every token,
every end position, every trigger); calls in each syntax, tokenized by Qwen2's own BPE, accepted
token by token and parsed into calls that ``jsonschema`` (with its format checker) validates;
random walks after each opener end in valid calls; the streaming parser's deltas add up to the
whole-text parse; text that never opens a call is never steered toward one."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.test_call_formats import SCHEMAS, TOOLS
from trierouter.registry.call_formats import AUTO_OPENERS, CALL_FORMATS, call_format
from trierouter.registry.call_text import auto_formats, envelope, first_trigger, scan_calls
from trierouter.registry.compiler import CompiledTools, compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.tool_calls.native import ToolCallStream
from trierouter.router.tool_calls.plan import ToolCallPlan

jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def hermes(qwen2_index: TokenIndex) -> CompiledTools:
    return compile_tools(TOOLS, qwen2_index, format="hermes")


@pytest.fixture(scope="module")
def auto(hermes: CompiledTools) -> ToolCallPlan:
    return ToolCallPlan(
        hermes, tool_choice="auto", string_max_tokens=4, slot_max_tokens=8, max_tokens=30
    )


def _valid(name: str, args: dict[str, Any]) -> None:
    schema = SCHEMAS[name] or {"type": "object"}
    cls = jsonschema.Draft202012Validator
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(args)


def test_auto_formats_skip_overlapping_openers() -> None:
    braced = "json_object_braced"
    assert auto_formats("hermes") == ("json_fence", "json_object", braced)
    assert auto_formats("llama3_json") == ("json_fence", braced)  # its bare object opens
    assert auto_formats("json_fence") == ("json_object", braced)
    assert auto_formats(braced) == ("json_fence", "json_object")
    assert auto_formats("hermes", ()) == ()


def _nested(outer: str, inner: str) -> bool:
    """By the decoder's own matcher: ``inner``'s watched text matches inside text that is
    ``outer``'s trigger, written at a line start or (unanchored) after other text."""
    f = call_format(outer)
    for lead in ("", "x") if not f.anchored else ("",):
        text = lead + f.trigger
        start, end, j = first_trigger(text, [call_format(inner).watch])
        if j == 0 and start >= len(lead) and end <= len(text):
            return True
    return False


@pytest.mark.parametrize("fmt", sorted(CALL_FORMATS))
def test_auto_formats_keep_exactly_the_openers_that_cannot_match_inside_another(fmt: str) -> None:
    """A candidate is dropped exactly when the decoder's matcher finds one trigger inside text
    that is the other's (so one opening would be read in two syntaxes)."""
    for cand in AUTO_OPENERS:
        clash = _nested(fmt, cand) or _nested(cand, fmt)
        assert auto_formats(fmt, (cand,)) == (() if clash else (cand,)), (fmt, cand)


def _brute_row(plan: ToolCallPlan, k: int, vocab: Vocabulary) -> set[int]:
    """Every token allowed at pending state ``k``, by scanning each end position."""
    fr = plan._frees[-1]
    syntaxes = [plan, *plan._alts]
    fulls = [
        [s.tools.name_text(n, s.format.lead(after_trigger=True)) + s.format.name_tail
         for n in s.tools._by_name]
        for s in syntaxes
    ]  # fmt: skip
    head = fr.prefixes[k]
    ok = set(vocab.end_ids)
    for i, t in enumerate(vocab.tokens):
        if not vocab.matchable[i]:
            continue
        text = head + t
        done = None
        for end in range(len(head) + 1, len(text) + 1):
            hits = [j for j, trig in enumerate(fr.triggers) if text[:end].endswith(trig)]
            if hits:
                done = (end, hits[0])
                break
        if done is None or done[0] == len(text):
            ok.add(i)
            continue
        rest = text[done[0] :].decode("latin-1")
        # the rest of the token must stay inside the call head and name of that syntax
        if any(f.startswith(rest) and len(rest) < len(f) for f in fulls[done[1]]):
            ok.add(i)
    return ok


def test_free_rows_equal_a_brute_force_scan(auto: ToolCallPlan, qwen2: Vocabulary) -> None:
    fr = auto._frees[-1]
    # the objects at a line start
    assert fr.triggers == (b"<tool_call>", b"```json", b'\n{"name"', b'\n{{"name"')
    assert fr.prefixes[fr.initial] == b"\n"  # the output starts a line
    pending = (b"\n", b"``", b'\n{"', b"```jso", b'\n{"name', b"<tool_call", b"\n{", b"\n{{",
               b'\n{{"', b'\n{{"name')  # fmt: skip
    for k in (0, *(fr.prefixes.index(p) for p in pending)):
        got = set(auto.allowed_token_ids((auto.NAME - 1, k)).tolist())
        assert got == _brute_row(auto, k, qwen2), fr.prefixes[k]


@pytest.mark.parametrize("fmt", ["hermes", "json_fence", "json_object", "json_object_braced"])
def test_each_opener_decodes_a_valid_call(auto: ToolCallPlan, qwen2: Vocabulary,
                                          qwen_encode: Any, fmt: str) -> None:  # fmt: skip
    f = call_format(fmt)
    call = json.dumps({"name": "weather.get", "arguments": {"city": "Oslo", "unit": "c"}})
    lead = "Let me check.\n"
    text = lead + f.prefix + call + f.suffix
    st: Any = auto.start()
    for t in qwen_encode(text):
        assert t in auto.allowed_token_ids(st).tolist(), (fmt, qwen2.tokens[t])
        st = auto.advance(st, t)
        assert st[0] != auto.DEAD
    assert st[6] == [None, "hermes", *AUTO_OPENERS].index(fmt) - 1  # the syntax it started in
    assert auto.advance(st, qwen2.end_ids[0])[0] == auto.TERMINATED
    out = auto.parse_calls(text)
    assert out.content == lead and [c.name for c in out.calls] == ["weather.get"]
    _valid("weather.get", out.calls[0].args)
    content, calls = scan_calls(text, envelope("hermes", auto=True))  # the server's parser
    assert content == lead and json.loads(calls[0].arguments) == out.calls[0].args


@pytest.mark.parametrize("opener", ["```json", '{"name"', "<tool_call>", '{{"name"'])
def test_random_walks_after_an_opener_are_valid_calls(
    auto: ToolCallPlan, qwen2: Vocabulary, qwen_encode: Any, opener: str
) -> None:
    rng = random.Random(opener)
    finished = 0
    for _ in range(15):
        st: Any = auto.start()
        toks = qwen_encode("Sure.\n" + opener)
        for t in toks:
            st = auto.advance(st, t)
        assert st[0] == auto.NAME
        for _ in range(200):
            ids = auto.allowed_token_ids(st).tolist()
            t = qwen2.end_ids[0] if st[0] == auto.DONE else rng.choice(ids)
            toks.append(t)
            st = auto.advance(st, t)
            assert st[0] != auto.DEAD
            if st[0] == auto.TERMINATED:
                break
        else:
            continue
        finished += 1
        text = qwen2.decode(toks[:-1]).decode()
        out = auto.parse_calls(text)
        assert out.content == "Sure.\n" and len(out.calls) == 1
        _valid(out.calls[0].name, out.calls[0].args)
    assert finished >= 12


def test_text_is_never_steered_toward_a_call(auto: ToolCallPlan, qwen2: Vocabulary,
                                             qwen_encode: Any) -> None:  # fmt: skip
    text = (
        'Use {"a": 1} or ```python\nprint(1)\n``` and <b>tags</b>; "name" is fine.\n'
        '<tools>\n{"type": "function", "function": {"name": "math.add"}} is quoted, not a call'
    )
    st: Any = auto.start()
    for t in qwen_encode(text):
        assert t in auto.allowed_token_ids(st).tolist()
        st = auto.advance(st, t)
    assert st[0] < auto.NAME and auto.advance(st, qwen2.end_ids[0])[0] == auto.TERMINATED
    assert auto.parse_calls(text).calls == []
    assert scan_calls(text, envelope("hermes", auto=True)) == (text, [])  # the server's parser
    # only tokens that run from an opener into something no call starts with are taken out
    blocked = len(qwen2.tokens) - len(auto.allowed_token_ids(auto.start()))
    assert 0 < blocked < 0.01 * len(qwen2.tokens)


@pytest.mark.parametrize("opener", ["json_fence", "json_object_braced"])
def test_stream_deltas_add_up_to_the_parse(opener: str) -> None:
    env = envelope("hermes", auto=True)
    f = call_format(opener)
    call = '{"name": "math.add", "arguments": {"a": 2, "b": 40}}'
    text = "Checking.\n" + f.prefix + call + f.suffix
    stream = ToolCallStream(env)
    content, args, names = "", "", []
    for n in range(1, len(text) + 1):
        d = stream.feed(text[:n])
        content += d.content
        for _, name, frag in d.calls:
            names += [name] if name else []
            args += frag
    assert content == "Checking.\n" and names == ["math.add"]
    assert json.loads(args) == {"a": 2, "b": 40}
    assert scan_calls(text, env)[0] == content


@pytest.mark.parametrize("before", ["", "Calling it.\n", "Calling it.\n\n"])
def test_a_bare_object_opens_a_call_at_a_line_start_only(
    auto: ToolCallPlan, qwen_encode: Any, before: str
) -> None:
    call = '{"name": "math.add", "arguments": {"a": 2, "b": 40}}'
    for lead, opens in ((before, True), ("See " if not before else before + "See ", False)):
        text = lead + call
        st: Any = auto.start()
        for t in qwen_encode(text):
            assert t in auto.allowed_token_ids(st).tolist(), (lead, t)
            st = auto.advance(st, t)
        assert st[0] != auto.DEAD and (not 0 <= st[0] < auto.NAME) is opens, lead
        out = auto.parse_calls(text)
        content, calls = scan_calls(text, envelope("hermes", auto=True))
        assert [c.name for c in out.calls] == (["math.add"] if opens else [])
        assert [c.name for c in calls] == [c.name for c in out.calls]
        assert out.content == content == (lead if opens else text)


# Qwen2.5-Coder-1.5B-Instruct's greedy answers after a tool result
# (benchmarks/results/agent_turns_qwen2.5-coder-1.5b-instruct.json, turn 2): its template's
# escaped example copied, the closing brace sometimes left out
BRACED = [
    ('{{"name": "get_weather", "arguments": {"city": "Paris"}}}', "Paris"),
    ('{{"name": "get_weather", "arguments": {"city": "Tokyo"}}', "Tokyo"),
]
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}}}]  # fmt: skip


@pytest.mark.parametrize(("text", "city"), BRACED)
def test_a_doubled_brace_call_is_a_tool_call(
    qwen2_index: TokenIndex, qwen2: Vocabulary, qwen_encode: Any, text: str, city: str
) -> None:
    """The model's own tokens are accepted beside the other openers (the bare object's included);
    where it would stop after ``}}``, only the closing ``}`` is allowed (checked against every
    token's bytes); the closed call parses, in the plan and in the server's parser, into the call
    of the tool with the model's arguments."""
    plan = ToolCallPlan(compile_tools(WEATHER, qwen2_index, format="hermes"),
                        tool_choice="auto", parallel_tool_calls=True)  # fmt: skip
    braced = [None, "hermes", *AUTO_OPENERS].index("json_object_braced") - 1
    st: Any = plan.start()
    for t in qwen_encode(text):
        assert t in plan.allowed_token_ids(st).tolist(), qwen2.tokens[t]
        st = plan.advance(st, t)
    assert st[0] >= plan.NAME and st[6] == braced
    while plan.advance(st, qwen2.end_ids[0])[0] != plan.TERMINATED:  # only "}" closes it
        ok = [i for i, b in enumerate(qwen2.tokens) if b and b"}".startswith(b)]
        assert sorted(set(plan.allowed_token_ids(st).tolist()) - set(qwen2.end_ids)) == ok
        st, text = plan.advance(st, ok[0]), text + "}"
    assert text.endswith('"}}}')
    call = plan.parse(text)
    assert call is not None and (call.name, call.args) == ("get_weather", {"city": city})
    for fmt in ("hermes", "json_object_braced"):  # the server's parser, auto and forced
        content, calls = scan_calls(text, envelope(fmt, auto=fmt == "hermes"))
        assert content == "" and [(c.name, json.loads(c.arguments)) for c in calls] == [
            ("get_weather", {"city": city})
        ]


def test_braces_in_text_stay_text(auto: ToolCallPlan, qwen2: Vocabulary, qwen_encode: Any) -> None:
    """Template braces, a doubled-brace object inside a line, a triple brace: text, with every
    one of the model's tokens allowed and no call read."""
    text = (
        'Write {{ name }} in Jinja:\n{{ user }} and {{{ raw }}}\n{{{"name": 1}}}\n'
        'inline {{"name": "math.add", "arguments": {"a": 1, "b": 2}}} is quoted'
    )
    st: Any = auto.start()
    for t in qwen_encode(text):
        assert t in auto.allowed_token_ids(st).tolist(), qwen2.tokens[t]
        st = auto.advance(st, t)
    assert st[0] < auto.NAME and auto.advance(st, qwen2.end_ids[0])[0] == auto.TERMINATED
    assert auto.parse_calls(text).calls == []
    assert scan_calls(text, envelope("hermes", auto=True)) == (text, [])


def test_transformers_returns_a_doubled_brace_call_as_a_call(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """End to end in ``model.generate`` (tiny random Llama, Qwen2's tokenizer): a model that
    writes the 1.5B's unclosed ``{{"name": ...}}`` (its tokens put first by a scripted logits
    processor before trierouter's) gets the closing ``}`` and a parsed tool call; one that
    writes template braces in text keeps its text token for token."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from trierouter.router.transformers import TrieLogitsProcessor
    from trierouter.testing.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny-braced") / "qwen2", tokenizer="qwen2")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    vocab = Vocabulary.from_tokenizer(tok, width=model.config.vocab_size)
    plan = ToolCallPlan(compile_tools(WEATHER, TokenIndex.get(vocab), format="hermes"),
                        tool_choice="auto", parallel_tool_calls=True)  # fmt: skip
    texts = [BRACED[1][0], "Fill in {{ city }} and {{ day }}:\n{{ city }} is sunny."]
    eos = vocab.end_ids[0]
    scripts = [tok(t, add_special_tokens=False)["input_ids"] + [eos] for t in texts]

    class Scripted(transformers.LogitsProcessor):  # the "model" prefers its script, then the end
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            k = input_ids.shape[1] - prompt.shape[1]
            for row, script in enumerate(scripts):
                scores[row, script[k] if k < len(script) else eos] += 1e4
            return scores

    prompt = tok(["Hi", "Hi"], return_tensors="pt")["input_ids"]
    trie = TrieLogitsProcessor(plan, max_new_tokens=40)
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=40, logits_processor=[Scripted(), trie],
                             pad_token_id=eos, eos_token_id=eos)  # fmt: skip
    got = [vocab.decode(r[: r.index(eos)]).decode() for r in out[:, prompt.shape[1] :].tolist()]
    assert got == [texts[0] + "}", texts[1]]
    call = plan.parse(got[0])
    assert call is not None and (call.name, call.args) == ("get_weather", {"city": "Tokyo"})
    assert plan.parse_calls(got[1]).calls == []
    assert scan_calls(got[1], envelope("hermes", auto=True)) == (got[1], [])


def test_a_calibration_made_before_a_candidate_counts_it_until_redone(tmp_path: Path) -> None:
    """A file that measured every candidate decides alone; one made before a candidate was added
    (the 0.5B's and 1.5B's before the doubled brace) keeps its openers, counts the unmeasured
    candidate as a missing file would, and is due again; a candidate the format's own trigger
    covers is never due (Llama 3's bare object covers json_object)."""
    from trierouter.router.openers import CACHE_FILE, calibrated, model_openers

    def write(name: str, fmt: str, probability: dict[str, float], kept: list[str]) -> str:
        folder = tmp_path / name
        folder.mkdir()
        data = {"openers": kept, "format": fmt, "probability": probability}
        (folder / CACHE_FILE).write_text(json.dumps(data), encoding="utf-8")
        return str(folder)

    old = write(
        "old", "hermes", {"hermes": 0, "json_fence": 0.5, "json_object": 0.001}, ["json_fence"]
    )
    assert model_openers(old) == ("json_fence", "json_object_braced") and not calibrated(old)
    p = {"hermes": 0, "json_fence": 0.5, "json_object": 0.9, "json_object_braced": 0.0001}
    new = write("new", "hermes", p, ["json_fence", "json_object"])
    assert model_openers(new) == ("json_fence", "json_object") and calibrated(new)
    llama = write(
        "llama",
        "llama3_json",
        {"llama3_json": 0.9, "json_fence": 0.0, "json_object_braced": 0.0},
        [],
    )
    assert model_openers(llama) == () and calibrated(llama)
    assert model_openers(str(tmp_path)) == AUTO_OPENERS and not calibrated(str(tmp_path))
