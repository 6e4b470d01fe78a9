"""Sticky assignment (same arm on every call, every replica, following the weights; a stopped
arm's units alone move, to control) and the prompt variant in each wire format."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from analyzers.experiments import sample_ratio_mismatch
from proxy.core import ExperimentState, assign, with_system_append

STATE = ExperimentState(
    route="bot",
    experiment_id="e1",
    running=True,
    weights={"control": 0.5, "cheaper": 0.25, "terse": 0.25},
    control="control",
    fingerprint="f",
)
SECRET = b"shared-by-every-replica"


def test_a_unit_always_lands_in_the_same_arm_and_is_hashed() -> None:
    arm, unit = assign(STATE, SECRET, "alice")
    assert all(assign(STATE, SECRET, "alice") == (arm, unit) for _ in range(5))
    assert "alice" not in unit and len(unit) == 24
    # Another experiment (salt) or another key draws afresh.
    other = replace(STATE, experiment_id="e2")
    assert assign(other, SECRET, "alice")[1] != unit
    assert assign(STATE, b"another", "alice")[1] != unit


def test_assignment_follows_the_weights_srm_passes_and_fires_on_a_broken_split() -> None:
    counts = Counter(assign(STATE, SECRET, f"user-{n}")[0] for n in range(20_000))
    weights = dict(STATE.weights)
    assert not sample_ratio_mismatch(counts, weights).flagged
    for arm, share in weights.items():
        assert abs(counts[arm] / 20_000 - share) < 0.02
    broken = dict(counts, cheaper=int(counts["cheaper"] * 0.9))  # a tenth of an arm lost
    assert sample_ratio_mismatch(broken, weights).flagged


def test_a_stopped_arm_sends_its_units_to_control_and_no_other_unit_moves() -> None:
    before = {f"u{n}": assign(STATE, SECRET, f"u{n}")[0] for n in range(2000)}
    stopped = replace(STATE, stopped_arms=frozenset({"cheaper"}))
    after = {u: assign(stopped, SECRET, u)[0] for u in before}
    for unit, arm in before.items():
        assert after[unit] == ("control" if arm == "cheaper" else arm)
    assert stopped.live_weights() == {"control": 0.75, "cheaper": 0.0, "terse": 0.25}


def test_system_prompt_append_in_each_wire_format() -> None:
    text = "Be brief."
    chat: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    out = with_system_append("chat.completions", chat, text)
    assert out["messages"] == [
        {"role": "system", "content": text},
        {"role": "user", "content": "hi"},
    ]
    assert chat == {"messages": [{"role": "user", "content": "hi"}]}  # the client's is untouched
    developer = {"messages": [{"role": "developer", "content": [{"type": "text", "text": "x"}]}]}
    assert with_system_append("chat.completions", developer, text)["messages"][0]["content"] == [
        {"type": "text", "text": "x"},
        {"type": "text", "text": text},
    ]
    assert with_system_append("responses", {"input": "hi"}, text)["instructions"] == text
    assert (
        with_system_append("responses", {"instructions": "Be kind."}, text)["instructions"]
        == f"Be kind.\n\n{text}"
    )
    assert with_system_append("messages", {"system": "Be kind."}, text)["system"] == (
        f"Be kind.\n\n{text}"
    )
    assert with_system_append("messages", {}, text)["system"] == text
    assert with_system_append("embeddings", {"input": "x"}, text) == {"input": "x"}
    hostile = {"messages": "not a list"}
    assert with_system_append("chat.completions", hostile, text) == hostile
