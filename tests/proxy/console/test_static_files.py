"""The console's assets come from the package and nowhere else."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from proxy.console.static_files import load_assets
from tests.conftest import InProcessGateway

STATIC = Path(__file__).parents[3] / "proxy" / "console" / "static"


def test_every_file_in_the_static_folder_is_an_asset() -> None:
    assets = load_assets()
    assert set(assets) == {p.name for p in STATIC.iterdir()}
    assert assets["console.css"][1].startswith("text/css")
    assert assets["console.js"][1].startswith("text/javascript")


def test_the_assets_are_package_data() -> None:
    pyproject = (STATIC.parents[2] / "pyproject.toml").read_text()
    assert '"console/static/*"' in pyproject


def test_assets_are_served_and_nothing_else_is(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gateway = start_gateway()
    css = gateway.http.get("/ui/static/console.css")
    assert css.status_code == 200 and css.content == (STATIC / "console.css").read_bytes()
    assert css.headers["x-content-type-options"] == "nosniff"
    for name in ("nothing.js", "..%2Fauth.py", "%2e%2e%2fauth.py", "console.css%00"):
        assert gateway.http.get(f"/ui/static/{name}").status_code == 404, name
    assert gateway.http.get("/ui/static/../auth.py").status_code in (303, 404)


def test_no_asset_loads_anything_from_elsewhere() -> None:
    for path in STATIC.iterdir():
        text = path.read_text()
        assert "http://" not in text and "https://" not in text and "@import" not in text, path
