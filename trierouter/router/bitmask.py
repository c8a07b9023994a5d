"""Packed token bitmasks in XGrammar's layout, and applying them to logits (numpy or torch).

A mask row is ``ceil(width / 32)`` int32 words; bit ``i % 32`` of word ``i // 32`` allows token
``i``. The layout is XGrammar's, so rows filled here can go to XGrammar's and vLLM's kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_to_ids",
    "ids_to_bitmask",
]


def allocate_token_bitmask(batch_size: int, width: int) -> npt.NDArray[np.int32]:
    """A zeroed ``(batch_size, ceil(width / 32))`` int32 bitmask."""
    if batch_size < 0 or width <= 0:
        raise ValueError(f"batch_size={batch_size}, width={width}: need batch_size >= 0, width > 0")
    return np.zeros((batch_size, (width + 31) // 32), dtype=np.int32)


def ids_to_bitmask(ids: npt.ArrayLike, width: int) -> npt.NDArray[np.int32]:
    """One packed row allowing exactly ``ids``."""
    arr = np.asarray(ids, dtype=np.int64)
    words = np.zeros((width + 31) // 32, dtype=np.uint32)
    np.bitwise_or.at(words, arr >> 5, (np.uint32(1) << (arr & 31).astype(np.uint32)))
    return words.view(np.int32)


def bitmask_to_ids(row: npt.NDArray[np.int32], width: int | None = None) -> npt.NDArray[np.int64]:
    """Token ids allowed by one packed row (below ``width`` when given)."""
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")
    ids = np.flatnonzero(bits)
    return ids[ids < width] if width is not None else ids


def apply_token_bitmask_inplace(logits: Any, bitmask: Any, *, indices: Any | None = None) -> None:
    """Set logits of disallowed tokens to ``-inf`` in place.

    XGrammar's semantics, so either implementation can serve: ``logits`` is a numpy array or
    torch tensor ``(B, V)`` or ``(V,)``, ``bitmask`` int32 ``(B, ceil(W / 32))`` (numpy or torch);
    the first ``min(V, 32 * words)`` columns are masked; ``indices`` selects the rows to mask,
    bitmask row ``indices[i]`` applying to logits row ``indices[i]`` (default: every row).
    On torch tensors XGrammar's kernel is used when installed (CPU and CUDA).
    """
    if isinstance(logits, np.ndarray):
        _apply_numpy(logits, np.asarray(bitmask), indices)
        return
    _apply_torch(logits, bitmask, indices)


def _apply_numpy(
    logits: npt.NDArray[Any], bitmask: npt.NDArray[np.int32], indices: Any | None
) -> None:
    two_d = logits if logits.ndim == 2 else logits[None, :]
    masks = bitmask if bitmask.ndim == 2 else bitmask[None, :]
    rows = np.arange(len(masks)) if indices is None else np.asarray(indices, dtype=np.int64)
    n = min(two_d.shape[1], masks.shape[1] * 32)
    bits = np.unpackbits(
        np.ascontiguousarray(masks[rows]).view(np.uint8), axis=-1, bitorder="little"
    )[:, :n].astype(bool)
    sub = two_d[rows, :n]
    sub[~bits] = -np.inf
    two_d[rows, :n] = sub


def _apply_torch(logits: Any, bitmask: Any, indices: Any | None) -> None:
    import torch

    mask_t = bitmask if isinstance(bitmask, torch.Tensor) else torch.from_numpy(np.asarray(bitmask))
    mask_t = mask_t.to(logits.device, non_blocking=True)
    try:
        import xgrammar
    except ImportError:
        _apply_torch_fallback(logits, mask_t, indices)
        return
    idx = None if indices is None else [int(i) for i in indices]
    xgrammar.apply_token_bitmask_inplace(logits, mask_t, indices=idx)


def _apply_torch_fallback(logits: Any, mask_t: Any, indices: Any | None) -> None:
    """Pure-torch form of XGrammar's kernel (used when xgrammar is not installed)."""
    import torch

    two_d = logits if logits.dim() == 2 else logits.unsqueeze(0)
    masks = mask_t if mask_t.dim() == 2 else mask_t.unsqueeze(0)
    rows = (
        torch.arange(masks.shape[0], device=two_d.device)
        if indices is None
        else torch.as_tensor(list(indices), device=two_d.device, dtype=torch.long)
    )
    n = min(two_d.shape[1], masks.shape[1] * 32)
    shifts = torch.arange(32, device=masks.device, dtype=torch.int32)
    bits = ((masks[rows].unsqueeze(-1) >> shifts) & 1).bool().reshape(len(rows), -1)[:, :n]
    two_d[rows, :n] = two_d[rows, :n].masked_fill(~bits, float("-inf"))
