"""What the bad-inputs cases build (bench/bad_inputs.py): runs, damaged archives, hostile export folders.

Each helper makes one thing a case's command runs against, in the case's fresh folder: a runs folder with a
run (`made_run`), one whose archive is damaged (`damaged_run`), an export folder written by hand
(`hand_export`) and the hostile ones made from it (a huge file, a hard link, a symlink, a fifo, a path out
of the folder, a damaged manifest, ...), a search another process is running (`busy_run`), a read-only
folder (`as_unprivileged`). The `*_kept` helpers say, after the command, what it lost (None: nothing).
`cli_env` is the environment every command runs in; `RUN`, `EVAL`, `MODEL_FREE` and `NO_FM` the options
the cases share, so that none starts a model server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: A model file that is never there, and an address where nothing listens (the discard port).
NO_GGUF = "no-such-model.gguf"
DEAD_ADDRESS = "127.0.0.1:9"
PACKING = "def pack_circles(n):\n    return [(0.5, 0.5, 0.1)] + [(0.5, 0.5, 0.0)] * (n - 1)\n"
EVAL = ("--split", "search", "--sandbox", "local", "--no-agent-fm")
#: Operators that write code without a model: a run case wrongly accepted would search without a model server.
NO_FM = ("--set", "search.operators={ast_mutate = 1.0}")
MODEL_FREE = ("--sandbox", "local", *NO_FM)
RUN = ("run", "deceptive", *NO_FM)  # a case's own --set comes later, and wins


def cli_env(extra: dict[str, str | None] | None = None) -> dict[str, str]:
    """The environment of a command: a wide plain terminal, this checkout's cambrian, no CAMBRIAN_* settings,
    and `extra` (None unsets a variable)."""
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    for name, value in {"CAMBRIAN_STORE": None, "CAMBRIAN_RUNS_DIR": None, **(extra or {})}.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def made_run(runs: Path, name: str, *, children: int = 2) -> Path:
    """A finished deceptive run with an evaluated seed and `children` evaluated children (model-free config)."""
    from cambrian.archive.models import AgentStatus, RunStatus
    from cambrian.archive.store import Archive
    from cambrian.meta_agent.config import RunConfig

    config = RunConfig.model_validate(
        {"name": name, "benchmark": "deceptive", "search": {"operators": {"ast_mutate": 1.0}}}
    )
    path = runs / name / "archive.db"
    with Archive.at(path) as archive:
        run = archive.create_run(name=name, benchmark="deceptive", seed=0, config_json=config.to_json())
        seed = archive.add_agent(run.key, files={"main.py": "x = 0\n" + "# padding\n" * 300}, entry="main.py")
        archive.mark_evaluating(seed.key)
        archive.finish_evaluation(seed.key, status=AgentStatus.evaluated, score=0.5)
        for k in range(children):
            child = archive.add_agent(
                run.key,
                files={"main.py": f"x = {k + 1}\n" + "# padding\n" * 300},
                entry="main.py",
                parent_id=seed.key,
                operator="ast_mutate",
                iteration=k + 1,
            )
            archive.mark_evaluating(child.key)
            archive.finish_evaluation(child.key, status=AgentStatus.evaluated, score=0.5 + 0.1 * (k + 1))
        archive.set_run_status(run.key, RunStatus.finished)
    return path


def damaged_run(runs: Path, name: str, damage: str) -> Path:
    """A run whose archive.db is random bytes, or its first third (with a healthy run beside it)."""
    made_run(runs, "good")
    path = made_run(runs, name, children=40)  # enough pages that a truncated copy loses some
    if damage == "random":
        path.write_bytes(os.urandom(8192))
    else:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    return path


def bytes_kept(path: Path) -> Callable[[], str | None]:
    """A check that `path` still holds the bytes it holds now (a damaged archive a user may want to rescue)."""
    before = hashlib.sha256(path.read_bytes()).hexdigest()

    def check() -> str | None:
        if not path.exists():
            return f"{path.name} was deleted"
        return None if hashlib.sha256(path.read_bytes()).hexdigest() == before else f"{path.name} was changed"

    return check


def archive_kept(path: Path) -> Callable[[], str | None]:
    """A check that the archive at `path` still passes its integrity check with the agents it has now."""

    def agents() -> int:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                return -1
            return db.execute("SELECT count(*) FROM agent").fetchone()[0]

    before = agents()

    def check() -> str | None:
        if not path.exists():
            return f"{path} was deleted"
        after = agents()
        return None if after == before else f"{path.name}: {before} agents before, {after} after"

    return check


def text_kept(path: Path) -> Callable[[], str | None]:
    """A check that the user's file at `path` still holds what it holds now."""
    before = path.read_text()
    return lambda: None if path.is_file() and path.read_text() == before else f"{path.name} was overwritten"


def nothing_left(folder: Path) -> Callable[[], str | None]:
    """A check that a run which failed before its seed was scored left no folder behind."""
    return lambda: f"{folder} was left behind" if folder.exists() else None


