"""``trierouter serve``: vLLM's own OpenAI server with trierouter's tool calling switched on.

:func:`main` runs vLLM's server entry point in this process with the flags that load the
``trierouter`` tool parser, the logits processor and :class:`ToolSearchMiddleware`; every other
argument is vLLM's. :class:`ToolSearchMiddleware` is a plain ASGI middleware (``--middleware``)
that works on the JSON body of ``/v1/chat/completions`` before vLLM parses it:

- a body larger than ``$TRIEROUTER_MAX_BODY_BYTES`` (default 16 MiB) is refused with 400;
- ``vllm_xargs.trierouter_tools`` (a named registry from ``$TRIEROUTER_TOOLS``) is expanded:
  the top ``trierouter_tool_search`` tools (default 16) for the conversation (BM25 over the
  registry's names and descriptions; padded with the registry's first tools when fewer match)
  become the request's ``tools``, so the chat template
  renders them, and ``trierouter_allowed`` restricts the call to them unless
  ``trierouter_constrain`` is ``"registry"`` (the whole registry stays callable);
- ``tool_choice: "none"`` with tools gets its constraint (vLLM does not call the tool parser
  then): text in which the model's call opener never appears.

Errors are OpenAI error bodies with status 400, like vLLM's own.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from trierouter.router.vllm.args import ARG_ALLOWED, ARG_TOOLS, ENV_TOOLS, _env_int
from trierouter.router.vllm.checks import RegistrySpecs, registry_specs
from trierouter.router.vllm.named import list_tool_registries

__all__ = [
    "ENV_MAX_BODY_BYTES",
    "SERVE_FLAGS",
    "ToolSearchMiddleware",
    "conversation_query",
    "main",
    "serve_argv",
]

logger = logging.getLogger(__name__)

ENV_MAX_BODY_BYTES = "TRIEROUTER_MAX_BODY_BYTES"
ARG_TOOL_SEARCH = "trierouter_tool_search"
ARG_CONSTRAIN = "trierouter_constrain"
_DEFAULT_K = 16
_MAX_K = 256

SERVE_FLAGS: tuple[str, ...] = (
    "--enable-auto-tool-choice",
    "--tool-call-parser", "trierouter",
    "--logits-processors", "trierouter.router.vllm.processor:TrieRouterLogitsProcessor",
    "--middleware", "trierouter.router.vllm.server.ToolSearchMiddleware",
)  # fmt: skip
"""What ``trierouter serve`` adds to ``vllm serve``."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BadRequest(ValueError):
    """A request the middleware refuses (HTTP 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def conversation_query(messages: Any, *, turns: int = 3) -> str:
    """The text a tool search looks for: the last ``turns`` user and tool messages, newest
    first (the current question weighs most)."""
    texts: list[str] = []
    if not isinstance(messages, list):
        return ""
    for m in reversed(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "tool"):
            continue
        c = m.get("content")
        if isinstance(c, list):  # content parts
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        if isinstance(c, str) and c.strip():
            texts.append(c)
        if len(texts) >= turns:
            break
    return "\n".join(texts)


class _Search:
    """BM25 over one registry's tool names and descriptions, built once in the background."""

    def __init__(self, specs: RegistrySpecs) -> None:
        self.specs = specs
        self._ready = threading.Event()
        self._index: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._build, daemon=True, name="trierouter-bm25").start()

    def _build(self) -> None:
        try:
            from trierouter.shortlist.bm25 import BM25Index

            tools = self.specs.specs
            names = [t.name for t in tools]
            texts = [f"{t.name} {t.description}" for t in tools]
            index = BM25Index.build(names, texts)
            index.search("warm up", 1)  # the first search finalizes the weights
            self._index = index
        except BaseException as exc:  # reported to every request that needs it
            self._error = exc
        finally:
            self._ready.set()

    def search(self, query: str, k: int) -> list[str]:
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError(f"tool search index failed to build: {self._error}")
        found: list[str] = self._index.search(query, k) if query.strip() else []
        if len(found) < k:  # fewer matches than asked: pad with the registry's first tools
            have = set(found)
            for t in self.specs.specs:
                if len(found) >= k:
                    break
                if t.name not in have:
                    found.append(t.name)
        return found


_searches: dict[str, _Search] = {}
_search_lock = threading.Lock()


def _search_for(name: str) -> _Search:
    with _search_lock:
        s = _searches.get(name)
        if s is None:
            s = _searches[name] = _Search(registry_specs(name))
        return s


