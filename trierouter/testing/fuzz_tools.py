"""Hostile tool schemas for the argument automata: the compiled core against the references.

A :class:`ToolCase` is a tool's argument schema (random patterns, formats, integer ranges,
lengths, enums of awkward strings, nested objects, arrays, unions), a small vocabulary (JSON
punctuation, random pieces, optionally every single byte) and the random choices of a few byte
walks. :func:`check_tool_case` checks, against oracles that share no code with the compiled core:

- the automaton built by the compiled core (wiring, key automata, subset construction, integer
  ranges, byte classes) is the one built by the Python constructions
  (:func:`~trierouter.testing.slots_reference.reference_slots`), up to the order in which the
  subset construction numbers states (a bijection keeping every edge, acceptance and exit),
  and both refuse the same schemas alike;
- every state's token mask from the core (``dfa_masks``, shared pieces) equals the numpy
  simulation's (:mod:`~trierouter.testing.masks_reference`) and brute force (a token is
  allowed iff all its bytes have edges); the automaton
  wired, compressed and masked in one core call (an eager registry's path) has the same table,
  byte classes and masks;
- every byte walk that ends in an accepting state spells JSON that ``jsonschema`` (with its
  format checker) accepts against the original schema: the automaton never allows an invalid
  argument.

Any other exception is a finding. Used by the atheris target ``fuzz/fuzz_tools.py`` and by a
bounded hypothesis test in the suite.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import numpy as np

from trierouter.registry.slots import formats
from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.fragment import Fragment
from trierouter.registry.slots.masks import ToolAutomaton, VocabTables
from trierouter.registry.slots.slot_records import SchemaRefused
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.bitmask import bitmask_to_ids
from trierouter.testing.masks_reference import ReferenceMasks, ReferenceTables
from trierouter.testing.slots_reference import clear_caches, reference_slots

__all__ = ["HEAD", "TAIL", "Pick", "ToolCase", "ToolOutcome", "check_tool_case", "tool_case"]

HEAD = b'{"args": '
TAIL = b"}"
MAX_STATES = 600  # states whose masks are compared (all of them up to this many)
MAX_WALK = 160  # bytes walked at random before heading straight for an accepting state


@dataclass
class ToolCase:
    schema: dict[str, Any]
    """The tool's argument schema (an object)."""
    tokens: list[bytes]
    """The vocabulary's pieces (ids in order); an end id is appended."""
    walks: list[list[int]] = field(default_factory=list)
    """Per walk, the random numbers that choose its bytes (cycled)."""


@dataclass
class ToolOutcome:
    result: str
    """``compiled`` or ``refused`` (SchemaRefused, both backends alike)."""
    states: int = 0
    exits: int = 0
    walks_valid: int = 0


def _compile(schema: dict[str, Any], reference: bool) -> Fragment | list[str]:
    """The tool automaton of ``schema`` (by the core, or by the Python constructions), or the
    problems it was refused for. Caches are emptied before and after: a fragment cached by one
    construction would hide a difference from the other."""
    with reference_slots() if reference else contextlib.nullcontext() as swapped:
        if swapped is not None and not all(swapped.values()):
            raise AssertionError(f"a reference construction is not reached: {swapped}")
        clear_caches()
        try:
            frag, _ = SlotCompiler().tool(schema, TAIL, HEAD)
        except SchemaRefused as exc:
            return sorted(str(p) for p in exc.problems)
        finally:
            clear_caches()
    return frag


def _isomorphism(ref: Fragment, nat: Fragment) -> list[int]:
    """``iso[s]``: the native state of reference state ``s``. The subset construction numbers
    states in another order in the core (documented; the same automaton): the two must be the
    same automaton up to that renumbering (a bijection that keeps every edge, acceptance and
    exit, over the states reachable from the start), else AssertionError."""
    if ref.n != nat.n:
        raise AssertionError(f"native automaton has {nat.n} states, the reference {ref.n}")

    ta, tb = ref.table, nat.table
    iso, back = [-1] * ref.n, [-1] * ref.n
    iso[0] = back[0] = 0
    todo = [0]
    while todo:
        x = todo.pop()
        y = iso[x]
        live = ta[x] >= 0
        if bool(ref.accept[x]) != bool(nat.accept[y]) or not np.array_equal(live, tb[y] >= 0):
            raise AssertionError(f"native state {y} is not the reference's state {x}")
        xa, xb = ref.exits.get(x), nat.exits.get(y)
        if (xa is None) != (xb is None) or (xa is not None and xb is not None and xa.key != xb.key):
            raise AssertionError(f"native state {y} exits unlike the reference's state {x}")
        follow = list(zip(ta[x, live].tolist(), tb[y, live].tolist(), strict=True))
        if xa is not None and xb is not None:  # where the other engine hands back
            follow.append((xa.reentry, xb.reentry))
        for t, u in follow:
            if iso[t] < 0 and back[u] < 0:
                iso[t], back[u] = u, t
                todo.append(t)
            elif iso[t] != u or back[u] != t:
                raise AssertionError(f"reference state {t} and native state {u} pair unlike before")
    return iso  # -1: a state no byte or hand-back reaches (left over by the wiring, in both)


