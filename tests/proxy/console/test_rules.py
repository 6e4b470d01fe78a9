"""The rules page."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import InProcessGateway
from tests.proxy.console.console_client import ADMIN_TOKEN, ENV, signed_in


def test_an_admin_opens_the_rules_page(start_gateway: Callable[..., InProcessGateway]) -> None:
    answer = signed_in(start_gateway(env=ENV), ADMIN_TOKEN).get("/ui/rules")
    assert answer.status_code == 200
