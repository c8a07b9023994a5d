"""``trierouter serve``: vLLM's own OpenAI server with trierouter's tool calling switched on.

:func:`trierouter.router.vllm.launch.main` runs vLLM's server entry point in this process with
the flags that load the ``trierouter`` tool parser, the logits processor and
:class:`ToolSearchMiddleware`; every other argument is vLLM's. :class:`ToolSearchMiddleware`
is a plain ASGI middleware (``--middleware``) that works on the JSON body of
``/v1/chat/completions`` before vLLM parses it, and only after vLLM's own authentication has
accepted the request (:func:`_vllm_auth`: with ``--api-key`` or ``VLLM_API_KEY`` an
unauthenticated request is handed to vLLM untouched, which answers 401):

- a body larger than ``$TRIEROUTER_MAX_BODY_BYTES`` (default 16 MiB) is refused with 400;
- ``vllm_xargs.trierouter_tools`` (a named registry from ``$TRIEROUTER_TOOLS``) is expanded
  (:mod:`.tool_search`): the top ``trierouter_tool_search`` tools (default 16) for the
  conversation (BM25 over the registry's tool names, descriptions and parameters; only tools
  that match: none matching is a 400 saying so), as many as fit the served model's context,
  become the request's ``tools``, so the chat template renders them, and ``trierouter_allowed``
  restricts the call to them unless ``trierouter_constrain`` is ``"registry"`` (the whole
  registry stays callable); a non-streamed answer carries the ``trierouter_routing`` field:
  the candidates with their search scores and what reached the prompt;
- inline ``tools`` are checked and analysed once in a worker process (:mod:`.prepare`), off the
  event loop and off the engine's step;
- ``tool_choice: "none"`` with tools gets its constraint (vLLM does not call the tool parser
  then): text in which the model's call opener never appears.

Errors are OpenAI error bodies with status 400, like vLLM's own, naming the field; a body that
cannot be read (nested past Python's parser, a field of the wrong type) is a 400 too, never a 500.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from trierouter import settings
from trierouter.router.vllm.args import ARG_TOOLS, ENV_TOOLS
from trierouter.router.vllm.checks import count_work, relaxed_response
from trierouter.router.vllm.named import list_tool_registries
from trierouter.router.vllm.prepare import needs_preparation, prepare_request, start_worker
from trierouter.router.vllm.tool_search import (
    BadRequest,
    PromptContext,
    conversation_query,
    expand_registry,
    search_for,
)

__all__ = [
    "ENV_MAX_BODY_BYTES",
    "ROUTING_FIELD",
    "BadRequest",
    "ToolSearchMiddleware",
    "check_shapes",
    "conversation_query",
]

logger = logging.getLogger(__name__)

ENV_MAX_BODY_BYTES = settings.MAX_BODY_BYTES.name
ROUTING_FIELD = "trierouter_routing"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _none_xargs(body: dict[str, Any], fmt: str) -> None:
    """``tool_choice: "none"`` with tools: the constraint vLLM would not ask the parser for."""
    from trierouter.router.vllm.tool_parser import request_xargs

    xargs = body.get("vllm_xargs") if isinstance(body.get("vllm_xargs"), dict) else None
    try:
        body["vllm_xargs"] = request_xargs(
            body.get("tools") or [], "none", parallel=False, fmt=fmt, xargs=xargs
        )
    except ValueError as exc:
        raise BadRequest(str(exc), "tools") from exc


def _format_of(scope: Scope) -> str | None:
    """The served model's call syntax, from the running app's chat handler."""
    app = scope.get("app")
    chat = getattr(getattr(app, "state", None), "openai_serving_chat", None)
    parser = getattr(chat, "parser_cls", None)
    cls = getattr(parser, "tool_parser_cls", None)
    if chat is None or cls is None or not hasattr(cls, "format_name"):
        return None
    fmt: str | None = getattr(cls, "_resolved_format", None)
    if fmt is None:
        fmt = cls.format_name or cls(chat.renderer.tokenizer).format
        cls._resolved_format = fmt
    return fmt


def _syntax_of(scope: Scope) -> tuple[str, tuple[str, ...]] | None:
    """The served model's call format and ``auto`` openers, as its tool parser has them."""
    fmt = _format_of(scope)
    chat = getattr(getattr(scope.get("app"), "state", None), "openai_serving_chat", None)
    if fmt is None or chat is None:
        return None
    from trierouter.router.openers import model_openers

    tokenizer = getattr(getattr(chat, "renderer", None), "tokenizer", None)
    return fmt, model_openers(getattr(tokenizer, "name_or_path", None))


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def check_shapes(body: dict[str, Any]) -> None:
    """The fields the middleware reads must have the types it reads them as (``BadRequest``
    naming the first that does not; vLLM's request model checks the rest)."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest(f"tools: expected a list of tool objects, got {_kind(tools)}", "tools")
    for i, t in enumerate(tools or []):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(
                f'tools[{i}]: expected {{"type": "function", "function": {{"name": str, ...}}}}, '
                f"got {json.dumps(t)[:80]}",
                "tools",
            )
        if not isinstance(fn.get("parameters", {}), (dict, type(None))):
            got = _kind(fn["parameters"])
            where = f"tools[{i}].function.parameters"
            raise BadRequest(f"{where}: expected an object, got {got}", "tools")
    choice = body.get("tool_choice")
    if choice is not None and not isinstance(choice, str):
        fn = choice.get("function") if isinstance(choice, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(
                'tool_choice: expected "auto", "required", "none" or {"type": "function", '
                f'"function": {{"name": str}}}}, got {json.dumps(choice)[:80]}',
                "tool_choice",
            )
    for key, kind in (("vllm_xargs", dict), ("messages", list)):
        if body.get(key) is not None and not isinstance(body[key], kind):
            want = "an object" if kind is dict else "a list"
            raise BadRequest(f"{key}: expected {want}, got {_kind(body[key])}", key)


def _too_deep(raw: bytes) -> BadRequest:
    """The 400 for a body nested past Python's JSON parser, naming its top-level field."""
    field = None
    ws = json.decoder.WHITESPACE.match  # type: ignore[attr-defined]
    try:
        text = raw.decode()
        decoder = json.JSONDecoder()
        i = ws(text, 0).end()
        if text[i] == "{":
            i += 1
            while field is None:
                i = ws(text, i).end()
                key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
                i = ws(text, ws(text, i).end() + 1).end()  # past the colon
                try:
                    _, i = decoder.raw_decode(text, i)
                except RecursionError:
                    field = key
                i = ws(text, i).end() + 1  # past the comma
    except (ValueError, IndexError, RecursionError):
        pass
    limit = sys.getrecursionlimit()
    return BadRequest(
        f"{field or 'request body'}: JSON nested too deeply to read (Python's parser stops "
        f"near {limit} levels)",
        field,
    )


