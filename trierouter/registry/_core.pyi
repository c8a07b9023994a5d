"""Type stubs of the C++ extension (csrc/bindings/, nanobind): arguments by position or by name."""

from collections.abc import Callable, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

SOURCE_HASH: str

class TokenTrie:
    nbytes: int
    n_nodes: int
    build_seconds: float
    single_byte: bytes
    def __init__(self, tokens: Sequence[bytes], matchable: bytes | npt.NDArray[Any]) -> None: ...
    def tables(self) -> dict[str, bytes]: ...

def compile(
    values: Sequence[str],
    trie: TokenTrie,
    terminator: bytes,
    end_ids: Sequence[int],
    allow_end: bool,
    max_keys: int = 0,
    threads: int = 1,
    split_min: int = 2048,
) -> tuple[dict[str, npt.NDArray[Any]], list[int] | None]: ...
def memset_bandwidth(buffer: Any, repeats: int) -> float: ...
def bm25_accumulate(
    ptr: npt.NDArray[np.int64],
    docs: npt.NDArray[np.int64],
    weights: npt.NDArray[np.float32],
    terms: npt.NDArray[np.int64],
    coefs: npt.NDArray[np.float64],
    out: npt.NDArray[np.float64],
) -> None: ...
def scatter_max(
    out: npt.NDArray[np.float64],
    values: npt.NDArray[np.float64],
    rows: npt.NDArray[np.int64],
    owners: npt.NDArray[np.int64],
) -> None: ...
def top_positive(scores: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.int64]: ...
def pack_tokens(
    tokens: tuple[bytes, ...],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]: ...
def join_tokens(tokens: tuple[bytes, ...], selected: bytes | npt.NDArray[Any]) -> bytes: ...

class Core:
    END: int
    DEAD: int
    def __init__(
        self,
        row_ptr: npt.NDArray[np.int32],
        tokens: npt.NDArray[np.int32],
        children: npt.NDArray[np.uint16],
        far_pos: npt.NDArray[np.int32],
        far_child: npt.NDArray[np.int32],
        ends: npt.NDArray[np.int32],
        width: int,
        compact: tuple[Any, ...] | None = None,
    ) -> None: ...
    def advance(self, state: int, token: int) -> int: ...
    def mask(self, state: int) -> npt.NDArray[np.int32]: ...
    def is_terminal(self, state: int) -> bool: ...
    def fill(self, state: int, bitmask: Any, index: int = 0) -> None: ...
    @overload
    def advance_batch(
        self,
        states: npt.NDArray[np.int64],
        tokens: npt.NDArray[np.int64],
        out: npt.NDArray[np.int64],
    ) -> None: ...
    @overload
    def advance_batch(
        self, states: npt.NDArray[np.int64], tokens: npt.NDArray[np.int64], out: None = None
    ) -> npt.NDArray[np.int64]: ...
    def fill_batch(
        self, states: npt.NDArray[np.int64], bitmask: Any, rows: npt.NDArray[np.int64] | None
    ) -> None: ...
    def apply_sparse(
        self,
        states: npt.NDArray[np.int64],
        logits: Any,
        rows: npt.NDArray[np.int64] | None,
        neg_inf_bits: int,
        itemsize: int,
    ) -> None: ...
    def copy_sparse(
        self,
        states: npt.NDArray[np.int64],
        src: Any | None,
        dst: Any,
        rows: npt.NDArray[np.int64] | None,
        neg_inf_bits: int,
        itemsize: int,
    ) -> None: ...

class MatcherBase:
    state: int
    @property
    def num_accepted(self) -> int: ...
    @property
    def _ended_at(self) -> int: ...
    def _init_core(
        self,
        core: Core | None,
        advance: Callable[[int, int], int],
        mask: Callable[[int], npt.NDArray[np.int32]],
        root: int,
        end: int,
        dead: int,
        max_rollback: int,
    ) -> None: ...
    def accept_token(self, token_id: int) -> bool: ...
    def accept_tokens(self, token_ids: Sequence[int]) -> bool: ...
    def rollback(self, num_tokens: int) -> None: ...
    def reset(self) -> None: ...
    def is_terminated(self) -> bool: ...
    def allowed_token_ids(self) -> npt.NDArray[np.int32]: ...

def csr_extend(
    ptr: npt.NDArray[np.int64],
    ids: npt.NDArray[np.int32],
    states: npt.NDArray[np.int64],
    lo: npt.NDArray[np.int64],
    hi: npt.NDArray[np.int64],
    pool: npt.NDArray[np.int32],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]: ...
def csr_pack(
    ptr: npt.NDArray[np.int64],
    ids: npt.NDArray[np.int32],
    which: npt.NDArray[np.int64],
    words: int,
) -> npt.NDArray[np.int32]: ...
def csr_split(
    ptr: npt.NDArray[np.int64],
    ids: npt.NDArray[np.int32],
    at: npt.NDArray[np.int64],
    n: int,
    wide: int,
    drop: npt.NDArray[np.bool_] | npt.NDArray[np.uint8] | bytes,
    words: int,
) -> tuple[
    npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.int32]
]: ...
def spelled_count(trie: TokenTrie, allowed: bytes, limit: int) -> int: ...
def int_range_dfa(
    zero: bool, pos_lo: str, pos_hi: str, neg_lo: str, neg_hi: str
) -> tuple[
    npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.bool_]
]: ...
