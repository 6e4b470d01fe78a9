"""Where a sign-in may send the browser next: only to a page of the console."""

from __future__ import annotations

import pytest

from proxy.console.forms import safe_next


@pytest.mark.parametrize(
    "target", ["/ui", "/ui/rollouts", "/ui/rollouts/bot?x=1#verdicts", "/ui/review/a%2Fb"]
)
def test_a_console_path_is_kept(target: str) -> None:
    assert safe_next(target) == target


@pytest.mark.parametrize(
    "target",
    [
        None,
        "",
        "http://evil.example/ui",
        "//evil.example/ui",
        "///evil.example",
        "/\\evil.example",
        "/ui\\..\\admin",
        "/ui/\t/x",
        "/ui/\x00",
        "data:text/html,x",
        "/admin",
        "/ui/../admin",
        "/ui/..",
        "/uix",
        "/ui/signin?next=//evil.example",
        "/ui/" + "x" * 2001,
    ],
)
def test_anything_else_goes_to_the_start_page(target: str | None) -> None:
    assert safe_next(target) == "/ui"