def _vocabulary(tokens: list[bytes]) -> Vocabulary:
    pieces = [*tokens, b"<eos>"]
    return Vocabulary(pieces, end_ids=[len(pieces) - 1], special_ids=[], width=len(pieces) + 3)


def _brute_force(auto: ToolAutomaton, vocab: Vocabulary, state: int) -> set[int]:
    out = set()
    for t, piece in enumerate(vocab.tokens):
        if not vocab.matchable[t] or not piece:
            continue
        if auto.step_bytes(state, piece) >= 0:
            out.add(t)
    return out


def _distances(auto: ToolAutomaton) -> np.ndarray[Any, Any]:
    """Bytes to the nearest accepting state (-1: none), never through an exit."""
    n, table = auto.n_states, auto.table
    back: list[list[int]] = [[] for _ in range(n)]
    for s in range(n):
        if s in auto.exits:
            continue
        for q in set(int(x) for x in table[s] if x >= 0):
            if q not in auto.exits:
                back[q].append(s)
    dist = np.full(n, -1, dtype=np.int64)
    todo = deque(int(s) for s in np.flatnonzero(auto.accept) if int(s) not in auto.exits)
    for s in todo:
        dist[s] = 0
    while todo:
        q = todo.popleft()
        for s in back[q]:
            if dist[s] < 0:
                dist[s] = dist[q] + 1
                todo.append(s)
    return dist


def _walk(auto: ToolAutomaton, dist: np.ndarray[Any, Any], choices: list[int]) -> bytes | None:
    """Bytes from state 0 to an accepting state: random live bytes for a while (from
    ``choices``), then the shortest way; None when state 0 cannot reach acceptance."""
    state, out = 0, bytearray()
    if dist[0] < 0:
        return None
    table, cls = auto.table, auto.byte_class
    for i in range(MAX_WALK + int(dist.max()) + 2):
        stop = i >= MAX_WALK or (choices and choices[i % len(choices)] % 7 == 0)
        if auto.accept[state] and stop:
            return bytes(out)
        nxt = table[state, cls]
        live = [b for b in range(256) if nxt[b] >= 0 and dist[nxt[b]] >= 0]
        if not live and auto.accept[state]:
            return bytes(out)
        if not live:
            raise AssertionError(f"state {state}, reached by a walk, cannot reach acceptance")
        if i < MAX_WALK and choices:
            b = live[choices[i % len(choices)] % len(live)]
        else:
            b = min(live, key=lambda x: (dist[nxt[x]], x))
        out.append(b)
        state = int(nxt[b])
    raise AssertionError("a walk toward the nearest accepting state did not end")


