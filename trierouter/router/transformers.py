"""Hugging Face transformers integration: a logits processor and a batched generate helper.

:class:`TrieLogitsProcessor` plugs into ``model.generate(logits_processor=[...])``: one
:class:`~trierouter.router.plan.Plan` (or :class:`~trierouter.registry.trie.ChoiceSet`) per batch
row, each row's state advanced from the token appended to ``input_ids`` since the previous call,
masks written into one packed bitmask (vectorized over rows that share a single-choice set) and
applied with :func:`~trierouter.router.bitmask.apply_token_bitmask_inplace`.

:func:`generate` is a small decoding loop of its own (left padding, attention mask, KV cache) that
can also *fast-forward*: where a plan allows only one continuation text (the rest of a value once
its prefix is unique, literal text), its tokens are appended without sampling and fed to the
model in the same forward call as the sampled token, saving one forward pass per forced token.

Sampling in :func:`generate` is reproducible and independent of batching: row ``i`` of a call
with ``seed=s`` draws one uniform ``u`` per sampled token from
``numpy.random.default_rng([s, i])`` and picks the first token whose cumulative probability
(float64 softmax of the masked logits over ``temperature``, in token-id order) exceeds
``u`` times the total.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import missing
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.bitmask import allocate_token_bitmask, apply_token_bitmask_inplace
from trierouter.router.plan import Plan, PlanState, compile_plan
from trierouter.router.tool_calls.plan import ToolCallPlan

try:
    import torch
    import transformers
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise missing("transformers", "transformers") from exc

__all__ = ["Result", "TrieLogitsProcessor", "generate", "model_width"]

Constraint = Plan | ChoiceSet | ToolCallPlan
"""What drives one row: a compiled plan (a :class:`ToolCallPlan` too), or a bare set (values
followed by an end id)."""


class _BatchStates:
    """Per-row decoding states for a batch, with masks vectorized per shared single-choice set.

    Every row holds a :class:`PlanState`. For a bare :class:`ChoiceSet` (or a plan that is a single
    choice), stage 0 is the set with ``node`` its trie node, like a single-choice plan's state;
    ``Plan.TERMINATED`` / ``Plan.DEAD`` follow an end id / a refused token.
    """

    def __init__(self, constraints: Sequence[Constraint], limit: int | None = None) -> None:
        if not constraints:
            raise ValueError("constraints: need at least one row")
        self.constraints = list(constraints)
        widths = {c.width for c in self.constraints}
        if len(widths) != 1:
            raise ValueError(f"constraints: all rows need the same vocabulary width, got {widths}")
        self.width = widths.pop()
        self.limit = limit
        """``max_new_tokens``: a tool-call turn closes within it."""
        self.states: list[Any] = []
        self.tokens: list[list[int]] = [[] for _ in self.constraints]
        self._groups: dict[int, tuple[ChoiceSet, list[int]]] = {}
        self._plan_rows: list[int] = []
        for i, c in enumerate(self.constraints):
            cs = c if isinstance(c, ChoiceSet) else c.single_choice
            if cs is None:
                self._plan_rows.append(i)
                self.states.append(c.start())  # type: ignore[union-attr]
            else:
                self._groups.setdefault(id(cs), (cs, []))[1].append(i)
                self.states.append(PlanState(0, cs.root, 0))
        self._end_row = allocate_token_bitmask(1, self.width)
        for e in self._end_ids():
            self._end_row[0, e >> 5] |= np.int32(np.uint32(1 << (e & 31)).view(np.int32))

    def _end_ids(self) -> tuple[int, ...]:
        return self.constraints[0].end_ids

    def advance(self, tokens: Sequence[int], rows: Sequence[int] | None = None) -> None:
        """Advance ``rows`` (default: all) by one token each."""
        which = range(len(self.states)) if rows is None else rows
        tok_of = dict(zip(which, (int(t) for t in tokens), strict=True))
        for i, t in tok_of.items():
            self.tokens[i].append(t)
        for i in self._plan_rows:
            if i in tok_of:
                plan = self.constraints[i]
                assert not isinstance(plan, ChoiceSet)
                self.states[i] = plan.advance(self.states[i], tok_of[i])
        ends = set(self._end_ids())
        for cs, members in self._groups.values():
            live = [i for i in members if i in tok_of and self.states[i].stage == 0]
            for i in members:
                if i in tok_of and self.states[i].stage != 0:
                    st = self.states[i]
                    done = st.stage == Plan.TERMINATED and tok_of[i] in ends
                    self.states[i] = st if done else PlanState(Plan.DEAD, 0)
            if not live:
                continue
            nodes = np.fromiter((self.states[i].node for i in live), np.int64, len(live))
            toks = np.fromiter((tok_of[i] for i in live), np.int64, len(live))
            nxt = cs.advance_batch(nodes, toks).tolist()
            for i, n in zip(live, nxt, strict=True):
                if n == cs.END:
                    self.states[i] = PlanState(Plan.TERMINATED, 0)
                elif n == cs.DEAD:
                    self.states[i] = PlanState(Plan.DEAD, 0)
                else:
                    self.states[i] = PlanState(0, n, self.states[i].steps + 1)

    def fill(self, bitmask: npt.NDArray[np.int32]) -> None:
        """Write every row's mask into ``bitmask`` (row ``i`` for batch row ``i``)."""
        for i in self._plan_rows:
            plan = self.constraints[i]
            assert not isinstance(plan, ChoiceSet)
            if self.limit is not None and isinstance(plan, ToolCallPlan):
                left = self.limit - len(self.tokens[i])
                plan.fill_next_token_bitmask(self.states[i], bitmask, i, remaining=left)
            else:
                plan.fill_next_token_bitmask(self.states[i], bitmask, i)
        for cs, members in self._groups.values():
            live = [i for i in members if self.states[i].stage == 0]
            for i in members:
                if self.states[i].stage != 0:
                    bitmask[i] = self._end_row[0]
            if live:
                nodes = np.fromiter((self.states[i].node for i in live), np.int64, len(live))
                cs.fill_bitmask_batch(nodes, bitmask, np.asarray(live, dtype=np.int64))

    def is_terminated(self, i: int) -> bool:
        return bool(self.states[i].stage == Plan.TERMINATED)

    def is_dead(self, i: int) -> bool:
        return bool(self.states[i].stage == Plan.DEAD)

    def forced_tokens(self, i: int, limit: int) -> list[int]:
        c = self.constraints[i]
        if isinstance(c, ChoiceSet) or limit <= 0:
            return []
        return c.forced_tokens(self.states[i], limit=limit)

    def choices(self, i: int) -> dict[str, str]:
        c = self.constraints[i]
        if not isinstance(c, ChoiceSet):
            return c.choices(self.tokens[i])
        node = c.root
        for t in self.tokens[i]:
            nxt = c.advance(node, t)
            if nxt == c.END or nxt == c.DEAD:
                break
            node = nxt
        value = c.value_at(node)
        return {} if value is None else {"choice0": value}


