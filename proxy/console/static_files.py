"""The console's static assets (`proxy/console/static/`, package data), served at
`/ui/static/<name>`: read once when this module is imported, only the files that are there, each
with its type and the console's security headers. No CDN, nothing fetched from elsewhere."""

from __future__ import annotations

import importlib.resources

from fastapi import APIRouter
from fastapi.responses import Response

from .layout import security_headers
from .refusal import ConsoleRefusal

MEDIA_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


def load_assets() -> dict[str, tuple[bytes, str]]:
    """name → (content, media type) of every asset in the package's `static` folder."""
    folder = importlib.resources.files("proxy.console").joinpath("static")
    assets = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in MEDIA_TYPES:
            assets[entry.name] = (entry.read_bytes(), MEDIA_TYPES[suffix])
    return assets


ASSETS = load_assets()
"""Read once, when the module is imported: the assets are the package's, the same for every
gateway."""

static_router = APIRouter(prefix="/ui/static")


@static_router.get("/{name}")
async def asset(name: str) -> Response:
    found = ASSETS.get(name)
    if found is None:
        raise ConsoleRefusal(404, f"no console asset '{name[:100]}'")
    content, media_type = found
    headers = {**security_headers(), "cache-control": "no-cache"}
    return Response(content, media_type=media_type, headers=headers)