def check_tool_case(case: ToolCase) -> ToolOutcome:
    """Check one case (see the module docstring); raises AssertionError on a finding."""
    ref = _compile(case.schema, reference=True)
    nat = _compile(case.schema, reference=False)
    if isinstance(ref, list) or isinstance(nat, list):
        if ref != nat:
            raise AssertionError(f"refusals differ: reference {ref!r}, native {nat!r}")
        return ToolOutcome("refused")
    iso = _isomorphism(ref, nat)
    vocab = _vocabulary(case.tokens)
    native = ToolAutomaton(nat, VocabTables(vocab))
    # wired, compressed and masked in one core call (an eager registry's path)
    late = ToolAutomaton(SlotCompiler().tool(case.schema, TAIL, HEAD, defer=True)[0], native.t)
    if late.table.dtype != native.table.dtype or not (
        np.array_equal(late.table, native.table)
        and np.array_equal(late.byte_class, native.byte_class)
    ):
        raise AssertionError("the automaton wired with its masks differs from the one wired first")
    reference = ReferenceMasks(ref, ReferenceTables(vocab))
    a = np.zeros(native.t.words, dtype=np.int32)
    b = a.copy()
    n = native.n_states
    states = range(n) if n <= MAX_STATES else np.linspace(0, n - 1, MAX_STATES).astype(int)
    for s in (int(x) for x in states):
        if s in reference.exits or iso[s] < 0:
            continue
        native.fill(iso[s], a)
        reference.fill(s, b)
        if not np.array_equal(a, b):
            raise AssertionError(f"state {s}: native mask differs from the numpy reference")
        late.fill(iso[s], b)
        if not np.array_equal(a, b):
            raise AssertionError(f"state {s}: the mask wired with its masks differs")
        if set(bitmask_to_ids(a, vocab.width).tolist()) != _brute_force(native, vocab, iso[s]):
            raise AssertionError(f"state {s}: mask differs from brute force")
    dist = _distances(native)
    validator = jsonschema.Draft202012Validator(
        case.schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    valid = 0
    for choices in case.walks:
        text = _walk(native, dist, choices)
        if text is None:
            break
        try:
            doc = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise AssertionError(f"accepted bytes are not JSON: {text!r} ({exc})") from exc
        if not isinstance(doc, dict) or set(doc) != {"args"}:
            raise AssertionError(f"accepted bytes are not the framed arguments: {text!r}")
        errors = sorted(str(e.message) for e in validator.iter_errors(doc["args"]))
        if errors:
            raise AssertionError(f"accepted arguments violate the schema: {text!r}: {errors}")
        valid += 1
    return ToolOutcome("compiled", n, len(native.exits), valid)


# -- random cases ------------------------------------------------------------------------------

Pick = Callable[[int, int], int]
"""``pick(lo, hi)``: a number in [lo, hi] (atheris' ConsumeIntInRange, a hypothesis draw...)."""

_ATOMS = [
    "a",
    "b",
    "Z",
    "0",
    "9",
    "-",
    "_",
    ".",
    " ",
    "é",
    "東",
    '"',
    "\\\\",
    "\\d",
    "\\w",
    "\\s",
    "[a-z]",
    "[^a]",
    "[0-9a-f]",
    "[A-Za-z_]",
    "[a-z0-9-]",
    ".",
    "\\.",
    "\\-",
    "/",
]
_QUANT = ["", "", "", "?", "*", "+", "{2}", "{0,3}", "{1,5}", "{2,}", "{3,9}"]
_STRINGS = ["", "a", "asc", "a b", 'q"q', "back\\slash", "é", "東京", "\n", "\u0000", "\x7f", "1"]
_KEYS = ["a", "b", "id", "name", "a b", 'q"', "é", "x" * 20, ""]
_FORMATS = [*formats.FORMAT_PATTERNS, "ipv6", "uri"]


def _regex(pick: Pick, depth: int = 0) -> str:
    parts = []
    for _ in range(pick(1, 4)):
        if depth < 2 and pick(0, 5) == 0:
            alts = [_regex(pick, depth + 1) for _ in range(pick(1, 3))]
            # a group repeats a bounded number of times: an unbounded repeat of one holding
            # repeats sends the oracle (Python's backtracking re) into exponential time
            atom = "(" + "|".join(alts) + ")"
            parts.append(atom + ["", "?", "{2}", "{0,3}", "{1,4}"][pick(0, 4)])
            continue
        atom = _ATOMS[pick(0, len(_ATOMS) - 1)]
        parts.append(atom + _QUANT[pick(0, len(_QUANT) - 1)])
    body = "".join(parts)
    return ["^" + body + "$", body, "^" + body, body + "$"][pick(0, 3)] if depth == 0 else body


def _json_value(pick: Pick) -> Any:
    kind = pick(0, 5)
    if kind == 0:
        return _STRINGS[pick(0, len(_STRINGS) - 1)]
    if kind == 1:
        return pick(-(10**6), 10**6) * [1, 1, 10**15][pick(0, 2)]
    if kind == 2:
        return [True, False, None][pick(0, 2)]
    if kind == 3:
        return pick(-1000, 1000) / 8
    if kind == 4:
        return [_json_value(pick) for _ in range(pick(0, 2))]
    return {_KEYS[pick(0, len(_KEYS) - 1)]: pick(0, 3)}


def _bound(pick: Pick) -> int:
    return pick(-50, 50) * [1, 1, 37, 10**12][pick(0, 3)]


def _schema(pick: Pick, depth: int) -> dict[str, Any]:
    kind = pick(0, 17 if depth < 3 else 8)
    if kind == 13:  # a list of types, with the keywords of one of them
        types = ["string", "null", "integer", "number", "boolean", "array", "object"]
        out: dict[str, Any] = {"type": sorted({types[pick(0, 6)] for _ in range(pick(1, 3))})}
        if pick(0, 1):
            out["maxLength"] = pick(0, 5)
        if pick(0, 1):
            out["minimum"] = _bound(pick)
        return out
    if kind == 14:  # a reference into the root's $defs (filled in by _object at depth 0)
        return {"$ref": f"#/$defs/d{pick(0, 1)}"}
    if kind == 15:
        key = ["allOf", "oneOf"][pick(0, 1)]
        return {key: [_schema(pick, depth + 1) for _ in range(pick(1, 2))]}
    if kind == 16:  # annotations next to a leaf, a format with lengths
        leaf = _schema(pick, 3)
        leaf.update({"description": "d", "title": "t", "default": None, "examples": [1]})
        return leaf
    if kind == 17:
        fmt: dict[str, Any] = {"type": "string", "format": _FORMATS[pick(0, len(_FORMATS) - 1)]}
        fmt["minLength" if pick(0, 1) else "maxLength"] = pick(0, 40)
        return fmt
    if kind == 0:
        return {"type": "string", "pattern": _regex(pick)}
    if kind == 1:
        return {"type": "string", "format": _FORMATS[pick(0, len(_FORMATS) - 1)]}
    if kind == 2:
        out = {"type": "string"}
        if pick(0, 1):
            out["minLength"] = pick(0, 4)
        if pick(0, 1):
            out["maxLength"] = pick(0, 12)
        if pick(0, 3) == 0:
            out["pattern"] = _regex(pick)
        return out
    if kind == 3:
        return {"enum": [_json_value(pick) for _ in range(pick(1, 4))]}
    if kind == 4:
        return {"const": _json_value(pick)}
    if kind in (5, 6):
        out = {"type": "integer"}
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if pick(0, 2) == 0:
                out[key] = _bound(pick)
        return out
    if kind == 7:
        out = {"type": "number"}
        if pick(0, 2) == 0:
            out["minimum"] = _bound(pick)
        return out
    if kind == 8:
        return [{"type": "boolean"}, {"type": "null"}, {"type": "string"}, {}][pick(0, 3)]
    if kind == 9:
        return _object(pick, depth + 1)
    if kind == 10:
        arr: dict[str, Any] = {"type": "array", "items": _schema(pick, depth + 1)}
        if pick(0, 1):
            arr["minItems"] = pick(0, 2)
        if pick(0, 1):
            arr["maxItems"] = pick(0, 3)
        return arr
    return {"anyOf": [_schema(pick, depth + 1) for _ in range(pick(1, 3))]}


def _object(pick: Pick, depth: int) -> dict[str, Any]:
    props = {}
    for _ in range(pick(0, 4)):
        props[_KEYS[pick(0, len(_KEYS) - 1)] + str(pick(0, 2))] = _schema(pick, depth)
    out: dict[str, Any] = {"type": "object", "properties": props}
    out["required"] = [k for k in props if pick(0, 1)]
    extra = pick(0, 3)
    if extra == 1:
        out["additionalProperties"] = False
    elif extra == 2:
        out["additionalProperties"] = _schema(pick, 3)
    if depth == 0:
        out["$defs"] = {f"d{i}": _schema(pick, 2) for i in range(2)}
    return out


_PIECES = [b'"', b"{", b"}", b"[", b"]", b",", b":", b" ", b", ", b'": ', b'{"', b'"}', b"-",
           b"0", b"1", b"9", b"12", b".", b"e", b"E", b"+", b"a", b"ab", b"Z", b"_", b"\\",
           b"u", b"00", b"null", b"true", b"false", b"\xc3", b"\xa9", b"\xe6\x9d\xb1",
           b"\xff", b"\n", b"T", b":0", b"2024-", b"ff"]  # fmt: skip


def tool_case(pick: Pick) -> ToolCase:
    """A random case drawn through ``pick``."""
    schema = _object(pick, 0)
    tokens = [bytes([b]) for b in range(256)] if pick(0, 3) else []
    tokens += [_PIECES[pick(0, len(_PIECES) - 1)] for _ in range(pick(0, 24))]
    tokens += [bytes(pick(0, 255) for _ in range(pick(1, 4))) for _ in range(pick(0, 6))]
    walks = [[pick(0, 2**16) for _ in range(pick(1, 12))] for _ in range(pick(1, 4))]
    return ToolCase(schema, tokens, walks)
