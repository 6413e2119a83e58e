"""The browser UI's pages and JSON endpoints over real archives (FastAPI's TestClient, real SQLite).

Fast tests read archives written through the real `Archive` API (tests/ui/conftest.py): escaping of
hostile text, error pages, the tree's level of detail, live changes, the report. The slow ones read
an archive written by a real search with a real local model. One test drives real headless Chromium.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from cambrian.archive.store import Archive
from cambrian.ui import CONTENT_SECURITY_POLICY, create_app, write_report
from tests.ui.conftest import HOSTILE_RUN, IMG, PAYLOAD, SCRIPT

Runs = tuple[Path, dict[str, int], dict[str, int]]
RAW_MARKUP = ("<script>alert", "<img src=x", "onerror=alert(1)>")


def client(folder: Path, run: str | None = None) -> TestClient:
    return TestClient(create_app(folder, run=run), base_url="http://127.0.0.1:8765")


def pages_of(run: str, ids: list[int]) -> list[str]:
    """Every page and JSON endpoint of one run, for agents `ids`."""
    base = f"/runs/{quote(run, safe='')}"
    api = f"/api/runs/{quote(run, safe='')}"
    urls = [
        "/",
        "/?all=1",
        "/api/runs",
        base,
        f"{api}/points",
        f"{api}/panels",
        f"{api}/tree",
        f"{api}/changes?after_agent=0",
        f"{base}/compare",
        f"/compare?runs={quote(run, safe='')}",
    ]
    for agent_id in ids:
        urls += [f"{base}/agents/{agent_id}", f"{api}/agents/{agent_id}", f"{base}/agents/{agent_id}?against={ids[0]}"]
    return urls


def no_raw_markup(text: str) -> None:
    for raw in RAW_MARKUP:
        assert raw not in text, f"{raw!r} reached the page unescaped"


def files_state(folder: Path) -> dict[str, str | None]:
    """sha256 of every archive file and its WAL under `folder` (None where absent), and their mtimes."""
    state: dict[str, str | None] = {}
    for db in sorted(folder.glob("*/archive.db")):
        for path in (db, db.with_name("archive.db-wal")):
            exists = path.exists()
            state[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if exists else None
            state[f"{path} mtime"] = str(path.stat().st_mtime_ns) if exists else None
    return state


# ----- pages over written archives ---------------------------------------------------------------


def test_every_page_answers_with_expected_content(runs_dir: Runs) -> None:
    folder, hostile, big = runs_dir
    with client(folder) as c:
        for url in pages_of("xss", list(hostile.values())) + pages_of("big", [big["seed"], big["deepest"]]):
            response = c.get(url)
            assert response.status_code == 200, (url, response.text[:500])
        runs = c.get("/?all=1").text
        assert "xss" in runs and "big" in runs and "circle_packing" in runs and "greedy" in runs
        assert "corrupt archive" in runs and "not a Cambrian archive" in runs  # broken folders listed, not fatal
        run = c.get("/runs/big").text
        parts = ("Score over iterations", "Lineage tree", "Operators", "Models", "Arms", "Config", "/static/run.js")
        for part in parts:
            assert part in run
        assert 'id="run-data"' in run and "scripted-model" in c.get("/runs/xss").text
        assert "MAP-Elites grid" in c.get("/runs/xss").text  # the run stored descriptors
        agent = c.get(f"/runs/big/agents/{big['deepest']}?against={big['seed']}").text
        assert "Diff against its parent" in agent and f"Diff from #{big['seed']} to #{big['deepest']}" in agent
        assert f"cambrian export big --agent {big['deepest']} --to" in agent
        assert "Per-task results" in agent and "task-1" in agent
        compare = c.get(f"/runs/big/compare?a={big['seed']}&b={big['deepest']}").text
        assert "Per-task scores" in compare and "+1.8980" in compare  # B - A per task
        assert '"curves"' in c.get("/compare?runs=big,xss").text


def test_fm_calls_show_the_full_prompt_reply_and_unrecorded_prompts(runs_dir: Runs) -> None:
    folder, hostile, _ = runs_dir
    with client(folder) as c:
        page = c.get(f"/runs/xss/agents/{hostile['child']}").text
        data = c.get(f"/api/runs/xss/agents/{hostile['child']}").json()
    assert "role-system" in page and "role-user" in page and "role-reply" in page
    assert "prompt not recorded (archive written before prompts were kept)" in page
    recorded, unrecorded = data["calls"]
    assert [m["role"] for m in recorded["messages"]] == ["system", "user"]
    assert recorded["messages"][1]["content"] == f"user {PAYLOAD}" and recorded["reply"] == f"reply {PAYLOAD}"
    assert recorded["call"]["prompt_tokens"] == 50 and unrecorded["messages"] is None


def test_hostile_text_is_escaped_on_every_page_and_carried_as_data_in_json(runs_dir: Runs) -> None:
    folder, hostile, _ = runs_dir
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    with client(folder) as c:
        for run in ("xss", HOSTILE_RUN):
            for url in pages_of(run, list(hostile.values())):
                response = c.get(url)
                assert response.status_code == 200, url
                no_raw_markup(response.text)
        agent = c.get(f"/runs/xss/agents/{hostile['child']}").text
        assert escaped in agent and "&lt;img src=x onerror=alert(1)&gt;" in agent  # shown, as text
        raw = c.get(f"/api/runs/xss/agents/{hostile['child']}")
        assert "<" not in raw.text  # \u003c in the JSON text...
        data = raw.json()  # ...and the payload itself as data
        assert SCRIPT in data["files"]["main.py"] and data["agent"]["feedback"] == f"feedback {PAYLOAD}"
        points = c.get("/api/runs/xss/points").json()
        assert f"reason {PAYLOAD}" in points["reason"] and f"op {IMG}" in points["operator"]
        run_page = c.get("/runs/xss").text
        block = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', run_page, re.S)
        assert block is not None and "<" not in block.group(1)
        assert f"reason {PAYLOAD}" in json.loads(block.group(1))["points"]["reason"]
        named = c.get(f"/runs/{quote(HOSTILE_RUN, safe='')}").text
        assert "run&lt;img src=x onerror=alert(1)&gt;" in named


def test_the_live_run_page_fetches_its_slow_panels_after_first_paint(runs_dir: Runs) -> None:
    folder, hostile, big = runs_dir
    with client(folder) as c:
        page = c.get("/runs/xss").text
        panels = c.get("/api/runs/xss/panels")
        first = json.loads(re.search(r'id="run-data">(.*?)</script>', c.get("/runs/big").text, re.S).group(1))
        few = c.get("/api/runs/big/points?max_points=10").json()
        every = c.get(f"/api/runs/big/points?max_points={len(big) + 5000}").json()
    assert 'id="grid-panel" hidden' in page and "loading" in page  # drawn once /panels answers
    assert panels.status_code == 200 and "<" not in panels.text  # hostile text travels escaped, as data
    grid = panels.json()["grid"]
    assert (grid["x_name"], grid["y_name"]) == ("size", "speed") and hostile["child"] in sum(grid["agent"], [])
    assert set(panels.json()["analytics"]) == {"budget", "search_space"}
    assert first["grid"] is None and first["analytics"] == {}  # not in the page itself
    # The score plot's first paint is capped; asking for more gets every agent.
    assert few["shown"] < few["total"] and few["shown"] >= 2 and every["shown"] == every["total"]


def test_every_response_carries_the_content_security_policy(runs_dir: Runs) -> None:
    folder, _, _ = runs_dir
    with client(folder) as c:
        for url in (
            "/",
            "/runs/xss",
            "/api/runs/xss/tree",
            "/static/run.js",
            "/static/plotly.min.js",
            "/runs/nope",
            "/runs/corrupt",
            "/static/pygments.css",
        ):
            response = c.get(url)
            assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, url
            assert response.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY and "unsafe-eval" not in CONTENT_SECURITY_POLICY


class _Tags(HTMLParser):
    """Every element's attributes, and the scripts: (attributes, text inside)."""

    def __init__(self) -> None:
        super().__init__()
        self.attributes: list[tuple[str, str, str | None]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._script: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attributes.extend((tag, name, value) for name, value in attrs)
        if tag == "script":
            self._script = dict(attrs)
            self.scripts.append((self._script, ""))

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self.scripts[-1] = (self._script, self.scripts[-1][1] + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script = None


def test_pages_load_only_their_own_scripts_and_no_inline_code(runs_dir: Runs) -> None:
    folder, hostile, _ = runs_dir
    with client(folder) as c:
        for url in ("/?all=1", "/runs/xss", f"/runs/xss/agents/{hostile['child']}", "/compare?runs=xss,big"):
            tags = _Tags()
            tags.feed(c.get(url).text)
            for attrs, text in tags.scripts:
                if "src" in attrs:
                    assert str(attrs["src"]).startswith("/static/") and not text.strip(), url
                else:  # data only, which the browser never runs
                    assert attrs.get("type") == "application/json", (url, attrs)
            handlers = [(tag, name) for tag, name, _ in tags.attributes if name.startswith("on")]
            assert handlers == [], url
            links = [v for _, name, v in tags.attributes if name in ("src", "href") and v and "://" in v]
            assert links == [], url  # nothing from a CDN or any other host


def test_missing_run_is_a_clear_404_page(runs_dir: Runs) -> None:
    folder, _, _ = runs_dir
    with client(folder) as c:
        page = c.get("/runs/no-such-run")
        api = c.get("/api/runs/no-such-run/tree")
        agent = c.get("/runs/xss/agents/999")
    assert page.status_code == 404 and "no run named &#39;no-such-run&#39;" in page.text
    assert "cambrian runs --runs-dir" in page.text and "Traceback" not in page.text
    assert api.status_code == 404 and api.json()["fix"]
    assert agent.status_code == 404 and "no agent with id 999" in agent.text


def test_a_5_mb_genome_page_shows_plain_text_and_a_download_not_a_highlighted_page(tmp_path: Path) -> None:
    # One 4.8 MB line once took its agent page 3 min 46 s and 80 MB to highlight (and to diff).
    huge = "x = [" + "1, " * 1_700_000 + "]\n"
    with Archive.at(tmp_path / "huge" / "archive.db") as archive:
        run = archive.create_run(name="huge", benchmark="circle_packing", seed=0, config_json="{}")
        seed = archive.add_agent(run.key, files={"main.py": "x = []\n"}, entry="main.py")
        child = archive.add_agent(
            run.key,
            files={"main.py": huge, "b c.py": "y = 1\n"},
            entry="main.py",
            parent_id=seed.key,
            operator="diff",
            iteration=1,
        )
    with client(tmp_path) as c:
        page = c.get(f"/runs/huge/agents/{child.key}")
        whole = c.get(f"/runs/huge/agents/{child.key}/files/main.py")
        other = c.get(f"/runs/huge/agents/{child.key}/files/b%20c.py")
        missing = c.get(f"/runs/huge/agents/{child.key}/files/nope.py")
    assert page.status_code == 200 and len(page.text) < len(huge) / 4
    assert "the first 200,000 are shown as plain text" in page.text
    assert f'href="/runs/huge/agents/{child.key}/files/main.py" download' in page.text
    assert "more characters)" in page.text  # the diff's one huge line is cut too
    assert whole.status_code == 200 and whole.text == huge and whole.headers["content-type"].startswith("text/plain")
    assert whole.headers["content-disposition"] == "attachment; filename*=UTF-8''main.py"
    assert other.text == "y = 1\n" and missing.status_code == 404 and "has no file" in missing.text


def test_a_request_naming_another_host_is_refused_dns_rebinding(runs_dir: Runs) -> None:
    # A page of attacker.example that resolves its own name to 127.0.0.1 sends `Host: attacker.example`.
    folder, _, _ = runs_dir
    with TestClient(create_app(folder), base_url="http://attacker.example:8765") as c:
        page, api = c.get("/"), c.get("/api/runs")
    assert page.status_code == 400 and "attacker.example" in page.text and "--allow-host" in page.text
    assert api.status_code == 400 and "runs" not in api.json() and "--allow-host" in api.json()["fix"]
    assert "xss" not in page.text and "xss" not in api.text  # nothing of the runs
    for base in ("http://localhost:8765", "http://[::1]:8765", "http://127.0.0.1"):
        with TestClient(create_app(folder), base_url=base) as c:
            assert c.get("/api/runs").status_code == 200, base
    with TestClient(create_app(folder, hosts=["cambrian.lab"]), base_url="http://Cambrian.Lab") as c:
        assert c.get("/api/runs").status_code == 200  # a name the user allowed (--allow-host)


@pytest.mark.parametrize(
    ("run", "status", "words"),
    [
        ("corrupt", 500, "cannot be read: file is not a database"),
        ("foreign", 409, "is not a Cambrian archive (its tables: recipes)"),
        ("outdated", 409, "has schema version 1"),
        ("too-new", 409, "has schema version 999"),
    ],
)
def test_unreadable_archives_give_a_clear_page_with_the_fix(runs_dir: Runs, run: str, status: int, words: str) -> None:
    folder, _, _ = runs_dir
    with client(folder) as c:
        page = c.get(f"/runs/{run}")
        api = c.get(f"/api/runs/{run}/points")
    assert page.status_code == status and words in page.text.replace("&#39;", "'")
    assert "Fix:" in page.text and "Traceback" not in page.text and 'File "' not in page.text
    assert api.status_code == status and api.json()["fix"]


def test_bad_parameters_are_a_400_page_not_a_traceback(runs_dir: Runs) -> None:
    folder, _, _ = runs_dir
    with client(folder) as c:
        assert c.get("/runs/xss/agents/abc").status_code == 400
        assert c.get("/api/runs/big/tree?expand=1,x").status_code == 400
        assert c.get("/api/runs/big/tree?root=99999").status_code == 404


def test_browsing_every_page_never_writes_the_archives(runs_dir: Runs, tmp_path: Path) -> None:
    folder, hostile, big = runs_dir
    copy = tmp_path / "runs"
    shutil.copytree(folder, copy)
    before = files_state(copy)
    with client(copy) as c:
        for url in pages_of("xss", list(hostile.values())) + pages_of("big", [big["deepest"]]):
            c.get(url)
        c.get("/runs/corrupt")
        c.get("/runs/outdated")
    assert files_state(copy) == before


def test_a_run_given_to_the_app_opens_first(runs_dir: Runs) -> None:
    folder, _, _ = runs_dir
    with client(folder, run="big") as c:
        response = c.get("/", follow_redirects=False)
        assert response.status_code == 307 and response.headers["location"] == "/runs/big"
        assert c.get("/?all=1").status_code == 200


# ----- the tree's level of detail ----------------------------------------------------------------


# ----- live ----------------------------------------------------------------------------------------


# ----- the report --------------------------------------------------------------------------------


def test_report_is_one_self_contained_escaped_file(runs_dir: Runs, tmp_path: Path) -> None:
    folder, hostile, _ = runs_dir
    path = write_report(folder, "xss", tmp_path / "report.html", best=2)
    html = path.read_text()
    assert "<script src=" not in html and '<link rel="stylesheet"' not in html  # everything inline
    assert "Plotly" in html and "Lineage tree" in html and f'id="agent-{hostile["child"]}"' in html
    assert "Diff against its parent" in html
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert len(scripts) == 4 and all("</script" not in s.lower() for s in scripts)
    # Its own policy lets exactly those scripts run, by hash, and loads nothing from anywhere.
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', html)
    assert policy is not None and html.index(policy.group(0)) < html.index("<script")
    allowed = set(re.findall(r"'sha256-([^']+)'", policy.group(1)))
    assert allowed == {base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() for s in scripts}
    assert "default-src 'none'" in policy.group(1) and "http" not in policy.group(1)
    outside = re.sub(r"<script>.*?</script>", "", html, flags=re.S)
    no_raw_markup(outside)
    block = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', html, re.S)
    assert block is not None and json.loads(block.group(1))["report"] is True


# ----- the real run --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a real search first (its fixture): however slow a busy machine makes it
def test_pages_of_a_real_run(real_run: tuple[Path, str]) -> None:
    folder, name = real_run
    with Archive.at(folder / name / "archive.db", readonly=True) as archive:
        run = archive.get_run(name)
        ids = [a.key for a in archive.agents(run.key)]
        made = [a.key for a in archive.agents(run.key) if a.iteration > 0]
    before = files_state(folder)
    with client(folder) as c:
        evaluated = c.get("/api/runs").json()["runs"][0]["counts"].get("evaluated", 0)
        for url in pages_of(name, ids):
            response = c.get(url)
            if url == f"/runs/{name}/compare" and evaluated < 2:  # SmolLM2's children may all be invalid
                assert response.status_code == 404 and "fewer than two evaluated agents" in response.text
                continue
            assert response.status_code == 200, (url, response.text[:500])
        page = c.get(f"/runs/{name}").text
        assert "circle_packing" in page and "smollm2-135m" in page and "dgm" in page
        tree = c.get(f"/api/runs/{name}/tree").json()
        assert sorted(tree["nodes"]["id"]) == sorted(ids)
        assert made, "the real run proposed no agent"
        agent = c.get(f"/runs/{name}/agents/{made[0]}").text
        assert "role-system" in agent and "role-user" in agent  # the prompts were recorded
        assert "Score over iterations" in c.get(f"/runs/{name}").text
    assert files_state(folder) == before


# ----- in the browser ------------------------------------------------------------------------------


CHROMIUM = "/usr/bin/chromium"


@pytest.mark.skipif(
    not Path(CHROMIUM).exists() and not os.environ.get("CAMBRIAN_REQUIRE_BROWSER"),
    reason="Debian's chromium package is not installed",
)
def test_pages_run_in_chromium_under_the_csp_and_hostile_text_runs_nothing(runs_dir: Runs) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    import threading

    import uvicorn

    folder, hostile, big = runs_dir
    server = uvicorn.Server(uvicorn.Config(create_app(folder), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    problems: list[str] = []
    dialogs: list[str] = []
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page()
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)

            def on_dialog(dialog: Any) -> None:
                dialogs.append(dialog.message)
                dialog.dismiss()

            page.on("dialog", on_dialog)
            for url in (
                "/?all=1",
                "/runs/xss",
                f"/runs/xss/agents/{hostile['child']}",
                f"/runs/{quote(HOSTILE_RUN, safe='')}",
                "/compare?runs=xss,big",
            ):
                page.goto(base + url)
                page.wait_for_load_state("networkidle")
            page.goto(base + "/runs/big")
            page.wait_for_selector("#tree-plot .scatterlayer .point")
            page.wait_for_selector("#score-plot .scatterlayer .point")
            assert page.locator("#tree-plot .scatterlayer .point").count() > 100
            # Clicking a collapsed clade asks for it and draws more.
            page.check('input[name="click-mode"][value="open"]')
            page.goto(f"{base}/runs/big/agents/{big['deepest']}")
            assert page.locator("h1").inner_text().startswith(f"Agent #{big['deepest']}")
            # The report file runs its scripts under its own hash policy (a blocked one is a console error).
            for run in ("big", "xss"):
                page.goto(write_report(folder, run, folder.parent / f"report-{run}.html", best=2).as_uri())
                page.wait_for_selector("#tree-plot .scatterlayer .point")
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert dialogs == [], "a payload ran in the browser"
    assert problems == [], problems
