"""The compact layout of a ChoiceSet: rows walked on demand where few values lie below a node.

A full set stores every node's allowed tokens; at K = 100,000 tool names most of its bytes are
the rows of nodes with one value, or a handful, below them. The compact layout keeps the rows of
the nodes with more than :data:`COMPACT_KEYS` values below (and ``END`` / ``DEAD``), and the C++
core walks the others when they are asked for: the same lockstep walk of the node's values and
the tokenizer's forward trie that the compile runs, so the rows are the full layout's, token for
token and target for target (tests compare every state of both). The state ids are the full
layout's too: a request can move between the two.

What it costs: a walked row takes a walk instead of a lookup (a step, a mask, an advance in a
batch), and the serving needs the tokenizer's forward trie (``TokenIndex.native_trie``, built once
per tokenizer and shared by every set). What it saves: most of the set (see the benchmarks).

Where a vocabulary cannot spell some byte of the values alone, the compile leaves out tokens that
lead to nodes no token sequence completes; the walk would not. Such sets are checked row by row
at compile, and a walked row that differs from the stored one stays stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.registry.backends.interface import Backend, TokenForms
from trierouter.registry.core import native_core
from trierouter.registry.validate import Checker

__all__ = ["COMPACT_ARRAYS", "COMPACT_KEYS", "LAYOUTS", "compact_arrays", "compact_spec"]

COMPACT_KEYS = 64
"""A node's row is walked on demand when at most this many values lie below it."""

LAYOUTS = ("full", "compact")

COMPACT_ARRAYS = frozenset({"demand_bits", "demand_rank", "key_first", "key_lcp", "compact_info"})
"""The arrays a compact set holds besides the full layout's names (its rows, fewer of them)."""


def check_layout(layout: object, backend: Backend) -> None:
    """Refuse an unknown layout, and one ``backend`` does not serve."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: expected one of {', '.join(map(repr, LAYOUTS))}")
    if layout not in backend.layouts:
        raise ValueError(
            f"layout={layout!r} walks rows in the C++ core; the {backend.name} backend serves "
            f"the {' and '.join(backend.layouts)} layout only: use "
            f"backend='native' (the default), or layout='full'"
        )


def compact_arrays(
    arrays: dict[str, npt.NDArray[Any]],
    index: TokenForms,
    terminator: str | None,
    end_ids: tuple[int, ...],
    allow_end: bool,
) -> dict[str, npt.NDArray[Any]]:
    """The compact layout of a full set's ``arrays`` (compiled with these arguments)."""
    core = native_core()
    term = terminator.encode("utf-8") if terminator else b""
    # with the trie, the core compares each dropped row with its walk where some byte of the
    # values has no single-byte token (the compile may have pruned rows there)
    out: dict[str, npt.NDArray[Any]] = core.compact_layout(
        arrays["row_ptr"],
        arrays["tokens"],
        arrays["children"],
        arrays["far_pos"],
        arrays["far_child"],
        arrays["value_bytes"],
        arrays["value_offsets"],
        term,
        COMPACT_KEYS,
        index.native_trie,
        end_ids if allow_end else (),
    )
    n_nodes, max_keys, kept = (int(x) for x in out["compact_info"])
    out["compact_info"] = np.asarray([n_nodes, max_keys, kept, int(allow_end)], dtype=np.int64)
    for name in ("ends", "value_bytes", "value_offsets"):
        out[name] = arrays[name]
    return out


def compact_spec(
    arrays: dict[str, npt.NDArray[Any]],
    index: TokenForms,
    terminator: str | None,
    end_ids: tuple[int, ...],
    check: bool,
) -> tuple[Any, ...]:
    """The ``compact`` argument of ``_core.Core`` for a compact set's arrays: its keys, and the
    tokenizer's forward trie (walks) and token bytes (advances), shared by every set.
    ``check``: the core verifies every key's common prefix (arrays read from a file)."""
    info = arrays["compact_info"]
    vocab = index.vocabulary
    return (
        arrays["demand_bits"],
        arrays["demand_rank"],
        arrays["key_first"],
        arrays["key_lcp"],
        arrays["value_bytes"],
        arrays["value_offsets"],
        terminator.encode("utf-8") if terminator else b"",
        index.native_trie,
        end_ids if int(info[3]) else (),
        int(info[0]),
        vocab.buffer,
        vocab.offsets,
        vocab.matchable.view(np.uint8),
        check,
    )


def stored_states(c: Checker) -> tuple[npt.NDArray[np.int64], int]:
    """A loaded compact set's stored states (the row of ``row_ptr`` each has) and its node count;
    the rest of its arrays are checked by the core when it serves them."""
    info = c.array("compact_info", np.int64, size=4)
    n_nodes = int(info[0])
    if n_nodes < 1 or int(info[3]) not in (0, 1):
        raise c.fail(f"compact_info {info.tolist()} does not describe a set")
    words = (n_nodes + 2 + 63) // 64
    bits = c.array("demand_bits", np.uint64, size=words)
    c.array("demand_rank", np.int32, size=words)
    flat = np.unpackbits(bits.view(np.uint8), bitorder="little")[: n_nodes + 2]
    return np.flatnonzero(flat == 0).astype(np.int64), n_nodes
