"""The serving arrays of a ChoiceSet: child codes, the checks a loaded file passes, and the raw
views of logits the sparse writers use (shared by both backends)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.registry.compact import COMPACT_ARRAYS, stored_states
from trierouter.registry.validate import Checker

__all__ = ["FAR", "TO_END", "VALUE_ARRAYS", "check_arrays", "raw_logits"]

# children are stored as uint16 offsets from their node; two codes stand for far targets
TO_END = 0xFFFF
"""The child code of a pair that leads to ``END``."""
FAR = 0xFFFE
"""The child code of a pair whose target is stored out of line (``far_child``)."""
VALUE_ARRAYS = frozenset({"value_bytes", "value_offsets"})


def raw_logits(logits: Any) -> tuple[npt.NDArray[Any], int, int]:
    """A writable 2-D numpy view of ``logits`` as raw words, with the bits of ``-inf``."""
    arr = logits
    if not isinstance(arr, np.ndarray):
        import torch

        if not isinstance(arr, torch.Tensor) or arr.device.type != "cpu":
            raise TypeError(
                f"logits must be a numpy array or a torch CPU tensor, got {type(logits).__name__}"
            )
        if arr.dtype in (torch.float16, torch.bfloat16):
            bits = 0xFC00 if arr.dtype == torch.float16 else 0xFF80
            return arr.view(torch.int16).numpy().view(np.uint16), bits, 2
        arr = arr.numpy()
    if arr.ndim != 2:
        raise ValueError(f"logits must be 2-D (rows, vocabulary), got shape {arr.shape}")
    if arr.dtype == np.float32:
        return arr.view(np.uint32), 0xFF800000, 4
    if arr.dtype == np.float16:
        return arr.view(np.uint16), 0xFC00, 2
    raise TypeError(f"logits dtype {arr.dtype}: expected float32, float16 or bfloat16")


def check_arrays(c: Checker, width: int, *, compact: bool = False) -> None:
    """Everything the serving functions rely on, checked before a loaded set is used: CSR rows
    over valid token ids, sorted within each row (binary search), every child code leading to a
    state, far targets where the codes say, completed nodes and value offsets in range (a
    compact layout's keys are checked by the core)."""
    names = {"row_ptr", "tokens", "children", "far_pos", "far_child", "ends"} | VALUE_ARRAYS
    c.names(names | COMPACT_ARRAYS if compact else names)
    row_ptr = c.array("row_ptr", np.int32)
    if compact:
        states, n_nodes = stored_states(c)
        n_states = n_nodes + 2
        if len(row_ptr) != len(states) + 1:
            raise c.fail(f"row_ptr has {len(row_ptr)} entries for {len(states)} stored rows")
    else:
        if len(row_ptr) < 4:
            raise c.fail("row_ptr has fewer than 4 entries (a root, END and DEAD)")
        n_states = len(row_ptr) - 1
        n_nodes = n_states - 2
        states = np.arange(n_states, dtype=np.int64)
    tokens = c.array("tokens", np.int32)
    c.offsets("row_ptr", row_ptr, len(tokens))
    c.within("tokens", tokens, 0, width)
    children = c.array("children", np.uint16, size=len(tokens))
    if len(tokens) > 1:
        step = np.diff(tokens.astype(np.int64))
        row_start = np.zeros(len(tokens), dtype=bool)
        row_start[row_ptr[:-1][np.diff(row_ptr) > 0]] = True
        if bool(((step <= 0) & ~row_start[1:]).any()):
            raise c.fail("tokens are not strictly increasing within a row")
    node = np.repeat(states, np.diff(row_ptr))
    near = children < FAR
    target = node[near] + children[near]
    if len(target) and int(target.max()) >= n_states:
        raise c.fail("children lead past the last state")
    far_pos = c.array("far_pos", np.int32)
    if not np.array_equal(far_pos, np.flatnonzero(children == FAR)):
        raise c.fail("far_pos does not list the far children")
    far_child = c.array("far_child", np.int32, size=len(far_pos))
    c.within("far_child", far_child, 0, n_states)
    ends = c.array("ends", np.int32)
    c.within("ends", ends, 0, n_nodes)
    c.increasing("ends", ends)
    values = c.strings("value")
    if len(values) != len(ends):
        raise c.fail(f"{len(values)} values for {len(ends)} completed nodes")
