"""The HTML pages: runs, run, agent, compare two agents, compare runs; and the two generated assets.

Each page opens the run's archive read-only for the request and closes it before answering. The
data the page's scripts draw rides in `<script type="application/json">` blocks (escaped by
`cambrian.ui._json`); the pages' own scripts are files under /static/.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import quote

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from cambrian.archive.errors import AgentNotFound, GenomeNotFound
from cambrian.ui._agent import agent_detail, agent_files, run_agent
from cambrian.ui._code import highlighted, pygments_css
from cambrian.ui._compare import agent_comparison, runs_comparison
from cambrian.ui._data import list_runs, open_run, run_names, shown_store
from cambrian.ui._run_page import FIRST_PAINT_POINTS, FIRST_PAINT_TREE_NODES, analytics_available, run_page
from cambrian.ui._settings import PLOTLY_JS, Settings, settings_of


def plotly_js() -> FileResponse:
    """The vendored plotly.js (nothing is fetched from a CDN)."""
    return FileResponse(PLOTLY_JS, media_type="text/javascript")


def pygments_stylesheet() -> Response:
    """The highlighting stylesheet."""
    return Response(pygments_css(), media_type="text/css")


def _where(settings: Settings) -> str:
    """Where the runs are, as pages show it: the runs folder, or the store's URL without its password."""
    return str(settings.runs_dir) if settings.store is None else shown_store(settings.store)


def _render(request: Request, template: str, **values: object) -> HTMLResponse:
    settings = settings_of(request)
    html = settings.templates.get_template(template).render(runs_dir=_where(settings), **values)
    return HTMLResponse(html)


def file_url(run: str, agent_id: int, path: str) -> str:
    """Where `agent_file` serves one file of an agent."""
    return f"/runs/{quote(run, safe='')}/agents/{agent_id}/files/{quote(path)}"


def add_routes(app: FastAPI) -> None:
    """Register the pages on `app`."""

    @app.get("/", response_class=HTMLResponse)
    def runs_page(request: Request, all: bool = False) -> Response:
        settings = settings_of(request)
        if settings.run is not None and not all:
            return RedirectResponse(f"/runs/{settings.run}", status_code=307)
        return _render(request, "runs.html", runs=list_runs(settings.runs_dir, settings.store), live=True)

    @app.get("/runs/{run}", response_class=HTMLResponse)
    def run_view(request: Request, run: str) -> Response:
        with open_run(settings_of(request).runs_dir, run, settings_of(request).store) as (archive, row):
            page = run_page(
                archive, row, max_points=FIRST_PAINT_POINTS, tree_nodes=FIRST_PAINT_TREE_NODES, panels=False
            )
        return _render(request, "run.html", page=page, run=run, report=False, has_analytics=analytics_available())

    @app.get("/runs/{run}/agents/{agent_id}", response_class=HTMLResponse)
    def agent_view(request: Request, run: str, agent_id: int, against: int | None = None) -> Response:
        settings = settings_of(request)
        with open_run(settings.runs_dir, run, settings.store) as (archive, row):
            detail = agent_detail(
                archive, row, agent_id, runs_dir=settings.runs_dir, against=against, store=settings.store
            )
            highlighted_files = [
                (path, highlighted(path, text, download=file_url(run, agent_id, path)))
                for path, text in sorted(detail.files.items())
            ]
        return _render(request, "agent.html", run=run, d=detail, files=highlighted_files)

    @app.get("/runs/{run}/agents/{agent_id}/files/{path:path}")
    def agent_file(request: Request, run: str, agent_id: int, path: str) -> Response:
        """One file of an agent's code, as a plain-text download (never rendered: it is untrusted)."""
        settings = settings_of(request)
        with open_run(settings.runs_dir, run, settings.store) as (archive, row):
            files, _ = agent_files(archive, run_agent(archive, row, agent_id))
        if path not in files:
            raise GenomeNotFound(
                f"agent {agent_id} of run {run!r} has no file {path!r}",
                fix=f"its files are listed on /runs/{quote(run, safe='')}/agents/{agent_id}",
            )
        name = quote(PurePosixPath(path).name, safe="")
        return Response(
            files[path],
            media_type="text/plain; charset=utf-8",
            headers={"Content-Disposition": f"attachment; filename*=UTF-8''{name}"},
        )

    @app.get("/runs/{run}/compare", response_class=HTMLResponse)
    def compare_agents(request: Request, run: str, a: int | None = None, b: int | None = None) -> Response:
        with open_run(settings_of(request).runs_dir, run, settings_of(request).store) as (archive, row):
            if a is None or b is None:
                best = archive.best(row.key, 2)
                if len(best) < 2 and (a is None or b is None):
                    raise AgentNotFound(
                        f"run {run!r} has fewer than two evaluated agents to compare",
                        fix="name two agents: /runs/RUN/compare?a=ID&b=ID",
                    )
                a = best[1].key if a is None else a
                b = best[0].key if b is None else b
            comparison = agent_comparison(archive, row, a, b)
        return _render(request, "compare_agents.html", run=run, c=comparison)

    @app.get("/compare", response_class=HTMLResponse)
    def compare_runs(
        request: Request,
        runs: str = Query("", description="run names, comma-separated"),
        pick: list[str] = Query([], description="run names, one per parameter (the form's tick boxes)"),
    ) -> Response:
        settings = settings_of(request)
        names = list(dict.fromkeys([*(name.strip() for name in runs.split(",")), *pick]))
        names = [name for name in names if name]
        comparison = runs_comparison(settings.runs_dir, names, settings.store) if names else None
        return _render(
            request,
            "compare_runs.html",
            names=names,
            c=comparison,
            every=run_names(settings.runs_dir, settings.store),
            analytics=comparison.analytics if comparison else None,
        )
