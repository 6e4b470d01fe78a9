"""Evaluation sets: prompts with expected answers, sent to candidates and scored (`--eval-set`).

One JSON object per line:

    {"id": "w-1", "task": "shipping", "difficulty": "easy",
     "input": "How heavy can my parcel be?", "system": "max_weight = 150",
     "expect": "{\"max_weight\": 150}"}

- `id` (required, unique in the file): stored as the request id of the candidate's record;
- `input` (required): a string is sent as a single user message — a chat.completions body for
  OpenAI-format candidates, a messages body with `max_tokens: 1024` for Anthropic ones — with
  `system` (optional) as the system prompt; such items suit candidates of either provider. An
  object is a full request body, sent as it is (its `model` replaced) to `endpoint` (default
  chat.completions; `messages` for an Anthropic body). Its wire format is the endpoint's, so it
  can only go to candidates that speak it (mirrorgate does not translate);
- `expect` (required, except with `score: checks`): the expected answer. A string is compared
  as it is; any other JSON value is compared with its JSON text (`json.dumps`); an object whose
  only key is `json` (`{"json": {...}}`) is scored by JSON equality with that value;
- `score` (optional): how the answer is judged correct — `text` (the default: equal after
  normalisation; exact equality is reported too), `json` (the answer parses as JSON equal to
  `expect`'s value, key order and whitespace ignored; a string `expect` is read as JSON text;
  its score is the share of top-level fields right),
  `checks` (every rule check of `route` passes, for the rule version the item's system prompt
  resolves to) or `judge` (the LLM judge scores the answer against the primary's with the
  item's `rubric`; sets built from traffic mark cases without a reference this way);
- `route` (required with `score: checks`, optional otherwise): the configured route whose rule
  checks apply; with another method they run too, and a failed check fails the item;
- `rubric` (required with `score: judge`): what the judge looks for;
- `task`, `difficulty` (optional, default `-`): the groups accuracy is reported by.

A line that cannot be used is reported with its number and skipped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzers.evalscore import SCORE_METHODS, ScoreMethod
from proxy.config import ModelSpec

from .job import ENDPOINTS_BY_NAME, Reference, ReplayJob
from .source import check_stream

ANTHROPIC_MAX_TOKENS = 1024
"""`max_tokens` of the messages body built for a string input (Anthropic requires one)."""
UNGROUPED = "-"


@dataclass(frozen=True, slots=True)
class EvalItem:
    """One line of an evaluation set."""

    item_id: str
    task: str
    difficulty: str
    expect: str
    prompt: str | None
    """The input, when it is a string (a single user message)."""
    system: str | None
    """The system prompt sent with `prompt`."""
    body: dict[str, Any] | None
    """The input, when it is a full request body."""
    endpoint: str
    """Where `body` goes (for a string input: decided by each candidate's provider)."""
    method: ScoreMethod = "text"
    """How the answer is scored (`score`; `json` for an `expect: {json: ...}`)."""
    expect_value: Any = None
    """The expected JSON value (`json` items)."""
    route: str | None = None
    """The route whose rule checks score the answer (`checks` items)."""

    def job(self, set_name: str, candidate: str, spec: ModelSpec) -> ReplayJob:
        """This item as a request to `candidate`."""
        anthropic = spec.provider == "anthropic"
        endpoint = self.endpoint
        if self.body is not None:
            body: dict[str, Any] = self.body
        elif anthropic:
            endpoint = "messages"
            body = {
                "max_tokens": ANTHROPIC_MAX_TOKENS,
                "messages": [{"role": "user", "content": self.prompt}],
            }
            if self.system:
                body["system"] = self.system
        else:
            system = [{"role": "system", "content": self.system}] if self.system else []
            body = {"messages": [*system, {"role": "user", "content": self.prompt}]}
        return ReplayJob(
            request_id=self.item_id,
            route=f"eval:{set_name}",
            candidate=candidate,
            endpoint=ENDPOINTS_BY_NAME[endpoint],
            body=body,
            reference=Reference(target="expect", text=self.expect),
            pair_kind="eval",
            tags=("eval", set_name),
        )


@dataclass(frozen=True, slots=True)
class EvalSet:
    """The usable items of an evaluation set file, and the lines that were not."""

    name: str
    """The file's stem: records are tagged `("eval", name)`."""
    items: tuple[EvalItem, ...]
    problems: tuple[str, ...] = ()
    """`<file>:<line>: <why>` for every skipped line."""

    def jobs(self, candidates: Mapping[str, ModelSpec]) -> list[ReplayJob]:
        """Every item for every candidate, item by item."""
        pairs = [(item, name, spec) for item in self.items for name, spec in candidates.items()]
        return [item.job(self.name, name, spec) for item, name, spec in pairs]


def read_eval_set(path: Path, *, limit: int | None = None) -> EvalSet:
    """The first `limit` (default: all) usable items of `path`. Raises `OSError` when the file
    cannot be read."""
    items: list[EvalItem] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                item = _parse_item(line)
            except ValueError as exc:
                problems.append(f"{path}:{number}: {exc}; line skipped")
                continue
            if item.item_id in seen:
                problems.append(
                    f"{path}:{number}: id '{item.item_id}' was already used on line "
                    f"{seen[item.item_id]}; line skipped"
                )
                continue
            seen[item.item_id] = number
            if limit is None or len(items) < limit:
                items.append(item)
    return EvalSet(path.stem, tuple(items), tuple(problems))


def _parse_item(line: str) -> EvalItem:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at character {exc.pos + 1})") from None
    except ValueError as exc:  # e.g. a number too large to convert
        raise ValueError(f"not valid JSON ({exc})") from None
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    item_id = raw.get("id")
    if not isinstance(item_id, str | int) or isinstance(item_id, bool) or item_id == "":
        raise ValueError("'id' must be a non-empty string or a number")
    method, expect_text, expect_value, route = _scoring(raw)
    value = raw.get("input")
    system = raw.get("system")
    if system is not None and not isinstance(system, str):
        raise ValueError("'system' must be a string")
    endpoint = raw.get("endpoint")
    if isinstance(value, str):
        if endpoint is not None:
            raise ValueError("'endpoint' only goes with a request body as 'input'")
        prompt, body, endpoint = value, None, "chat.completions"
    elif isinstance(value, dict):
        if system is not None:
            raise ValueError("'system' only goes with a string 'input' (put it in the body)")
        if endpoint is not None and endpoint not in ENDPOINTS_BY_NAME:
            known = ", ".join(ENDPOINTS_BY_NAME)
            raise ValueError(f"'endpoint' must be one of {known}, not {endpoint!r}")
        endpoint = endpoint or "chat.completions"
        check_stream(value, endpoint)
        prompt, body = None, value
    else:
        raise ValueError("'input' must be a string (a user message) or a request body (object)")
    return EvalItem(
        item_id=str(item_id),
        task=_group(raw, "task"),
        difficulty=_group(raw, "difficulty"),
        expect=expect_text,
        prompt=prompt,
        system=system,
        body=body,
        endpoint=endpoint,
        method=method,
        expect_value=expect_value,
        route=route,
    )


