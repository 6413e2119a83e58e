"""How fast the browser UI answers on big runs: issue 13's measurement.

On a synthetic run of N agents (bench/synthetic_archive.py; 10k and 100k by default, generated once
and cached under bench/results/ui-bench-cache/), three measurements, each the median of --loads:

1. analytics: ui._analytics's budget and compare_runs and ui._search_space's search_space called in-process
   (after one warm-up call, so scikit-learn's import is not counted).
2. server: the response time of the run page HTML, every JSON endpoint the run page loads or polls,
   the runs page, and an agent page (HTML and JSON) of the best agent, from a uvicorn server in a
   subprocess (`cambrian.ui.create_app`), over HTTP on 127.0.0.1, after one warm-up request each.
3. browser: time until the run page is interactive in headless Chromium (Debian's /usr/bin/chromium
   through Playwright, a fresh browser context per load, so nothing is cached): from navigation start
   to the moment the page says so (`window.cambrianReadyAt`, performance.now(): the score plot and the
   lineage tree are drawn and answer clicks). Reported beside it: when the panels the page fetches
   after that (MAP-Elites grid, budget, search space) have all drawn.

Targets (issue 13): interactive in <= 2 s at 10k agents and <= 5 s at 100k.

Usage: .venv/bin/python bench/ui_bench.py [--sizes 10000 100000] [--loads 5] [--no-browser] [--profile]
Prints a markdown table and writes bench/results/ui_bench.json; never asserts on time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import platform
import pstats
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from synthetic_archive import ensure_synthetic_archive

from cambrian.archive.store import Archive

CACHE = ROOT / "bench" / "results" / "ui-bench-cache"
RESULT = ROOT / "bench" / "results" / "ui_bench.json"
TARGET_S = {10_000: 2.0, 100_000: 5.0}
CHROMIUM = "/usr/bin/chromium"
#: True once the run page is interactive (ui/static/run.js sets window.cambrianReady and cambrianReadyAt).
READY_JS = "() => window.cambrianReady === true"
#: True once the lazily fetched panels have drawn too; records the first moment every visible plot had its SVG.
PANELS_JS = """() => {
  if (window.__cambrianBenchPanels !== undefined) return true;
  if (document.body.dataset.panels !== "1") return false;
  const plots = Array.from(document.querySelectorAll(".plot")).filter((div) => div.offsetParent !== null);
  if (!plots.every((div) => div.querySelector(".main-svg"))) return false;
  window.__cambrianBenchPanels = performance.now();
  return true;
}"""
COUNT_PLOTS_JS = "Array.from(document.querySelectorAll('.plot')).filter((div) => div.querySelector('.main-svg')).length"
#: [responseEnd, domContentLoadedEventEnd] of the navigation, in ms from its start.
NAVIGATION_JS = """(() => {
  const timing = performance.getEntriesByType("navigation")[0];
  return [timing.responseEnd, timing.domContentLoadedEventEnd];
})()"""


def _median_s(measure: Callable[[], Any], loads: int) -> tuple[float, list[float]]:
    """(median, all) seconds of `loads` calls of `measure`, after one warm-up call."""
    measure()
    times = []
    for _ in range(loads):
        started = time.perf_counter()
        measure()
        times.append(time.perf_counter() - started)
    return statistics.median(times), times


def time_analytics(db: Path, loads: int) -> dict[str, float]:
    """Median seconds of each analytics function (ui._analytics, ui._search_space) over the archive at `db`."""
    from cambrian.ui._analytics import budget, compare_runs
    from cambrian.ui._search_space import search_space

    with Archive.at(db, readonly=True) as archive:
        run_id = archive.list_runs()[0].key
        calls: dict[str, Callable[[], Any]] = {
            "budget": lambda: budget(archive, run_id),
            "search_space (behaviour, auto)": lambda: search_space(archive, run_id),
            "search_space (code)": lambda: search_space(archive, run_id, space="code"),
            "compare_runs (1 run)": lambda: compare_runs([("run", archive, run_id)]),
        }
        return {name: _median_s(call, loads)[0] for name, call in calls.items()}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serve(runs_dir: Path) -> Iterator[str]:
    """A uvicorn server of `ui.create_app(runs_dir)` in a subprocess; yields its base URL."""
    port = _free_port()
    code = (
        "import sys, uvicorn; from pathlib import Path; from cambrian.ui import create_app; "
        f"uvicorn.run(create_app(Path({str(runs_dir)!r})), host='127.0.0.1', port={port}, log_level='warning')"
    )
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "/api/runs", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the UI server did not start (exit code {process.poll()})")
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def endpoints(run: str, agent_id: int, last_agent: int) -> dict[str, str]:
    """What the run page and an agent page fetch (paths relative to the server)."""
    return {
        "run page (HTML)": f"/runs/{run}",
        "runs page (HTML)": "/",
        "GET /api/runs": "/api/runs",
        "GET /api/runs/{run}/panels (fetched after first paint)": f"/api/runs/{run}/panels",
        "GET /api/runs/{run}/points (every agent, 'show every agent')": f"/api/runs/{run}/points",
        "GET /api/runs/{run}/tree": f"/api/runs/{run}/tree",
        "GET /api/runs/{run}/changes (live poll)": f"/api/runs/{run}/changes?after_agent={last_agent}",
        "agent page (HTML)": f"/runs/{run}/agents/{agent_id}",
        "GET /api/runs/{run}/agents/{id}": f"/api/runs/{run}/agents/{agent_id}",
    }


def time_server(base: str, paths: dict[str, str], loads: int) -> dict[str, dict[str, float]]:
    """Median seconds and response size (bytes) per endpoint."""
    out: dict[str, dict[str, float]] = {}
    with httpx.Client(base_url=base, timeout=120) as client:
        for name, path in paths.items():
            sizes: list[int] = []

            def fetch(path: str = path, sizes: list[int] = sizes) -> None:
                response = client.get(path)
                if response.status_code != 200:
                    raise RuntimeError(f"{path} answered {response.status_code}: {response.text[:300]}")
                sizes.append(len(response.content))

            median, _ = _median_s(fetch, loads)
            out[name] = {"median_s": median, "bytes": float(sizes[-1])}
    return out


def time_browser(url: str, loads: int) -> dict[str, Any]:
    """Median seconds from navigation start until the run page is interactive (and until its later panels
    have drawn), in headless Chromium."""
    from playwright.sync_api import sync_playwright

    times: list[float] = []
    phases: dict[str, list[float]] = {"response_end_s": [], "dom_content_loaded_s": [], "panels_drawn_s": []}
    errors: list[str] = []  # script errors the page raised, on any load
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for load in range(loads + 1):  # the first load warms the server's caches and is not counted
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                page = context.new_page()
                page.on("pageerror", lambda error: errors.append(str(error)))
                page.goto(url, wait_until="commit", timeout=120_000)
                page.wait_for_function(READY_JS, polling="raf", timeout=120_000)
                ready_ms = float(page.evaluate("window.cambrianReadyAt"))
                page.wait_for_function(PANELS_JS, polling="raf", timeout=120_000)
                panels_ms = float(page.evaluate("window.__cambrianBenchPanels"))
                plots = int(page.evaluate(COUNT_PLOTS_JS))
                timing = page.evaluate(NAVIGATION_JS)
                context.close()
                if errors:
                    raise RuntimeError(f"the run page raised in the browser: {errors[:3]}")
                if load:
                    times.append(ready_ms / 1000.0)
                    phases["response_end_s"].append(float(timing[0]) / 1000.0)
                    phases["dom_content_loaded_s"].append(float(timing[1]) / 1000.0)
                    phases["panels_drawn_s"].append(panels_ms / 1000.0)
        finally:
            browser.close()
    medians = {name: statistics.median(values) for name, values in phases.items()}
    return {"median_s": statistics.median(times), "all_s": times, "plots": plots, **medians}


def profile_endpoint(runs_dir: Path, path: str, *, top: int = 25) -> str:
    """cProfile of one request to `path`, served in-process, top functions by cumulative time.

    FastAPI runs a sync endpoint in a worker thread, out of cProfile's sight; here it runs inline on
    the event loop's thread (the bench only) so the profile sees the endpoint's own work.
    """
    import fastapi.routing

    from cambrian.ui import create_app

    async def inline(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    async def profile() -> cProfile.Profile:
        profiler = cProfile.Profile()
        transport = httpx.ASGITransport(app=create_app(runs_dir))
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=300) as client:
            (await client.get(path)).raise_for_status()  # warm-up: imports, caches
            profiler.enable()
            (await client.get(path)).raise_for_status()
            profiler.disable()
        return profiler

    original = fastapi.routing.run_in_threadpool
    fastapi.routing.run_in_threadpool = inline
    try:
        profiler = asyncio.run(profile())
    finally:
        fastapi.routing.run_in_threadpool = original
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(top)
    return text.getvalue()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="agents per synthetic run")
    parser.add_argument("--loads", type=int, default=5, help="timed repetitions per measurement (median)")
    parser.add_argument("--no-browser", action="store_true", help="skip the headless Chromium measurement")
    parser.add_argument("--profile", action="store_true", help="cProfile the slowest server endpoint per size")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)

    report: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": _cpus()},
        "loads": args.loads,
        "sizes": {},
    }
    for n in args.sizes:
        runs_dir, run, generated_s = ensure_synthetic_archive(CACHE, n)
        db = runs_dir / run / "archive.db"
        with Archive.at(db, readonly=True) as archive:
            run_id = archive.get_run(run).key
            best = archive.best(run_id)[0].key
            last_agent = archive.agents(run_id)[-1].key
        entry: dict[str, Any] = {"run": run, "generated_s": generated_s, "analytics_s": time_analytics(db, args.loads)}
        with serve(runs_dir) as base:
            entry["server"] = time_server(base, endpoints(run, best, last_agent), args.loads)
            if not args.no_browser:
                entry["browser_interactive"] = time_browser(f"{base}/runs/{run}", args.loads)
        if args.profile:
            slowest = max(entry["server"], key=lambda name: entry["server"][name]["median_s"])
            top = profile_endpoint(runs_dir, endpoints(run, best, last_agent)[slowest])
            entry["profile"] = {"endpoint": slowest, "top": top}
        report["sizes"][str(n)] = entry
        print(_table(n, entry), flush=True)
        if args.profile:
            print(f"\ncProfile of {entry['profile']['endpoint']}:\n{entry['profile']['top']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\nwritten: {args.out}")


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def _table(n: int, entry: dict[str, Any]) -> str:
    """One size's numbers as a markdown table."""
    lines = [f"\n### {n:,} agents", "", "| what | median | size |", "|---|---:|---:|"]
    browser = entry.get("browser_interactive")
    if browser:
        target = TARGET_S.get(n)
        met = target is not None and browser["median_s"] <= target
        verdict = "" if target is None else f" (target <= {target:g} s: {'met' if met else 'MISSED'})"
        lines += [
            f"| run page interactive in Chromium{verdict} | {browser['median_s']:.2f} s | {browser['plots']} plots |",
            f"| - its HTML received (responseEnd) | {browser['response_end_s']:.2f} s | |",
            f"| - DOMContentLoaded (page scripts done) | {browser['dom_content_loaded_s']:.2f} s | |",
            f"| - grid, budget and search-space panels drawn (fetched after) | {browser['panels_drawn_s']:.2f} s | |",
        ]
    for name, row in entry["server"].items():
        lines.append(f"| {name} | {row['median_s'] * 1000:.0f} ms | {row['bytes'] / 1024:.0f} KiB |")
    for name, seconds in entry["analytics_s"].items():
        lines.append(f"| ui analytics: {name} (in-process) | {seconds * 1000:.0f} ms | |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