class TrieLogitsProcessor(transformers.LogitsProcessor):
    """Constrain ``model.generate`` to a plan (or set) per batch row.

    ``constraints``: one :class:`Plan` / :class:`ChoiceSet` for every row, or one shared by all
    (``batch_size`` rows, default: the batch size seen at the first call). ``prompt_lengths``: the
    ``input_ids`` width where generated tokens start (an int for all rows, or one per row); by
    default the width at the first call, which is right for left-padded batches.
    ``max_new_tokens``: the same limit as ``generate``'s, so that a tool-call turn closes within
    it (:class:`~trierouter.router.tool_calls.closing.TurnCloser`). Like XGrammar's
    processor, an instance serves one ``generate`` call; :meth:`reset` makes it reusable.
    """

    def __init__(
        self,
        constraints: Constraint | Sequence[Constraint],
        *,
        prompt_lengths: int | Sequence[int] | None = None,
        batch_size: int | None = None,
        max_new_tokens: int | None = None,
    ) -> None:
        self._limit = max_new_tokens
        if isinstance(constraints, Plan | ChoiceSet | ToolCallPlan):
            self._shared: Constraint | None = constraints
            self._given: list[Constraint] = []
        else:
            self._shared = None
            self._given = list(constraints)
            for i, c in enumerate(self._given):
                if not isinstance(c, Plan | ChoiceSet | ToolCallPlan):
                    raise TypeError(
                        f"constraints[{i}] is {type(c).__name__}; expected a Plan or a ChoiceSet"
                    )
            if not self._given:
                raise ValueError("constraints: empty sequence; give one Plan or ChoiceSet per row")
        if batch_size is not None and self._given and batch_size != len(self._given):
            raise ValueError(f"batch_size={batch_size} but {len(self._given)} constraints given")
        self._batch_size = batch_size
        self._prompt_lengths = prompt_lengths
        self.reset()

    def reset(self) -> None:
        """Forget all row states: the next call starts a new generation."""
        self.rows: _BatchStates | None = None
        self._next: list[int] = []
        self._bitmask: npt.NDArray[np.int32] | None = None

    def _start(self, input_ids: torch.Tensor) -> _BatchStates:
        n = int(input_ids.shape[0])
        if self._given:
            if len(self._given) != n:
                raise ValueError(
                    f"input_ids has {n} rows but {len(self._given)} constraints were given"
                )
            constraints = self._given
        else:
            if self._batch_size is not None and self._batch_size != n:
                raise ValueError(f"input_ids has {n} rows, batch_size={self._batch_size}")
            assert self._shared is not None
            constraints = [self._shared] * n
        rows = _BatchStates(constraints, self._limit)
        pl = self._prompt_lengths
        if pl is None:
            self._next = [int(input_ids.shape[1])] * n
        elif isinstance(pl, int):
            self._next = [pl] * n
        else:
            if len(pl) != n:
                raise ValueError(f"prompt_lengths has {len(pl)} entries for {n} rows")
            self._next = [int(x) for x in pl]
        self._bitmask = allocate_token_bitmask(n, rows.width)
        return rows

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.rows is None:
            self.rows = self._start(input_ids)
            if scores.shape[-1] < self.rows.width:
                raise ValueError(
                    f"scores have width {scores.shape[-1]} but the constraints were compiled for "
                    f"width {self.rows.width}: they hold token ids the model cannot produce; "
                    "compile them for this model's tokenizer"
                )
        rows = self.rows
        if input_ids.shape[0] != len(rows.states):
            raise ValueError(
                f"input_ids has {input_ids.shape[0]} rows, expected {len(rows.states)}"
            )
        width = int(input_ids.shape[1])
        pending = max(0, width - min(self._next))
        if pending:
            tail = input_ids[:, width - pending :].tolist()
            for k in range(pending):
                pos = width - pending + k
                which = [i for i, start in enumerate(self._next) if pos >= start]
                rows.advance([tail[i][k] for i in which], which)
            self._next = [max(s, width) for s in self._next]
        assert self._bitmask is not None
        rows.fill(self._bitmask)
        apply_token_bitmask_inplace(scores, self._bitmask)
        if rows.width < scores.shape[-1]:  # the model's padding ids: never allowed
            scores[:, rows.width :] = -float("inf")
        return scores


