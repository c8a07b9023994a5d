"""LangChain chat model: tool calls (and finite-set answers) decoded through trierouter.

    llm = ChatTrieRouter(model=hf_model, tokenizer=hf_tokenizer)       # in process (transformers)
    llm = ChatTrieRouter(base_url="http://host:8000/v1", model_name="qwen")   # a trierouter serve
    msg = llm.bind_tools([get_weather, WeatherQuery, lc_tool, openai_dict]).invoke("Weather?")
    msg.tool_calls        # [{"name": "get_weather", "args": {...}, "id": "call_...", ...}]
    llm.with_structured_output(Literal["spam", "ham"]).invoke("Buy now!")   # -> "spam"

``bind_tools`` reads tools through :class:`~trierouter.registry.tool_registry.ToolRegistry`
(functions, pydantic models, LangChain tools, OpenAI / Anthropic / MCP dicts) and takes LangChain's
``tool_choice`` (``"auto"``, ``"any"`` / ``"required"`` / ``True``, ``"none"``, a tool name).
In process, the prompt is the tokenizer's chat template with the tools, and the call is decoded
in the model's native syntax (``<tool_call>`` for Qwen/Hermes templates); against a server, the
request is a standard OpenAI chat completion. A finite set (``Literal``, an ``Enum``, a list of
strings) in ``with_structured_output`` is decoded as one value through the trie; any other
schema goes through LangChain's own tool-calling path (a forced call of that schema).
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import secrets
import typing
from collections.abc import Sequence
from typing import Any

from trierouter.errors import missing
from trierouter.registry.call_formats import model_call_format
from trierouter.registry.call_text import envelope, scan_calls
from trierouter.registry.tool_registry import ToolRegistry
from trierouter.router.tool_calls.native import native_plan

try:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import Runnable, RunnableLambda
    from pydantic import ConfigDict, PrivateAttr
except ImportError as exc:  # pragma: no cover - exercised only without langchain-core
    raise missing("langchain_core", "langchain") from exc

__all__ = ["ChatTrieRouter", "finite_labels"]

_ARG_LABELS = "trierouter_labels"


def finite_labels(schema: Any) -> list[Any] | None:
    """The values of a finite-set schema (``Literal[...]``, an ``Enum`` class, a list or tuple
    of strings), or ``None`` for any other schema."""
    if isinstance(schema, list | tuple) and schema and all(isinstance(v, str) for v in schema):
        return list(schema)
    if isinstance(schema, type) and issubclass(schema, enum.Enum):
        return list(schema)
    if typing.get_origin(schema) is typing.Literal:
        args = typing.get_args(schema)
        if args and all(isinstance(a, str) for a in args):
            return list(args)
    return None


def _label_text(v: Any) -> str:
    return str(v.value) if isinstance(v, enum.Enum) else str(v)


def _tool_choice(choice: Any) -> Any:
    """LangChain's ``tool_choice`` in OpenAI's form."""
    if choice is None or choice == "auto":
        return "auto"
    if choice is True or choice in ("any", "required"):
        return "required"
    if choice == "none":
        return "none"
    if isinstance(choice, str):
        return {"type": "function", "function": {"name": choice}}
    if isinstance(choice, dict):
        return choice
    raise ValueError(
        f"tool_choice={choice!r}: expected 'auto', 'any'/'required'/True, 'none', a tool name "
        "or an OpenAI tool_choice dict"
    )


def _choice_name(choice: Any) -> str:
    if isinstance(choice, dict):
        return str(choice["function"]["name"])
    return str(choice)


def _history_for_template(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages with tool-call arguments as dicts (chat templates ``tojson`` them)."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if calls:
            m = dict(m)
            fixed = []
            for c in calls:
                c = json.loads(json.dumps(c))
                fn = c.get("function", {})
                if isinstance(fn.get("arguments"), str):
                    with contextlib.suppress(ValueError):
                        fn["arguments"] = json.loads(fn["arguments"] or "{}")
                fixed.append(c)
            m["tool_calls"] = fixed
        out.append(m)
    return out


def _ai_message(text: str, fmt: str, choice: str) -> AIMessage:
    if choice == "none":
        return AIMessage(content=text)
    content, calls = scan_calls(text, envelope(fmt, auto=choice == "auto"))
    done = [c for c in calls if c.complete]
    if not done:
        return AIMessage(content=text)
    return AIMessage(
        content=content,
        tool_calls=[
            {
                "name": c.name,
                "args": json.loads(c.arguments),
                "id": "call_" + secrets.token_hex(12),
                "type": "tool_call",
            }
            for c in done
        ],
    )


class ChatTrieRouter(BaseChatModel):
    """A LangChain chat model whose tool calls are constrained by trierouter (module doc)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=())

    model: Any = None
    """A transformers causal LM (in-process engine)."""
    tokenizer: Any = None
    """Its tokenizer (with the chat template)."""
    base_url: str | None = None
    """A ``trierouter serve`` endpoint (``.../v1``) instead of a local model."""
    api_key: str = "none"
    model_name: str = "default"
    """The served model's name (server mode)."""
    max_tokens: int = 256
    temperature: float = 0.0
    seed: int | None = None
    tool_format: str | None = None
    """Native call syntax (in process); default: read from the chat template."""

    _compiled: dict[str, Any] = PrivateAttr(default_factory=dict)
    _index: Any = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "trierouter"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "model_name": self.model_name}

    # -- binding ------------------------------------------------------------------------------
    def bind_tools(
        self,
        tools: Sequence[Any],
        *,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> Runnable[Any, AIMessage]:
        """Bind tools in any form :class:`ToolRegistry` reads; ``tool_choice`` as LangChain's."""
        registry = ToolRegistry()
        registry.add(*tools)
        return self.bind(
            tools=registry.to_openai(), tool_choice=_tool_choice(tool_choice), **kwargs
        )

    def with_structured_output(
        self, schema: Any, *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[Any, Any]:
        """A finite set (``Literal``, ``Enum``, list of str): one value through the trie;
        anything else: LangChain's forced-tool-call path."""
        labels = finite_labels(schema)
        if labels is None:
            return super().with_structured_output(schema, include_raw=include_raw, **kwargs)
        if include_raw:
            raise ValueError("include_raw is not supported for a finite set of labels")
        by_text = {_label_text(v): v for v in labels}

        def pick(msg: BaseMessage) -> Any:
            text = msg.content if isinstance(msg.content, str) else str(msg.content)
            if text not in by_text:
                raise ValueError(f"the answer {text!r} is not one of the labels")
            return by_text[text]

        return self.bind(**{_ARG_LABELS: list(by_text)}) | RunnableLambda(pick)

    # -- generation ---------------------------------------------------------------------------
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        oa = convert_to_openai_messages(messages)
        msgs = oa if isinstance(oa, list) else [oa]
        tools = kwargs.get("tools") or None
        choice = kwargs.get("tool_choice", "auto") if tools else None
        labels = kwargs.get(_ARG_LABELS)
        if self.base_url is not None:
            msg = self._remote(msgs, tools, choice, labels, stop)
        else:
            msg = self._local(msgs, tools, choice, labels)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _remote(
        self,
        msgs: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        choice: Any,
        labels: list[str] | None,
        stop: list[str] | None,
    ) -> AIMessage:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover
            raise missing("openai", "langchain") from exc
        client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key)
        extra: dict[str, Any] = {}
        if labels is not None:
            extra["vllm_xargs"] = {"trierouter_choices": labels}
        args: dict[str, Any] = {
            "model": self.model_name,
            "messages": msgs,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if tools:
            args["tools"], args["tool_choice"] = tools, choice
        if self.seed is not None:
            args["seed"] = self.seed
        if stop:
            args["stop"] = stop
        r = client.chat.completions.create(**args, extra_body=extra or None)
        m = r.choices[0].message
        calls = [
            {
                "name": c.function.name,
                "args": json.loads(c.function.arguments or "{}"),
                "id": c.id,
                "type": "tool_call",
            }
            for c in m.tool_calls or []
        ]
        return AIMessage(content=m.content or "", tool_calls=calls)

    def _local(
        self,
        msgs: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        choice: Any,
        labels: list[str] | None,
    ) -> AIMessage:
        if self.model is None or self.tokenizer is None:
            raise ValueError("ChatTrieRouter needs model= and tokenizer=, or base_url=")
        from trierouter.router.transformers import generate

        prompt = self.tokenizer.apply_chat_template(
            _history_for_template(msgs),
            tools=tools,
            add_generation_prompt=True,
            tokenize=False,
        )
        sample = self.temperature > 0
        opts: dict[str, Any] = {
            "max_new_tokens": self.max_tokens,
            "do_sample": sample,
            "temperature": self.temperature if sample else 1.0,
            "seed": self.seed,
        }
        if labels is not None:
            (res,) = generate(self.model, self.tokenizer, [prompt], labels, **opts)
            return AIMessage(content=res.text)
        if not tools:
            return AIMessage(content=self._free_text(prompt))
        fmt = self.tool_format or self._format()
        compiled = self._compile(tools, fmt)
        c = (
            choice
            if isinstance(choice, str) and choice in ("auto", "none", "required")
            else (_choice_name(choice))
        )
        plan = native_plan(compiled, tool_choice=c, budget=max(4, self.max_tokens // 8))
        (res,) = generate(self.model, self.tokenizer, [prompt], plan, **opts)
        return _ai_message(res.text, fmt, c)

    def _free_text(self, prompt: str) -> str:
        import torch

        enc = self.tokenizer(prompt, return_tensors="pt")
        with torch.no_grad():
            out = self.model.generate(
                **enc,
                max_new_tokens=self.max_tokens,
                do_sample=self.temperature > 0,
                **({"temperature": self.temperature} if self.temperature > 0 else {}),
            )
        text: str = self.tokenizer.decode(
            out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        return text

    def _format(self) -> str:
        fmt = model_call_format(self.tokenizer)
        if fmt is None:
            raise ValueError(
                "cannot tell the model's tool-call syntax from its chat template or vocabulary; "
                "pass tool_format="
            )
        return fmt

    def _compile(self, tools: list[dict[str, Any]], fmt: str) -> Any:
        from trierouter.registry.compiler import compile_tools
        from trierouter.registry.index import TokenIndex
        from trierouter.router.transformers import _vocabulary_for, model_width

        key = hashlib.sha256(
            (fmt + json.dumps(tools, sort_keys=True)).encode("utf-8", "surrogatepass")
        ).hexdigest()
        hit = self._compiled.get(key)
        if hit is None:
            if self._index is None:
                width = model_width(self.model)
                self._index = TokenIndex.get(_vocabulary_for(self.tokenizer, width))
            hit = compile_tools(tools, self._index, format=fmt)
            if len(self._compiled) >= 16:
                self._compiled.pop(next(iter(self._compiled)))
            self._compiled[key] = hit
        return hit
