"""The review page, as far as the shell goes: every signed-in role can open it."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import InProcessGateway
from tests.proxy.console.console_client import ADMIN_TOKEN, ENV, REVIEWER_TOKENS, signed_in


def test_reviewers_and_admins_open_the_review_page(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gateway = start_gateway(env=ENV)
    for token in (REVIEWER_TOKENS[0], ADMIN_TOKEN):
        answer = signed_in(gateway, token).get("/ui/review")
        assert answer.status_code == 200
        assert "<h1>Review</h1>" in answer.text