def hand_export(folder: Path, files: dict[str, str], *, config: dict | None = None, **options: object) -> Path:
    """An export folder as a stranger might send it: the files and a manifest whose hash matches them."""
    from cambrian.archive.store import genome_hash

    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    frozen = config or {"benchmark": "circle_packing", "benchmark_options": options, "seed": 0}
    manifest = {"entry": "packing.py", "files": sorted(files), "config": frozen, "genome_hash": genome_hash(files)}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def as_unprivileged(root: Path) -> tuple[str, ...]:
    """The prefix that runs a command as a user who may not write a read-only folder: nobody, for root (whom
    no mode bit stops), else nothing. `root` is opened to nobody (it reads the run and writes its HOME)."""
    if os.geteuid() != 0:
        return ()
    for path in [root, *root.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    return ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", f"HOME={root}")


def busy_run(tmp: Path, name: str) -> tuple[subprocess.Popen, Callable[[], None]]:
    """A model-free search of `name` that holds its run until stopped (SIGINT, as Ctrl-C); waits for its lock."""
    searcher = subprocess.Popen(
        [sys.executable, "-m", "cambrian", "run", "deceptive", "--name", name, "--iterations", "100000", *MODEL_FREE],
        cwd=tmp,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock, deadline = tmp / "runs" / name / "run.lock", time.monotonic() + 120
    while not (lock.exists() and lock.read_text().startswith(f"pid {searcher.pid} ")):
        if searcher.poll() is not None or time.monotonic() > deadline:
            searcher.kill()
            raise RuntimeError(f"the search holding {name} never started: {searcher.communicate()[1][-400:]}")
        time.sleep(0.05)

    def stop() -> None:
        if searcher.poll() is None:
            searcher.send_signal(signal.SIGINT)
        try:
            searcher.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            searcher.kill()
            searcher.communicate()

    return searcher, stop


def still_searching(searcher: subprocess.Popen, archive: Path, name: str) -> Callable[[], str | None]:
    """A check that the refused command left the search it collided with going, and its archive sound."""

    def check() -> str | None:
        if searcher.poll() is not None:
            return f"the search of {name} holding the run ended (exit {searcher.returncode})"
        with contextlib.closing(sqlite3.connect(f"file:{archive}?mode=ro", uri=True)) as db:
            status = db.execute("SELECT status FROM run WHERE name = ?", (name,)).fetchone()
        return None if status and status[0] == "running" else f"run {name} is {status} while its search goes on"

    return check


# ----- hostile export folders ----------------------------------------------------------------------


def huge_file(tmp: Path) -> Path:
    folder = hand_export(tmp / "huge", {"packing.py": PACKING, "data.py": ""})
    os.truncate(folder / "data.py", 1 << 30)  # 1 GiB listed in the manifest (sparse: nothing is written)
    return folder


def hard_link(tmp: Path) -> Path:
    (tmp / "elsewhere.py").write_text("secret = 1\n")
    folder = hand_export(tmp / "linked", {"packing.py": PACKING, "other.py": "secret = 1\n"})
    (folder / "other.py").unlink()
    os.link(tmp / "elsewhere.py", folder / "other.py")  # a second name for a file outside the folder
    return folder


def symlink(tmp: Path) -> Path:
    folder = hand_export(tmp / "linked", {"packing.py": PACKING, "other.py": ""})
    (folder / "other.py").unlink()
    (folder / "other.py").symlink_to("/etc/passwd")
    return folder


def fifo(tmp: Path) -> Path:
    folder = hand_export(tmp / "fifo", {"packing.py": PACKING, "pipe.py": ""})
    (folder / "pipe.py").unlink()
    os.mkfifo(folder / "pipe.py")  # a read would block for ever
    return folder


def escaping_path(tmp: Path) -> Path:
    folder = hand_export(tmp / "escape", {"packing.py": PACKING})
    (tmp / "secret.py").write_text("key = 'x'\n")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"] = ["packing.py", "../secret.py"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def not_an_export(tmp: Path) -> Path:
    (tmp / "stuff").mkdir()
    (tmp / "stuff" / "packing.py").write_text(PACKING)
    return tmp / "stuff"


def damaged_manifest(tmp: Path) -> Path:
    folder = hand_export(tmp / "agent-3", {"packing.py": PACKING})
    (folder / "manifest.json").write_text('{"entry": "packing.py", "files": ["packing.py"')
    return folder


def modified_export(tmp: Path) -> Path:
    folder = hand_export(tmp / "agent-3", {"packing.py": PACKING})
    (folder / "packing.py").write_text(PACKING + "# changed\n")
    return folder


def unknown_benchmark_export(tmp: Path) -> Path:
    return hand_export(tmp / "agent-3", {"packing.py": PACKING}, config={"benchmark": "nosuchbench", "seed": 0})


def bad_option_export(tmp: Path) -> Path:
    return hand_export(tmp / "agent-3", {"packing.py": PACKING}, n_circles="many")
