"""The browser UI in real headless Chromium (Debian's chromium through Playwright), served by the real
`cambrian ui` command over real SQLite archives.

Clicking through a run to an agent's prompt and diff, a live page picking up an agent that another
process writes while it is open, and a reader polling at 20 Hz beside a real run that writes, with no
error on either side. Screenshots go to pytest's tmp_path (and to $CAMBRIAN_UI_SHOTS when set).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from cambrian.archive.models import AgentStatus, Evaluation, LLMCall, LLMRequest, LLMResponse
from cambrian.archive.store import Archive
from tests.ui import conftest as ui_fixtures
from tests.ui.conftest import HOSTILE_RUN, IMG, SCRIPT, write_hostile_run

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SYSTEM = "You improve a program for the benchmark."
USER = "Make solve() return a larger number."

#: CI sets CAMBRIAN_REQUIRE_BROWSER=1 (.ci/run installs chromium): there a missing browser fails instead of skipping.
NO_BROWSER = not Path(CHROMIUM).exists() and not os.environ.get("CAMBRIAN_REQUIRE_BROWSER")
pytestmark = pytest.mark.skipif(NO_BROWSER, reason="Debian's chromium package is not installed")


def write_clean_run(runs_dir: Path, name: str = "clean") -> dict[str, int]:
    """A seed and one child whose FM call (prompt and reply) is recorded."""
    with Archive.at(runs_dir / name / "archive.db") as archive:
        run = archive.create_run(name=name, benchmark="circle_packing", seed=0, config_json="{}")
        seed = archive.add_agent(run.key, files={"main.py": "def solve():\n    return 1\n"}, entry="main.py")
        archive.mark_evaluating(seed.key)
        archive.finish_evaluation(
            seed.key, status=AgentStatus.evaluated, score=1.0, evaluations=[Evaluation(task_id="t0")]
        )
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
        archive.record_llm_exchange(
            LLMCall(
                run_id=run.key,
                iteration=1,
                purpose="mutate",
                proposal_id="p1",
                model="qwen",
                request_hash="h1",
                prompt_tokens=30,
                completion_tokens=12,
            ),
            LLMResponse(request_hash="h1", model="qwen", text="return 2"),
            LLMRequest(request_hash="h1", model="qwen", messages=json.dumps(messages)),
        )
        child = archive.add_agent(
            run.key,
            files={"main.py": "def solve():\n    return 2\n"},
            entry="main.py",
            parent_id=seed.key,
            operator="diff",
            model="qwen",
            iteration=1,
            proposal_id="p1",
        )
        archive.mark_evaluating(child.key)
        archive.finish_evaluation(
            child.key, status=AgentStatus.evaluated, score=2.0, evaluations=[Evaluation(task_id="t0")]
        )
        return {"seed": seed.key, "child": child.key}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(runs_dir: Path) -> Iterator[str]:
    """`cambrian ui --runs-dir runs_dir` in a subprocess; yields its base URL once it prints it and answers;
    Ctrl-C (SIGINT) at the end. Its output goes to a file beside runs_dir (a pipe nobody reads could fill
    and stall it); a traceback or an error logged there fails the test that served it."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = runs_dir.parent / f"cambrian-ui-{port}.log"
    command = [sys.executable, "-m", "cambrian", "ui", "--runs-dir", str(runs_dir), "--port", str(port)]
    with log_path.open("w") as log:
        server = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(base + "/api/runs", timeout=5).close()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"`cambrian ui` did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.2)
        assert base in log_path.read_text(), "`cambrian ui` did not print its URL"
        yield base
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    output = log_path.read_text()  # reached only when the test body passed
    assert "Traceback" not in output and "ERROR" not in output, output[-3000:]


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
    page.evaluate("window.scrollTo(0, 0)")  # a sticky header scrolled along would be drawn mid-page
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("CAMBRIAN_UI_SHOTS"):
        target = Path(os.environ["CAMBRIAN_UI_SHOTS"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)
    assert path.stat().st_size > 10_000, f"{name}: an empty screenshot"


def plotted_agents(page: Any) -> int:
    """Markers in the score plot (every trace but the best-so-far line)."""
    return int(
        page.evaluate(
            "() => document.getElementById('score-plot').data.filter((t) => t.mode === 'markers')"
            ".reduce((n, t) => n + t.x.length, 0)"
        )
    )


def test_click_from_the_runs_page_through_the_tree_to_an_agents_prompt_and_diff(tmp_path: Path) -> None:
    ids = write_clean_run(tmp_path / "runs")
    with served(tmp_path / "runs") as base, browser_page() as (page, problems):
        page.goto(base + "/")
        page.wait_for_selector("#runs-table")
        screenshot(page, tmp_path, "runs")
        page.get_by_role("link", name="clean", exact=True).first.click()
        page.wait_for_url("**/runs/clean")
        page.wait_for_function("() => window.cambrianReady === true")
        page.wait_for_selector("#score-plot .main-svg")
        page.wait_for_selector("#tree-plot .main-svg")
        page.wait_for_selector("#tree-plot .scatterlayer .point")
        assert plotted_agents(page) == 2
        page.wait_for_selector("body[data-panels='1']")  # the budget and search-space panels, fetched after
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
        # The full prompt, message by message, and the reply.
        assert SYSTEM in page.locator(".message.role-system").first.inner_text()
        assert USER in page.locator(".message.role-user").first.inner_text()
        assert "return 2" in page.locator(".message.role-reply").first.inner_text()
        removed = page.locator("table.diff tr.del").first.inner_text()  # the diff against the parent
        added = page.locator("table.diff tr.add").first.inner_text()
        assert "return 1" in removed and "return 2" in added
        screenshot(page, tmp_path, "agent")
    assert problems == []


PWN_SCRIPT = "<script>window.__pwned=1</script>"
PWN_IMG = '<img src=x onerror="window.__pwned=1">'
PWN_RUN = f"pwn {PWN_IMG}"


def write_pwn_runs(runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, int]]:
    """conftest's hostile run twice with its alert() payloads ("xss" and HOSTILE_RUN, whose name is markup)
    and twice with payloads that set window.__pwned ("pwn" and PWN_RUN); the agent ids of each by role."""
    ids = {"xss": write_hostile_run(runs_dir, "xss"), HOSTILE_RUN: write_hostile_run(runs_dir, HOSTILE_RUN)}
    monkeypatch.setattr(ui_fixtures, "SCRIPT", PWN_SCRIPT)
    monkeypatch.setattr(ui_fixtures, "IMG", PWN_IMG)
    monkeypatch.setattr(ui_fixtures, "PAYLOAD", f"{PWN_SCRIPT} {PWN_IMG}")
    ids["pwn"] = write_hostile_run(runs_dir, "pwn")
    ids[PWN_RUN] = write_hostile_run(runs_dir, PWN_RUN)
    return ids


