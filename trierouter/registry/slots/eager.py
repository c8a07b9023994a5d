"""The masks of many tool automata on a second thread, while the caller builds the next ones.

An eager registry (``compile_tools(..., eager_automata=True)``) builds thousands of automata in
turn: Python work per schema (normalization, dispatch, wiring) and then the compiled core's walk
of each automaton's states over the token trie (``dfa_masks``), which needs no Python and runs
with the GIL released; given a fragment not wired yet (``Builder.finish(defer=True)``: a
tool's whole automaton), the same call first wires it and compresses its bytes to classes (the
compiling thread's largest calls into the core otherwise). :class:`MaskPipeline` hands the walks
to one worker thread, in batches
(``dfa_masks_many``: one release of the GIL per batch, so the two threads trade the GIL a few
hundred times, not once per automaton), and keeps each result on the caller's thread (the
Python part of a mask: shared rows, packing). The masks are the ones :meth:`ToolAutomaton.
materialize` computes (the same call, run elsewhere); :meth:`MaskPipeline.close` returns once
every automaton added is ready, and re-raises what a batch raised.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any

from trierouter.registry import core as _backend
from trierouter.registry.slots.masks import ToolAutomaton

BATCH_STATES = 16384
"""A batch goes to the worker once its automata hold this many states (~10 ms of walks)."""
BATCH_CALLS = 128
"""... or once it holds this many automata."""

_Keep = Callable[[Any], None]


class MaskPipeline:
    """``add(automaton)`` (built with ``masks=False``) queues its masks; ``close()`` waits for
    all of them. A context manager: leaving it closes the pipeline (on an error too, waiting
    for the worker without keeping its results)."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._batch: list[tuple[tuple[Any, ...], _Keep]] = []
        self._states = 0
        self._pending: deque[tuple[list[_Keep], Future[list[Any]]]] = deque()

    def add(self, auto: ToolAutomaton) -> None:
        call = auto.masks_call()
        if call is None:
            return
        self._batch.append(call)
        self._states += auto.n_states
        if self._states >= BATCH_STATES or len(self._batch) >= BATCH_CALLS:
            self._submit()
        while self._pending and self._pending[0][1].done():  # keep what is ready, in order
            self._keep()

    def _submit(self) -> None:
        if not self._batch:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="trierouter-masks")
        core = _backend.native_core()
        calls = [args for args, _ in self._batch]
        keeps = [keep for _, keep in self._batch]
        self._pending.append((keeps, self._pool.submit(core.dfa_masks_many, calls)))
        self._batch, self._states = [], 0

    def _keep(self) -> None:
        keeps, fut = self._pending.popleft()
        for keep, result in zip(keeps, fut.result(), strict=True):
            keep(result)

    def close(self) -> None:
        """Every automaton added has its masks when this returns."""
        try:
            self._submit()
            while self._pending:
                self._keep()
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        self._pending.clear()
        self._batch = []
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> MaskPipeline:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()
        else:
            self._shutdown()
