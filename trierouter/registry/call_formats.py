"""Model-native tool-call syntaxes, one table entry each.

A model is trained to write its calls one way: Qwen 2.5 / Hermes wrap each call in
``<tool_call>`` tags, Llama 3.x JSON-based tool calling writes a bare object with
``"parameters"``, ... Constraining in the model's own syntax keeps it on text it was trained on.
``json_fence`` (never detected from a template) is what small chat models write when their
template's tags are not followed: a Markdown ```` ```json ```` fence around the object;
``json_object`` a bare ``{"name": ...}`` object in the text; ``json_object_braced`` the same
object in doubled braces, ``{{"name": ..., "arguments": {...}}}`` (what Qwen2.5-Coder-1.5B
writes after a tool result, copying its template's escaped example). Under
``tool_choice="auto"`` these start a call beside the template's own opener
(:func:`~trierouter.registry.call_text.auto_formats`), each where the model's calibration kept
it: the model decides, in the syntax it actually writes, and the call that follows is
constrained all the same.
Some formats also wrap the whole turn: Mistral writes ``[TOOL_CALLS][{...}, {...}]`` (one
opening, calls separated by ``, ``, one closing), vLLM's ``tool_choice="required"`` schema a bare
JSON array (``json_array``, opt-in); :attr:`CallFormat.open` and :attr:`CallFormat.close` say so,
and the decoder ends such a turn only after its closing text.
A :class:`CallFormat` says where a call's JSON object sits in the output; the compiler builds the
names trie and each tool's automaton around it (so tokens may cross from the wrapper into the
JSON exactly as the model's tokenizer splits them), the decoder uses it for ``auto`` and parallel
calls, and :mod:`~trierouter.registry.call_text` (the one reader of call text) to parse.

A new format is one entry in :data:`CALL_FORMATS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trierouter.errors import TrieRouterError

__all__ = [
    "AUTO_OPENERS",
    "CALL_FORMATS",
    "CALL_HEAD",
    "TEMPLATE_MARKERS",
    "CallFormat",
    "call_format",
    "has_chat_template",
    "model_call_format",
]

CALL_HEAD = '{"name": "'
"""How every call object starts: the tool name is the first key."""


@dataclass(frozen=True)
class CallFormat:
    """Where the JSON object ``{"name": ..., "<arguments_key>": {...}}`` of a call sits."""

    name: str
    """The table key (``"hermes"``, ``"llama3_json"``, ``"json"``)."""
    prefix: str = ""
    """Text before each call's object (``"<tool_call>\\n"``)."""
    suffix: str = ""
    """Text after each call's object (``"\\n</tool_call>"``)."""
    separator: str = "\n"
    """Text between two calls of one turn (parallel calls)."""
    arguments_key: str = "arguments"
    """The key of the arguments object (Llama 3.x: ``"parameters"``)."""
    trigger: str = "<tool_call>"
    """Under ``tool_choice="auto"``: the text that starts a call (before it, free text)."""
    anchored: bool = False
    """:attr:`trigger` starts a call only at the start of the output or of a line (a bare
    ``{"name"`` object), not inside text (a tool's description quoted as JSON)."""
    hold: int = 1
    """Under parallel calls, how many characters at the end of :attr:`suffix` start what follows
    (so a token crossing from the suffix into the separator stays whole): 1 for ``>\n``, 3 for
    a closing fence that the tokenizer writes as one ```` ``` ```` token; 0 for none, where a
    token crossing from the call's end into the separator is refused instead, but one joining
    the arguments' ``}`` with the whole suffix stays whole (``}}}``: holding the last ``}``
    back would split it)."""
    models: tuple[str, ...] = ()
    """Model families trained on it (documentation)."""
    open: str = ""
    """Text before the first call of a turn (Mistral: ``"[TOOL_CALLS]["``); under ``auto`` it
    starts with :attr:`trigger` or follows it."""
    close: str = ""
    """Text after the last call of a turn (``"]"``), before the end of the output. A format
    with a closing text lets tokens cross from a call's ``}`` into what follows (``}}]``,
    ``},``) instead of holding characters back."""

    def __post_init__(self) -> None:
        if self.close and self.lead(following=True).startswith(self.close[:1]):
            raise ValueError(
                f"CallFormat {self.name!r}: close={self.close!r} and the next call "
                f"({self.separator!r}...) start alike; the decoder tells them apart by the "
                "first character"
            )

    @property
    def watch(self) -> str:
        """What the decoder and the parsers watch for under ``auto``: :attr:`trigger`, after a
        newline when :attr:`anchored` (the output reads as if a newline preceded it, see
        :func:`~trierouter.registry.call_text.first_trigger`)."""
        return "\n" + self.trigger if self.anchored else self.trigger

    # -- text the compiled tries and automata hold ---------------------------------------------
    @property
    def name_tail(self) -> str:
        """What the names trie holds after a tool name: ``", "arguments":``. The space after it
        starts the arguments automaton, so that the token byte-level BPE tokenizers write there
        (`` {"``) stays whole."""
        return f'", "{self.arguments_key}":'

    ARGS_HEAD = " "
    """What the arguments automaton starts with, before ``{``."""

    def tail(self, *, hold: bool = False) -> str:
        """What follows the arguments object: ``}`` and the suffix; ``hold``: without the
        suffix's last :attr:`hold` characters, which then start what follows (another call or
        the end), so a token crossing from the suffix into the separator (``>\n``) stays
        whole."""
        full = "}" + self.suffix
        n = len(self.held(hold=hold))
        return full[:-n] if n else full

    def held(self, *, hold: bool) -> str:
        """The characters :meth:`tail` held back (empty when none)."""
        return self.suffix[-self.hold :] if hold and self.suffix and self.hold > 0 else ""

    def ending(self, *, held: str = "") -> str:
        """What closes the turn after its last call's :meth:`tail`: the held characters and
        :attr:`close` (then only the end of the output)."""
        return held + self.close

    def lead(self, *, after_trigger: bool = False, following: bool = False, held: str = "") -> str:
        """The text before a tool name: the whole call head, or what is left of it once
        :attr:`trigger` was written (``auto``), or (``following``) the held characters, the
        separator and the head of a next call. The first call starts with :attr:`open`."""
        if following:
            return held + self.separator + self.prefix + CALL_HEAD
        head = self.open + self.prefix + CALL_HEAD
        if after_trigger and self.trigger_in_head:
            return head[len(self.trigger) :]
        return head

    @property
    def trigger_in_head(self) -> bool:
        """The call head (:attr:`open`, :attr:`prefix`, ``{"name": "``) begins with
        :attr:`trigger` (Llama 3's bare object, ``json_array``'s ``[{"name": "``): under ``auto``
        the trigger is the first call's start, not text before it."""
        return (self.open + self.prefix + CALL_HEAD).startswith(self.trigger)


