"""`create_app`: the FastAPI app that serves a runs folder read-only, with its safety headers and error pages.

Requests must name this machine's loopback, or a host the user allowed, in their Host header (DNS
rebinding). Every response carries a Content-Security-Policy that allows only this server's own scripts (no
inline script, no eval) and no framing. Errors a user can meet (a missing run or agent, an archive
that cannot be read) become a page naming the cause and the fix, or JSON under /api/, never a
traceback. Routes live in `_pages` (HTML) and `_api` (JSON); what they share in `_settings`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from cambrian.archive.errors import AgentNotFound, ArchiveError, GenomeNotFound, RunNotFound
from cambrian.errors import CambrianError
from cambrian.ui import _api, _pages
from cambrian.ui._data import Unreadable, close_stores, shown_store
from cambrian.ui._settings import STATIC_DIR, Settings, settings_of
from cambrian.ui._templates import environment

#: The policy every response carries.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)


#: The names a request may give in its Host header whatever the UI listens on: this machine's loopback.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def create_app(
    runs_dir: Path, *, run: str | None = None, store: str | None = None, hosts: Sequence[str] = ()
) -> FastAPI:
    """The browser UI over the runs in `runs_dir`, or in `store` (a database URL), read-only; `run`: the run
    "/" opens on. It answers only requests whose Host header names this machine's loopback or one of `hosts`
    (the address it listens on, a proxy's name): a web page of another site that points its own name at
    127.0.0.1 (DNS rebinding) gets a 400, not the runs."""
    allowed = {name.lower().strip("[]") for name in (*LOOPBACK_HOSTS, *hosts)}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            close_stores()  # the store archives kept open between requests

    app = FastAPI(title="Cambrian", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.settings = Settings(Path(runs_dir), run, environment(), store)

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        host = host_name(request.headers.get("host", ""))
        if host not in allowed:
            response = _error(
                request,
                400,
                "Unknown host",
                f"this UI answers to {', '.join(sorted(allowed))}, and the request named {host or 'no host'}",
                "open the UI at the address `cambrian ui` printed; behind a proxy or under another name, start it "
                "with `--allow-host NAME`",
            )
        else:
            response = await call_next(request)
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        if request.url.path.startswith("/api/"):
            response.headers["Cache-Control"] = "no-store"
        return response

    @app.exception_handler(Unreadable)
    async def unreadable_archive(request: Request, error: Unreadable) -> Response:
        title = f"Run {error.run}: {error.kind}"
        return _error(request, error.status_code, title, error.message, error.fix)

    @app.exception_handler(CambrianError)
    async def user_error(request: Request, error: CambrianError) -> Response:
        missing = isinstance(error, (RunNotFound, AgentNotFound, GenomeNotFound))
        status = 404 if missing else 409 if isinstance(error, ArchiveError) else 400
        title = "Not found" if missing else type(error).__name__
        return _error(request, status, title, str(error), error.fix)

    @app.exception_handler(ValueError)
    async def bad_value(request: Request, error: ValueError) -> Response:
        return _error(request, 400, "Bad request", str(error), "check the address's parameters")

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(request: Request, error: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem.get('loc', ())[1:])}: {problem.get('msg', '')}"
            for problem in error.errors()
        )
        return _error(request, 400, "Bad request", problems, "check the address: agent ids are whole numbers")

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception) -> Response:
        # The traceback goes to the server's log, not into the page.
        first_line = (str(error).splitlines() or [""])[0][:300]
        message = f"the UI failed on {request.url.path}: {type(error).__name__}: {first_line}"
        return _error(request, 500, "Internal error", message, "this is a bug in the UI: report it with the log")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    app.get("/static/plotly.min.js", include_in_schema=False)(_pages.plotly_js)
    app.get("/static/pygments.css", include_in_schema=False)(_pages.pygments_stylesheet)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    _pages.add_routes(app)
    _api.add_routes(app)
    return app


def host_name(header: str) -> str:
    """The name of a Host header, lower case, without its port: "[::1]:8765" -> "::1", "Localhost" -> "localhost"."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else ""
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _error(request: Request, status: int, title: str, message: str, fix: str) -> Response:
    """The error as JSON under /api/, as a page elsewhere."""
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message, "fix": fix, "title": title}, status_code=status)
    settings = settings_of(request)
    html = settings.templates.get_template("error.html").render(
        title=title,
        message=message,
        fix=fix,
        status=status,
        runs_dir=str(settings.runs_dir.resolve()) if settings.store is None else shown_store(settings.store),
    )
    return HTMLResponse(html, status_code=status)
