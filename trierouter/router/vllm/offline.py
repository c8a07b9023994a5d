"""vLLM's in-process ``LLM`` with trierouter's logits processor: constrained choices offline.

:class:`OfflineChooser` loads a local model folder into ``vllm.LLM`` (float32, eager, seed 0 by
default; any ``LLM`` argument may be given) with
:class:`~trierouter.router.vllm.processor.TrieRouterLogitsProcessor`, and greedily decodes one
value of a set per prompt through the processor's request arguments (``trierouter_choices``,
optionally thinking first). The classifier's ``engine="vllm"`` runs on it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trierouter.errors import missing
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["OfflineChooser"]


class OfflineChooser:
    """A ``vllm.LLM`` over a local model folder, with the trie processor loaded.

    ``model``: the folder (``config.json`` and tokenizer); ``kwargs``: ``LLM`` arguments over
    the defaults (``dtype="float32"``, ``enforce_eager=True``, ``max_model_len=1024``,
    ``seed=0``). ``vocabulary``: the tokenizer at the model's logits width.
    """

    def __init__(
        self, model: str | os.PathLike[str] | tuple[Any, Any], kwargs: dict[str, Any]
    ) -> None:
        if isinstance(model, tuple):
            raise TypeError("engine='vllm' needs a model folder, not loaded objects")
        path = Path(model)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"model={str(model)!r} is not a local model folder (no config.json)"
            )
        try:
            from vllm import LLM
        except ImportError as exc:
            raise missing("vllm", "vllm") from exc
        from trierouter.router.vllm.processor import TrieRouterLogitsProcessor

        args: dict[str, Any] = {
            "dtype": "float32",
            "enforce_eager": True,
            "max_model_len": 1024,
            "seed": 0,
            "logits_processors": [TrieRouterLogitsProcessor],
        }
        args.update(kwargs)
        self.llm = LLM(str(path), **args)
        tokenizer = self.llm.get_tokenizer()
        width = int(self.llm.llm_engine.model_config.get_vocab_size())
        self.vocabulary = Vocabulary.from_tokenizer(tokenizer, width=width)

    def choose(
        self,
        prompts: Sequence[str],
        choices: Sequence[Sequence[str]],
        *,
        think: str | None = None,
        think_tokens: int = 64,
        prefix: str = "",
    ) -> list[str]:
        """Greedy text after each prompt: one of its ``choices`` (a value), or with ``think``
        (a delimiter such as ``"</think>"``) free text until it (at most ``think_tokens``),
        then ``prefix`` and the value."""
        from vllm import SamplingParams

        params = []
        for cands in choices:
            extra: dict[str, Any] = {"trierouter_choices": list(cands)}
            if think is not None:
                extra["trierouter_think"] = think
                extra["trierouter_think_max_tokens"] = think_tokens
                extra["trierouter_prefix"] = prefix
            params.append(
                SamplingParams(temperature=0.0, max_tokens=think_tokens + 64, extra_args=extra)
            )
        if not prompts:
            return []
        outs = self.llm.generate(list(prompts), params, use_tqdm=False)
        return [o.outputs[0].text for o in outs]

    def generate_lines(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Unconstrained greedy text after each prompt, its first non-blank line."""
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
        outs = self.llm.generate(list(prompts), params, use_tqdm=False)
        return [o.outputs[0].text.strip().split("\n")[0].strip() for o in outs]
