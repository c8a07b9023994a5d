"""Inline tool sets prepared off the event loop and off the engine's step.

A request with inline ``tools`` costs two analyses of its schemas: the tool parser's check in the
API process (valid schemas, the relaxations, refusals) and the slot analysis the logits
processor needs to compile the set. For 1,000 real OpenAPI operations each is about a second of
Python. Run where they used to run, the first blocked the API server's event loop (every stream
paused) and the second the engine's batch step (every running request paused).

The middleware (after authentication) hands such a request's body to one worker process, which
runs both once: the check's verdict comes back to the API process's cache (the tool parser then
answers from it), and the slot analysis goes to the :class:`~trierouter.registry.analysis.
AnalysisStore` that ``trierouter serve`` shares with its engine core, where the processor reads
it in milliseconds. With the vocabulary the engine publishes in that store at start, the worker
also compiles the names tries over the set's tools that the request's plan will ask for, and
their turn-closing tables (:func:`prepare_names`): the engine loads them (a few milliseconds)
instead of compiling them inside its step. The request waits for its own preparation; nothing
else does. A request whose tools were seen before is not sent again; without a worker (it died),
the preparation runs on a thread instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import multiprocessing
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from trierouter import settings
from trierouter.registry.analysis import AnalysisStore, tools_key
from trierouter.registry.index import TokenIndex
from trierouter.registry.trie import compile_choices
from trierouter.router.tool_calls.greedy import counter
from trierouter.router.vllm.args import (
    ARG_CHOICES,
    ARG_TOOLS,
    RequestLimits,
    parse_request,
)
from trierouter.router.vllm.checks import (
    inline_text,
    known_inline,
    prepare_inline_tools,
    remember_inline,
)

__all__ = ["needs_preparation", "prepare_body", "prepare_request", "start_worker"]

logger = logging.getLogger("trierouter")

_NICE = 10
_pool: ProcessPoolExecutor | None = None
_lock = threading.Lock()
_pending: dict[bytes, asyncio.Future[Any]] = {}
_SEEN = 256
_seen: OrderedDict[bytes, str] = OrderedDict()
"""The tools of requests prepared before, by the digest of their JSON as sent: their key."""


def needs_preparation(request: dict[str, Any] | None) -> bool:
    """Whether the parsed body sends inline tools the tool parser will check and constrain, or
    inline values (``trierouter_choices``) the engine would compile."""
    if not isinstance(request, dict):
        return False
    if _inline_values(request) is not None:
        return True
    tools = request.get("tools")
    xargs = request.get("vllm_xargs")
    return (
        isinstance(tools, list)
        and bool(tools)
        and request.get("tool_choice") != "none"
        and not (isinstance(xargs, dict) and ARG_TOOLS in xargs)
    )


def _inline_values(request: dict[str, Any]) -> list[Any] | None:
    xargs = request.get("vllm_xargs")
    values = xargs.get(ARG_CHOICES) if isinstance(xargs, dict) else None
    return values if isinstance(values, list) and values and not request.get("tools") else None


Syntax = tuple[str, tuple[str, ...]] | None
"""The served model's call format and its ``auto`` openers (``None``: not known here)."""


def prepare_body(raw: bytes, syntax: Syntax = None) -> tuple[str, tuple[str, ...] | str] | None:
    """In the worker: the request's tools as the tool parser will see them (vLLM's own request
    model, dumped as the parser dumps it), checked and analysed (``prepare_inline_tools``),
    and with the model's ``syntax``, the names tries its plan will need (:func:`prepare_names`);
    ``(key, names or the refusal)``, or ``None`` when vLLM itself will refuse the body."""
    from vllm.entrypoints.openai.chat_completion.protocol import (  # type: ignore[import-not-found,unused-ignore]
        ChatCompletionRequest,
    )

    try:
        request = ChatCompletionRequest.model_validate(json.loads(raw))
    except Exception:  # vLLM answers the malformed body with its own 400
        return None
    tools = [t.model_dump(exclude_none=True) for t in (request.tools or [])]
    if not tools:
        return None
    text = inline_text(tools)
    limit = settings.MAX_INLINE_TOOLS.get()
    if len(tools) > limit or len(text) > RequestLimits.from_env().max_total_bytes:
        return None  # refused by its size in the parser, unanalysed
    key, verdict = tools_key(text), prepare_inline_tools(text)
    if syntax is not None and not isinstance(verdict, str):
        parallel = request.parallel_tool_calls is not False
        try:
            prepare_names(text, key, syntax, _choice_of(request.tool_choice), parallel)
        except Exception as exc:  # the engine compiles them itself, as without a worker
            logger.warning("trierouter: names of inline tools not prepared: %r", exc)
    return key, verdict


