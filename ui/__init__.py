"""The browser UI: a local web app that reads run archives read-only and never writes.

Imports nothing from Cambrian but `archive`. Public: `create_app(runs_dir, run=None)` (the FastAPI
app), `write_report(runs_dir, run, to, best=...)` (one self-contained HTML file of a run),
`check_run(runs_dir, run)` (RunNotFound or Unreadable, each with a fix), `Unreadable`, `is_loopback(host)`
and `CONTENT_SECURITY_POLICY`.

Modules: `_app` (the app, its headers and error pages), `_pages` (HTML routes), `_api` (JSON routes),
`_data` (finding and opening runs, run summaries), `_columns` (a run's agents as numpy columns),
`_run_stats` (score points, per-operator/model/arm outcomes, the MAP-Elites grid), `_tree` (the lineage
tree at a level of detail, laid out), `_run_page` (the run page's data), `_analytics` (where the budget
went, runs compared per unit of budget), `_search_space` (the agents on a 2-D map), `_agent` (one agent:
code, diffs, results, FM calls), `_compare` (two agents, several runs), `_live` (what a live page
polls), `_code` (highlighting and diffs, escaped), `_json` (JSON safe inside a page), `_templates` (the
Jinja2 environment), `_report` (the self-contained HTML report), `_serve` (host checks). Templates in
`templates/`, scripts and styles in `static/`; plotly.js (its cartesian bundle) is vendored in
`static/vendor/` with its licence.
"""

from cambrian.ui._app import CONTENT_SECURITY_POLICY, create_app
from cambrian.ui._data import Unreadable, check_run
from cambrian.ui._report import write_report
from cambrian.ui._serve import is_loopback

__all__ = ["CONTENT_SECURITY_POLICY", "Unreadable", "check_run", "create_app", "is_loopback", "write_report"]
