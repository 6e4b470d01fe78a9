"""Building an evaluation set from the store (`mirrorgate evalset build`; docs/evaluation.md).

    sample   EvalStore draws the window's answered primary requests in the database, each rule
             version at a rate that gives it enough rows (rare versions more often)
    parse    each request body: its messages, last user message, system prompt
    dedupe   by the normalised conversation (`analyzers.comparison.normalize`), against the
             cases kept from the previous version too
    classify task by the route's `evalset.task` (rule version, body field, recorded header,
             regex over the last user message); difficulty `edge` (a rare rule version),
             `hard` (long, many turns, corrected, a shadow disagreed) or `easy`
    allocate every task its `min_per_task` (the long tail), the rest in proportion to traffic
    refer    the user's correction, else the primary's answer when every rule check passed on
             it, else a case marked for review (a rubric for the judge, no expected answer)
    write    DIR/cases.jsonl, DIR/held_out.jsonl and DIR/manifest.json, every text as
             `store.bodies` says

Rotation (`--rotate F`) starts from the set already in DIR: it keeps 1 - F of its cases,
replaces the rest with fresh traffic that was never in the set, keeps the held-out part as it
is (it stays disjoint from every case), and adds the step to the manifest's lineage.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from analyzers.comparison import normalize
from proxy.config import EvalSetSpec
from proxy.store import EvalStore, SampledExchange, redact

FORMAT = 1
OVERSAMPLE = 4
"""Rows drawn per case wanted: room for duplicates, unusable bodies and the allocation."""
MIN_DRAWN_PER_VERSION = 40
"""A rule version is drawn at a rate that yields at least this many rows when it has them."""
OTHER_TASK = "other"
NO_TASK = "-"
REVIEW_RUBRIC = (
    "No reference answer: judge whether the answer is correct, follows the instructions and "
    "policies in the request, and is concise."
)
_TASK_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


class BuildProblem(Exception):
    """The set cannot be built as asked; the message says why (exit 1)."""


@dataclass(frozen=True, slots=True)
class Case:
    """One case of a set, and what it was built from."""

    case_id: str
    task: str
    difficulty: str
    body: dict[str, Any]
    endpoint: str
    source_request_id: str
    reference: str
    """How the reference was chosen: `correction`, `primary_passed` or `review`."""
    expect: Any = None
    """The expected answer (None for a case marked for review)."""
    json_expect: bool = False
    rubric: str | None = None
    rule_version: str | None = None
    key: str = ""
    """The normalised conversation (dedupe key)."""

    def as_json(self, route: str) -> dict[str, Any]:
        line: dict[str, Any] = {
            "id": self.case_id,
            "task": self.task,
            "difficulty": self.difficulty,
            "input": self.body,
            "endpoint": self.endpoint,
        }
        if self.rubric is not None:
            line["score"] = "judge"
            line["rubric"] = self.rubric
        elif self.json_expect:
            line["expect"] = {"json": self.expect}
        else:
            line["expect"] = self.expect
        line["route"] = route
        line["source_request_id"] = self.source_request_id
        line["reference"] = self.reference
        if self.rule_version is not None:
            line["rule_version"] = self.rule_version
        return line


@dataclass(frozen=True, slots=True)
class PreviousSet:
    """The set already in the output directory (for a rotation)."""

    manifest: Mapping[str, Any]
    cases: Sequence[Mapping[str, Any]]
    held_out: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class BuiltSet:
    manifest: dict[str, Any]
    cases: list[dict[str, Any]]
    held_out: list[dict[str, Any]]


def _hash(text: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{text}".encode()).hexdigest()


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str))
    return ""


@dataclass(frozen=True, slots=True)
class Conversation:
    body: dict[str, Any]
    last_user: str
    turns: int
    chars: int
    key: str


def parse_request(raw: str | None) -> Conversation | None:
    """The usable parts of a stored request body; None when it is not a chat-shaped request."""
    if not raw:
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    messages = body.get("messages")
    texts: list[str] = []
    last_user = ""
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, dict):
                continue
            text = _text_of(message.get("content"))
            texts.append(f"{message.get('role')}:{normalize(text)}")
            if message.get("role") == "user":
                last_user = text
        system = body.get("system")
        if system is not None:
            texts.insert(0, f"system:{normalize(_text_of(system))}")
    elif isinstance(body.get("input"), str | list):
        last_user = _text_of(body["input"])
        texts.append(f"user:{normalize(last_user)}")
    elif isinstance(body.get("prompt"), str):
        last_user = body["prompt"]
        texts.append(f"user:{normalize(last_user)}")
    if not texts:
        return None
    for key in ("model", "stream", "stream_options"):
        body.pop(key, None)
    count = len(messages) if isinstance(messages, list) else 1
    return Conversation(body, last_user, count, sum(len(t) for t in texts), "\x1f".join(texts))


def _dotted(body: Mapping[str, Any], path: str) -> Any:
    value: Any = body
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _task_value(value: Any) -> str:
    if value is None or isinstance(value, dict | list) or value == "":
        return OTHER_TASK
    text = _TASK_VALUE.sub("_", str(value))[:64].strip("_")
    return text or OTHER_TASK


class TaskClassifier:
    """A route's `evalset.task`, compiled once."""

    def __init__(self, spec: EvalSetSpec) -> None:
        self.spec = spec
        self._patterns = [(name, re.compile(p)) for name, p in spec.tasks.items()]

    def __call__(self, row: SampledExchange, conversation: Conversation) -> str:
        form = self.spec.task
        if form == "none":
            return NO_TASK
        if form == "rule":
            return _task_value(row.rule_version)
        if form == "regex":
            text = conversation.last_user[:100_000]
            return next((n for n, p in self._patterns if p.search(text)), OTHER_TASK)
        kind, _, name = form.partition(":")
        if kind == "body":
            return _task_value(_dotted(conversation.body, name))
        prefix = "task:"
        tagged = next((t[len(prefix) :] for t in row.tags if t.startswith(prefix)), None)
        return _task_value(tagged)


