"""Oracles: XGrammar's matcher and a brute-force reference, stepped beside a ChoiceSet.

``compare_with_xgrammar`` walks random tokenizations (not only the canonical one) of random
values and checks, at every step including the end step, that the packed bitmask of the trie
equals XGrammar's over the logits width.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trierouter.errors import missing
from trierouter.registry.compiler import xgrammar_tokenizer_info
from trierouter.registry.trie import ChoiceSet
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.bitmask import bitmask_to_ids

__all__ = [
    "EquivalenceReport",
    "brute_force_allowed",
    "compare_with_xgrammar",
    "ebnf_alternation",
    "xgrammar_compile",
    "xgrammar_tokenizer_info",
]


def _xgr() -> Any:
    try:
        import xgrammar
    except ImportError as exc:
        raise missing("xgrammar", "test") from exc
    return xgrammar


def _literal(value: str) -> str:
    out = []
    for ch in value:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def ebnf_alternation(values: Sequence[str], terminator: str | None = None) -> str:
    """``root ::= "v1" | "v2" ...`` over ``value + terminator``."""
    term = terminator or ""
    return "root ::= " + " | ".join(_literal(v + term) for v in dict.fromkeys(values))


def xgrammar_compile(
    vocab: Vocabulary, values: Sequence[str], terminator: str | None = None
) -> Any:
    """Compile the alternation of ``values`` with XGrammar for ``vocab``."""
    xgr = _xgr()
    compiler = xgr.GrammarCompiler(xgrammar_tokenizer_info(vocab), cache_enabled=False)
    return compiler.compile_grammar(ebnf_alternation(values, terminator))


@dataclass
class EquivalenceReport:
    """What a comparison covered."""

    paths: int = 0
    steps: int = 0
    end_steps: int = 0
    non_canonical_paths: int = 0
    masks: int = 0
    """Masks compared: ``steps`` times the number of sets walked."""


def _row_ids(row: npt.NDArray[np.int32], width: int) -> set[int]:
    return set(bitmask_to_ids(row, width).tolist())


def _check_row(
    ours: npt.NDArray[np.int32],
    theirs: npt.NDArray[np.int32],
    vocab: Vocabulary,
    where: str,
) -> None:
    """Raise unless two packed rows agree on every token id below the logits width."""
    width = vocab.width
    tail = (1 << (width % 32)) - 1 if width % 32 else -1
    a = ours.astype(np.int64) & 0xFFFFFFFF
    b = theirs.astype(np.int64) & 0xFFFFFFFF
    a[-1] &= tail
    b[-1] &= tail
    if np.array_equal(a, b):
        return
    only_ours = sorted(_row_ids(ours, width) - _row_ids(theirs, width))
    only_xgr = sorted(_row_ids(theirs, width) - _row_ids(ours, width))
    raise AssertionError(
        f"mask differs at {where}: "
        f"only trierouter {only_ours[:10]} ({[vocab.tokens[t] for t in only_ours[:5]]}), "
        f"only xgrammar {only_xgr[:10]} "
        f"({[vocab.tokens[t] for t in only_xgr[:5] if t < len(vocab)]})"
    )


def compare_with_xgrammar(
    choices: ChoiceSet,
    vocab: Vocabulary,
    compiled: Any,
    *,
    n_paths: int,
    seed: int = 0,
    also: Sequence[ChoiceSet] = (),
) -> EquivalenceReport:
    """Walk ``n_paths`` random accepted paths; assert identical masks at every step.

    ``also``: more sets of the same values (another layout, another compile) checked against
    XGrammar at every step of the same paths (``choices`` picks the tokens); each is counted in
    ``masks``.
    """
    xgr = _xgr()
    rng = random.Random(seed)
    sets = [choices, *also]
    ours = np.zeros((1, (vocab.width + 31) // 32), dtype=np.int32)
    theirs = xgr.allocate_token_bitmask(1, vocab.width)
    report = EquivalenceReport()
    ends = set(vocab.end_ids)
    for p in range(n_paths):
        matcher = xgr.GrammarMatcher(compiled)
        states = [cs.root for cs in sets]
        state = states[0]
        greedy_longest = p % 2 == 1
        canonical = True
        while True:
            matcher.fill_next_token_bitmask(theirs)
            expected = theirs[0].numpy()
            for i, (cs, st) in enumerate(zip(sets, states, strict=True)):
                cs.fill_next_token_bitmask(st, ours, 0)
                where = f"path {p} step {report.steps} state {st}" + (f" (set {i})" if i else "")
                _check_row(ours[0], expected, vocab, where)
                report.masks += 1
            report.steps += 1
            allowed = choices.mask(state)
            if len(allowed) == 0:
                raise AssertionError(f"dead end at path {p}, state {state}")
            if greedy_longest:
                lens = [len(vocab.tokens[t]) if t not in ends else -1 for t in allowed.tolist()]
                best = max(lens)
                cands = [t for t, n in zip(allowed.tolist(), lens, strict=True) if n == best]
                token = rng.choice(cands)
                if rng.random() < 0.15:
                    token = int(rng.choice(allowed.tolist()))
            else:
                token = int(rng.choice(allowed.tolist()))
            if len(vocab.tokens[token]) < max(
                (len(vocab.tokens[t]) for t in allowed.tolist() if t not in ends), default=0
            ):
                canonical = False
            if not matcher.accept_token(token):
                raise AssertionError(f"xgrammar refused token {token} that trierouter allows")
            states = [cs.advance(st, token) for cs, st in zip(sets, states, strict=True)]
            state = states[0]
            if token in ends:
                report.end_steps += 1
                if not matcher.is_terminated() or any(
                    st != cs.END for cs, st in zip(sets, states, strict=True)
                ):
                    raise AssertionError("end id accepted but not terminated in both")
                break
        report.paths += 1
        report.non_canonical_paths += not canonical
    return report


def brute_force_allowed(vocab: Vocabulary, strings: set[bytes], prefix: bytes) -> set[int]:
    """Every token allowed after ``prefix`` by the definition, checked token by token."""
    out = set()
    for t, tb in enumerate(vocab.tokens):
        if t in vocab.special_ids or not tb:
            continue
        q = prefix + tb
        if any(s.startswith(q) for s in strings):
            out.add(t)
    if prefix in strings:
        out |= set(vocab.end_ids)
    return out


def ahocorasick_pairs(vocab: Vocabulary, strings: Sequence[bytes]) -> set[tuple[bytes, int, bytes]]:
    """Reference: every (prefix, token, prefix + token) occurring in ``strings``, by Aho-Corasick.

    Runs pyahocorasick (bytes mapped 1:1 to latin-1 characters) over each string; an occurrence
    of token ``t`` ending at ``end`` in string ``s`` yields ``(s[:start], t, s[:end + 1])``.
    """
    try:
        import ahocorasick
    except ImportError as exc:
        raise missing("pyahocorasick", "test") from exc
    automaton = ahocorasick.Automaton()
    by_bytes: dict[bytes, list[int]] = {}
    for t, tb in enumerate(vocab.tokens):
        if t in vocab.special_ids or not tb:
            continue
        by_bytes.setdefault(tb, []).append(t)
    for tb, ids in by_bytes.items():
        automaton.add_word(tb.decode("latin-1"), (len(tb), ids))
    automaton.make_automaton()
    out: set[tuple[bytes, int, bytes]] = set()
    for s in strings:
        for end, (length, ids) in automaton.iter(s.decode("latin-1")):
            start = end - length + 1
            for t in ids:
                out.add((s[:start], t, s[: end + 1]))
    return out