@dataclass
class Result:
    """One generated output."""

    text: str
    """The generated text (end ids left out)."""
    token_ids: list[int] = field(default_factory=list)
    """Every generated token, forced ones and the final end id included."""
    choices: dict[str, str] = field(default_factory=dict)
    """The value chosen per named :class:`~trierouter.router.plan.Choice`."""
    forward_passes: int = 0
    """Model forward calls this output's tokens were chosen from (the prefill included)."""
    forced_tokens: int = 0
    """Tokens appended by fast-forward, without a forward pass of their own."""
    terminated: bool = False
    """An end id closed the output (else ``max_new_tokens`` stopped it, or a token was refused)."""


def _vocabulary_for(tokenizer: Any, width: int) -> Vocabulary:
    return Vocabulary.from_tokenizer(tokenizer, width=width)


def model_width(model: Any) -> int:
    """The width of ``model``'s logits (its output embeddings' rows, else ``vocab_size``)."""
    emb = model.get_output_embeddings()
    if emb is not None and hasattr(emb, "weight"):
        return int(emb.weight.shape[0])
    return int(model.config.vocab_size)


def _as_plans(plan_or_plans: Any, n: int, tokenizer: Any, width: int) -> list[Plan]:
    index: list[TokenIndex] = []

    def plan_of(x: Any) -> Plan:
        if isinstance(x, Plan | ToolCallPlan):
            return x  # type: ignore[return-value]
        if not index:
            index.append(TokenIndex.get(_vocabulary_for(tokenizer, width)))
        return compile_plan(x, index[0])

    if isinstance(plan_or_plans, Plan | ChoiceSet | ToolCallPlan):
        return [plan_of(plan_or_plans)] * n
    items = list(plan_or_plans)
    if items and all(isinstance(x, str) for x in items):
        return [plan_of(items)] * n
    if len(items) != n:
        raise ValueError(
            f"plan_or_plans has {len(items)} entries for {n} prompts; give one per prompt or one "
            "shared Plan / ChoiceSet / list of values"
        )
    cache: dict[int, Plan] = {}
    return [cache.setdefault(id(x), plan_of(x)) for x in items]