Read = tuple[bytes | None, dict[str, Any] | None, dict[str, Any] | None]


def read_body(raw: bytes, fmt: str | None, ctx: PromptContext | None = None) -> Read:
    """``(the rewritten body or None to pass it on unchanged, the request as vLLM gets it
    parsed, None when it is no JSON object, the routing record of a registry request)``;
    ``BadRequest`` to refuse. The body is parsed once, here (off the event loop in the
    middleware); ``ctx`` bounds a registry's tools by the served model's context."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _too_deep(raw) from None
    except ValueError:
        return None, None, None  # vLLM answers malformed JSON itself
    if not isinstance(body, dict):
        return None, None, None
    changed = False
    routing = None
    registry = _names_registry(body)
    none = body.get("tool_choice") == "none" and body.get("tools") and fmt is not None
    if not (registry or none):
        return None, body, None
    check_shapes(body)
    try:
        if registry:
            routing = expand_registry(body, ctx)
            changed = True
        if none and fmt is not None:
            _none_xargs(body, fmt)
            changed = True
        return (json.dumps(body).encode() if changed else None), body, routing
    except (TypeError, AttributeError, KeyError, IndexError, RecursionError) as exc:
        logger.warning("trierouter: request body refused: %r", exc)  # a shape check_shapes missed
        raise BadRequest(f"request body: {type(exc).__name__}: {exc}", None) from exc


async def _send_error(send: Send, message: str, param: str | None) -> None:
    payload = json.dumps(
        {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _vllm_auth(app: Any) -> Callable[[Scope], bool] | None:
    """vLLM's own authentication (``--api-key``, ``VLLM_API_KEY``) as ``scope -> accepted``:
    its ``AuthenticationMiddleware`` found in the stack below ``app`` (vLLM adds user middleware
    outside it), with its token check and its guarded paths. ``None``: the server has none.
    Authentication configured but not found stops the server (nothing of trierouter may run
    before it)."""
    node, depth = app, 0
    while node is not None and depth < 64:
        if type(node).__name__ == "AuthenticationMiddleware" and hasattr(node, "verify_token"):
            break
        node, depth = getattr(node, "app", None), depth + 1
    else:
        node = None
    if node is None:
        configured = os.environ.get("VLLM_API_KEY") or any(
            a == "--api-key" or a.startswith("--api-key=") for a in sys.argv
        )
        if configured:
            raise RuntimeError(
                "trierouter: the server has an API key but vLLM's AuthenticationMiddleware is "
                "not in the middleware stack below ToolSearchMiddleware; refusing to run "
                "trierouter's request checks before authentication"
            )
        return None
    auth = node
    module = sys.modules.get(type(auth).__module__)
    guarded = tuple(getattr(module, "GUARDED_PREFIX", ("",)))  # unknown: every path guarded

    def accepted(scope: Scope) -> bool:
        if scope.get("method") == "OPTIONS":
            return True  # vLLM lets OPTIONS through; the middleware acts on POST only
        path = str(scope.get("path", "")).removeprefix(str(scope.get("root_path", "")))
        if not path.startswith(guarded):
            return True
        from starlette.datastructures import Headers

        return bool(auth.verify_token(Headers(scope=scope)))

    return accepted


class ToolSearchMiddleware:
    """ASGI middleware for ``vllm serve --middleware`` (module docstring)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self._accepted = _vllm_auth(app)
        if settings.TOOLS.is_set():  # load now (a bad registry stops the server with its
            names = sorted(list_tool_registries())  # problems), build the searches
            logger.info("trierouter: tool registries %s from $%s", names, ENV_TOOLS)
            for name in names:
                try:
                    search_for(name)
                except (ValueError, OSError) as exc:
                    raise RuntimeError(f"${ENV_TOOLS}: registry {name!r}: {exc}") from exc
        if settings.ANALYSIS_DIR.is_set():  # under trierouter serve: the worker, warmed now
            start_worker()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope.get("type") != "http"
            or scope.get("method") != "POST"
            or not str(scope.get("path", "")).endswith("/chat/completions")
            or (self._accepted is not None and not self._accepted(scope))
        ):  # not ours, or not authenticated: vLLM answers it (a 401) untouched
            await self.app(scope, receive, send)
            return
        count_work("middleware")
        limit = settings.MAX_BODY_BYTES.get()
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _send_error(
                send,
                f"request body of {int(declared)} bytes, more than ${ENV_MAX_BODY_BYTES}="
                f"{limit}; serve large tool sets as a named registry (${ENV_TOOLS})",
                None,
            )
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _send_error(send, f"request body over ${ENV_MAX_BODY_BYTES}={limit}", None)
                return
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        raw = b"".join(chunks)
        try:
            import anyio

            new, request, routing = await anyio.to_thread.run_sync(
                read_body, raw, _format_of(scope), _prompt_context(scope)
            )
        except BadRequest as exc:
            await _send_error(send, str(exc), exc.param)
            return
        if request is not None and needs_preparation(request):  # checked off loop and step
            await prepare_request(raw, request, _syntax_of(scope))
        body = raw if new is None else new
        if new is not None:
            scope = dict(scope)
            hdrs = [(k, v) for k, v in scope.get("headers", []) if k != b"content-length"]
            scope["headers"] = [*hdrs, (b"content-length", str(len(body)).encode())]
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, _with_extensions(request, routing, send))