def _scoring(raw: dict[str, Any]) -> tuple[ScoreMethod, str, Any, str | None]:
    """(method, expected text, expected JSON value, route) of an item."""
    given = raw.get("score")
    method = next((m for m in SCORE_METHODS if m == given), None)
    if given is not None and method is None:
        known = ", ".join(SCORE_METHODS)
        raise ValueError(f"'score' must be one of {known}, not {given!r}")
    route = raw.get("route")
    if method == "checks":
        if not isinstance(route, str) or not route:
            raise ValueError("'score: checks' needs 'route' (the route whose rule checks apply)")
    elif route is not None and (not isinstance(route, str) or not route):
        raise ValueError("'route' must be a non-empty string")
    if method == "judge":
        rubric = raw.get("rubric")
        if not isinstance(rubric, str) or not rubric.strip() or len(rubric) > 20_000:
            raise ValueError("'score: judge' needs 'rubric' (a text of at most 20000 characters)")
        return "judge", rubric, None, route
    if "expect" not in raw:
        if method == "checks":
            return "checks", "", None, route
        raise ValueError("'expect' (the expected answer) is missing")
    expect = raw["expect"]
    wrapped = isinstance(expect, dict) and list(expect) == ["json"]
    if method is None:
        method = "json" if wrapped else "text"
    value = expect["json"] if wrapped and method == "json" else expect
    if method == "json" and not wrapped and isinstance(expect, str):
        try:
            value = json.loads(expect)
        except ValueError:
            raise ValueError("'expect' of a 'score: json' item is not JSON text") from None
    if method == "json":
        return "json", json.dumps(value), value, route
    return method, expect if isinstance(expect, str) else json.dumps(expect), None, route


def _group(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if value is None:
        return UNGROUPED
    if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
        raise ValueError(f"'{key}' must be a string or a number")
    return str(value)