def _encode(tokenizer: Any, prompt: str | Sequence[int]) -> list[int]:
    if isinstance(prompt, str):
        return [int(t) for t in tokenizer(prompt)["input_ids"]]
    return [int(t) for t in prompt]


def _pick(
    logits: torch.Tensor, do_sample: bool, temperature: float, rngs: list[np.random.Generator]
) -> list[int]:
    if not do_sample:
        return [int(t) for t in torch.argmax(logits, dim=-1).tolist()]
    x = logits.detach().to(torch.float64).cpu().numpy()
    out = []
    for r in range(x.shape[0]):
        row = x[r]
        ok = np.flatnonzero(np.isfinite(row))
        if len(ok) == 0:
            out.append(0)
            continue
        z = row[ok] / temperature
        p = np.exp(z - z.max())
        cdf = np.cumsum(p)
        u = rngs[r].random()
        k = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
        out.append(int(ok[min(k, len(ok) - 1)]))
    return out


def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str | Sequence[int]],
    plan_or_plans: Any,
    *,
    max_new_tokens: int = 64,
    do_sample: bool = False,
    temperature: float = 1.0,
    seed: int | None = None,
    fast_forward: bool = False,
    batch_size: int = 16,
) -> list[Result]:
    """Generate one constrained output per prompt, in batches, greedy or sampled.

    ``plan_or_plans``: one :class:`Plan`, :class:`ChoiceSet` or list of values for every prompt,
    or a sequence with one per prompt (sets and values are compiled for the tokenizer at the
    model's width). ``fast_forward``: append forced continuations without sampling them (see the
    module docstring). ``seed``: reproducible sampling, the same for any ``batch_size``. A tool
    call (:class:`ToolCallPlan`) always closes within ``max_new_tokens`` when it fits at all.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}: expected >= 1")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: expected >= 1")
    if do_sample and not temperature > 0:
        raise ValueError(f"temperature={temperature}: sampling needs temperature > 0")
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of prompts; wrap a single prompt in a list")
    width = model_width(model)
    plans = _as_plans(plan_or_plans, len(prompts), tokenizer, width)
    for p in plans:
        if p.width > width:
            raise ValueError(
                f"a plan was compiled for width {p.width} but the model's logits have width "
                f"{width}: it holds token ids the model cannot produce; compile it for this "
                "model's tokenizer"
            )
    base = secrets.randbits(63) if seed is None else int(seed)
    rngs = [np.random.default_rng([base, i]) for i in range(len(prompts))]
    results: list[Result] = []
    for lo in range(0, len(prompts), batch_size):
        hi = min(lo + batch_size, len(prompts))
        results.extend(
            _generate_batch(
                model,
                tokenizer,
                [_encode(tokenizer, p) for p in prompts[lo:hi]],
                plans[lo:hi],
                rngs[lo:hi],
                max_new_tokens=max_new_tokens,
                do_sample=do_sample,
                temperature=temperature,
                fast_forward=fast_forward,
            )
        )
    return results


def _pad_id(tokenizer: Any, plans: Sequence[Plan]) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    if isinstance(pad, int):
        return pad
    return int(plans[0].end_ids[0]) if plans[0].end_ids else 0


@torch.inference_mode()
def _generate_batch(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    plans: list[Plan],
    rngs: list[np.random.Generator],
    *,
    max_new_tokens: int,
    do_sample: bool,
    temperature: float,
    fast_forward: bool,
) -> list[Result]:
    n = len(prompts)
    device = model.device
    pad = _pad_id(tokenizer, plans)
    rows = _BatchStates(plans, max_new_tokens)
    ends = set(plans[0].end_ids)
    bitmask = allocate_token_bitmask(n, rows.width)
    forward = [0] * n
    forced = [0] * n
    active = [True] * n
    # the chunk fed to the next forward call: per row its new tokens, left-padded
    chunk = [list(p) for p in prompts]
    if fast_forward:  # text forced from the start goes in with the prompt
        for i in range(n):
            extra = rows.forced_tokens(i, max_new_tokens)
            for t in extra:
                rows.advance([t], [i])
            forced[i] += len(extra)
            chunk[i].extend(extra)
            active[i] = len(rows.tokens[i]) < max_new_tokens
    mask = torch.zeros((n, 0), dtype=torch.long, device=device)
    next_pos = [0] * n
    past: Any = None
    while any(active):
        m = max(len(c) for c in chunk)
        ids = torch.full((n, m), pad, dtype=torch.long)
        cmask = torch.zeros((n, m), dtype=torch.long)
        pos = torch.zeros((n, m), dtype=torch.long)
        for i, c in enumerate(chunk):
            if c:
                ids[i, m - len(c) :] = torch.tensor(c, dtype=torch.long)
                cmask[i, m - len(c) :] = 1
                pos[i, m - len(c) :] = torch.arange(next_pos[i], next_pos[i] + len(c))
                next_pos[i] += len(c)
        mask = torch.cat([mask, cmask.to(device)], dim=1)
        out = model(
            input_ids=ids.to(device),
            attention_mask=mask,
            position_ids=pos.to(device),
            past_key_values=past,
            use_cache=True,
            logits_to_keep=1,
        )
        past = out.past_key_values
        logits = out.logits[:, -1, :].float()
        rows.fill(bitmask)
        apply_token_bitmask_inplace(logits, bitmask)
        if rows.width < logits.shape[-1]:  # the model's padding ids: never allowed
            logits[:, rows.width :] = -float("inf")
        picked = _pick(logits, do_sample, temperature, rngs)
        live = [i for i in range(n) if active[i]]
        for i in live:
            forward[i] += 1
        rows.advance([picked[i] for i in live], live)
        chunk = [[] for _ in range(n)]
        for i in live:
            extra = []
            if fast_forward and not (rows.is_terminated(i) or rows.is_dead(i)):
                extra = rows.forced_tokens(i, max_new_tokens - len(rows.tokens[i]))
                for t in extra:
                    rows.advance([t], [i])
                forced[i] += len(extra)
            if rows.is_terminated(i) or rows.is_dead(i) or len(rows.tokens[i]) >= max_new_tokens:
                active[i] = False
            else:
                chunk[i] = [picked[i], *extra]
    results = []
    for i in range(n):
        toks = rows.tokens[i]
        text = tokenizer.decode([t for t in toks if t not in ends], skip_special_tokens=False)
        results.append(
            Result(
                text=text,
                token_ids=list(toks),
                choices=rows.choices(i),
                forward_passes=forward[i],
                forced_tokens=forced[i],
                terminated=rows.is_terminated(i),
            )
        )
    return results
