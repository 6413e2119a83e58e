"""The Jinja2 environment of the pages: autoescape always on, and the number formats they share."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import jinja2

from cambrian.ui._json import script_json

TEMPLATE_DIR = Path(__file__).parent / "templates"


def score(value: float | None, digits: int = 4) -> str:
    """A score to `digits` decimals, "—" when there is none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def rate(value: float | None) -> str:
    """A fraction in [0, 1] as a whole percentage, "—" when there is none."""
    return "—" if value is None else f"{value:.0%}"


def usd(value: float | None) -> str:
    """US dollars: 4 decimals under a dollar, 2 above."""
    if value is None:
        return "—"
    return f"${value:.4f}" if abs(value) < 1 else f"${value:,.2f}"


def count(value: int | None) -> str:
    """An integer with thousands separators."""
    return "—" if value is None else f"{value:,}"


def when(seconds: float | None) -> str:
    """POSIX seconds as a UTC time, minutes precision."""
    if not seconds:
        return "—"
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def environment(template_dir: Path = TEMPLATE_DIR) -> jinja2.Environment:
    """The pages' environment: every `{{ value }}` is HTML-escaped unless it is already Markup."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(score=score, rate=rate, usd=usd, count=count, when=when, json=script_json)
    return env
