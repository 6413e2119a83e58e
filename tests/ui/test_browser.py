"""The browser UI in real headless Chromium (Debian's chromium through Playwright), served by the real
`cambrian ui` command over real SQLite archives.

Clicking through a run to an agent's prompt and diff, a live page picking up an agent that another
process writes while it is open, and a reader polling at 20 Hz beside a real run that writes, with no
error on either side. Screenshots go to pytest's tmp_path (and to $CAMBRIAN_UI_SHOTS when set).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from archive.models import AgentStatus, Evaluation, LLMCall, LLMRequest, LLMResponse
from archive.store import Archive

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SYSTEM = "You improve a program for the benchmark."
USER = "Make solve() return a larger number."

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium package is not installed")


def write_clean_run(runs_dir: Path, name: str = "clean") -> dict[str, int]:
    """A seed and one child whose FM call (prompt and reply) is recorded."""
    with Archive.at(runs_dir / name / "archive.db") as archive:
        run = archive.create_run(name=name, benchmark="circle_packing", seed=0, config_json="{}")
        seed = archive.add_agent(run.key, files={"main.py": "def solve():\n    return 1\n"}, entry="main.py")
        archive.mark_evaluating(seed.key)
        archive.finish_evaluation(seed.key, status=AgentStatus.evaluated, score=1.0, evaluations=[Evaluation(task_id="t0")])
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
        archive.record_llm_exchange(
            LLMCall(run_id=run.key, iteration=1, purpose="mutate", model="qwen", request_hash="h1",
                    prompt_tokens=30, completion_tokens=12),
            LLMResponse(request_hash="h1", model="qwen", text="return 2"),
            LLMRequest(request_hash="h1", model="qwen", messages=json.dumps(messages)),
        )  # fmt: skip
        child = archive.add_agent(
            run.key, files={"main.py": "def solve():\n    return 2\n"}, entry="main.py", parent_id=seed.key,
            operator="diff", model="qwen", iteration=1, link_llm_calls=True,
        )  # fmt: skip
        archive.mark_evaluating(child.key)
        archive.finish_evaluation(child.key, status=AgentStatus.evaluated, score=2.0, evaluations=[Evaluation(task_id="t0")])
        return {"seed": seed.key, "child": child.key}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(runs_dir: Path) -> Iterator[str]:
    """`cambrian ui --runs-dir runs_dir` in a subprocess; yields its base URL; Ctrl-C (SIGINT) at the end."""
    port = _free_port()
    command = [sys.executable, "-m", "meta_agent.cli", "ui", "--runs-dir", str(runs_dir), "--port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(base + "/api/runs", timeout=5).close()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if server.poll() is not None or time.monotonic() > deadline:
                    out, err = server.communicate(timeout=10) if server.poll() is not None else ("", "")
                    pytest.fail(f"`cambrian ui` did not start:\n{out[-2000:]}\n{err[-2000:]}")
                time.sleep(0.2)
        yield base
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@contextmanager
def browser_page() -> Iterator[tuple[Any, list[str]]]:
    """A fresh Chromium page and the problems it reports (page errors, console errors, dialogs)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    problems: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
            page.on("dialog", lambda dialog: (problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
            yield page, problems
        finally:
            browser.close()


def screenshot(page: Any, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("CAMBRIAN_UI_SHOTS"):
        target = Path(os.environ["CAMBRIAN_UI_SHOTS"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)
    assert path.stat().st_size > 10_000, f"{name}: an empty screenshot"


def plotted_agents(page: Any) -> int:
    """Markers in the score plot (every trace but the best-so-far line)."""
    return int(page.evaluate(
        "() => document.getElementById('score-plot').data.filter((t) => t.mode === 'markers')"
        ".reduce((n, t) => n + t.x.length, 0)"
    ))  # fmt: skip


def test_click_from_the_runs_page_through_the_tree_to_an_agents_prompt_and_diff(tmp_path: Path) -> None:
    ids = write_clean_run(tmp_path / "runs")
    with served(tmp_path / "runs") as base, browser_page() as (page, problems):
        page.goto(base + "/")
        page.get_by_role("link", name="clean", exact=True).first.click()
        page.wait_for_function("() => window.cambrianReady === true")
        page.wait_for_selector("#tree-plot .scatterlayer .point")
        screenshot(page, tmp_path, "run")
        # The child is the lowest node of the tree (depth 1; the depth axis points down).
        points = page.locator("#tree-plot .scatterlayer .point")
        boxes = [points.nth(k).bounding_box() for k in range(points.count())]
        lowest = max(range(len(boxes)), key=lambda k: boxes[k]["y"])
        points.nth(lowest).scroll_into_view_if_needed()
        box = points.nth(lowest).bounding_box()  # in the viewport now
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)  # plotly clicks the point it last hovered: hover first
        page.wait_for_selector("#tree-plot .hoverlayer .hovertext")
        page.mouse.click(x, y)
        page.wait_for_url(f"**/runs/clean/agents/{ids['child']}")
        text = page.inner_text("body")
        assert SYSTEM in text and USER in text and "return 2" in text  # the prompt and the reply
        removed = page.locator("table.diff tr.del").first.inner_text()  # the diff against the parent
        added = page.locator("table.diff tr.add").first.inner_text()
        assert "return 1" in removed and "return 2" in added
        screenshot(page, tmp_path, "agent")
    assert problems == []


def test_the_live_page_shows_an_agent_another_process_writes(tmp_path: Path) -> None:
    ids = write_clean_run(tmp_path / "runs")
    writer = f"""
from pathlib import Path
from archive.models import AgentStatus, Evaluation
from archive.store import Archive
with Archive.at(Path({str(tmp_path / "runs" / "clean" / "archive.db")!r})) as archive:
    run = archive.get_run("clean")
    child = archive.add_agent(run.key, files={{"main.py": "def solve():\\n    return 9\\n"}}, entry="main.py",
                              parent_id={ids["child"]}, operator="diff", model="qwen", iteration=2)
    archive.mark_evaluating(child.key)
    archive.finish_evaluation(child.key, status=AgentStatus.evaluated, score=9.5, evaluations=[Evaluation(task_id="t0")])
"""
    with served(tmp_path / "runs") as base, browser_page() as (page, problems):
        page.goto(base + "/runs/clean")
        page.wait_for_function("() => window.cambrianReady === true")
        assert plotted_agents(page) == 2
        done = subprocess.run([sys.executable, "-c", writer], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        # No reload: the page polls every 2 s and draws the new agent and the new best.
        page.wait_for_function("() => document.getElementById('fact-best').textContent.includes('9.5')", timeout=30_000)
        page.wait_for_function(
            "() => document.getElementById('score-plot').data.filter((t) => t.mode === 'markers')"
            ".reduce((n, t) => n + t.x.length, 0) === 3",
            timeout=30_000,
        )
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # never reloaded
        screenshot(page, tmp_path, "live")
    assert problems == []


def test_a_reader_polling_at_20_hz_beside_a_writing_run_sees_no_error_and_causes_none(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    command = [sys.executable, "-m", "meta_agent.cli", "run", "deceptive", "--sandbox", "local", "--iterations", "40",
               "--name", "w", "--runs-dir", str(runs), "--set", "search.operators={ast_mutate = 1.0}"]  # fmt: skip
    answers: list[tuple[str, int]] = []
    failures: list[str] = []
    with served(runs) as base:
        run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stop = threading.Event()

        def poll() -> None:
            last_agent = 0
            while not stop.is_set():
                started = time.monotonic()
                try:
                    with urllib.request.urlopen(f"{base}/api/runs/w/changes?after_agent={last_agent}", timeout=30) as r:
                        body = json.loads(r.read())
                        answers.append(("changes", r.status))
                        last_agent = body["last_agent"]
                    with urllib.request.urlopen(f"{base}/api/runs/w/points", timeout=30) as r:
                        json.loads(r.read())
                        answers.append(("points", r.status))
                except urllib.error.HTTPError as error:
                    if not answers and error.code == 404:  # the run's archive is not there yet
                        pass
                    else:
                        failures.append(f"HTTP {error.code}: {error.read()[:300]!r}")
                except Exception as error:  # noqa: BLE001 - every other failure is a finding, recorded
                    failures.append(f"{type(error).__name__}: {error}")
                stop.wait(max(0.05 - (time.monotonic() - started), 0.0))  # 20 Hz

        reader = threading.Thread(target=poll)
        reader.start()
        try:
            out, err = run.communicate(timeout=600)
        finally:
            stop.set()
            reader.join(timeout=60)
        with urllib.request.urlopen(f"{base}/api/runs/w/points?max_points=100000", timeout=30) as r:
            shown = json.loads(r.read())["total"]
    assert run.returncode == 0, out[-2000:] + err[-2000:]
    assert "locked" not in err and "Traceback" not in err, err[-2000:]
    assert failures == [], failures[:5]
    assert len(answers) >= 20 and all(status == 200 for _, status in answers)
    with Archive.at(runs / "w" / "archive.db", readonly=True) as archive:
        assert shown == len(archive.agents(archive.get_run("w").key)) > 1
