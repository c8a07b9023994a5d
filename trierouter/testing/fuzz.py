"""One fuzz case, checked end to end: vocabulary, index, compile, decode, against a reference.

Shared by the hypothesis tests (``tests/test_fuzz.py``) and the coverage-guided atheris target
(``fuzz/fuzz_compile.py``). A case is a vocabulary (any bytes per token: byte-fallback pieces,
empty and duplicate tokens, special ids, padding width), a list of values (any ``str``: empty,
prefixes of each other, lone surrogates, control characters, very long), a terminator and token
sequences to decode. :func:`check_case` either confirms the result against an exact reference
computed by dynamic programming over bytes, or confirms that the documented error was raised for
the documented reason; anything else (another exception, a wrong mask) fails an assertion.
Where the set compiled with the native core, the numpy reference must give the same arrays bit
for bit (and the same error where it refuses).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trierouter.errors import (
    EmptySetError,
    InvalidValueError,
    UnreachableValueError,
    VocabularyError,
)
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["Case", "Outcome", "check_case"]


@dataclass(frozen=True)
class Case:
    """Inputs of one fuzz case."""

    tokens: Sequence[bytes]
    """Token bytes by id."""
    end_ids: Sequence[int]
    """End-of-sequence ids (may be out of range: then a ``VocabularyError`` is expected)."""
    special_ids: Sequence[int]
    """Special ids (never inside a value)."""
    width_pad: int
    """Padding ids past the tokens (the model's logits are wider)."""
    values: Sequence[str]
    """The set (may be empty, repeat, hold lone surrogates)."""
    terminator: str | None
    """``None`` for the end ids, else the text that must follow a value."""
    walks: Sequence[Sequence[int]]
    """Token ids to decode from the root (any ints: refused ones lead to ``DEAD``)."""


@dataclass(frozen=True)
class Outcome:
    """What happened: ``compiled`` or the documented error's class name."""

    result: str
    steps: int = 0


def _spellable_suffixes(s: bytes, pieces: frozenset[bytes], max_len: int) -> list[bool]:
    """``ok[i]``: ``s[i:]`` is a concatenation of ``pieces`` (matchable token bytes)."""
    ok = [False] * (len(s) + 1)
    ok[len(s)] = True
    for i in range(len(s) - 1, -1, -1):
        for n in range(1, min(max_len, len(s) - i) + 1):
            if ok[i + n] and s[i : i + n] in pieces:
                ok[i] = True
                break
    return ok


class _Reference:
    """Exact allowed tokens after a prefix, straight from the definition (with pruning of
    continuations that no token sequence can finish)."""

    def __init__(self, vocab: Vocabulary, strings: set[bytes]) -> None:
        self.vocab = vocab
        self.matchable = [
            (t, tb) for t, tb in enumerate(vocab.tokens) if tb and t not in vocab.special_ids
        ]
        pieces = frozenset(tb for _, tb in self.matchable)
        max_len = max((len(p) for p in pieces), default=0)
        self.ok = {s: _spellable_suffixes(s, pieces, max_len) for s in strings}
        self.strings = strings

    def spellable(self, s: bytes) -> bool:
        return self.ok[s][0]

    def allowed(self, prefix: bytes) -> set[int]:
        live = [s for s in self.strings if s.startswith(prefix) and self.ok[s][0]]
        out = set()
        n = len(prefix)
        for t, tb in self.matchable:
            m = n + len(tb)
            if any(s[n:m] == tb and len(s) >= m and self.ok[s][m] for s in live):
                out.add(t)
        if prefix in self.strings and self.ok[prefix][0]:
            out |= set(self.vocab.end_ids)
        return out


def _vocabulary(case: Case) -> Vocabulary | None:
    n = len(case.tokens)
    bad = not n or any(not 0 <= e < n for e in case.end_ids)
    bad |= any(not 0 <= s < n for s in case.special_ids)
    try:
        vocab = Vocabulary(
            case.tokens,
            end_ids=case.end_ids,
            special_ids=case.special_ids,
            width=n + case.width_pad,
        )
    except VocabularyError:
        assert bad, "VocabularyError for a valid vocabulary"
        return None
    assert not bad, "an invalid vocabulary was accepted"
    return vocab


def check_case(case: Case, *, index: TokenIndex | None = None) -> Outcome:
    """Run one case and check it; raise ``AssertionError`` on any wrong answer."""
    vocab = index.vocabulary if index is not None else _vocabulary(case)
    if vocab is None:
        return Outcome("VocabularyError")
    index = index if index is not None else TokenIndex.build(vocab)
    encodable: list[bytes | None] = []
    for v in case.values:
        try:
            encodable.append(v.encode("utf-8"))
        except UnicodeEncodeError:
            encodable.append(None)
    term = case.terminator.encode("utf-8") if case.terminator else b""
    strings = {e + term for e in encodable if e is not None}
    cs: ChoiceSet | None
    try:
        cs = compile_choices(list(case.values), index, terminator=case.terminator)
    except Exception as exc:
        if index.backend == "native":  # the reference refuses the same way
            try:
                compile_choices(
                    list(case.values), index, terminator=case.terminator, backend="numpy"
                )
            except Exception as ref_exc:
                assert type(ref_exc) is type(exc), (exc, ref_exc)
                assert getattr(ref_exc, "values", None) == getattr(exc, "values", None)
            else:
                raise AssertionError(f"native refused ({exc!r}), numpy compiled") from exc
        cs = None
        err: Exception | None = exc
    else:
        err = None
        if cs.backend == "native":
            ref_cs = compile_choices(
                list(case.values), index, terminator=case.terminator, backend="numpy"
            )
            for name, arr in ref_cs._arrays.items():
                assert np.array_equal(cs._arrays[name], arr), f"native {name} differs from numpy"
                assert cs._arrays[name].dtype == arr.dtype, name
    try:
        if err is not None:
            raise err
        assert cs is not None
    except EmptySetError:
        assert not case.values, "EmptySetError for a non-empty set"
        return Outcome("EmptySetError")
    except InvalidValueError:
        assert None in encodable, "InvalidValueError though every value is UTF-8 encodable"
        return Outcome("InvalidValueError")
    except UnreachableValueError as exc:
        assert case.values and None not in encodable
        ref = _Reference(vocab, strings)
        reported = {v.encode("utf-8") + term for v in exc.values if isinstance(v, str)}
        assert reported, "UnreachableValueError without values"
        assert all(not ref.spellable(s) for s in reported), "a spellable value was reported"
        assert any(not ref.spellable(s) for s in strings)
        return Outcome("UnreachableValueError")
    assert cs is not None
    assert case.values and None not in encodable, "compiled a set that should be refused"
    ref = _Reference(vocab, strings)
    assert all(ref.spellable(s) for s in strings), "compiled though a value is unspellable"
    assert set(cs.values) == set(case.values) and len(cs) == len(set(case.values))
    steps = _walk(cs, vocab, ref, case.walks, len(term))
    if cs.backend == "native":  # the compact layout walks the same paths against the reference
        cx = compile_choices(list(case.values), index, terminator=case.terminator, layout="compact")
        assert cx.layout == "compact" and _walk(cx, vocab, ref, case.walks, len(term)) == steps
    return Outcome("compiled", steps)


def _walk(
    cs: ChoiceSet, vocab: Vocabulary, ref: _Reference, walks: Sequence[Sequence[int]], nterm: int
) -> int:
    """Decode each walk: masks, single and batch steps, bitmasks all equal the reference."""
    steps = 0
    bitmask = np.zeros((1, cs.bitmask_words), np.int32)
    for walk in walks:
        state, prefix = cs.root, b""
        for raw in walk:
            want = ref.allowed(prefix)
            got = cs.mask(state).tolist()
            assert got == sorted(got) and set(got) == want, (prefix, got, want)
            cs.fill_next_token_bitmask(state, bitmask)
            bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[: cs.width]
            assert set(np.flatnonzero(bits).tolist()) == want
            # the raw int picks an allowed token most of the time, else any id (also invalid)
            token = sorted(want)[raw % len(want)] if want and raw >= 0 else raw
            nxt = cs.advance(state, token)
            assert int(cs.advance_batch([state], [token])[0]) == nxt
            steps += 1
            if token not in want:
                assert nxt == cs.DEAD, (prefix, token)
                break
            if token in vocab.end_ids:
                assert nxt == cs.END
                value = prefix[: len(prefix) - nterm] if nterm else prefix
                assert cs.value_at(state) == value.decode("utf-8")
                assert cs.is_terminal(state)
                break
            assert 0 <= nxt < cs.n_nodes
            state, prefix = nxt, prefix + vocab.tokens[token]
    return steps


ATHERIS_SEED = 1
"""The seed of the suite's short atheris runs: the same inputs on every run, so a finding is
reproduced by rerunning the test (random seeds belong to the long runs, ``fuzz/run_fuzz.py``)."""


_FRESH_PEAK = [
    sys.executable,
    "-c",
    "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))",
]
"""A small process that starts the target: libFuzzer's ``-rss_limit_mb`` reads the peak RSS of
``getrusage``, which a process started straight from this one inherits from it (Linux keeps the
peak across fork and exec: a test process holding 4.5 GB made a 94 MB target an out-of-memory
finding); started from a small process, the target's peak is its own."""


def atheris_run(
    target: Path, runs: int, workdir: Path, *flags: str, seed: int = ATHERIS_SEED
) -> dict[str, Any]:
    """Run the atheris target ``target`` (``fuzz/*.py`` of a checkout) on ``runs`` inputs in
    ``workdir`` from libFuzzer seed ``seed``; its ``-stats`` JSON. AssertionError with the seed
    and the output's tail on a finding."""
    out = workdir / "stats.json"
    env = {**os.environ, "PYTHONPATH": str(target.resolve().parent.parent)}
    cmd = [sys.executable, str(target), f"-runs={runs}", f"-seed={seed}", *flags, f"-stats={out}"]
    proc = subprocess.run(
        [*_FRESH_PEAK, *cmd],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd[1:])}:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    stats: dict[str, Any] = json.loads(out.read_text())
    return stats
