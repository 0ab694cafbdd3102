"""``GET /dashboard``: the page, and its files under ``/dashboard/static``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app.dashboard import STATIC

# Everything the page loads comes from the proxy itself; nothing inline.
_CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'"
_HEADERS = {"Content-Security-Policy": _CSP, "Cache-Control": "no-cache"}

router = APIRouter()


@router.get("/dashboard", include_in_schema=False)
async def dashboard() -> FileResponse:
    """The dashboard page (it polls ``/stats``)."""
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=_HEADERS)


def static_files() -> StaticFiles:
    """The page's script, style and vendored chart library."""
    return StaticFiles(directory=STATIC)
