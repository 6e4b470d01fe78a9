"""The console's routes, mounted at /ui: where each role starts, and what a reviewer may not
open."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import InProcessGateway
from tests.proxy.console.console_client import ADMIN_TOKEN, ENV, REVIEWER_TOKENS, signed_in

ADMIN_PAGES = ["/ui/rollouts", "/ui/rules", "/ui/experiments"]


@pytest.fixture
def gateway(start_gateway: Callable[..., InProcessGateway]) -> InProcessGateway:
    return start_gateway(env=ENV)


def test_each_role_starts_on_its_page(gateway: InProcessGateway) -> None:
    admin = signed_in(gateway, ADMIN_TOKEN)
    reviewer = signed_in(gateway, REVIEWER_TOKENS[0])
    assert admin.get("/ui").headers["location"] == "/ui/rollouts"
    assert admin.get("/ui/").headers["location"] == "/ui/rollouts"
    assert reviewer.get("/ui").headers["location"] == "/ui/review"


@pytest.mark.parametrize("path", ADMIN_PAGES)
def test_a_reviewer_cannot_open_an_admin_page(gateway: InProcessGateway, path: str) -> None:
    reviewer = signed_in(gateway, REVIEWER_TOKENS[0])
    answer = reviewer.get(path)
    assert answer.status_code == 403
    assert "reviewers may only review" in answer.text
    assert signed_in(gateway, ADMIN_TOKEN).get(path).status_code == 200


@pytest.mark.parametrize("path", ["/ui", *ADMIN_PAGES, "/ui/review"])
def test_nobody_signed_out_sees_a_page(gateway: InProcessGateway, path: str) -> None:
    answer = gateway.http.get(path)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/ui/signin?next=")