CALL_FORMATS: dict[str, CallFormat] = {
    f.name: f
    for f in (
        CallFormat("json", models=("any: a bare object; under auto after <tool_call>",)),
        CallFormat(
            "hermes",
            prefix="<tool_call>\n",
            suffix="\n</tool_call>",
            separator="\n",
            trigger="<tool_call>",
            models=("Qwen2.5", "Qwen3", "Hermes 2/3", "SmolLM2/3"),
        ),
        CallFormat(
            "json_fence",
            prefix="```json\n",
            suffix="\n```",
            separator="\n",
            trigger="```json",
            hold=3,
            models=("small chat models that answer with a fenced JSON object (an auto opener)",),
        ),
        CallFormat(
            "json_object",
            trigger='{"name"',
            anchored=True,
            models=("any chat model that writes its call as a bare JSON object in its text",),
        ),
        CallFormat(
            "json_object_braced",
            prefix="{",
            suffix="}",
            trigger='{{"name"',
            anchored=True,
            hold=0,
            models=(
                "chat models that copy their template's escaped example, {{...}} (an auto opener)",
            ),
        ),
        CallFormat(
            "llama3_json",
            separator="; ",
            arguments_key="parameters",
            trigger=CALL_HEAD,
            models=("Llama 3.1", "Llama 3.2", "Llama 3.3"),
        ),
        CallFormat(
            "mistral",
            separator=", ",
            trigger="[TOOL_CALLS]",
            open="[TOOL_CALLS][",
            close="]",
            models=(
                "Mistral 7B Instruct v0.3",
                "Mistral Nemo",
                "Ministral 8B",
                "Mistral Small 3 / 3.1",
                "Mistral Large 2",
            ),
        ),
        CallFormat(
            "json_array",
            separator=", ",
            arguments_key="parameters",
            trigger="[" + CALL_HEAD,
            open="[",
            close="]",
            models=("opt-in: vLLM's tool_choice='required' JSON schema (an array of calls)",),
        ),
        CallFormat(
            "json_array_lines",
            separator=",\n    ",
            arguments_key="parameters",
            trigger="[\n    " + CALL_HEAD,
            open="[\n    ",
            close="\n]",
            models=(
                "opt-in: json_array with one call per indented line, the layout Qwen2.5 "
                "writes under vLLM's required schema when any whitespace is allowed",
            ),
        ),
    )
}
"""The supported formats by name."""