def difficulty_of(
    spec: EvalSetSpec, row: SampledExchange, conversation: Conversation, rare: set[str]
) -> tuple[str, tuple[str, ...]]:
    """(`edge` | `hard` | `easy`, the signals that decided it)."""
    d = spec.difficulty
    if (row.rule_version or "") in rare:
        return "edge", ("rare_version",)
    signals = [
        name
        for name, on in (
            ("long", conversation.chars > d.long_chars),
            ("many_turns", conversation.turns > d.many_turns),
            ("corrected", d.corrected and row.corrected),
            ("disagreed", d.disagreed and row.disagreed),
        )
        if on
    ]
    return ("hard" if signals else "easy"), tuple(signals)


def allocate(available: Mapping[str, int], size: int, minimum: int) -> dict[str, int]:
    """Cases per task, in proportion to what is available, except that a task whose share falls
    under `minimum` gets `minimum` (or all it has): the tail is lifted, the rest shrinks in
    proportion. Largest remainders round; never more than a task has."""
    tasks = {t: n for t, n in available.items() if n > 0}
    quota = dict.fromkeys(available, 0)
    size = min(size, sum(tasks.values()))
    if size <= 0:
        return quota
    if sum(min(n, minimum) for n in tasks.values()) > size:  # more tasks than room
        for task in sorted(tasks, key=lambda t: (-tasks[t], t))[:size]:
            quota[task] = 1
        return quota
    fixed: dict[str, int] = {}
    while True:
        free = {t: n for t, n in tasks.items() if t not in fixed}
        room = size - sum(fixed.values())
        total = sum(free.values())
        shares = {t: room * n / total for t, n in free.items()} if total else {}
        settled = {
            t: (n if shares[t] > n else min(n, minimum))
            for t, n in free.items()
            if shares[t] > n or shares[t] < min(n, minimum)
        }
        if not settled:
            break
        fixed.update(settled)
    quota.update(fixed)
    given = {t: math.floor(s) for t, s in shares.items()}
    quota.update(given)
    left = size - sum(quota.values())
    for task in sorted(shares, key=lambda t: (-(shares[t] - given[t]), t)):
        if left <= 0:
            break
        if quota[task] < tasks[task]:
            quota[task] += 1
            left -= 1
    return quota


