"""`write_report`: one self-contained HTML file of a run page and its best agents, to attach to a paper or a PR.

Everything is inside the file: the styles, plotly.js (the vendored bundle), the page's scripts
and the data as escaped JSON, so it opens offline from disk. A Content-Security-Policy in the file lets only
those scripts run (by their hashes). The tree is drawn deeper than the live
page (it cannot load more later); clicking an agent jumps to its section when it is one of the best.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from markupsafe import Markup

from cambrian.ui._agent import agent_detail
from cambrian.ui._code import highlighted, pygments_css
from cambrian.ui._data import open_run
from cambrian.ui._run_page import run_page
from cambrian.ui._settings import PLOTLY_JS, STATIC_DIR
from cambrian.ui._templates import environment

#: Levels and nodes of the report's tree.
REPORT_TREE_DEPTH = 12
REPORT_TREE_NODES = 5000

_SCRIPT_END = re.compile(r"</(script)", re.IGNORECASE)


def inline_script(text: str) -> Markup:
    """JavaScript made safe to sit inside a `<script>` element: no `</script` or `<!--` can end it early."""
    return Markup(_SCRIPT_END.sub(r"<\\/\1", text).replace("<!--", "<\\!--"))  # JS reads `<\/` as `</`


def report_policy(scripts: list[Markup]) -> str:
    """The report's Content-Security-Policy (a <meta> tag, as no server sends a header for a file): only
    its own inline scripts run, each allowed by its sha256, and it loads nothing from anywhere. A script
    that hostile text smuggled in would have no hash, so the browser would not run it."""
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(str(script).encode()).digest()).decode()}'" for script in scripts
    )
    return (
        f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; img-src data:; "
        "object-src 'none'; base-uri 'none'; form-action 'none'"
    )


def write_report(runs_dir: Path, run: str, to: Path, *, best: int = 3, store: str | None = None) -> Path:
    """Write the report of `run` (with its `best` best agents' code and diffs) to `to`; returns the path.

    RunNotFound / Unreadable as the pages raise them.
    """
    env = environment()
    with open_run(runs_dir, run, store) as (archive, row):
        page = run_page(archive, row, tree_nodes=REPORT_TREE_NODES, tree_depth=REPORT_TREE_DEPTH)
        agents = []
        for agent in archive.best(row.key, best):
            detail = agent_detail(archive, row, agent.key, runs_dir=runs_dir, store=store)
            agents.append((detail, [(path, highlighted(path, text)) for path, text in sorted(detail.files.items())]))
    css = (STATIC_DIR / "app.css").read_text() + "\n" + pygments_css()
    scripts = [PLOTLY_JS.read_text(encoding="utf-8")] + [
        (STATIC_DIR / name).read_text(encoding="utf-8") for name in ("common.js", "analytics.js", "run.js")
    ]
    inline = [inline_script(s) for s in scripts]
    html = env.get_template("report.html").render(
        page=page,
        run=run,
        report=True,
        has_analytics=bool(page.analytics),
        agents=agents,
        runs_dir=str(runs_dir),
        inline_assets={
            "css": Markup(css.replace("</style", "<\\/style")),
            "scripts": inline,
            "csp": Markup(report_policy(inline)),  # our own hashes, in a double-quoted attribute
        },
    )
    to = Path(to)
    to.parent.mkdir(parents=True, exist_ok=True)
    to.write_text(html, encoding="utf-8")
    return to
