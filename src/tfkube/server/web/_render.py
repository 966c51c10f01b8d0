"""Rendering: one Jinja environment (autoescape on for every template: a value from a
user is always text, never markup), the filters the templates use, the page-only
errors, and the headers every page carries (a strict Content-Security-Policy: scripts
only from this server's own files, so even a tag slipped into a page could not run)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tfkube import contract
from tfkube.server.web import _present as present

HERE = Path(__file__).parent
STATIC = HERE / "static"
VENDOR = STATIC / "vendor"
VENDOR_FILES = ("htmx.min.js", "uPlot.iife.min.js", "uPlot.min.css")

CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",  # uPlot and htmx set element styles
        "img-src 'self' data:",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "object-src 'none'",
    ]
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Vary": "HX-Request",
}


class PageError(Exception):
    """A page that cannot be shown: rendered as an HTML error page with this status."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


class SignInFirst(Exception):
    """Not signed in: go to the sign-in page, then come back to `target`."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target


def _static_version() -> str:
    """Changes whenever a static file changes, so browsers may cache them for long."""
    digest = hashlib.sha256()
    for path in sorted(STATIC.rglob("*")):
        if path.is_file() and path.name != ".stamp":
            digest.update(path.name.encode())
            digest.update(str(path.stat().st_mtime_ns).encode())
    return digest.hexdigest()[:10]


def vendor_missing() -> list[str]:
    return [name for name in VENDOR_FILES if not (VENDOR / name).is_file()]


def _ago(when: float | None, now: float | None = None) -> str:
    if when is None:
        return ""
    return present.ago((now or time.time()) - when)


def _clock(when: float | None) -> str:
    if when is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


def _iso(when: float | None) -> str:
    if when is None:
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(when))


ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters.update(
    ago=_ago,
    clock=_clock,
    iso=_iso,
    duration=present.duration,
    eta=present.eta,
    size=present.size,
    number=present.number,
    cpu=present.cpu,
    urlpart=lambda s: quote(str(s), safe=""),
    metric=present.metric,
)
ENV.globals.update(
    query_url=present.query_url,
    PHASES=present.PHASES,
    PHASE_HELP=present.PHASE_HELP,
    ROLE_NAMES=present.ROLE_NAMES,
    DEFAULT_ENTRYPOINT=contract.DEFAULT_ENTRYPOINT,
    state_summary=present.state_summary,
    running_of=present.running_of,
    is_active=present.is_active,
    job_state=present.job_state,
)
_VERSION: dict[str, str] = {}


def render(
    request: Request, template: str, context: dict[str, Any], status: int = 200
) -> HTMLResponse:
    if "v" not in _VERSION:
        _VERSION["v"] = _static_version()
    html = ENV.get_template(template).render(
        {
            "request": request,
            "static_v": _VERSION["v"],
            "vendor_missing": vendor_missing(),
            **context,
        }
    )
    return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)


def page_error(request: Request, exc: PageError) -> Response:
    return render(
        request,
        "error.html",
        {"title": exc.title, "message": exc.message, "status": exc.status},
        status=exc.status,
    )


def sign_in_first(request: Request, exc: SignInFirst) -> Response:
    target = "/login?" + "next=" + quote(exc.target, safe="/")
    if request.headers.get("hx-request") == "true":
        return Response(status_code=204, headers={"HX-Redirect": target})
    return RedirectResponse(target, 303)
