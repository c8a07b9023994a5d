"""Does the model answer in text after a tool result? The agent loop of tests/test_serve_qwen.py,
measured in transformers on the model's own probabilities (no router, no constraint).

    python benchmarks/agent_turns.py --model qwen2.5-coder-1.5b-instruct   # ~10 min, 2 threads

The 20 questions, the two tools (as openai-agents 0.24 sends them: ``strict`` JSON schemas) and
the agent's instructions of ``tests/test_serve_qwen.py``, rendered by the model's own chat
template with ``tools=``; greedy, float32. Two turns per question:

- turn 1: system (the instructions) -> user question;
- turn 2: the same, then the assistant's call of the fitting tool with the question's city
  (rendered from ``tool_calls`` by the template, as the server renders what the SDK sends back,
  whatever syntax the model wrote it in) -> the tool's result.

Per turn and question: the probability of the first answer token being ``<tool_call>`` (the
template's opener), of it spelling that tag in plain tokens (``<``, ...), of it starting with
```` ``` ```` or ``{`` (the other call openers the router watches for under ``auto``; a ``{``
may also start a text that is not a call: an upper bound), the greedy continuation
(``--tokens``) and its reading: a call (the tag, a fenced or bare JSON object naming a tool) or
text. Writes ``benchmarks/results/agent_turns_<model>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CITIES = ["Paris", "Oslo", "Tokyo", "Lima", "Cairo", "Dublin", "Seoul", "Quito", "Riga", "Perth"]
QUESTIONS = [f"What is the weather like in {c} right now?" for c in CITIES] + [
    f"What time is it in {c} at the moment?" for c in CITIES
]
INSTRUCTIONS = "You are a helpful assistant. Use the tools to answer."
TOOLS = {  # name -> (description, result for a city)
    "get_weather": (
        "Get the current weather in a city.",
        "It is sunny and 21 degrees Celsius in {}.",
    ),
    "get_local_time": ("Get the current local time in a city.", "It is 14:05 in {}."),
}


def tool_dicts() -> list[dict[str, Any]]:
    """The tools as openai-agents' ``function_tool`` sends them (``Converter.tool_to_openai``)."""
    out = []
    for name, (desc, _) in TOOLS.items():
        city = {"description": "the city name, e.g. Paris", "title": "City", "type": "string"}
        params = {
            "properties": {"city": city},
            "required": ["city"],
            "title": f"{name}_args",
            "type": "object",
            "additionalProperties": False,
        }
        fn = {"name": name, "description": desc, "parameters": params, "strict": True}
        out.append({"type": "function", "function": fn})
    return out


def conversation(question: str, turn: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": question},
    ]
    if turn == 2:
        city = question.split(" in ")[1].split(" ")[0]
        name = "get_weather" if "weather" in question else "get_local_time"
        call = {"name": name, "arguments": {"city": city}}
        calls = [{"id": "call_1", "type": "function", "function": call}]
        messages += [
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_1", "content": TOOLS[name][1].format(city)},
        ]
    return messages


def reading(text: str) -> str:
    """``call:<tool>`` when the text starts a call in a syntax the router serves, else ``text``."""
    head = text.lstrip()
    for name in TOOLS:
        quoted = f'"{name}"'
        if head.startswith("<tool_call>") and quoted in head:
            return f"call:{name}"
        if (head.startswith("```") or head.startswith("{")) and quoted in head[:80]:
            return f"call:{name}"
    return "call:?" if head.startswith(("<tool_call>", "{", "```json")) else "text"


def _sig(p: Any) -> float:
    return float(f"{float(p):.4g}")


def _opens(piece: str, opener: str) -> bool:
    return piece.startswith(opener) or opener.startswith(piece)


def measure(
    model: Any, tok: Any, turn: int, tokens: int, questions: list[str]
) -> list[dict[str, Any]]:
    import torch

    prompts = [
        str(
            tok.apply_chat_template(
                conversation(q, turn),
                tools=tool_dicts(),
                tokenize=False,
                add_generation_prompt=True,
            )
        )
        for q in questions
    ]
    tok.padding_side = "left"
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    tag = tok.convert_tokens_to_ids("<tool_call>")
    pieces = tok.convert_ids_to_tokens(list(range(len(tok))))
    text_of = [tok.convert_tokens_to_string([p]) if p is not None else "" for p in pieces]
    fence = [i for i, s in enumerate(text_of) if s.startswith("```")]
    brace = [i for i, s in enumerate(text_of) if s.startswith("{")]
    # the tag spelled in plain tokens (``<`` ``tool`` ...): the router matches the text too
    angle = [i for i, s in enumerate(text_of) if s and i != tag and _opens(s, "<tool_call>")]
    with torch.inference_mode():
        out = model.generate(
            **batch,
            max_new_tokens=tokens,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=tok.pad_token_id,
        )
    first = out.logits[0].float().softmax(-1)
    rows = []
    for k, q in enumerate(questions):
        new = out.sequences[k, batch["input_ids"].shape[1] :]
        text = tok.decode(new, skip_special_tokens=False).split("<|im_end|>")[0]
        top = first[k].topk(5)
        rows.append(
            {
                "question": q,
                "prompt_tokens": int(batch["attention_mask"][k].sum()),
                "p_tool_call_tag": _sig(first[k, tag]),
                "p_tag_as_text": _sig(first[k, angle].sum()),
                "p_fence": _sig(first[k, fence].sum()),
                "p_brace": _sig(first[k, brace].sum()),
                "top5": [[tok.decode([int(i)]), _sig(p)] for p, i in zip(*top, strict=True)],
                "greedy": text,
                "reading": reading(text),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=len(QUESTIONS), help="questions (a smoke run)")
    args = ap.parse_args()
    import torch
    import transformers

    from trierouter.models import load_model

    torch.set_num_threads(args.threads)
    path = load_model(args.model, progress=False)
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    result: dict[str, Any] = {"model": args.model, "dtype": "float32", "tokens": args.tokens}
    for turn in (1, 2):
        t0 = time.perf_counter()
        rows = measure(model, tok, turn, args.tokens, QUESTIONS[: args.n])
        n = len(rows)
        fitting = [
            "call:" + ("get_weather" if "weather" in q else "get_local_time") for q in QUESTIONS
        ]
        opener = [
            r["p_tool_call_tag"] + r["p_tag_as_text"] + r["p_fence"] + r["p_brace"] for r in rows
        ]
        summary = {
            "seconds": round(time.perf_counter() - t0, 1),
            "text": sum(r["reading"] == "text" for r in rows),
            "call_of_fitting_tool": sum(
                r["reading"] == f for r, f in zip(rows, fitting, strict=False)
            ),
            "mean_p_tool_call_tag": _sig(sum(r["p_tool_call_tag"] for r in rows) / n),
            "max_p_tool_call_tag": max(r["p_tool_call_tag"] for r in rows),
            "mean_p_call_opener": round(sum(opener) / n, 4),
            "min_p_call_opener": round(min(opener), 4),
            "max_p_call_opener": round(max(opener), 4),
        }
        print(f"turn {turn}: {json.dumps(summary)}")
        result[f"turn{turn}"] = {**summary, "rows": rows}
    git = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
    result["run"] = {
        "commit": subprocess.run(git, capture_output=True, text=True).stdout.strip(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": f"{platform.machine()}, {os.cpu_count()} cores, shared with other jobs (nice 10)",
        "threads": args.threads,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    out = ROOT / "benchmarks" / "results" / f"agent_turns_{args.model}.json"
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
