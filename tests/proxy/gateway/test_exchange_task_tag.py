"""A route whose evalset classifies tasks by a request header keeps the header's value as the
exchange's `task:` tag (the store keeps no headers); hostile values are cut to a safe form."""

from __future__ import annotations

from collections.abc import Callable

from proxy.gateway.exchange import task_tags
from tests.conftest import InProcessGateway
from tests.proxy.gateway.test_exchange_openai import MESSAGES, records_for


def test_the_header_is_kept_as_a_tag_only_when_the_route_classifies_by_it(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    extra = {"routes": {"echo": {"primary": "echo", "evalset": {"task": "header:x-task"}}}}
    gw = start_gateway(extra=extra)
    answered = gw.http.post(
        "/v1/chat/completions",
        json={"model": "echo", "messages": MESSAGES},
        headers={"x-task": "billing/EU refunds"},
    )
    assert answered.status_code == 200, answered.text
    (record,) = records_for(gw, answered.headers["x-mirrorgate-request-id"])
    assert record.tags == ("task:billing_EU_refunds",)
    plain = gw.http.post("/v1/chat/completions", json={"model": "echo", "messages": MESSAGES})
    (record,) = records_for(gw, plain.headers["x-mirrorgate-request-id"])
    assert record.tags == ()


def test_hostile_header_values_become_a_short_safe_tag_or_none() -> None:
    headers = [(b"X-Task", b"\xff" * 10_000 + b"ok")]
    assert task_tags("none", headers) == ()
    assert task_tags("header:x-task", headers) == ()  # nothing safe in its first 256 bytes
    long = [(b"x-task", b"a" * 5000)]
    assert task_tags("header:x-task", long) == ("task:" + "a" * 64,)
    assert task_tags("header:x-task", [(b"x-task", b"../../etc;rm -rf")]) == (
        "task:.._.._etc_rm_-rf",
    )
    assert task_tags("header:x-other", long) == ()
