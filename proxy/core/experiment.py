"""Online A/B experiments, the pure part: the persisted state of a route's experiment, sticky
assignment of a unit to an arm, and the prompt variant an arm sends.

Assignment (`assign`): an HMAC-SHA256 of the unit key, keyed with the gateway's shared secret
and salted with the experiment's id, gives a bucket in [0, 10000); the arms own consecutive
ranges of buckets by their weights, in config order. The same key lands in the same arm on
every replica, across restarts, for the whole experiment; the next experiment draws afresh. An
arm stopped by a guardrail keeps its range, whose units are then served by control: the other
arms' units never move. The unit recorded (`experiment_unit`) is a part of the same keyed hash,
never the key itself.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

BUCKETS = 10_000


@dataclass(frozen=True, slots=True)
class ExperimentState:
    """A route's experiment as persisted: the last one started (running or stopped)."""

    route: str
    experiment_id: str
    """The experiment's id: the assignment's salt, and the report's key."""
    running: bool
    weights: Mapping[str, float]
    """Arm → share of units (0..1) when it was started, in the arms' order."""
    control: str
    fingerprint: str
    """The configuration it was started with (`experiment_fingerprint`)."""
    revision: int = 1
    """Bumped at every change (a stop, an arm stopped): replicas poll it."""
    stopped_arms: frozenset[str] = frozenset()
    started_at: datetime | None = None
    stopped_at: datetime | None = None
    actor: str = ""
    reason: str = ""
    models: Mapping[str, str] = field(default_factory=dict)
    """Arm → model it was started with (what the decision and the report name)."""

    def live_weights(self) -> dict[str, float]:
        """Arm → share of units it serves now: a stopped arm's share goes to control."""
        live = {arm: (0.0 if arm in self.stopped_arms else w) for arm, w in self.weights.items()}
        live[self.control] = live.get(self.control, 0.0) + sum(
            w for arm, w in self.weights.items() if arm in self.stopped_arms
        )
        return live


def unit_digest(secret: bytes, experiment_id: str, key: str) -> bytes:
    """The keyed hash of a unit key within one experiment."""
    message = experiment_id.encode() + b"\0" + key.encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).digest()


def bucket_of(digest: bytes) -> int:
    return int.from_bytes(digest[:8], "big") % BUCKETS


def unit_id(digest: bytes) -> str:
    """What the store keeps of a unit: 24 hex digits of its keyed hash."""
    return digest[8:20].hex()


def arm_for_bucket(bucket: int, weights: Mapping[str, float]) -> str:
    """The arm owning `bucket` under `weights` (consecutive ranges in the mapping's order)."""
    edge = 0.0
    last = ""
    for arm, weight in weights.items():
        edge += weight * BUCKETS
        last = arm
        if bucket < round(edge):
            return arm
    return last


def assign(state: ExperimentState, secret: bytes, key: str) -> tuple[str, str]:
    """(arm serving this unit now, the unit's recorded id)."""
    digest = unit_digest(secret, state.experiment_id, key)
    arm = arm_for_bucket(bucket_of(digest), state.weights)
    if arm in state.stopped_arms:
        arm = state.control
    return arm, unit_id(digest)


def experiment_fingerprint(spec: Any) -> str:
    """A short fingerprint of an experiment's configuration (arms, weights, unit, metrics)."""
    text = spec.model_dump_json() if hasattr(spec, "model_dump_json") else repr(spec)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_system_append(endpoint: str, payload: Mapping[str, Any], text: str) -> dict[str, Any]:
    """A copy of `payload` with `text` appended to its system prompt, as `endpoint` spells it:
    chat.completions (the first system/developer message, else a new system message first),
    responses (`instructions`), messages (Anthropic `system`, a string or blocks). Other
    endpoints have no system prompt: the copy is unchanged."""
    body = dict(payload)
    if endpoint == "chat.completions":
        messages = body.get("messages")
        if not isinstance(messages, list):
            return body
        messages = list(messages)
        first = messages[0] if messages else None
        if isinstance(first, dict) and first.get("role") in ("system", "developer"):
            messages[0] = {**first, "content": _appended(first.get("content"), text, "text")}
        else:
            messages.insert(0, {"role": "system", "content": text})
        body["messages"] = messages
    elif endpoint == "responses":
        instructions = body.get("instructions")
        body["instructions"] = (
            f"{instructions}\n\n{text}" if isinstance(instructions, str) and instructions else text
        )
    elif endpoint == "messages":
        body["system"] = _appended(body.get("system"), text, "text")
    return body


def _appended(content: Any, text: str, part_type: str) -> Any:
    """`content` (a string, or a list of content parts) with `text` after it."""
    if isinstance(content, list):
        return [*copy.deepcopy(content), {"type": part_type, "text": text}]
    if isinstance(content, str) and content:
        return f"{content}\n\n{text}"
    return text