def reference_of(row: SampledExchange) -> tuple[str, Any, bool, str | None]:
    """(provenance, expect, expect is JSON, rubric) of a sampled answer."""
    if row.correction:
        value, is_json = _json_value(row.correction)
        return "correction", value, is_json, None
    if not row.corrected and row.checks_failed == 0 and row.response_text:
        value, is_json = _json_value(row.response_text)
        return "primary_passed", value, is_json, None
    return "review", None, False, REVIEW_RUBRIC


def _json_value(text: str) -> tuple[Any, bool]:
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped), True
        except (ValueError, RecursionError):
            pass
    return text, False


def _policy(bodies: str) -> Callable[[str], str]:
    return (lambda text: text) if bodies == "full" else redact


def _redacted_json(value: Any, clean: Callable[[str], str]) -> Any:
    """`value` with `clean` applied to its JSON text (keys, values and all)."""
    return json.loads(clean(json.dumps(value, ensure_ascii=False)))


def build_set(
    store: EvalStore,
    *,
    name: str,
    route: str,
    spec: EvalSetSpec,
    bodies: str,
    since: datetime,
    until: datetime,
    size: int,
    seed: int = 0,
    previous: PreviousSet | None = None,
    rotate: float = 0.0,
) -> BuiltSet:
    """A set of `size` cases (and its held-out part) from `route`'s traffic in the window.
    Raises `BuildProblem` (e.g. store.bodies: none) and `StoreError`s."""
    if bodies == "none":
        raise BuildProblem("store.bodies is none: no request bodies are stored to build from")
    clean = _policy(bodies)
    kept: list[dict[str, Any]] = []
    held_out: list[dict[str, Any]] = [dict(c) for c in previous.held_out] if previous else []
    excluded: set[str] = set()
    keys: set[str] = set()
    if previous is not None:
        ordered = sorted(previous.cases, key=lambda c: _hash(str(c.get("id")), seed))
        keep = len(ordered) - round(len(ordered) * rotate)
        kept = [dict(c) for c in ordered[:keep]]
        for old in [*kept, *previous.held_out]:
            conversation = parse_request(json.dumps(old.get("input")))
            if conversation is not None:
                keys.add(conversation.key)
        # Retired cases never come back either: a rotation brings traffic the set never had.
        excluded = {str(c.get("source_request_id")) for c in [*previous.cases, *previous.held_out]}
        excluded |= {str(r) for r in previous.manifest.get("retired_sources", [])}
    want_held = 0 if previous is not None else round(size * spec.held_out)
    fresh_needed = max(0, size - len(kept)) + want_held
    versions = store.window_versions(route, since, until)
    total = sum(versions.values())
    if total == 0 and fresh_needed:
        raise BuildProblem(
            f"route '{route}' has no answered primary request with a stored body in the window"
        )
    d = spec.difficulty
    rare = {v for v, n in versions.items() if total and n / total < d.rare_version_share}
    drawn = (fresh_needed + len(excluded)) * OVERSAMPLE
    rates = {
        v: min(1.0, max(drawn / total, MIN_DRAWN_PER_VERSION / n)) for v, n in versions.items() if n
    }
    rows = store.sample(route, since, until, rates, seed=seed) if fresh_needed else []
    classify = TaskClassifier(spec)
    pool: dict[str, list[Case]] = {}
    for row in sorted(rows, key=lambda r: _hash(r.request_id, seed)):
        if row.request_id in excluded:
            continue
        conversation = parse_request(row.request_body)
        if conversation is None or conversation.key in keys:
            continue
        keys.add(conversation.key)
        task = classify(row, conversation)
        difficulty, _ = difficulty_of(spec, row, conversation, rare)
        provenance, expect, is_json, rubric = reference_of(row)
        case = Case(
            case_id="c-" + _hash(row.request_id, 0)[:16],
            task=task,
            difficulty=difficulty,
            body=_redacted_json(conversation.body, clean),
            endpoint=row.endpoint,
            source_request_id=row.request_id,
            reference=provenance,
            expect=_redacted_json(expect, clean) if is_json else _clean_text(expect, clean),
            json_expect=is_json,
            rubric=rubric,
            rule_version=row.rule_version,
            key=conversation.key,
        )
        pool.setdefault(task, []).append(case)
    # The held-out part is drawn first, across tasks in proportion, then the cases.
    fresh_held: list[Case] = []
    if want_held:
        held_quota = allocate({t: len(c) for t, c in pool.items()}, want_held, 0)
        for task, n in held_quota.items():
            fresh_held.extend(pool[task][:n])
            pool[task] = pool[task][n:]
    kept_tasks = Counter(str(c.get("task")) for c in kept)
    room = max(0, size - len(kept))
    available = {t: len(c) for t, c in pool.items()}
    minimum = {t: max(0, spec.min_per_task - kept_tasks[t]) for t in available}
    if previous is None:
        quota = allocate(available, room, spec.min_per_task)
    else:
        quota = _respect_minimum(minimum, available, room)
    fresh: list[Case] = []
    for task in sorted(quota):
        fresh.extend(pool[task][: quota[task]])
    cases = [*kept, *(c.as_json(route) for c in fresh)]
    held_out += [c.as_json(route) for c in fresh_held]
    cases.sort(key=lambda c: (str(c["task"]), str(c["difficulty"]), str(c["id"])))
    held_out.sort(key=lambda c: str(c["id"]))
    manifest = _manifest(
        name=name,
        route=route,
        since=since,
        until=until,
        seed=seed,
        cases=cases,
        held_out=held_out,
        versions=versions,
        rare=rare,
        previous=previous,
        rotate=rotate,
        added=len(fresh),
        kept=len(kept),
    )
    return BuiltSet(manifest, cases, held_out)