TEMPLATE_MARKERS: tuple[tuple[str, str], ...] = (
    ("<tool_call>", "hermes"),
    ("<|python_tag|>", "llama3_json"),
    ("[TOOL_CALLS]", "mistral"),
)
"""``(marker, format)``: text in a model's chat template (or a special token of its vocabulary)
that names its native call syntax, in the order they are looked for."""


def _templates(tokenizer: Any) -> list[str]:
    """A tokenizer's chat template texts (a string, or a dict of named templates)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return [t for t in template.values() if isinstance(t, str)]
    return [template] if isinstance(template, str) else []


def has_chat_template(tokenizer: Any) -> bool:
    """Whether a tokenizer carries a chat template (what ``apply_chat_template`` renders)."""
    return any(t.strip() for t in _templates(tokenizer))


def model_call_format(tokenizer: Any) -> str | None:
    """The native call syntax of a model, told by its tokenizer: the first of
    :data:`TEMPLATE_MARKERS` found in its chat template (a string, or a dict of named templates),
    else among its vocabulary's tokens; ``None`` when neither names one. The one place a model's
    call format is detected (the vLLM tool parser and the LangChain adapter both ask here)."""
    for text in _templates(tokenizer):
        for marker, fmt in TEMPLATE_MARKERS:
            if marker in text:
                return fmt
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # a tokenizer without a vocabulary view cannot tell
        return None
    for marker, fmt in TEMPLATE_MARKERS:
        if marker in vocab:
            return fmt
    return None


AUTO_OPENERS: tuple[str, ...] = ("json_fence", "json_object", "json_object_braced")
"""Formats whose trigger starts a call under ``tool_choice="auto"`` beside the model's own: what
chat models write in practice when they do not follow their template's tags (Qwen2.5 0.5B: a
```` ```json ```` fence or a bare object, never ``<tool_call>``; Qwen2.5-Coder-1.5B after a tool
result: the object in doubled braces). The candidates calibration measures
(:mod:`trierouter.router.openers`); a model uses those it gives enough probability."""


def call_format(fmt: str | CallFormat) -> CallFormat:
    """The format named ``fmt`` (or ``fmt`` itself); an unknown name lists the known ones."""
    if isinstance(fmt, CallFormat):
        return fmt
    try:
        return CALL_FORMATS[fmt]
    except (KeyError, TypeError):
        raise TrieRouterError(
            f"format={fmt!r}: unknown tool-call format; use one of {sorted(CALL_FORMATS)} "
            "or a CallFormat"
        ) from None
