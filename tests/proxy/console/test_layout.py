"""The page shell: escaping, the navigation per role, landmarks and the security headers."""

from __future__ import annotations

import re

from proxy.console import Principal, esc, page
from proxy.console.layout import CONTENT_SECURITY_POLICY, error_page

ADMIN = Principal("admin", "admin-1234", "n1")
REVIEWER = Principal("reviewer", "rev-abcd", "n2")


def test_esc_makes_markup_text() -> None:
    hostile = """<script>alert("x")</script><img src=x onerror='y'>&amp;"""
    escaped = esc(hostile)
    assert "<" not in escaped and ">" not in escaped and '"' not in escaped and "'" not in escaped
    assert escaped.startswith("&lt;script&gt;")
    assert esc(None) == "" and esc(3) == "3"


def _nav_links(html: str) -> list[str]:
    nav = re.search(r"<nav[^>]*>(.*?)</nav>", html, re.S)
    assert nav is not None
    return re.findall(r'href="([^"]+)"', nav.group(1))


def test_reviewers_see_only_review_and_admins_see_every_page() -> None:
    reviewer = page(title="T", principal=REVIEWER, csrf="c", active="review", body="")
    admin = page(title="T", principal=ADMIN, csrf="c", active="rules", body="")
    assert _nav_links(reviewer.body.decode()) == ["/ui/review"]
    assert _nav_links(admin.body.decode()) == [
        "/ui/review",
        "/ui/rollouts",
        "/ui/rules",
        "/ui/experiments",
    ]
    assert '<a href="/ui/rules" aria-current="page">' in admin.body.decode()


def test_a_page_has_a_skip_link_landmarks_and_no_inline_script_or_style() -> None:
    html = page(
        title="<b>Rules</b>", principal=ADMIN, csrf="tok&", active="rules", body="<p>x</p>",
        scripts=("review.js",),
    ).body.decode()  # fmt: skip
    assert html.index('<a class="skip" href="#main">') < html.index("<nav")
    assert '<main id="main"' in html and "<header" in html and 'lang="en"' in html
    assert "<title>&lt;b&gt;Rules&lt;/b&gt; · mirrorgate</title>" in html
    assert 'value="tok&amp;"' in html  # the sign-out form's CSRF token, escaped
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
    assert scripts and all(body == "" and "src=" in attrs for attrs, body in scripts)
    assert [re.search(r'src="([^"]+)"', a).group(1) for a, _ in scripts] == [  # type: ignore[union-attr]
        "/ui/static/console.js",
        "/ui/static/review.js",
    ]
    assert "<style" not in html and " style=" not in html
    assert not re.search(r"\son[a-z]+=", html)  # no inline event handlers


def test_every_page_carries_the_security_headers() -> None:
    for response in (
        page(title="T", principal=None, csrf="", active="", body=""),
        error_page(403, "<no>"),
    ):
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert "default-src 'self'" in CONTENT_SECURITY_POLICY
        assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["cache-control"] == "no-store"


def test_an_error_page_says_why_in_text() -> None:
    response = error_page(403, "<script>bad</script>")
    assert response.status_code == 403
    assert "&lt;script&gt;bad&lt;/script&gt;" in response.body.decode()
    assert "<nav" not in response.body.decode()  # nobody is signed in on an error page
