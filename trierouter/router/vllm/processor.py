"""The vLLM v1 logits processor: one trie (or plan, or tool-call) state per request, masks applied
once per batch step. See :mod:`trierouter.router.vllm` for how to load and drive it.
"""

from __future__ import annotations

from trierouter.errors import missing

try:
    import torch
    from vllm.v1.sample.logits_processor import (  # type: ignore[import-not-found,unused-ignore]
        BatchUpdate,
        LogitsProcessor,
        MoveDirectionality,
    )
except ImportError as exc:  # pragma: no cover - exercised only without vllm
    raise missing("vllm", "vllm") from exc

import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from trierouter import settings
from trierouter.registry.analysis import STEP_WORK, AnalysisStore
from trierouter.registry.compiler import CompiledTools, compile_tools
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.router.bitmask import apply_token_bitmask_inplace, ids_to_bitmask
from trierouter.router.plan import Choice, FreeText, Plan, PlanState, Segment, Text, compile_plan
from trierouter.router.tool_calls.greedy import counter
from trierouter.router.vllm.args import (
    ARG_ALLOWED,
    ARG_SET,
    ARG_TOOLS,
    ARG_TOOLS_INLINE,
    ENV_SETS,
    I32,
    I64,
    RequestSpec,
    logger,
    parse_request,
)
from trierouter.router.vllm.checks import (
    BUILTIN_CHOICES,
    check_inline_tools,
    check_tool_choice,
    registry_specs,
)
from trierouter.router.vllm.named import (
    list_named_sets,
    list_tool_registries,
    load_named_sets,
    load_tool_registries,
    step_work,
)
from trierouter.router.vllm.tool_sets import EngineToolSets
from trierouter.router.vllm.vocab import engine_vocabulary as _engine_vocabulary
from trierouter.router.vllm.vocab import model_syntax

__all__ = ["TrieRouterLogitsProcessor"]

# The processor built first for an engine (by id of its vllm_config): vLLM instantiates the
# installed entry point AND any ``logits_processors=[TrieRouterLogitsProcessor]`` given to it, so
# without this every request would be stepped and masked twice (and every named set held twice).
_ACTIVE: dict[int, weakref.ReferenceType[TrieRouterLogitsProcessor]] = {}


class _Req:
    """One constrained request: its live output list, how much of it was read, its state."""

    __slots__ = ("choices", "limit", "node", "out", "plan", "plan_state", "seen")

    def __init__(
        self, out: list[int], choices: ChoiceSet | None, plan: Any, limit: int | None = None
    ) -> None:
        self.out = out
        self.limit = limit
        """A tool-call request's ``max_tokens``: its turn closes within it."""
        self.choices = choices
        self.plan = plan
        self.seen = 0
        self.node = choices.root if choices is not None else 0
        self.plan_state: Any = plan.start() if plan is not None else PlanState(Plan.DEAD, 0)


