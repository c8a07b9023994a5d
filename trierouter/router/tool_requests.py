"""What a tool is for, in its users' words: requests the model writes per tool, once per registry.

    writer = QuestionWriter(model_dir)                      # or (model, tokenizer)
    questions = writer.write(tools, cache="registry.questions.json")   # {name: [request, ...]}
    index = ToolIndex.build(tools, expansions=questions)    # BM25 over tool_text + requests

(The model decodes here, in the router package; :mod:`trierouter.shortlist` only indexes the
text: :func:`~trierouter.shortlist.tool_text.expanded_text`.)

A tool is described by its author (``get_weread_rank``: "Get the WeRead book ranking"); it is
asked for by its users ("what are people reading on WeChat this week?"). A search over the
author's words misses a request in the users' words. Offline, once per registry, the model
writes ``n`` short requests each tool answers (greedy, from :func:`~trierouter.shortlist.
tool_text.tool_text` and the model's chat template: :data:`PROMPT`), and the search indexes them
beside the tool's text (doc2query). Nothing is learned from the questions a search will be asked.

The requests are cached in one JSON file per registry, each under a key of the tool's text, the
model and the prompt: a tool whose text changes is written again, the others are read back.
Writing is generation, slow on a CPU (a 0.5B model: about 13 s per tool on one core, batches of
8, 80 new tokens): progress goes to stderr, and an interrupted run resumes from the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trierouter.shortlist.tool_text import tool_fields, tool_text

__all__ = ["PROMPT", "QuestionWriter", "parse_requests"]

PROMPT = (
    "Here is a software tool.\n\n{tool}\n\n"
    "Write {n} different short requests that a user of an assistant might type, each one "
    "answered by calling this tool. Write them as the user would, without the tool's name. "
    "One request per line, nothing else."
)
"""The user message the model answers per tool (``{tool}``: its :func:`tool_text` of at most
``TOOL_CHARS`` characters; ``{n}``: how many requests). Fixed before any search was scored."""

TOOL_CHARS = 600
"""The most characters of a tool's text shown in :data:`PROMPT`."""

_BULLET = re.compile(r"^\s*(?:[-*•]|\d+\s*[.):]|\(\d+\))\s*")


def parse_requests(text: str, n: int) -> list[str]:
    """The first ``n`` distinct non-blank lines of ``text``, bullets, numbers and quotes
    stripped."""
    out: list[str] = []
    for line in text.splitlines():
        req = _BULLET.sub("", line).strip().strip('"').strip()
        if req and req not in out:
            out.append(req)
        if len(out) == n:
            break
    return out


class QuestionWriter:
    """Writes :data:`PROMPT`'s requests for tools with a transformers causal LM (greedy).

    ``model``: a local model folder (tokenizer and chat template included) or a
    ``(model, tokenizer)``; ``n``: requests per tool; ``batch_size``: prompts per
    ``generate`` call (left-padded); ``max_new_tokens``: per tool. ``generated`` counts the
    tools written by the model so far (not read from a cache).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | tuple[Any, Any],
        *,
        n: int = 3,
        batch_size: int = 8,
        max_new_tokens: int = 80,
    ) -> None:
        if n < 1 or batch_size < 1 or max_new_tokens < 1:
            raise ValueError("n, batch_size and max_new_tokens must be >= 1")
        from trierouter.router.label_scorer import TransformersScorer

        self.scorer = TransformersScorer(model)
        tok = self.scorer.tokenizer
        from trierouter.registry.call_formats import has_chat_template

        if not has_chat_template(tok):
            raise ValueError(
                "the tokenizer has no chat_template: QuestionWriter prompts the model through "
                "its own chat template; set tokenizer.chat_template"
            )
        self.n = n
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.generated = 0
        cfg = getattr(self.scorer.model, "config", None)
        self.model_id = str(getattr(cfg, "_name_or_path", "") or type(self.scorer.model).__name__)

    def prompt(self, name: str, description: str, parameters: Mapping[str, Any] | None) -> str:
        """The chat-templated prompt for one tool."""
        tool = tool_text(name, description, parameters, max_chars=TOOL_CHARS)
        msgs = [{"role": "user", "content": PROMPT.format(tool=tool, n=self.n)}]
        text: str = self.scorer.tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True
        )
        return text

    def key(self, name: str, prompt: str) -> str:
        """The cache key of a tool: its name, its :meth:`prompt` (text, ``n``, :data:`PROMPT`)
        and the model."""
        h = hashlib.sha256()
        for part in (self.model_id, str(self.max_new_tokens), prompt):
            h.update(part.encode("utf-8") + b"\0")
        return f"{name}:{h.hexdigest()[:20]}"

    def write(
        self,
        tools: Iterable[Any],
        *,
        cache: str | os.PathLike[str] | None = None,
        progress: bool = True,
    ) -> dict[str, list[str]]:
        """``{tool name: its requests}`` for ``tools`` (a registry, its tools, or OpenAI /
        Anthropic / MCP dicts), read from ``cache`` where written before, the rest written
        by the model now (the cache rewritten after each batch, so an interruption loses at
        most one batch)."""
        fields = [tool_fields(t) for t in tools]
        path = Path(cache) if cache is not None else None
        stored: dict[str, list[str]] = {}
        if path is not None and path.is_file():
            stored = json.loads(path.read_text(encoding="utf-8")).get("requests", {})
        prompts = [self.prompt(n, d, p) for n, d, p in fields]
        keys = [self.key(f[0], q) for f, q in zip(fields, prompts, strict=True)]
        todo = [i for i, k in enumerate(keys) if k not in stored]
        t0 = time.perf_counter()
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start : start + self.batch_size]
            texts = self._generate([prompts[i] for i in batch])
            for i, text in zip(batch, texts, strict=True):
                stored[keys[i]] = parse_requests(text, self.n)
            self.generated += len(batch)
            if path is not None:
                self._save(path, stored)
            if progress:
                done = start + len(batch)
                rate = (time.perf_counter() - t0) / done
                print(
                    f"requests written for {done:,}/{len(todo):,} tools "
                    f"({rate:.1f} s per tool, about {rate * (len(todo) - done) / 60:.0f} min left)",
                    file=sys.stderr,
                    flush=True,
                )
        return {f[0]: stored[k] for f, k in zip(fields, keys, strict=True)}

    def _save(self, path: Path, stored: Mapping[str, list[str]]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        doc = {"model": self.model_id, "n": self.n, "prompt": PROMPT, "requests": dict(stored)}
        tmp.write_text(json.dumps(doc, indent=0, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)

    def _generate(self, prompts: list[str]) -> list[str]:
        """Greedy continuations of ``prompts`` (one left-padded batch)."""
        torch = self.scorer.torch
        tok = self.scorer.tokenizer
        ids = [self.scorer.encode(p) for p in prompts]
        width = max(len(x) for x in ids)
        pad = tok.pad_token_id if tok.pad_token_id is not None else next(iter(self.scorer.end_ids))
        input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        with torch.inference_mode():
            out = self.scorer.model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
        ends = self.scorer.end_ids
        texts = []
        for row in out[:, width:].tolist():
            new = []
            for t in row:
                if t in ends:
                    break
                new.append(t)
            texts.append(tok.decode(new, skip_special_tokens=True))
        return texts
