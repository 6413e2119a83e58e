"""A new user's bad inputs through the real CLI: each one clear line with its fix, a non-zero exit, no
traceback, and nothing lost (issue: "A sandbox that holds without Docker, and the holes of the second
hostile review", item 8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cambrian.archive.store import Archive

CAMBRIAN = [sys.executable, "-m", "cambrian"]


def cambrian(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    env.pop("CAMBRIAN_STORE", None)
    return subprocess.run([*CAMBRIAN, *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def healthy_run(runs: Path, name: str, agents: int = 40) -> Path:
    path = runs / name / "archive.db"
    with Archive.at(path) as archive:
        run = archive.create_run(name=name, benchmark="deceptive", seed=0, config_json="{}")
        for k in range(agents):  # enough pages that a truncated copy loses some
            archive.add_agent(run.key, files={"main.py": f"x = {k}\n" + "# padding\n" * 200}, entry="main.py")
    return path


@pytest.mark.parametrize("damage", ["random bytes", "truncated"])
def test_a_damaged_archive_is_named_with_the_fix_and_runs_lists_the_healthy_ones(tmp_path: Path, damage: str) -> None:
    runs = tmp_path / "runs"
    healthy_run(runs, "good")
    bad = healthy_run(runs, "bad")
    if damage == "random bytes":
        bad.write_bytes(os.urandom(8192))
    else:
        data = bad.read_bytes()
        bad.write_bytes(data[: len(data) // 3])
    for command in (("status", "bad"), ("tree", "bad"), ("resume", "bad"), ("show", "bad", "1")):
        done = cambrian(*command, "--runs-dir", str(runs))
        assert done.returncode == 2 and "Traceback" not in done.stderr, (command, done.stderr)
        assert f"the archive {bad} is damaged" in done.stderr and "PRAGMA integrity_check" in done.stderr, command
    listed = cambrian("runs", "--runs-dir", str(runs))
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert "good" in listed.stdout and "deceptive" in listed.stdout and "damaged archive" in listed.stdout
    assert f"{bad} is damaged" in listed.stderr


def test_status_shows_what_the_bandit_would_choose_next_among_all_the_runs_operators(tmp_path: Path) -> None:
    # No rewrite was proposed yet, but the bandit may choose it next: it is in the table, with its share.
    from cambrian.archive.models import AgentStatus
    from cambrian.meta_agent.config import RunConfig

    config = RunConfig.model_validate({"name": "arms", "search": {"operators": {"lines": 0.5, "rewrite": 0.5}}})
    with Archive.at(tmp_path / "arms" / "archive.db") as archive:
        run = archive.create_run(name="arms", benchmark="deceptive", seed=0, config_json=config.to_json())
        seed = archive.add_agent(run.key, files={"main.py": "x = 0\n"}, entry="main.py")
        archive.mark_evaluating(seed.key)
        archive.finish_evaluation(seed.key, status=AgentStatus.evaluated, score=0.5)
        for k in range(3):
            child = archive.add_agent(
                run.key,
                files={"main.py": f"x = {k + 1}\n"},
                entry="main.py",
                parent_id=seed.key,
                operator="lines",
                model="m",
                iteration=k + 1,
                fm_seconds=2.0,
            )
            archive.mark_evaluating(child.key)
            archive.finish_evaluation(child.key, status=AgentStatus.evaluated, score=0.5)
    done = cambrian("status", "arms", "--runs-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    rows = {line.split()[1]: line.split() for line in done.stdout.splitlines() if line.startswith("m ")}
    assert set(rows) == {"lines", "rewrite"} and rows["rewrite"][2] == "0"  # proposals
    shares = {name: int(row[-1].rstrip("%")) for name, row in rows.items()}
    assert sum(shares.values()) in (99, 100, 101) and shares["rewrite"] > 0


def test_export_to_a_file_or_an_impossible_path_is_one_line_with_the_fix(tmp_path: Path) -> None:
    from cambrian.archive.models import AgentStatus

    runs = tmp_path / "runs"
    with Archive.at(runs / "r" / "archive.db") as archive:
        run = archive.create_run(name="r", benchmark="deceptive", seed=0, config_json="{}")
        seed = archive.add_agent(run.key, files={"main.py": "x = 0\n"}, entry="main.py")
        archive.mark_evaluating(seed.key)
        archive.finish_evaluation(seed.key, status=AgentStatus.evaluated, score=0.5)
    (tmp_path / "a-file").write_text("")
    for to, words in ((tmp_path / "a-file", "is a file"), (Path("/proc/no-such/x"), "No such file or directory")):
        done = cambrian("export", "r", "--to", str(to), "--runs-dir", str(runs))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert words in done.stderr and "fix:" in done.stderr
    (runs / "r").rename(runs / "s")  # a folder name that is not its run's name
    renamed = cambrian("status", "s", "--runs-dir", str(runs))
    assert renamed.returncode == 2 and "it holds r: was its folder renamed?" in renamed.stderr
    port = cambrian("ui", "--port", "99999", "--runs-dir", str(runs))
    assert (
        port.returncode == 2 and "Traceback" not in port.stderr and "--port" in port.stderr and "65535" in port.stderr
    )


def test_a_missing_model_file_is_refused_before_the_run_exists(tmp_path: Path) -> None:
    done = cambrian(
        "run",
        "deceptive",
        "--model",
        str(tmp_path / "no-such.gguf"),
        "--iterations",
        "1",
        "--sandbox",
        "local",
        "--runs-dir",
        str(tmp_path / "runs"),
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"no model file at {tmp_path / 'no-such.gguf'}" in done.stderr and "cambrian models list" in done.stderr
    assert not (tmp_path / "runs").exists()  # nothing left behind


def test_a_search_that_calls_no_fm_starts_no_model_server(tmp_path: Path) -> None:
    # ast_mutate writes children without an FM and deceptive's programs call none: the model named (a file that
    # does not even exist) is never needed, so it is neither checked nor served (nor, on a fresh machine,
    # downloaded).
    runs = tmp_path / "runs"
    done = cambrian(
        "run",
        "deceptive",
        "--name",
        "plain",
        "--model",
        str(tmp_path / "no-such.gguf"),
        "--iterations",
        "2",
        "--sandbox",
        "local",
        "--set",
        "search.operators={ast_mutate = 1.0}",
        "--runs-dir",
        str(runs),
    )
    assert done.returncode == 0, done.stderr
    assert "no model server" in done.stdout + done.stderr and "starting a local inference server" not in done.stdout
    assert not list((runs / "plain").glob("server*.log"))
    with Archive.at(runs / "plain" / "archive.db", readonly=True) as archive:
        assert archive.iterations_done(archive.get_run("plain").key) == 2
    # Evaluating its export with the agents' FM asked for starts none either: deceptive's programs call none.
    assert (
        cambrian("export", "plain", "--best", "1", "--to", str(tmp_path / "out"), "--runs-dir", str(runs)).returncode
        == 0
    )
    [folder] = list((tmp_path / "out").glob("agent-*"))
    evaluated = cambrian(
        "eval", str(folder), "--split", "search", "--agent-fm", "--sandbox", "local", "--runs-dir", str(runs)
    )
    assert evaluated.returncode == 0, evaluated.stderr
    assert "no model server" in evaluated.stdout + evaluated.stderr


def test_a_second_resume_of_a_run_being_searched_is_refused_and_the_run_goes_on(tmp_path: Path) -> None:
    import signal
    import time

    runs = tmp_path / "runs"
    args = ["--sandbox", "local", "--set", "search.operators={ast_mutate = 1.0}", "--runs-dir", str(runs)]
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    first = subprocess.Popen(
        [*CAMBRIAN, "run", "deceptive", "--name", "busy", "--iterations", "100000", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lock = runs / "busy" / "run.lock"
        deadline = time.monotonic() + 300  # a generous ceiling: the event waited for is the lock's holder line
        while not (lock.exists() and lock.read_text().startswith(f"pid {first.pid} ")):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        for command in (("resume", "busy", "--runs-dir", str(runs)), ("run", "deceptive", "--name", "busy", *args)):
            refused = cambrian(*command)
            assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
            assert f"run 'busy' is being searched now, by pid {first.pid} on" in refused.stderr
            assert "kill -INT PID" in refused.stderr
        assert first.poll() is None  # the search goes on, undisturbed
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=300)
    with Archive.at(runs / "busy" / "archive.db", readonly=True) as archive:
        assert archive.get_run("busy").status.value == "stopped"  # stopped by its Ctrl-C, not failed
    assert lock.read_text() == ""  # released: a resume may take it now


def hand_export(folder: Path, files: dict[str, str], **options: object) -> Path:
    """An export folder as a stranger might send it: the files, and a manifest whose hash matches them."""
    import json

    from cambrian.archive.store import genome_hash

    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    config = {"benchmark": "circle_packing", "benchmark_options": options, "seed": 0}
    manifest = {"entry": "packing.py", "files": sorted(files), "config": config, "genome_hash": genome_hash(files)}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


PACKING = "def pack_circles(n):\n    return [(0.5, 0.5, 0.1)] + [(0.5, 0.5, 0.0)] * (n - 1)\n"


def test_hostile_exports_are_refused_before_any_read_and_limits_stay_yours(tmp_path: Path) -> None:
    args = ("--split", "search", "--sandbox", "local", "--no-agent-fm", "--runs-dir", str(tmp_path / "runs"))
    huge = hand_export(tmp_path / "huge", {"packing.py": PACKING, "data.py": ""})
    os.truncate(huge / "data.py", 1 << 30)  # 1 GiB listed in the manifest (sparse: nothing is written)
    linked = hand_export(tmp_path / "linked", {"packing.py": PACKING, "other.py": "x = 1\n"})
    (linked / "other.py").unlink()
    os.link(tmp_path / "huge" / "packing.py", linked / "other.py")  # a second name for another folder's file
    fifo = hand_export(tmp_path / "fifo", {"packing.py": PACKING, "pipe.py": ""})
    (fifo / "pipe.py").unlink()
    os.mkfifo(fifo / "pipe.py")  # a read would block for ever
    for folder, words in ((huge, "1,073,741,824 bytes"), (linked, "is a hard link"), (fifo, "device, fifo")):
        done = cambrian("eval", str(folder), *args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert words in done.stderr and "fix:" in done.stderr, done.stderr
    # Options that raise the benchmark's own limits (3600 s, 64 GiB) do not raise yours: 1.5 GiB is refused.
    greedy = PACKING.replace("    return", "    hog = bytearray(1536 * 1024 * 1024)\n    return")
    raised = hand_export(tmp_path / "raised", {"packing.py": greedy}, timeout_s=3600, memory_mb=65536)
    done = cambrian("eval", str(raised), *args)
    assert "ran out of memory (limit 1024 MiB)" in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_resume_that_would_change_the_sandbox_backend_says_so_and_needs_sandbox_to_confirm(tmp_path: Path) -> None:
    import json

    runs = tmp_path / "runs"
    plain = ("--set", "search.operators={ast_mutate = 1.0}", "--runs-dir", str(runs))
    assert (
        cambrian("run", "deceptive", "--name", "moved", "--iterations", "1", "--sandbox", "local", *plain).returncode
        == 0
    )
    record = runs / "moved" / "sandbox.json"
    assert json.loads(record.read_text()) == {"backend": "local"}
    # As if its earlier sessions had run in Docker: this session would not.
    record.write_text(json.dumps({"backend": "docker", "image": "cambrian-sandbox:bookworm"}))
    refused = cambrian("resume", "moved", "--iterations", "2", "--runs-dir", str(runs))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert "was evaluated in the Docker sandbox (image cambrian-sandbox:bookworm)" in refused.stderr
    assert "--sandbox local" in refused.stderr
    with Archive.at(runs / "moved" / "archive.db", readonly=True) as archive:
        assert archive.get_run("moved").status.value == "finished"  # refused before anything: not failed
    accepted = cambrian("resume", "moved", "--iterations", "2", "--sandbox", "local", "--runs-dir", str(runs))
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(record.read_text()) == {"backend": "local"}


def test_rm_deletes_a_run_after_a_yes_and_leaves_the_others(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    healthy_run(runs, "keep", agents=2)
    healthy_run(runs, "gone", agents=3)
    asked = cambrian("rm", "gone", "--runs-dir", str(runs))  # no terminal to ask on: a yes is needed
    assert asked.returncode == 2 and "--yes" in asked.stderr and (runs / "gone" / "archive.db").exists()
    done = cambrian("rm", "gone", "--yes", "--runs-dir", str(runs))
    assert done.returncode == 0 and "deleted run gone (3 agents)" in done.stdout, done.stderr
    assert not (runs / "gone").exists() and (runs / "keep" / "archive.db").exists()
    missing = cambrian("rm", "gone", "--yes", "--runs-dir", str(runs))
    assert missing.returncode == 2 and "no run named 'gone'" in missing.stderr


def test_rm_deletes_only_its_rows_in_a_shared_store(tmp_path: Path, store_url: str) -> None:
    store = store_url
    with Archive(store) as archive:
        for name in ("keep", "gone"):
            run = archive.create_run(name=name, benchmark="deceptive", seed=0, config_json="{}")
            seed = archive.add_agent(run.key, files={"main.py": f"x = '{name}'\n"}, entry="main.py")
            archive.add_agent(run.key, files={"main.py": "y = 1\n"}, entry="main.py", parent_id=seed.key, iteration=1)
    done = cambrian("rm", "gone", "--yes", "--store", store, "--runs-dir", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr
    with Archive(store, readonly=True) as archive:
        assert [run.name for run in archive.list_runs()] == ["keep"]
        assert len(archive.agents(archive.get_run("keep").key)) == 2


def test_a_store_that_is_no_url_is_refused_with_the_fix_however_it_is_given(tmp_path: Path) -> None:
    # It once reached a message that shows the URL (sqlalchemy's ArgumentError, a traceback) before the archive
    # could say what is wrong with it.
    runs = tmp_path / "runs"
    healthy_run(runs, "r", agents=1)
    for command in (("status", "r"), ("show", "r", "1"), ("run", "deceptive", "--name", "x", "--sandbox", "local")):
        done = cambrian(*command, "--store", "runs.db", "--runs-dir", str(runs))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "'runs.db' (--store) is not a database URL" in done.stderr and "fix: write sqlite:///" in done.stderr
    (tmp_path / "my.toml").write_text('store = "runs.db"\n')
    for given, words in (
        (("--set", "store=runs.db"), "--set store"),
        (("-c", str(tmp_path / "my.toml")), f"store in {tmp_path / 'my.toml'}"),
    ):
        done = cambrian("run", "deceptive", "--name", "x", *given, "--sandbox", "local", "--runs-dir", str(runs))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"'runs.db' ({words}) is not a database URL" in done.stderr and "fix: write sqlite:///" in done.stderr
    assert not (runs / "x").exists()
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1", "CAMBRIAN_STORE": "runs.db"}
    done = subprocess.run(
        [*CAMBRIAN, "status", "r", "--runs-dir", str(runs)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 2 and "'runs.db' (CAMBRIAN_STORE) is not a database URL" in done.stderr, done.stderr


def test_an_fm_url_without_its_scheme_is_refused_however_it_is_given(tmp_path: Path) -> None:
    # --set fm.api_base=localhost:8080 once reached the FM check, which said that nothing answers there.
    runs = tmp_path / "runs"
    (tmp_path / "my.toml").write_text('[fm]\napi_base = "localhost:8080"\n')
    for given in (
        ("--api-base", "localhost:8080"),
        ("--set", "fm.api_base=localhost:8080"),
        ("-c", str(tmp_path / "my.toml")),
    ):
        done = cambrian("run", "deceptive", "--name", "x", "--model", "qwen", *given, "--runs-dir", str(runs))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "'localhost:8080' has no http:// or https://" in done.stderr and "http://localhost:8080" in done.stderr
        assert "answers" not in done.stderr
    assert not (runs / "x").exists()


def test_a_bad_flag_is_named_as_the_command_lines_never_as_the_runs_stored_config(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    healthy_run(runs, "r", agents=1)
    for command, words in (
        (("resume", "r", "--iterations", "-5"), "budget.iterations: Input should be greater than or equal to 0"),
        (("resume", "r", "--wall-seconds", "-1"), "budget.wall_seconds: Input should be greater than 0"),
        (("resume", "r", "--sandbox", "vm"), "evaluation.sandbox: Input should be 'auto', 'docker' or 'local'"),
        (("eval", "r:1", "--sandbox", "vm"), "evaluation.sandbox: Input should be 'auto', 'docker' or 'local'"),
    ):
        done = cambrian(*command, "--runs-dir", str(runs))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"bad config in the command line: {words}" in done.stderr and "stored config" not in done.stderr
        assert "fix:" in done.stderr


def test_values_no_command_can_use_are_refused_before_it_starts(tmp_path: Path) -> None:
    # `export --best 0` once said the run had no evaluated agent, `--best -2` exported all of them, `tree
    # --max-depth -1` printed the seed alone, `serve --port 99999` started a model server on no port, and an
    # --api-base without http:// was reported as a server that does not answer.
    runs = tmp_path / "runs"
    healthy_run(runs, "r", agents=1)
    for command, option in (
        (("export", "r", "--best", "0", "--to", str(tmp_path / "out")), "'--best'"),
        (("export", "r", "--best", "-2", "--to", str(tmp_path / "out")), "'--best'"),
        (("tree", "r", "--max-depth", "-1"), "'--max-depth'"),
        (("serve", "--port", "99999"), "'--port'"),
        (("run", "deceptive", "--model", "qwen", "--api-base", "localhost:8080"), "--api-base"),
        (("doctor", "--quick", "--api-base", "localhost:8080"), "--api-base"),
    ):
        done = cambrian(*command, *(("--runs-dir", str(runs)) if command[0] in ("export", "tree", "run") else ()))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"Invalid value for {option}" in done.stderr and "--help" in done.stderr, done.stderr
    assert "write e.g. http://localhost:8080" in done.stderr
    assert not (tmp_path / "out").exists() and list(runs.iterdir()) == [runs / "r"]


def test_runs_names_a_runs_folder_that_is_not_there(tmp_path: Path) -> None:
    missing = cambrian("runs", "--runs-dir", str(tmp_path / "no-such"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
    assert f"the runs folder {tmp_path / 'no-such'} does not exist" in missing.stderr and "fix:" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = cambrian("runs", "--runs-dir", str(tmp_path / "empty"))
    assert empty.returncode == 0 and "no runs in" in empty.stdout, empty.stderr


def test_doctor_fails_a_model_that_a_run_would_refuse() -> None:
    # No local model, no provider/model string, no --api-base: it once read "ok" twice (and "answers").
    done = cambrian("doctor", "--quick", "--model", "qwen-nosuch")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "FAIL  default model: 'qwen-nosuch' is neither a local model nor a litellm model string" in done.stdout
    assert "cambrian models list" in done.stdout and "answers" not in done.stdout