def expand_registry(body: dict[str, Any]) -> None:
    """Rewrite a request naming a registry: shortlisted tools into ``tools`` (in place)."""
    xargs = body.get("vllm_xargs")
    if not isinstance(xargs, dict) or ARG_TOOLS not in xargs:
        return
    name = xargs[ARG_TOOLS]
    if not isinstance(name, str):
        raise BadRequest(f"vllm_xargs.{ARG_TOOLS}: expected a registry name", "vllm_xargs")
    try:
        specs = registry_specs(name)
    except ValueError as exc:
        raise BadRequest(str(exc), "vllm_xargs") from exc
    k = xargs.pop(ARG_TOOL_SEARCH, _DEFAULT_K)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= _MAX_K:
        raise BadRequest(
            f"vllm_xargs.{ARG_TOOL_SEARCH}={k!r:.40}: expected an int in 1..{_MAX_K}",
            "vllm_xargs",
        )
    constrain = xargs.pop(ARG_CONSTRAIN, "shortlist")
    if constrain not in ("shortlist", "registry"):
        raise BadRequest(
            f"vllm_xargs.{ARG_CONSTRAIN}={constrain!r:.40}: expected 'shortlist' or 'registry'",
            "vllm_xargs",
        )
    pinned: list[str] = []
    for t in body.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) else None
        n = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(n, str) or n not in specs.names:
            raise BadRequest(
                f"tools: {n!r:.80} is not in registry {name!r}; with a registry, tools may "
                "only name its tools (they are always shortlisted)",
                "tools",
            )
        pinned.append(n)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        fn = choice.get("function")
        forced = fn.get("name") if isinstance(fn, dict) else None
        if isinstance(forced, str):
            if forced not in specs.names:
                raise BadRequest(
                    f"tool_choice: no tool named {forced!r} in registry {name!r}", "tool_choice"
                )
            pinned.append(forced)
    found = _search_for(name).search(conversation_query(body.get("messages")), k)
    names = list(dict.fromkeys([*pinned, *found]))
    body["tools"] = specs.openai(names)
    if constrain == "shortlist":
        xargs[ARG_ALLOWED] = names
    body["vllm_xargs"] = xargs


def _none_xargs(body: dict[str, Any], fmt: str) -> None:
    """``tool_choice: "none"`` with tools: the constraint vLLM would not ask the parser for."""
    from trierouter.router.vllm.openai import request_xargs

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


def rewrite_body(raw: bytes, fmt: str | None) -> bytes | None:
    """The rewritten body, or ``None`` to pass it on unchanged (``BadRequest`` to refuse)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None  # vLLM answers malformed JSON itself
    if not isinstance(body, dict):
        return None
    changed = False
    xargs = body.get("vllm_xargs")
    if isinstance(xargs, dict) and ARG_TOOLS in xargs:
        expand_registry(body)
        changed = True
    if body.get("tool_choice") == "none" and body.get("tools") and fmt is not None:
        _none_xargs(body, fmt)
        changed = True
    return json.dumps(body).encode() if changed else None


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


class ToolSearchMiddleware:
    """ASGI middleware for ``vllm serve --middleware`` (module docstring)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        if os.environ.get(ENV_TOOLS):  # load now (a bad registry stops the server with its
            for name in sorted(list_tool_registries()):  # problems), build the searches
                try:
                    _search_for(name)
                except (ValueError, OSError) as exc:
                    raise RuntimeError(f"${ENV_TOOLS}: registry {name!r}: {exc}") from exc

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope.get("type") != "http"
            or scope.get("method") != "POST"
            or not str(scope.get("path", "")).endswith("/chat/completions")
        ):
            await self.app(scope, receive, send)
            return
        limit = _env_int(ENV_MAX_BODY_BYTES, 16 << 20)
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

            new = await anyio.to_thread.run_sync(rewrite_body, raw, _format_of(scope))
        except BadRequest as exc:
            await _send_error(send, str(exc), exc.param)
            return
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

        await self.app(scope, replay, send)


def serve_argv(argv: Sequence[str]) -> list[str]:
    """vLLM's server arguments for ``trierouter serve MODEL [ARGS]``: the model as ``--model``
    and :data:`SERVE_FLAGS` unless already given."""
    args = list(argv)
    if args and not args[0].startswith("-"):
        args = ["--model", args[0], *args[1:]]
    extra: list[str] = []
    flags = list(SERVE_FLAGS)
    if _processor_installed():  # vLLM loads it from the entry point already: not twice
        i = flags.index("--logits-processors")
        del flags[i : i + 2]
    i = 0
    while i < len(flags):
        flag = flags[i]
        takes_value = i + 1 < len(flags) and not flags[i + 1].startswith("--")
        if flag not in args:
            extra.extend(flags[i : i + 2] if takes_value else [flag])
        i += 2 if takes_value else 1
    return [*args, *extra]


def _processor_installed() -> bool:
    """Whether the ``vllm.logits_processors`` entry point of an installed trierouter loads the
    processor into every engine."""
    import importlib.metadata

    eps = importlib.metadata.entry_points(group="vllm.logits_processors")
    return any(e.value.startswith("trierouter.") for e in eps)


def main(argv: Sequence[str] | None = None) -> None:
    """Run vLLM's OpenAI server in this process (``trierouter serve MODEL [vllm flags]``)."""
    from trierouter.router.vllm.plugin import register

    register()
    sys.argv = ["trierouter serve", *serve_argv(sys.argv[1:] if argv is None else argv)]
    from vllm.entrypoints.launchers.api_server.entry import main as vllm_main

    vllm_main()  # type: ignore[no-untyped-call,unused-ignore]


if __name__ == "__main__":
    main()