_contexts: dict[int, PromptContext | None] = {}


def _prompt_context(scope: Scope) -> PromptContext | None:
    """The served model's tokenizer and context length, from the running app's chat handler
    (``None`` where it has none: no budget is applied then)."""
    app = scope.get("app")
    key = id(app)
    if key not in _contexts:
        chat = getattr(getattr(app, "state", None), "openai_serving_chat", None)
        tokenizer = getattr(getattr(chat, "renderer", None), "tokenizer", None)
        length = getattr(getattr(chat, "model_config", None), "max_model_len", None)
        ok = tokenizer is not None and isinstance(length, int)
        _contexts[key] = PromptContext(tokenizer, int(length or 0)) if ok else None
    return _contexts[key]


def _with_extensions(
    request: dict[str, Any] | None, routing: dict[str, Any] | None, send: Send
) -> Send:
    """``send``, through which a non-streamed answer to a request with tools (``request``, the
    parsed body) gets the ``trierouter`` extension field on each call of a relaxed tool
    (``relaxed_response``) and, for a registry request, the ``trierouter_routing`` field:
    ``routing``, the tools its search considered and what reached the prompt."""
    if (
        request is None
        or request.get("stream")
        or not (request.get("tools") or _names_registry(request))
    ):
        return send
    start: Message | None = None
    parts: list[bytes] = []

    async def held(msg: Message) -> None:
        nonlocal start
        if msg["type"] == "http.response.start" and msg.get("status") == 200:
            start = msg
            return
        if msg["type"] != "http.response.body" or start is None:
            await send(msg)
            return
        parts.append(msg.get("body", b""))
        if msg.get("more_body", False):
            return
        out = b"".join(parts)
        new = relaxed_response(out, request)
        if routing is not None:
            new = _with_routing(new or out, routing) or new
        head = start
        if new is not None:
            out = new
            hdrs = [(k, v) for k, v in head.get("headers", []) if k.lower() != b"content-length"]
            head = {**head, "headers": [*hdrs, (b"content-length", str(len(out)).encode())]}
        start = None
        await send(head)
        await send({"type": "http.response.body", "body": out, "more_body": False})

    return held


def _with_routing(response: bytes, routing: dict[str, Any]) -> bytes | None:
    try:
        data = json.loads(response)
    except ValueError:
        return None
    if not isinstance(data, dict) or "choices" not in data:
        return None
    data[ROUTING_FIELD] = routing
    return json.dumps(data, ensure_ascii=False).encode()


def _names_registry(request: dict[str, Any]) -> bool:
    xargs = request.get("vllm_xargs")
    return isinstance(xargs, dict) and ARG_TOOLS in xargs
