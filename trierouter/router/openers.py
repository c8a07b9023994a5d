"""Which texts a model starts its tool calls with, learned from the model and kept beside it.

Under ``tool_choice="auto"`` a call starts where the model writes a call opener. Its chat
template names one (``<tool_call>``); small models often write another (Qwen2.5-Coder-0.5B
answers with a ```` ```json ```` fence or a bare ``{"name"`` object and never the tag; the 1.5B,
after a tool result, with the object in doubled braces, ``{{"name"``). Which
of the candidate syntaxes (:data:`~trierouter.registry.call_formats.AUTO_OPENERS`) a model
uses is measured, not assumed: on a few calibration requests (generic tools and questions,
rendered by the model's own template, one of them after a tool result; no benchmark data),
the probability that its answer starts with each candidate's opener, by one forward pass per
request and opener (teacher forcing the opener's tokens, the last one counted with every token
that starts with it, since the model may write it merged with what follows). A
candidate the model gives at least :data:`THRESHOLD` of its probability on some request is
kept. The result is written to ``trierouter_openers.json`` in the model's folder;
:func:`model_openers` reads it (no torch needed) and falls back to every candidate: with no
file, every one; with a file made before a candidate was added (:func:`calibrated` says so), the
kept ones and every candidate the file did not measure.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from trierouter.errors import TrieRouterError
from trierouter.registry.call_formats import AUTO_OPENERS, call_format
from trierouter.registry.call_text import auto_formats
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["CACHE_FILE", "THRESHOLD", "calibrated", "learn_openers", "model_openers"]

_log = logging.getLogger("trierouter")

CACHE_FILE = "trierouter_openers.json"
THRESHOLD = 0.01
"""The least probability of starting an answer with an opener, on some calibration request,
for the syntax to count as one the model writes."""

_TOOL = {
    "type": "function",
    "function": {
        "name": "{name}",
        "description": "{desc}",
        "parameters": {
            "type": "object",
            "properties": {"{arg}": {"type": "string", "description": "the {arg}"}},
            "required": ["{arg}"],
        },
    },
}
CALIBRATION: tuple[tuple[str, str, str, str], ...] = (
    ("get_weather", "Get the current weather in a city.", "city", "How warm is it in Rome?"),
    ("convert_currency", "Convert 1 unit of a currency to euros.", "currency",
     "What is one US dollar in euros?"),
    ("send_email", "Send an email to an address.", "address",
     "Email bob@example.com that I am late."),
    ("search_books", "Search a library catalogue by title.", "title",
     "Find the book Dune in the library."),
)  # fmt: skip
"""``(tool, description, argument, question)``: requests whose answer is a call of that tool;
the first is also asked once more after a call of the tool and its result."""
RESULT = ("Rome", "It is 24 degrees Celsius and sunny in Rome.")
"""The first request's call argument and tool result in the after-a-result request."""


def _requests() -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """``(messages, tools)`` of every calibration request."""
    out: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = [
        ([{"role": "user", "content": q}], _tools(n, d, a)) for n, d, a, q in CALIBRATION
    ]
    name, _, arg, question = CALIBRATION[0]
    # arguments as an object, as vLLM hands them to the template (a string would be quoted)
    call = {"id": "call_0", "type": "function",
            "function": {"name": name, "arguments": {arg: RESULT[0]}}}  # fmt: skip
    after: list[dict[str, Any]] = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": RESULT[1]},
    ]
    out.append((after, out[0][1]))
    return out


def _tools(name: str, desc: str, arg: str) -> list[dict[str, Any]]:
    text = json.dumps(_TOOL).replace("{name}", name).replace("{desc}", desc)
    return [json.loads(text.replace("{arg}", arg))]


def model_openers(model_dir: str | os.PathLike[str] | None) -> tuple[str, ...]:
    """The openers learned for the model in ``model_dir`` (:func:`learn_openers`), or every
    candidate when none were learned (no file, or not a folder); a candidate the file did not
    measure (added since) counts too."""
    return AUTO_OPENERS if model_dir is None else _read(str(model_dir))