def hover_texts(page: Any, plot: str) -> list[str]:
    """Plotly's hover label over each marker of `plot` (the text plotly rendered from the escaped label)."""
    texts = []
    points = page.locator(f"#{plot} .scatterlayer .point")
    for k in range(points.count()):
        points.nth(k).scroll_into_view_if_needed()
        box = points.nth(k).bounding_box()
        if box is None:
            continue
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        try:
            page.wait_for_selector(f"#{plot} .hoverlayer .hovertext", timeout=3000)
        except Exception:  # noqa: BLE001 - a marker hidden under another one shows no label of its own
            continue
        texts.append(page.locator(f"#{plot} .hoverlayer .hovertext").first.text_content() or "")
        page.mouse.move(0, 0)
    return texts


def test_hostile_text_runs_nothing_in_the_browser_and_shows_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    ids = write_pwn_runs(runs, monkeypatch)
    with served(runs) as base, browser_page() as (page, problems):
        fetched_x: list[str] = []  # an <img src=x> that became an element would fetch .../x
        page.on("request", lambda request: fetched_x.append(request.url) if request.url.endswith("/x") else None)

        def check(url: str, *visible: str) -> str:
            """Open url, let its scripts and polls run; nothing ran, and the payloads are there as text."""
            page.goto(base + url)
            page.wait_for_load_state("networkidle")
            assert page.evaluate("window.__pwned") is None, f"a payload ran on {url}"
            assert page.evaluate("document.querySelectorAll('img[src=\"x\"], [onerror]').length") == 0, url
            scripts = page.evaluate("[...document.scripts].map((s) => s.getAttribute('src') || s.type)")
            assert all(s.startswith("/static/") or s == "application/json" for s in scripts), (url, scripts)
            text = page.inner_text("body")
            for payload in visible:
                assert payload in text, f"{payload!r} is not shown as text on {url}"
            return text

        check("/?all=1", HOSTILE_RUN, PWN_RUN)
        screenshot(page, tmp_path, "xss-runs")
        for run, payloads in (
            ("xss", (SCRIPT, IMG)),
            (HOSTILE_RUN, (SCRIPT, IMG)),
            ("pwn", (PWN_SCRIPT, PWN_IMG)),
            (PWN_RUN, (PWN_SCRIPT, PWN_IMG)),
        ):
            path = "/runs/" + quote(run, safe="")
            child, invalid, seed = ids[run]["child"], ids[run]["invalid"], ids[run]["seed"]
            check(path, run)
            page.wait_for_selector("#tree-plot .main-svg")
            page.wait_for_selector("body[data-panels='1']")
            # Plotly draws hover labels from an HTML subset: the labels show the payloads as text.
            labels = " ".join(hover_texts(page, "score-plot") + hover_texts(page, "tree-plot"))
            assert payloads[1] in labels, labels  # the invalid agent's operator and reason
            assert page.evaluate("window.__pwned") is None, f"hovering {run} ran a payload"
            if run == PWN_RUN:
                screenshot(page, tmp_path, "xss-run")
            agent_text = check(f"{path}/agents/{child}", *payloads)
            assert f"system {payloads[0]} {payloads[1]}" in agent_text  # the prompt, as text
            if run == PWN_RUN:
                screenshot(page, tmp_path, "xss-agent")
            check(f"{path}/agents/{invalid}", f"reason {payloads[0]} {payloads[1]}")
            check(f"{path}/compare?a={seed}&b={child}", *payloads)
        check("/compare?runs=" + ",".join(quote(run, safe="") for run in ids), "pwn")
    assert problems == [], problems  # no dialog, no page error, no CSP refusal in the console
    assert fetched_x == []


