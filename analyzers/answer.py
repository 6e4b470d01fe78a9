"""What the checks look at: a model's answer, reduced to its text, its tool calls and (where the
provider returned one in a non-streamed answer) its reasoning text.

The proxy builds one `Answer` per exchange from any wire format:

- OpenAI chat completions: `message.content` (string, or the text of its content parts) and
  `message.tool_calls[*].function` (`name`, `arguments` — already JSON text);
- OpenAI responses: `output_text` (the text of every `output_text` part) and every
  `function_call` output item (`name`, `arguments`);
- Anthropic messages: the text of every `text` content block, and every `tool_use` block
  (`name`, and its `input` object serialised with `json.dumps`).

Reasoning: chat `message.reasoning_content` (as OpenAI-compatible providers send it), the summary
texts of Responses `reasoning` items, Anthropic `thinking` blocks.

Text the proxy could not decode as UTF-8 should reach here decoded with `errors="surrogateescape"`
(lone surrogates mark the bad bytes), never silently "fixed": the checks then fail it with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from analyzers.jsonvalue import JSONDocument, parse_json


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool (function) the model asked to call."""

    name: str
    """The tool's name as the model gave it."""
    arguments: str
    """The arguments as JSON text, as the model sent them. Empty text counts as `{}` (some
    providers send nothing for a tool without parameters)."""


@dataclass(frozen=True)
class Answer:
    """A model's answer: its text and its tool calls. Frozen; derived values are computed once
    per answer and shared by every check that runs on it."""

    text: str = ""
    """The answer's text: every text part, concatenated in order."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls, in the order the model made them."""
    reasoning: str = ""
    """The model's reasoning text, where the provider returned it and the gateway captured it
    (Anthropic `thinking` blocks, OpenAI-compatible `reasoning_content`, a Responses reasoning
    summary); "" otherwise. Only `phantom_rule` looks at it."""

    @cached_property
    def text_problem(self) -> str | None:
        """Why the text cannot be judged (empty, or not valid Unicode); None when it can."""
        return text_problem(self.text)

    @cached_property
    def document(self) -> JSONDocument:
        """The text parsed as strict JSON (see `analyzers.jsonvalue.parse_json`)."""
        return parse_json(self.text)


def text_problem(text: str) -> str | None:
    """Why `text` is unusable as an answer, or None: empty (or only whitespace) text, or text
    holding a lone surrogate code point (what `surrogateescape` decoding leaves for bytes that
    were not UTF-8)."""
    if not text or text.isspace():
        return "empty answer" if not text else "empty answer (only whitespace)"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")  # in C, and far faster than a regex scan
    except UnicodeEncodeError as exc:
        return (
            f"answer is not valid UTF-8 text: lone surrogate U+{ord(text[exc.start]):04X} "
            f"at character {exc.start}"
        )
    return None