def _respect_minimum(
    minimum: Mapping[str, int], available: Mapping[str, int], room: int
) -> dict[str, int]:
    """`allocate` with each task's own minimum (a rotation's kept cases count towards it):
    tasks first get what they still lack of it, then the room left in proportion."""
    if not available:
        return {}
    floor = {t: min(minimum.get(t, 0), available[t]) for t in available}
    if sum(floor.values()) >= room:
        return allocate(available, room, min(minimum.values(), default=0))
    extra = allocate({t: available[t] - floor[t] for t in available}, room - sum(floor.values()), 0)
    return {t: floor[t] + extra.get(t, 0) for t in available}


def _clean_text(value: Any, clean: Callable[[str], str]) -> Any:
    return clean(value) if isinstance(value, str) else value


def content_hash(cases: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of the cases as `write_set` writes them (one canonical JSON line each)."""
    digest = hashlib.sha256()
    for case in cases:
        digest.update(_line(case).encode())
    return "sha256:" + digest.hexdigest()


def _line(case: Mapping[str, Any]) -> str:
    return json.dumps(case, ensure_ascii=False, sort_keys=True) + "\n"


def _counts(cases: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "task": dict(sorted(Counter(str(c["task"]) for c in cases).items())),
        "difficulty": dict(sorted(Counter(str(c["difficulty"]) for c in cases).items())),
        "task_difficulty": dict(
            sorted(Counter(f"{c['task']}/{c['difficulty']}" for c in cases).items())
        ),
        "reference": dict(sorted(Counter(str(c.get("reference")) for c in cases).items())),
    }


def _manifest(
    *,
    name: str,
    route: str,
    since: datetime,
    until: datetime,
    seed: int,
    cases: Sequence[Mapping[str, Any]],
    held_out: Sequence[Mapping[str, Any]],
    versions: Mapping[str, int],
    rare: set[str],
    previous: PreviousSet | None,
    rotate: float,
    added: int,
    kept: int,
) -> dict[str, Any]:
    version = int(previous.manifest.get("version", 0)) + 1 if previous else 1
    digest = content_hash(cases)
    lineage = list(previous.manifest.get("lineage", [])) if previous else []
    lineage.append(
        {
            "version": version,
            "content_hash": digest,
            "parent_hash": previous.manifest.get("content_hash") if previous else None,
            "rotate": rotate if previous else None,
            "kept": kept,
            "added": added,
            "retired": len(previous.cases) - kept if previous else 0,
            "window": {"since": _iso(since), "until": _iso(until)},
        }
    )
    return {
        "format": FORMAT,
        "name": name,
        "version": version,
        "route": route,
        "built_at": _iso(datetime.now(UTC)),
        "window": {"since": _iso(since), "until": _iso(until)},
        "seed": seed,
        "cases": len(cases),
        "counts": _counts(cases),
        "references": {
            "correction": "the user's corrected answer (POST /v1/feedback with a correction)",
            "primary_passed": "the primary's answer, every rule check passed on it",
            "review": "no reference: marked for review, scored by the judge with its rubric",
        },
        "traffic": {"rule_versions": dict(sorted(versions.items())), "rare": sorted(rare)},
        "held_out": {"cases": len(held_out), "content_hash": content_hash(held_out)},
        "retired_sources": _retired(previous, cases),
        "content_hash": digest,
        "lineage": lineage,
    }


def _retired(previous: PreviousSet | None, cases: Sequence[Mapping[str, Any]]) -> list[str]:
    """Source requests of every case a rotation retired: never drawn again."""
    if previous is None:
        return []
    now = {str(c.get("source_request_id")) for c in cases}
    before = [str(r) for r in previous.manifest.get("retired_sources", [])]
    gone = [str(c.get("source_request_id")) for c in previous.cases]
    return sorted({*before, *(r for r in gone if r not in now)})


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds")


MANIFEST = "manifest.json"
CASES = "cases.jsonl"
HELD_OUT = "held_out.jsonl"


def read_previous(directory: Path) -> PreviousSet | None:
    """The set in `directory`, or None when there is none. Raises `BuildProblem` for a set
    that cannot be read."""
    manifest_path = directory / MANIFEST
    if not manifest_path.exists():
        return None
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        cases = _read_lines(directory / CASES)
        held = _read_lines(directory / HELD_OUT) if (directory / HELD_OUT).exists() else []
    except (OSError, ValueError, RecursionError) as exc:
        raise BuildProblem(f"cannot read the set in {directory}: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("version"), int):
        raise BuildProblem(f"{manifest_path} is not an evaluation set's manifest")
    if content_hash(cases) != manifest.get("content_hash"):
        raise BuildProblem(
            f"{directory / CASES} does not match its manifest's content hash: "
            "it was edited after the build (build a new set, or restore it)"
        )
    return PreviousSet(manifest, cases, held)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    lines = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                value = json.loads(line)
                if not isinstance(value, dict):
                    raise ValueError(f"{path}: a line is not a JSON object")
                lines.append(value)
    return lines


def write_set(directory: Path, built: BuiltSet) -> None:
    """Write the set's three files (each whole, then renamed into place)."""
    directory.mkdir(parents=True, exist_ok=True)
    for filename, text in (
        (CASES, "".join(_line(c) for c in built.cases)),
        (HELD_OUT, "".join(_line(c) for c in built.held_out)),
        (MANIFEST, json.dumps(built.manifest, indent=2, ensure_ascii=False) + "\n"),
    ):
        temporary = directory / f".{filename}.tmp"
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(directory / filename)