_index: dict[str, TokenIndex] = {}
_waited: list[bool] = []
VOCABULARY_WAIT_S = 60.0
"""How long a worker waits, once, for the engine to publish its vocabulary (engine start)."""


def _engine_index(store: AnalysisStore, *, wait: bool = True) -> TokenIndex | None:
    """The token index over the vocabulary the engine published (built once per worker and
    vocabulary file; ``wait``: the first time, for the engine to publish it)."""
    deadline = time.monotonic() + (VOCABULARY_WAIT_S if wait and not _waited else 0.0)
    while True:
        seen = store.vocabulary_version()
        if seen is not None:
            break
        if time.monotonic() >= deadline:
            if wait:
                _waited.append(True)
            return None
        time.sleep(0.2)
    index = _index.get(seen)
    if index is None:
        vocab = store.vocabulary()
        if vocab is None:
            return None
        _index.clear()  # one engine, one vocabulary
        index = _index[seen] = TokenIndex.get(vocab)
        counter(vocab).prepare()
    return index


def prepare_names(text: str, key: str, syntax: Syntax, choice: str, parallel: bool) -> int:
    """In the worker: compile the names tries over every tool (and their turn-closing tables)
    that the engine's plan for these inline tools will ask for (``tool_choice`` ``choice``,
    ``parallel`` calls, in the model's call ``syntax``), with the vocabulary the engine
    published, into the analysis store: the engine then loads them instead of compiling inside
    its step (masks identical: the same code on the same vocabulary). How many were stored."""
    store = AnalysisStore.from_env()
    if store is None or syntax is None or choice == "none":
        return 0
    if choice != "auto":  # a named choice: a one-name trie in the step, the tools' own here
        choice, parallel = "required", parallel and choice == "required"
    index = _engine_index(store)
    if index is None:
        return 0
    from trierouter.registry.inline_tools import compile_inline
    from trierouter.router.tool_calls.closing import plan_tables
    from trierouter.router.tool_calls.native import native_plan

    fmt, openers = syntax
    tools = compile_inline(text, index, format=fmt, store=store)
    plan = native_plan(tools, tool_choice=choice, parallel=parallel, openers=openers)
    tables = plan_tables(plan)
    for name, lead, trie, by_variant in tables:
        store.put_names(key, name, lead, trie, by_variant)
    return len(tables)


def prepare_values(values: list[Any]) -> bool:
    """In the worker: a request's inline values (``trierouter_choices``, checked as the engine
    checks them) compiled with the vocabulary the engine published, into the analysis store:
    the engine loads the set instead of compiling it inside its step. Whether it is stored."""
    store = AnalysisStore.from_env()
    try:
        spec = parse_request({ARG_CHOICES: values})
    except ValueError:  # vLLM refuses the request with the message
        return False
    if store is None or spec is None or spec.values is None:
        return False
    key = spec.source_key.removeprefix("inline:")
    if not store.has_values(key):
        index = _engine_index(store)
        if index is None:
            return False
        store.put_values(key, compile_choices(spec.values, index))
    return True


def _values_key(values: list[Any]) -> str:
    return hashlib.sha256(json.dumps(values, ensure_ascii=False).encode("utf-8")).hexdigest()


def _choice_of(tool_choice: Any) -> str:
    """``tool_choice`` as the tool parser passes it on (a named choice: the tool's name)."""
    function = getattr(tool_choice, "function", None)
    if function is not None:
        return str(function.name)
    if isinstance(tool_choice, dict):
        return str(tool_choice.get("function", {}).get("name"))
    return str(tool_choice or "auto")


