"""Refusals answer in the caller's format: an HTML page for a browser, JSON for a script."""

from __future__ import annotations

import orjson

from proxy.console import ConsoleRefusal


def test_a_page_refusal_is_html_with_the_reason_as_text() -> None:
    response = ConsoleRefusal(403, "no <b>way</b>", headers={"retry-after": "3"}).response()
    assert response.status_code == 403
    assert response.headers["content-type"].startswith("text/html")
    assert b"no &lt;b&gt;way&lt;/b&gt;" in response.body
    assert response.headers["retry-after"] == "3"
    assert response.headers["x-content-type-options"] == "nosniff"


def test_an_api_refusal_is_json() -> None:
    response = ConsoleRefusal(401, "sign in", json=True).response()
    assert response.status_code == 401
    assert orjson.loads(response.body) == {
        "error": {"type": "authentication_error", "message": "sign in"}
    }


def test_sign_in_redirects_with_the_target_quoted() -> None:
    response = ConsoleRefusal.sign_in("/ui/rollouts/a b?x=1&y=2").response()
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/signin?next=/ui/rollouts/a%20b%3Fx%3D1%26y%3D2"
