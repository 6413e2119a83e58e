"""What every route shares: the app's settings (runs folder, the run it opens on, templates) and where
the packaged assets are (the static folder, the vendored plotly.js)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2
from fastapi import Request

STATIC_DIR = Path(__file__).parent / "static"
#: plotly.js's cartesian bundle from the npm registry, vendored with its licence (static/vendor/README.md):
#: nothing is fetched from a CDN.
PLOTLY_JS = STATIC_DIR / "vendor" / "plotly-cartesian.min.js"


@dataclass(frozen=True)
class Settings:
    """What every route needs: the runs folder (or the store: a database URL holding the runs), the run the
    app opens on (if any), the templates."""

    runs_dir: Path
    run: str | None
    templates: jinja2.Environment
    store: str | None = None


def settings_of(request: Request) -> Settings:
    """The app's settings, from a request."""
    settings: Settings = request.app.state.settings
    return settings