class TrieRouterLogitsProcessor(LogitsProcessor):  # type: ignore[misc,unused-ignore]
    """vLLM v1 logits processor: requests choose one value out of a set (module docstring)."""

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """Refuse malformed ``trierouter_*`` arguments or an unknown set name (``ValueError``)."""
        spec = parse_request(getattr(sampling_params, "extra_args", None))
        if spec is None:
            return
        if getattr(sampling_params, "structured_outputs", None) is not None:
            raise ValueError(
                "trierouter arguments and structured_outputs on the same request: choose one"
            )
        if spec.tools_name is not None and spec.tools_name not in list_tool_registries():
            raise ValueError(f"{ARG_TOOLS}={spec.tools_name!r:.80}: unknown registry")
        if spec.tools_inline is not None:  # what the worker would find mid-batch, found here
            inline = check_inline_tools(spec.tools_inline)
            check_tool_choice(spec.tool_choice, inline, f"{ARG_TOOLS_INLINE}")
        elif spec.tools_name is not None:
            reg = registry_specs(spec.tools_name)
            check_tool_choice(spec.tool_choice, reg.names, f"registry {spec.tools_name!r}")
            missing_names = [n for n in spec.allowed or () if n not in reg.names]
            if missing_names:
                raise ValueError(
                    f"{ARG_ALLOWED}: {missing_names[:5]} are not in registry {spec.tools_name!r}"
                )
            if spec.allowed is not None and spec.tool_choice not in BUILTIN_CHOICES:
                check_tool_choice(spec.tool_choice, spec.allowed, f"{ARG_ALLOWED}")
        if spec.set_name is not None:
            names = list_named_sets()
            if spec.set_name not in names:
                known = ", ".join(sorted(names)[:20]) or f"none (${ENV_SETS} is not set)"
                raise ValueError(f"{ARG_SET}={spec.set_name!r}: unknown set; configured: {known}")

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        self._config = vllm_config
        self._reqs: dict[int, _Req] = {}
        ref = _ACTIVE.get(id(vllm_config))
        first = ref() if ref is not None else None
        self._idle = first is not None and first._config is vllm_config
        if self._idle:
            # a second instance for the same engine: the first one does all the work
            logger.info(
                "trierouter: TrieRouterLogitsProcessor is already active for this engine (the "
                "installed entry point and logits_processors=[...] both load it); this "
                "instance stays idle"
            )
            return
        _ACTIVE[id(vllm_config)] = weakref.ref(self)
        self._device = device
        self._pin = bool(is_pin_memory and device is not None and device.type != "cpu")
        self._max_rows = int(vllm_config.scheduler_config.max_num_seqs)
        self._width = int(vllm_config.model_config.get_vocab_size())
        self._index: TokenIndex | None = None
        self._index_lock = threading.Lock()
        self._named: dict[str, ChoiceSet] = {}
        self._inline: OrderedDict[str, ChoiceSet] = OrderedDict()
        self._plans: OrderedDict[tuple[str, str | None, int, str], Plan] = OrderedDict()
        self._cache_size = max(1, settings.INLINE_CACHE.get())
        self._cache_bytes = max(0, settings.INLINE_CACHE_BYTES.get())
        self._groups: list[tuple[ChoiceSet, list[_Req], I64]] = []
        self._plan_rows: list[tuple[int, _Req]] = []
        self._failed_rows: I64 = np.zeros(0, dtype=np.int64)
        self._rows: I64 = np.zeros(0, dtype=np.int64)
        self._dirty = False
        words = (self._width + 31) // 32
        self._bitmask_t = torch.zeros((self._max_rows, words), dtype=torch.int32)
        if self._pin:
            self._bitmask_t = self._bitmask_t.pin_memory()
        self._bitmask: I32 = self._bitmask_t.numpy()
        self._end_row: I32 | None = None
        # CPU: masked logits written sparsely into a buffer kept at -inf (see _swap_target)
        mode = str(getattr(vllm_config.model_config, "logprobs_mode", "raw_logprobs"))
        self._swap_ok = (device is None or device.type == "cpu") and mode.startswith("raw")
        self._swap: Any = None
        self._swap_sets: list[tuple[ChoiceSet, I64, I64]] = []
        self._swap_full: I64 = np.zeros(0, dtype=np.int64)
        self._store = AnalysisStore.from_env()
        registries: dict[str, CompiledTools] = {}
        tools_cfg = settings.TOOLS.get()
        if tools_cfg:
            for name, tools in load_tool_registries(tools_cfg).items():
                registries[name] = compile_tools(tools, self._ensure_index())
            logger.info("trierouter: %d tool registries from %s", len(registries), tools_cfg)
        self._tool_sets = EngineToolSets(
            self._ensure_index, self._store, registries, self._cache_size, self._cache_bytes
        )
        config = settings.SETS.get()
        if config:
            self._named = load_named_sets(config, self._ensure_index())
            logger.info(
                "trierouter: %d named sets loaded from %s (%s)",
                len(self._named),
                config,
                ", ".join(f"{k}={len(v)}" for k, v in self._named.items()),
            )
        # the token index and the turn closer's counter are built now, off the step: the
        # engine is idle until its first request, which then waits only for what is left
        self._warm = threading.Thread(target=self._warm_index, name="trierouter-index", daemon=True)
        self._warm.start()

    # -- engine-level resources --------------------------------------------------------------
    def _ensure_index(self) -> TokenIndex:
        index = self._index
        if index is None:
            with self._index_lock:  # the warm-up thread may be building it: wait for it
                index = self._index
                if index is None:
                    vocab = _engine_vocabulary(self._config, self._width)
                    index = TokenIndex.get(vocab)
                    counter(vocab).prepare()  # the turn closer's sizes, built with the index
                    self._end_row = ids_to_bitmask(np.asarray(vocab.end_ids, np.int64), self._width)
                    self._index = index
                    if self._store is not None:  # the worker compiles new sets' names with it
                        try:
                            self._store.put_vocabulary(vocab)
                        except OSError as exc:
                            logger.warning("trierouter: vocabulary not shared: %s", exc)
        return index

    def _warm_index(self) -> None:
        """The engine's token index, built at start on a thread, then the registries' first
        plans in the model's call format (:meth:`EngineToolSets.warm`); a failure is logged
        here and raised again by the first request that needs the index."""
        try:
            self._ensure_index()
        except Exception as exc:  # the first request needing it reports it
            logger.warning("trierouter: token index not built at engine start: %s", exc)
            return
        if self._tool_sets.registries:
            try:
                fmt, openers = model_syntax(self._config.model_config)
            except Exception as exc:  # the registries are then built by their first requests
                logger.warning("trierouter: registries not warmed: %r", exc)
                return
            if fmt is not None:
                self._tool_sets.warm(fmt, openers)

    def _choice_set(self, spec: RequestSpec) -> ChoiceSet:
        if spec.set_name is not None:
            if spec.set_name not in self._named:
                raise ValueError(f"{ARG_SET}={spec.set_name!r}: unknown set")
            return self._named[spec.set_name]
        key = spec.source_key
        cs = self._inline.get(key)
        if cs is None:
            assert spec.values is not None
            index, store, sha = self._ensure_index(), self._store, key.removeprefix("inline:")
            cs = None if store is None else store.get_values(sha, index.vocabulary)
            if cs is None:  # not prepared by the API process's worker
                STEP_WORK["value_set"] += 1
                cs = compile_choices(spec.values, index)
            self._inline[key] = cs
            # bounded in count and in bytes (the newest set stays: its request holds it anyway)
            held = sum(c.nbytes for c in self._inline.values())
            while len(self._inline) > 1 and (
                len(self._inline) > self._cache_size or held > self._cache_bytes
            ):
                _, old = self._inline.popitem(last=False)
                held -= old.nbytes
        else:
            self._inline.move_to_end(key)
        return cs

    def _plan(self, spec: RequestSpec, cs: ChoiceSet) -> Plan:
        key = (spec.source_key, spec.think, spec.think_max_tokens, spec.prefix)
        plan = self._plans.get(key)
        if plan is None:
            segments: list[Segment] = []
            if spec.think is not None:
                segments.append(FreeText(until=spec.think, max_tokens=spec.think_max_tokens))
            if spec.prefix:
                segments.append(Text(spec.prefix))
            segments.append(Choice(cs, name="answer"))
            plan = compile_plan(segments, self._ensure_index())
            self._plans[key] = plan
            while len(self._plans) > self._cache_size:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def _new_request(self, params: Any, out: list[int]) -> _Req | None:
        try:
            spec = parse_request(getattr(params, "extra_args", None), checked=True)
        except ValueError as exc:  # validate_params runs first; this is a direct engine call
            logger.error("trierouter: request refused in the worker: %s", exc)
            try:
                self._ensure_index()
            except Exception as exc2:  # the row stays unmasked only if no end id is known
                logger.error("trierouter: no vocabulary for a failed request: %s", exc2)
            return _Req(out, None, None)
        if spec is None:
            return None
        try:
            self._ensure_index()
            if spec.is_tool_call:
                limit = getattr(params, "max_tokens", None)
                work = STEP_WORK.total()
                plan = self._tool_sets.plan(spec)
                if STEP_WORK.total() != work:
                    step_work(f"registry {spec.tools_name!r}" if spec.tools_name else "")
                return _Req(out, None, plan, limit)
            work = STEP_WORK.total()
            cs = self._choice_set(spec)
            if STEP_WORK.total() != work:
                step_work("inline values")
            if spec.is_plain:
                return _Req(out, cs, None)
            return _Req(out, None, self._plan(spec, cs))
        except Exception as exc:  # anything at all: this request alone fails, the batch goes on
            # (its row allows only the end ids); an exception escaping update_state would kill
            # the engine core and with it every request in flight
            logger.error(
                "trierouter: cannot constrain request, it will end at once: %s: %s",
                type(exc).__name__,
                exc,
            )
            return _Req(out, None, None)

    # -- LogitsProcessor interface -------------------------------------------------------------
    def is_argmax_invariant(self) -> bool:
        """Masking changes the argmax: never skipped for greedy requests."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Apply removals, additions, then moves (vLLM's order); regroup rows when changed."""
        if batch_update is None or self._idle:
            return
        reqs = self._reqs
        for index in batch_update.removed:
            if reqs.pop(index, None) is not None:
                self._dirty = True
        for index, params, _prompt, out in batch_update.added:
            req = self._new_request(params, out)
            if req is not None:
                reqs[index] = req
                self._dirty = True
            elif reqs.pop(index, None) is not None:
                self._dirty = True
        for a, b, direction in batch_update.moved:
            ra, rb = reqs.pop(a, None), reqs.pop(b, None)
            if ra is not None:
                reqs[b] = ra
            if rb is not None and direction == MoveDirectionality.SWAP:
                reqs[a] = rb
            if ra is not None or rb is not None:
                self._dirty = True

    def _regroup(self) -> None:
        groups: dict[int, tuple[ChoiceSet, list[_Req], list[int]]] = {}
        plan_rows: list[tuple[int, _Req]] = []
        failed: list[int] = []
        for row in sorted(self._reqs):
            req = self._reqs[row]
            if req.choices is not None:
                g = groups.setdefault(id(req.choices), (req.choices, [], []))
                g[1].append(req)
                g[2].append(row)
            elif req.plan is not None:
                plan_rows.append((row, req))
            else:
                failed.append(row)
        self._groups = [(cs, rs, np.asarray(rows, np.int64)) for cs, rs, rows in groups.values()]
        self._plan_rows = plan_rows
        self._failed_rows = np.asarray(failed, dtype=np.int64)
        self._rows = np.asarray(sorted(self._reqs), dtype=np.int64)
        self._dirty = False

    def _swap_target(self, logits: Any) -> Any:
        """The buffer the set rows are written into sparsely this step, or None (mask in place).

        On the CPU, filling a row of ``-inf`` costs a pass over the whole vocabulary (150K
        entries) per request and step; instead the processor keeps its own logits buffer at
        ``-inf``, copies only each row's allowed logits into it, undoes those few writes on the
        next step, and returns the buffer (vLLM's interface: ``apply`` returns the tensor it
        samples from). Used when most rows of the batch are set rows (other rows are copied
        whole), the logits are float32 and logprobs are raw (computed before processors, so
        the buffer is never kept across steps); the buffer grows to the largest batch seen."""
        n_set = sum(len(rows) for _, _, rows in self._groups)
        rows, width = int(logits.shape[0]), int(logits.shape[1])
        if not (
            self._swap_ok
            and logits.dtype == torch.float32
            and logits.dim() == 2
            and logits.is_contiguous()
            and 2 * n_set >= rows
        ):
            return None
        buf = self._swap
        if buf is None or buf.shape[0] < rows or buf.shape[1] != width:
            buf = self._swap = torch.full((max(rows, self._max_rows), width), float("-inf"))
            self._swap_sets, self._swap_full = [], np.zeros(0, dtype=np.int64)
        for cs, states, written in self._swap_sets:  # undo last step's writes
            cs.copy_allowed(states, None, buf, written)
        if len(self._swap_full):
            buf.index_fill_(0, torch.from_numpy(self._swap_full), float("-inf"))
        self._swap_sets = []
        self._swap_full = np.zeros(0, dtype=np.int64)
        return buf[:rows]

    def apply(self, logits: Any) -> Any:
        """Advance every constrained row by its new tokens and mask its logits row."""
        if not self._reqs:  # also an idle duplicate instance (its _reqs stays empty)
            return logits
        if self._dirty:
            self._regroup()
        bitmask = self._bitmask
        sparse = bool(logits.device.type == "cpu")
        target = self._swap_target(logits) if sparse else None
        n_rows = int(logits.shape[0])
        for cs, reqs, rows in self._groups:
            states = self._advance_group(cs, reqs)
            if target is not None:
                cs.copy_allowed(states, logits, target, rows)
                self._swap_sets.append((cs, states, rows))
            elif sparse:
                # CPU: xgrammar's kernel walks every (row, token) bit; a trie row allows few
                # tokens, so each row is filled with -inf and its allowed logits kept, in one
                # call into the core per set (about 20x faster than the dense kernel)
                cs.apply_mask_inplace(states, logits, rows)
            else:
                cs.fill_bitmask_batch(states, bitmask, rows)
        self._plan_masks()
        if target is not None:  # every other row is copied whole (plan rows masked below)
            done = np.zeros(n_rows, dtype=bool)
            for _, _, rows in self._groups:
                done[rows[rows < n_rows]] = True
            full = np.flatnonzero(~done)
            if len(full):
                idx = torch.from_numpy(full)
                target.index_copy_(0, idx, logits.index_select(0, idx))
            self._swap_full = full
            logits = target
        if sparse:  # the set rows are done; plan and failed rows still take the bitmask
            rows = np.concatenate([[row for row, _ in self._plan_rows], self._failed_rows])
            rows = rows.astype(np.int64)
        else:
            rows = self._rows
        if len(rows):
            # xgrammar's kernel: bitmask row ``i`` masks logits row ``i`` for ``i`` in indices
            indices = None if len(rows) == n_rows else rows.tolist()
            apply_token_bitmask_inplace(logits, self._bitmask_t[:n_rows], indices=indices)
        return logits

    @staticmethod
    def _advance_group(cs: ChoiceSet, reqs: list[_Req]) -> I64:
        """Step the requests of one set by their new tokens (one batched call); their states."""
        states = np.empty(len(reqs), dtype=np.int64)
        tokens = np.empty(len(reqs), dtype=np.int64)
        stepping = np.zeros(len(reqs), dtype=bool)
        for i, req in enumerate(reqs):
            out = req.out
            n = len(out)
            state = req.node
            if n > req.seen + 1:  # resumed (preempted) or first seen with history
                for t in out[req.seen : n - 1]:
                    state = cs.advance(state, t)
                req.seen = n - 1
            states[i] = state
            if n > req.seen:
                tokens[i] = out[n - 1]
                stepping[i] = True
                req.seen = n
        if stepping.any():
            states[stepping] = cs.advance_batch(states[stepping], tokens[stepping])
        for req, s in zip(reqs, states.tolist(), strict=True):
            req.node = s
        return states

    def _plan_masks(self) -> None:
        """Step the plan rows and write their bitmask rows (failed rows: end ids only)."""
        bitmask = self._bitmask
        for row, req in self._plan_rows:
            plan = req.plan
            if plan is None:  # failed at an earlier step of this batch layout
                if self._end_row is not None:
                    bitmask[row] = self._end_row
                continue
            try:
                out = req.out
                pstate = req.plan_state
                for t in out[req.seen :]:
                    pstate = plan.advance(pstate, t)
                req.seen = len(out)
                req.plan_state = pstate
                work = STEP_WORK.total()
                if req.limit is None:
                    plan.fill_next_token_bitmask(pstate, bitmask, row)
                else:  # only tokens after which the call list can close within max_tokens
                    left = req.limit - len(out)
                    plan.fill_next_token_bitmask(pstate, bitmask, row, remaining=left)
                if STEP_WORK.total() != work:
                    name = self._tool_sets.registry_of(getattr(plan, "tools", None))
                    step_work(f"registry {name!r}" if name else "")
            except Exception as exc:  # this row alone ends (its end ids only); the batch goes on
                logger.error(
                    "trierouter: request failed while decoding, it will end now: %s: %s",
                    type(exc).__name__,
                    exc,
                )
                req.plan = None
                self._dirty = True
                if self._end_row is not None:
                    bitmask[row] = self._end_row
        if len(self._failed_rows) and self._end_row is not None:
            bitmask[self._failed_rows] = self._end_row