def _ready() -> bool:
    """The worker's first job: its imports, and the engine's token index if published."""
    store = AnalysisStore.from_env()
    try:
        if store is not None:
            _engine_index(store, wait=False)
    except Exception as exc:  # built again by the first request that needs it
        logger.warning("trierouter: the worker has no token index yet: %r", exc)
    return True


def _background() -> None:
    """The worker's priority: below the engine's and the API process's (the request that waits
    for it waits either way; the decoding requests should not)."""
    with contextlib.suppress(OSError):  # a platform without nice: the default priority
        os.nice(_NICE)


def start_worker() -> ProcessPoolExecutor | None:
    """The worker process (started once, then reused; ``None`` if it cannot start)."""
    global _pool
    with _lock:
        if _pool is None:
            try:
                _pool = ProcessPoolExecutor(
                    1, mp_context=multiprocessing.get_context("spawn"), initializer=_background
                )
                _pool.submit(_ready)  # imports trierouter there before the first request
            except (OSError, RuntimeError) as exc:
                logger.warning("trierouter: no worker process for tool checks (%s)", exc)
                return None
        return _pool


def _run(fn: Any, *args: Any) -> Future[Any]:
    """``fn(*args)`` in the worker process (on a thread when there is none)."""
    pool = start_worker()
    if pool is not None:
        try:
            return pool.submit(fn, *args)
        except (BrokenProcessPool, RuntimeError) as exc:
            logger.warning("trierouter: tool-check worker lost (%s); checking on a thread", exc)
            _restart()
    out: Future[Any] = Future()
    threading.Thread(target=_into, args=(out, fn, *args), daemon=True).start()
    return out


def _into(out: Future[Any], fn: Any, *args: Any) -> None:
    try:
        out.set_result(fn(*args))
    except BaseException as exc:
        out.set_exception(exc)


def _restart() -> None:
    global _pool
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None


async def _once(digest: bytes, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in the worker, run once while in flight under ``digest``; ``None`` (logged)
    when it fails."""
    running = _pending.get(digest)
    if running is None:
        running = asyncio.wrap_future(_run(fn, *args))
        _pending[digest] = running
        running.add_done_callback(lambda _f: _pending.pop(digest, None))
    try:
        return await asyncio.shield(running)
    except Exception as exc:
        if isinstance(exc, BrokenProcessPool):
            _restart()
        logger.warning("trierouter: preparing inline tools or values failed: %r", exc)
        return None


def _tools_digest(request: dict[str, Any]) -> bytes:
    """The request's tools as sent, and what decides the names tries its plan needs."""
    how = [_choice_of(request.get("tool_choice")), request.get("parallel_tool_calls") is not False]
    text = json.dumps([request.get("tools"), how], ensure_ascii=False)
    return hashlib.sha256(text.encode()).digest()


def _ready_for(key: str) -> bool:
    """The tool parser will answer from its cache and the engine find the analysis."""
    store = AnalysisStore.from_env()
    return known_inline(key) and (store is None or store.has(key))


async def prepare_request(raw: bytes, request: dict[str, Any], syntax: Syntax = None) -> None:
    """Prepare a request's inline tools (after :func:`needs_preparation`) and wait for it; the
    same body in flight twice is prepared once, and tools seen before (the same JSON as sent and
    the same ``tool_choice`` and ``parallel_tool_calls``, which decide the names to compile;
    their verdict and analysis still held) are not sent to the worker again, so a repeated set
    never waits behind another's analysis. Failures are logged, never raised: the tool parser
    then checks the tools itself, as without the middleware."""
    import anyio

    values = _inline_values(request)
    if values is not None:  # a value set: compiled once, unless the store has it
        store = AnalysisStore.from_env()
        key = await anyio.to_thread.run_sync(_values_key, values)
        if store is not None and not store.has_values(key):
            await _once(bytes.fromhex(key), prepare_values, values)
        return
    sent = await anyio.to_thread.run_sync(_tools_digest, request)
    with _lock:
        seen = _seen.get(sent)
    if seen is not None and _ready_for(seen):
        return
    result = await _once(hashlib.sha256(raw).digest(), prepare_body, raw, syntax)
    if result is not None:
        key, verdict = result
        if not known_inline(key):
            remember_inline(key, verdict)
        with _lock:
            _seen[sent] = key
            while len(_seen) > _SEEN:
                _seen.popitem(last=False)
