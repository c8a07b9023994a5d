"""The engine's vocabulary: its tokenizer's exact token bytes, the model's width, its stop ids."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trierouter.errors import missing
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.vllm.args import logger

__all__ = ["engine_vocabulary"]


def engine_vocabulary(vllm_config: Any, width: int) -> Vocabulary:
    """The engine tokenizer's exact token bytes, the model's width and vLLM's stop ids."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - vllm depends on transformers
        raise missing("transformers", "vllm") from exc
    mc = vllm_config.model_config
    tok = AutoTokenizer.from_pretrained(
        mc.tokenizer,
        revision=getattr(mc, "tokenizer_revision", None),
        trust_remote_code=bool(getattr(mc, "trust_remote_code", False)),
    )
    ends: set[int] = set()
    eos = getattr(tok, "eos_token_id", None)
    if isinstance(eos, int):
        ends.add(eos)
    try:
        gen = mc.try_get_generation_config() or {}
    except Exception:  # a missing generation config is normal
        gen = {}
    g_eos = gen.get("eos_token_id") if isinstance(gen, Mapping) else None
    if isinstance(g_eos, int):
        ends.add(g_eos)
    elif isinstance(g_eos, list):
        ends.update(e for e in g_eos if isinstance(e, int))
    vocab = Vocabulary.from_tokenizer(tok, width=width, end_ids=sorted(ends) or None)
    logger.info("trierouter: %r", vocab)
    return vocab
