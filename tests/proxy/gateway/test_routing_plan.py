"""The route table's choice for one request: the primary, or the canary for its sticky share."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from proxy.config import parse_config
from proxy.core.records import Arm
from proxy.core.rollout_state import Action, transition
from proxy.gateway.routing import RouteTable

CONFIG = """
models:
  prod: {provider: openai, base_url: "http://h/v1", model: p}
  cand: {provider: openai, base_url: "http://h/v1", model: c}
  safe: {provider: openai, base_url: "http://h/v1", model: s}
routes:
  bot:
    primary: prod
    fallback: safe
    canary: {model: cand, steps: [30, 60], sticky: "header:x-user-id"}
  plain: {primary: prod}
"""


def table_in_rollout() -> RouteTable:
    config = parse_config(CONFIG, {})
    table = RouteTable(config)
    state = table.get("bot")
    assert state is not None and state.rollout is not None
    started = transition(
        state.rollout, Action.START, config.routes["bot"], now=datetime.now(UTC),
        reason="test", actor="operator",
    )  # fmt: skip
    table.apply(started.after)
    return table


def users(n: int) -> list[list[tuple[bytes, bytes]]]:
    return [[(b"x-user-id", f"user-{i}".encode())] for i in range(n)]


def test_unknown_routes_have_no_plan_and_plain_routes_go_to_their_primary() -> None:
    table = RouteTable(parse_config(CONFIG, {}))
    assert table.plan("nope") is None
    plan = table.plan("plain", request_id="r1")
    assert plan is not None and (plan.target, plan.arm) == ("prod", Arm.PRIMARY)
    assert table.names() == ["bot", "plain"]


def test_before_the_rollout_starts_nobody_is_on_the_canary() -> None:
    table = RouteTable(parse_config(CONFIG, {}))
    plans = [table.plan("bot", headers) for headers in users(200)]
    assert {(p.target, p.arm) for p in plans if p} == {("prod", Arm.PRIMARY)}


def test_the_canary_takes_its_weight_of_users_and_each_user_stays_on_one_arm() -> None:
    table = table_in_rollout()
    state = table.get("bot")
    assert state is not None and state.canary is not None and state.canary.weight == 30.0
    arms = [plan.arm for headers in users(10_000) if (plan := table.plan("bot", headers))]
    share = arms.count(Arm.CANARY) / len(arms)
    # Each rollout draws its own users (its id salts the key), so the share is a fresh draw every
    # run: five standard deviations (~0.023) miss about once in two million runs. The 2,000
    # users and 0.03 this had were three, and failed once in a few hundred.
    assert abs(share - 0.30) < 5 * math.sqrt(0.30 * 0.70 / len(arms))
    for headers in users(50):
        first = table.plan("bot", headers, request_id="a")
        again = table.plan("bot", headers, request_id="b")
        assert first is not None and again is not None and first.arm == again.arm
        assert first.target == ("cand" if first.arm is Arm.CANARY else "prod")


def test_without_the_sticky_header_the_request_id_decides() -> None:
    table = table_in_rollout()
    arms = {plan.arm for i in range(300) if (plan := table.plan("bot", (), {}, request_id=f"r{i}"))}
    assert arms == {Arm.PRIMARY, Arm.CANARY}


def test_each_request_carries_its_users_keyed_unit_on_both_arms() -> None:
    table = table_in_rollout()
    plans = [table.plan("bot", headers, request_id="r") for headers in users(200)]
    units = [p.sticky_unit for p in plans if p]
    assert len(set(units)) == 200  # one unit per user
    assert all(u is not None and len(u) == 24 and "user" not in u for u in units)
    assert {p.arm for p in plans if p} == {Arm.PRIMARY, Arm.CANARY}
    again = table.plan("bot", users(1)[0], request_id="other")
    assert again is not None and again.sticky_unit == units[0]  # the same user, the same unit
    # Keyed: another secret (another gateway's table) records another unit for the same user.
    other = RouteTable(parse_config(CONFIG, {}), experiment_secret=b"another secret")
    plan = other.plan("bot", users(1)[0])
    assert plan is not None and plan.sticky_unit not in (None, units[0])


def test_no_unit_without_a_sticky_key_or_without_its_header() -> None:
    table = table_in_rollout()
    lacking = table.plan("bot", (), {}, request_id="r1")
    plain = table.plan("plain", users(1)[0], request_id="r2")
    assert lacking is not None and lacking.sticky_unit is None
    assert plain is not None and plain.sticky_unit is None
    before = RouteTable(parse_config(CONFIG, {})).plan("bot", users(1)[0])
    assert before is not None and before.sticky_unit is not None  # recorded before a rollout too
