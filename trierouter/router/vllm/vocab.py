"""The engine's vocabulary: its tokenizer's exact token bytes, the model's width, its stop ids."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trierouter.errors import missing
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.vllm.args import logger

__all__ = ["engine_vocabulary", "model_syntax"]


def _tokenizer(model_config: Any) -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - vllm depends on transformers
        raise missing("transformers", "vllm") from exc
    return AutoTokenizer.from_pretrained(
        model_config.tokenizer,
        revision=getattr(model_config, "tokenizer_revision", None),
        trust_remote_code=bool(getattr(model_config, "trust_remote_code", False)),
    )


def model_syntax(model_config: Any) -> tuple[str | None, tuple[str, ...]]:
    """The served model's call format and ``auto`` openers, found as the tool parser finds
    them (:func:`~trierouter.router.vllm.tool_parser.detect_format`, the openers learned beside the
    model); ``(None, ...)`` when its format cannot be told (the parser then needs its own)."""
    from trierouter.router.openers import model_openers
    from trierouter.router.vllm.tool_parser import detect_format

    tok = _tokenizer(model_config)
    try:
        fmt: str | None = detect_format(tok)
    except ValueError:
        fmt = None
    return fmt, model_openers(getattr(tok, "name_or_path", None))


def engine_vocabulary(vllm_config: Any, width: int) -> Vocabulary:
    """The engine tokenizer's exact token bytes, the model's width and vLLM's stop ids."""
    mc = vllm_config.model_config
    tok = _tokenizer(mc)
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