def calibrated(model_dir: str | os.PathLike[str]) -> bool:
    """Whether ``model_dir`` holds a calibration that measured every current candidate (else
    :func:`learn_openers` is due); read from the disk each time."""
    return _load(str(model_dir))[1]


@functools.lru_cache(maxsize=16)
def _read(model_dir: str) -> tuple[str, ...]:
    return _load(model_dir)[0]


def _load(model_dir: str) -> tuple[tuple[str, ...], bool]:
    """``(the openers, whether the file measured every candidate)``."""
    path = Path(model_dir) / CACHE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        kept = tuple(str(o) for o in data["openers"])
        measured = set(data["probability"]) | {str(data["format"])}
        for o in kept:
            call_format(o)
        # a candidate the format's own trigger covers is never measured, nor needed
        due = auto_formats(str(data["format"]), AUTO_OPENERS)
    except (OSError, ValueError, KeyError, TypeError, TrieRouterError):
        return AUTO_OPENERS, False
    unmeasured = tuple(o for o in due if o not in measured and o not in kept)
    return kept + unmeasured, not unmeasured


def _starting_with(vocab: Vocabulary, token: int) -> Any:
    """The ids of the tokens whose bytes start with token ``token``'s (itself included)."""
    import torch

    piece = vocab.tokens[token] if token < len(vocab.tokens) else b""
    if not piece or not vocab.matchable[token]:  # a special token: itself only
        return torch.tensor([token])
    return torch.tensor(
        [i for i, t in enumerate(vocab.tokens) if vocab.matchable[i] and t.startswith(piece)]
    )


def learn_openers(
    model_dir: str | os.PathLike[str],
    *,
    fmt: str = "hermes",
    candidates: tuple[str, ...] = AUTO_OPENERS,
    threshold: float = THRESHOLD,
) -> dict[str, Any]:
    """Measure which of ``candidates`` the model in ``model_dir`` (a transformers folder whose
    template calls in ``fmt``) starts its answers with, write ``trierouter_openers.json`` there
    and return what it holds: ``openers`` (kept), ``probability`` (the most per candidate, the
    template's own opener included) and the calibration it came from."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()  # type: ignore[no-untyped-call,unused-ignore]
    vocab = Vocabulary.from_tokenizer(tok)
    starting: dict[int, Any] = {}
    names = (fmt, *auto_formats(fmt, candidates))
    best = dict.fromkeys(names, 0.0)
    with torch.inference_mode():
        for messages, tools in _requests():
            render: Any = tok.apply_chat_template
            prompt = str(render(messages, tools=tools, tokenize=False, add_generation_prompt=True))
            head = tok(prompt, add_special_tokens=False)["input_ids"]
            for f in names:
                ids = tok(prompt + call_format(f).trigger, add_special_tokens=False)["input_ids"]
                if ids[: len(head)] != head:  # the opener merged with the prompt's last token
                    continue
                logits = model(torch.tensor([ids])).logits[0].log_softmax(-1)
                lp = sum(float(logits[i - 1, ids[i]]) for i in range(len(head), len(ids) - 1))
                # the last piece may be written merged with what follows (`":` for `"`): every
                # token that starts with its bytes counts
                ends = starting.setdefault(ids[-1], _starting_with(vocab, ids[-1]))
                lp += float(logits[len(ids) - 2, ends].logsumexp(0))
                best[f] = max(best[f], math.exp(lp))
    kept = tuple(f for f in names[1:] if best[f] >= threshold)
    out = {
        "openers": list(kept),
        "format": fmt,
        "probability": {f: round(p, 6) for f, p in best.items()},
        "threshold": threshold,
        "calibration": [q for *_, q in CALIBRATION] + [f"{CALIBRATION[0][3]} (after a result)"],
    }
    (Path(model_dir) / CACHE_FILE).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    _read.cache_clear()
    _log.info("call openers of %s: %s (%s)", model_dir, kept, out["probability"])
    return out