def test_the_live_page_shows_an_agent_another_process_writes(tmp_path: Path) -> None:
    ids = write_clean_run(tmp_path / "runs")
    writer = f"""
from pathlib import Path
from cambrian.archive.models import AgentStatus, Evaluation
from cambrian.archive.store import Archive
with Archive.at(Path({str(tmp_path / "runs" / "clean" / "archive.db")!r})) as archive:
    run = archive.get_run("clean")
    child = archive.add_agent(run.key, files={{"main.py": "def solve():\\n    return 9\\n"}}, entry="main.py",
                              parent_id={ids["child"]}, operator="diff", model="qwen", iteration=2)
    archive.mark_evaluating(child.key)
    archive.finish_evaluation(child.key, status=AgentStatus.evaluated, score=9.5,
                              evaluations=[Evaluation(task_id="t0")])
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
    # ast_mutate proposes without an FM, so the run needs no model: it names a hosted one whose key is a
    # placeholder (no local server is started, and nothing calls it: the archive records no FM call).
    command = [
        sys.executable,
        "-m",
        "cambrian",
        "run",
        "deceptive",
        "--sandbox",
        "local",
        "--iterations",
        "60",
        "--name",
        "w",
        "--runs-dir",
        str(runs),
        "--set",
        "search.operators={ast_mutate = 1.0}",
        "--model",
        "openai/gpt-4o-mini",
        "--api-key-env",
        "CAMBRIAN_TEST_UNUSED_KEY",
    ]
    answers: list[tuple[str, int]] = []
    failures: list[str] = []
    agents_seen: set[int] = set()  # the run's agent count in each answer: it grows while the reader polls
    with served(runs) as base:
        env = {**os.environ, "CAMBRIAN_TEST_UNUSED_KEY": "never-used"}
        run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        stop = threading.Event()

        def poll() -> None:
            last_agent, last_update = 0, ""
            while not stop.is_set():
                started = time.monotonic()
                try:
                    query = urllib.parse.urlencode({"after_agent": last_agent, "after_update": last_update})
                    with urllib.request.urlopen(f"{base}/api/runs/w/changes?{query}", timeout=30) as r:
                        body = json.loads(r.read())
                        answers.append(("changes", r.status))
                        last_agent, last_update = body["last_agent"], body["last_update"]
                        agents_seen.add(body["summary"]["agents"])
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
            plotted = json.loads(r.read())["total"]
        with urllib.request.urlopen(f"{base}/api/runs", timeout=30) as r:
            listed = {summary["name"]: summary["agents"] for summary in json.loads(r.read())["runs"]}
    assert run.returncode == 0, out[-2000:] + err[-2000:]
    assert not re.search(r"error|locked|traceback", err, re.IGNORECASE), err[-2000:]
    assert failures == [], failures[:5]
    assert len(answers) >= 20 and all(status == 200 for _, status in answers)
    assert len(agents_seen) > 2, f"the reader never saw the run grow: {sorted(agents_seen)}"
    with Archive.at(runs / "w" / "archive.db", readonly=True) as archive:
        run_key = archive.get_run("w").key
        stored = len(archive.agents(run_key))
        assert stored > 1 and plotted == listed["w"] == stored
        assert archive.llm_calls(run_key) == []  # the placeholder model was never called
