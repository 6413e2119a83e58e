"""The documentation's screenshots of the browser UI, taken from a real small run.

    .venv/bin/python bench/docs_screenshots.py              # writes docs/assets/ui-{runs,run,agent}.png

Two searches with the FM-free `ast_mutate` operator (no model needed) in a temporary runs folder, the real
`cambrian ui` over them, and Debian's chromium driven by Playwright, as tests/ui/test_browser.py drives it
(no browser download). Each PNG is a viewport shot, kept under 300 kB. Takes about a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import cambrian

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
MAX_BYTES = 300_000
#: The runs shown: (benchmark, name, iterations, strategy). The FM-free operator keeps them model-free.
RUNS = (("deceptive", "deceptive-map-elites", 80, "map_elites"), ("symbolic_regression", "symbolic-dgm", 30, "dgm"))


def search_runs(runs_dir: Path) -> None:
    for benchmark, name, iterations, strategy in RUNS:
        cambrian.search(
            benchmark,
            iterations=iterations,
            sandbox="local",
            runs_dir=runs_dir,
            name=name,
            config={"search": {"operators": {"ast_mutate": 1.0}, "strategy": strategy}},
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_ui(runs_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """`cambrian ui` started beside the runs folder, so the pages show it as `runs`, not a temporary path."""
    command = [sys.executable, "-m", "cambrian", "ui", "--runs-dir", runs_dir.name, "--port", str(port)]
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=runs_dir.parent, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=5).close()
            return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"`cambrian ui` did not start:\n{log.read_text()[-3000:]}") from None
            time.sleep(0.2)


def shoot(page: Any, path: Path) -> None:
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(path))
    size = path.stat().st_size
    print(f"{path.relative_to(ROOT)}: {size / 1000:.0f} kB")
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over {MAX_BYTES}: use a smaller viewport")


def take_screenshots(base: str, out: Path, run: str, agent: int) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 360})  # two runs: a short page
            page.goto(base + "/")
            page.wait_for_selector("#runs-table")
            shoot(page, out / "ui-runs.png")
            page.set_viewport_size({"width": 1280, "height": 800})
            page.goto(f"{base}/runs/{run}")
            page.wait_for_function("() => window.cambrianReady === true")
            page.wait_for_selector("body[data-panels='1']")
            shoot(page, out / "ui-run.png")
            page.goto(f"{base}/runs/{run}/agents/{agent}")
            page.wait_for_selector("table.diff")
            shoot(page, out / "ui-agent.png")
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "assets", help="folder for the PNG files")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cambrian-docs-") as tmp:
        runs_dir = Path(tmp) / "runs"
        search_runs(runs_dir)
        shown = RUNS[0][1]
        best = cambrian.open_run(shown, runs_dir=runs_dir).best(1)[0]
        port = free_port()
        server = serve_ui(runs_dir, port, Path(tmp) / "ui.log")
        try:
            take_screenshots(f"http://127.0.0.1:{port}", args.out, shown, best.id)
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


if __name__ == "__main__":
    main()
