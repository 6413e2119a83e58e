"""The JSON endpoints the pages' scripts read: runs, a run's score points, its tree at a level of detail,
what changed since the last poll, and one agent with its code and FM calls.

Answers are `cambrian.ui._json.dumps` text (NaN as null; `<`, `>`, `&` escaped), so untrusted text (code,
prompts, replies, reasons) travels as data and a script can only insert it with textContent.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

from fastapi import FastAPI, Query, Request, Response

from cambrian.archive.errors import AgentNotFound
from cambrian.ui._agent import agent_detail
from cambrian.ui._columns import agent_columns
from cambrian.ui._data import Unreadable, list_runs, open_run
from cambrian.ui._json import dumps
from cambrian.ui._live import changes
from cambrian.ui._run_page import run_panels
from cambrian.ui._run_stats import MAX_PLOT_POINTS, score_points
from cambrian.ui._settings import settings_of
from cambrian.ui._tree import DEFAULT_DEPTH, DEFAULT_MAX_CHILDREN, DEFAULT_MAX_NODES, lineage, tree_view

#: Most nodes one tree request may ask for.
TREE_NODE_LIMIT = 20_000
#: Most points one score-plot request may ask for.
POINTS_LIMIT = 200_000


def row_dict(row: Any) -> dict[str, Any]:
    """A table row's columns as JSON-ready values (times as ISO text, enums as their value)."""
    values = {}
    for column in type(row).__table__.c:
        value = getattr(row, column.name)
        values[column.name] = value.isoformat() if isinstance(value, datetime) else getattr(value, "value", value)
    return values


def json_response(value: Any, status_code: int = 200) -> Response:
    return Response(dumps(value), status_code=status_code, media_type="application/json")


def _ids(text: str) -> list[int]:
    """Comma-separated agent ids; ValueError (a 400) for anything else."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated agent ids, got {text[:80]!r}") from None


def add_routes(app: FastAPI) -> None:
    """Register the JSON endpoints on `app`."""

    @app.get("/api/runs")
    def runs(request: Request) -> Response:
        found = []
        for entry in list_runs(settings_of(request).runs_dir, settings_of(request).store):
            if isinstance(entry, Unreadable):
                found.append({"name": entry.run, "error": entry.message, "fix": entry.fix, "kind": entry.kind})
            else:
                summary = asdict(entry)
                summary.pop("config")
                found.append(summary)
        return json_response({"runs": found})

    @app.get("/api/runs/{run}/points")
    def points(request: Request, run: str, max_points: int = Query(MAX_PLOT_POINTS, ge=1, le=POINTS_LIMIT)) -> Response:
        with open_run(settings_of(request).runs_dir, run, settings_of(request).store) as (archive, row):
            return json_response(score_points(agent_columns(archive, row.key), max_points=max_points))

    @app.get("/api/runs/{run}/panels")
    def panels(request: Request, run: str) -> Response:
        with open_run(settings_of(request).runs_dir, run, settings_of(request).store) as (archive, row):
            return json_response(run_panels(archive, row))

    @app.get("/api/runs/{run}/tree")
    def tree(
        request: Request,
        run: str,
        root: int | None = None,
        depth: int = Query(DEFAULT_DEPTH, ge=0, le=10_000),
        expand: str = "",
        collapse: str = "",
        wide: str = "",
        max_nodes: int = Query(DEFAULT_MAX_NODES, ge=1, le=TREE_NODE_LIMIT),
        max_children: int = Query(DEFAULT_MAX_CHILDREN, ge=1, le=TREE_NODE_LIMIT),
    ) -> Response:
        with open_run(settings_of(request).runs_dir, run, settings_of(request).store) as (archive, row):
            columns = agent_columns(archive, row.key)
        try:
            view = tree_view(
                columns,
                lineage(columns),
                root=root,
                depth=depth,
                expand=_ids(expand),
                collapse=_ids(collapse),
                wide=_ids(wide),
                max_nodes=max_nodes,
                max_children=max_children,
            )
        except KeyError:
            raise AgentNotFound(f"agent {root} is not in run {run!r}", fix="pick a root from the run's tree") from None
        return json_response(view)

    @app.get("/api/runs/{run}/changes")
    def run_changes(request: Request, run: str, after_agent: int = 0, after_update: str = "") -> Response:
        with open_run(settings_of(request).runs_dir, run, settings_of(request).store) as (archive, row):
            return json_response(changes(archive, row, after_agent=after_agent, after_update=after_update))

    @app.get("/api/runs/{run}/agents/{agent_id}")
    def agent(request: Request, run: str, agent_id: int) -> Response:
        settings = settings_of(request)
        with open_run(settings.runs_dir, run, settings.store) as (archive, row):
            detail = agent_detail(archive, row, agent_id, runs_dir=settings.runs_dir, store=settings.store)
        return json_response(
            {
                "agent": row_dict(detail.agent),
                "files": detail.files,
                "entry": detail.entry,
                "lineage": [a.id for a in detail.lineage],
                "children": [a.id for a in detail.children],
                "evaluations": [row_dict(e) for e in detail.evaluations],
                "calls": [
                    {
                        "call": row_dict(view.call),
                        "messages": None if view.messages is None else [asdict(m) for m in view.messages],
                        "params": view.params,
                        "reply": view.reply,
                    }
                    for view in detail.calls
                ],
                "export_command": detail.export_command,
                "islands": detail.islands,
                "joined": [row_dict(m) for m in detail.joined],
            }
        )
