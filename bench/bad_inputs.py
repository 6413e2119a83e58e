"""Is every bad input a new user might give answered clearly? The bad-inputs batch.

Runs each case (`CASES`) through the real CLI, as a user would type it: `python -m cambrian ...` in a fresh
temporary folder (the default `runs` folder is that folder's), COLUMNS=250, NO_COLOR=1, CAMBRIAN_STORE and
CAMBRIAN_RUNS_DIR unset. Each case is a small function that builds what it needs (a runs folder with a run,
a damaged archive, a read-only folder, an export folder with a hostile manifest, a bad TOML config, a run
being searched by another process, ...) and names one command, the words that name its cause, and what the
command must not lose. One row per case: its name, the command, the exit code, the verdict and the first
error line; then "N clear, N confusing, N tracebacks, N hangs of N".

    .venv/bin/python bench/bad_inputs.py                       # every case; rows to bench/results/bad_inputs.json
    .venv/bin/python bench/bad_inputs.py --only export,eval    # the cases whose names contain a word
    .venv/bin/python bench/bad_inputs.py --list                # the cases and their commands, nothing run

Verdicts. Most cases are inputs the CLI must refuse (`expect="refuse"`):

- traceback: "Traceback (most recent call last)" in stdout or stderr;
- hangs: the command ran past its timeout (60 s unless the case says less);
- confusing: exit 0; or no error line (`error:`, click's `Error:`, `run NAME failed:`, the doctor's `FAIL`);
  or the message (from the first error line to its fix) does not hold every word of the case's `cause`; or no
  fix (a `fix:` line after the error, or click's usage form, whose `Try '... --help'` line is its fix); or the
  command lost something the case checks (an archive changed, a file overwritten, a run folder left behind);
- clear: none of these.

A few inputs are ones the CLI should ride out (`expect="proceed"`): a runs folder with one damaged archive
among healthy ones is still listed; an operator that needs no model runs without one; an export's options
cannot raise your limits or turn a model server on for programs that call none. There clear means exit 0,
every word of `cause` in the output (the line that says what was ignored or refused), and the case's check.

The rows go to bench/results/bad_inputs.json with the commit and the date. Every case fails fast; none starts
a model server or downloads anything (a run that needs a model names one that is missing or unreachable). A
read-only folder is one this user may not write: as root, the command runs as nobody (setpriv) over it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RESULTS = REPO / "bench" / "results" / "bad_inputs.json"
TRACEBACK = "Traceback (most recent call last)"
ERROR_LINE = re.compile(r"^\s*(error:|Error:|run \S+ failed:|FAIL\b)")
FIX_LINE = re.compile(r"^\s*fix:")
USAGE_FIX = re.compile(r"^Try '.+ --help' for help\.")
#: A model file that is never there, and an address where nothing listens (the discard port).
NO_GGUF = "no-such-model.gguf"
DEAD_ADDRESS = "127.0.0.1:9"


@dataclass
class Attempt:
    """One command of a case, and how to judge it. `cause`: words the message must hold (case-insensitive);
    `wrong`: words that would blame the wrong thing (a value typed now blamed on the run's stored config);
    `kept`: after the command, what it lost (None: nothing); `stop`: ends what the case started."""

    args: tuple[str, ...]
    cause: tuple[str, ...]
    expect: Literal["refuse", "proceed"] = "refuse"
    wrong: tuple[str, ...] = ()
    kept: Callable[[], str | None] | None = None
    stop: Callable[[], None] | None = None
    prefix: tuple[str, ...] = ()
    env: dict[str, str | None] = field(default_factory=dict)  # None: unset
    timeout_s: float = 60.0


@dataclass(frozen=True)
class Case:
    name: str
    setup: Callable[[Path], Attempt]  # builds what the case needs in a fresh folder; the command runs there


@dataclass
class Row:
    name: str
    command: str
    exit: int | None
    verdict: str
    reason: str
    first_error: str
    seconds: float
    output_tail: str = field(default="", repr=False)


# ----- what the cases build ----------------------------------------------------------------------


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


PACKING = "def pack_circles(n):\n    return [(0.5, 0.5, 0.1)] + [(0.5, 0.5, 0.0)] * (n - 1)\n"
EVAL = ("--split", "search", "--sandbox", "local", "--no-agent-fm")
#: Operators that write code without a model: a run case wrongly accepted would search without a model server.
NO_FM = ("--set", "search.operators={ast_mutate = 1.0}")
MODEL_FREE = ("--sandbox", "local", *NO_FM)
RUN = ("run", "deceptive", *NO_FM)  # a case's own --set comes later, and wins


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


# ----- the cases ---------------------------------------------------------------------------------


def plain(
    *args: str, cause: tuple[str, ...], wrong: tuple[str, ...] = (), timeout_s: float = 60.0, **env: str | None
) -> Callable[[Path], Attempt]:
    """A case that needs nothing but an empty folder (and `env`, set for the command; None unsets)."""
    return lambda tmp: Attempt(args, cause, wrong=wrong, timeout_s=timeout_s, env=env)


def with_run(*args: str, cause: tuple[str, ...], wrong: tuple[str, ...] = ()) -> Callable[[Path], Attempt]:
    """A case over a runs folder holding one finished run, r (3 agents), which must come through intact."""

    def setup(tmp: Path) -> Attempt:
        return Attempt(args, cause, wrong=wrong, kept=archive_kept(made_run(tmp / "runs", "r")))

    return setup


def on_damaged(damage: str, *args: str) -> Callable[[Path], Attempt]:
    """`args` over run bad, whose archive is damaged: the message names the archive of bad; it is never changed."""

    def setup(tmp: Path) -> Attempt:
        path = damaged_run(tmp / "runs", "bad", damage)
        return Attempt(args, ("archive", "bad"), kept=bytes_kept(path))

    return setup


def runs_over_damaged(damage: str) -> Callable[[Path], Attempt]:
    def setup(tmp: Path) -> Attempt:
        path = damaged_run(tmp / "runs", "bad", damage)
        healthy = archive_kept(tmp / "runs" / "good" / "archive.db")
        kept = bytes_kept(path)

        def check() -> str | None:
            return kept() or healthy()

        return Attempt(("runs",), ("bad/archive.db is damaged", "cambrian status bad"), expect="proceed", kept=check)

    return setup


def export_to_file(tmp: Path) -> Attempt:
    made_run(tmp / "runs", "r")
    (tmp / "notes.txt").write_text("my notes\n")
    return Attempt(("export", "r", "--to", "notes.txt"), ("notes.txt",), kept=text_kept(tmp / "notes.txt"))


def export_over_earlier_export(tmp: Path) -> Attempt:
    made_run(tmp / "runs", "r")
    (tmp / "out" / "agent-3").mkdir(parents=True)
    (tmp / "out" / "agent-3" / "main.py").write_text("my edits\n")
    return Attempt(
        ("export", "r", "--to", "out"), ("out/agent-3",), kept=text_kept(tmp / "out" / "agent-3" / "main.py")
    )


def export_to_read_only(tmp: Path) -> Attempt:
    made_run(tmp / "runs", "r")
    prefix = as_unprivileged(tmp)
    (tmp / "shelf").mkdir(mode=0o555)
    (tmp / "shelf").chmod(0o555)
    return Attempt(("export", "r", "--to", "shelf"), ("shelf",), prefix=prefix)


def ui_port_in_use(tmp: Path) -> Attempt:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    return Attempt(("ui", "--port", str(port)), (str(port), "in use"), stop=holder.close, timeout_s=30)


def missing_gguf(tmp: Path) -> Attempt:
    args = ("run", "deceptive", "--name", "m", "--model", str(tmp / NO_GGUF), "--iterations", "1", "--sandbox", "local")
    return Attempt(args, (NO_GGUF,), kept=nothing_left(tmp / "runs" / "m"))


def unknown_model(tmp: Path) -> Attempt:
    args = ("run", "deceptive", "--name", "m", "--model", "qwen-nosuch", "--iterations", "1", "--sandbox", "local")
    return Attempt(args, ("qwen-nosuch",), kept=nothing_left(tmp / "runs" / "m"))


def dead_api_base(tmp: Path) -> Attempt:
    args = ("run", "deceptive", "--name", "m", "--model", "openai/gpt-4o-mini", "--api-base", f"http://{DEAD_ADDRESS}")
    return Attempt(
        (*args, "--iterations", "1", "--sandbox", "local"), (DEAD_ADDRESS,), kept=nothing_left(tmp / "runs" / "m")
    )


def unset_api_key(tmp: Path) -> Attempt:
    args = ("run", "deceptive", "--name", "m", "--model", "openai/gpt-4o-mini", "--api-key-env", "NO_SUCH_KEY_VAR")
    return Attempt(
        (*args, "--iterations", "1", "--sandbox", "local"), ("NO_SUCH_KEY_VAR",), kept=nothing_left(tmp / "runs" / "m")
    )


def no_scheme(*api_base: str) -> Callable[[Path], Attempt]:
    """An FM server URL without http:// (`api_base`: the flag or the --set that gives it): it reaches no server,
    whatever listens at that address."""

    def setup(tmp: Path) -> Attempt:
        args = ("run", "deceptive", "--name", "m", "--model", "qwen", *api_base, "--sandbox", "local")
        cause = ("localhost:8080", "http://")
        return Attempt(args, cause, wrong=("nothing answers",), kept=nothing_left(tmp / "runs" / "m"))

    return setup


def hosted_without_key(tmp: Path) -> Attempt:
    args = (
        "run",
        "deceptive",
        "--name",
        "m",
        "--model",
        "openai/gpt-4o-mini",
        "--iterations",
        "1",
        "--sandbox",
        "local",
    )
    return Attempt(args, ("OPENAI_API_KEY",), kept=nothing_left(tmp / "runs" / "m"), env={"OPENAI_API_KEY": None})


def seed_no_operator_edits(tmp: Path) -> Attempt:
    args = ("run", "knapsack", "--name", "k", *MODEL_FREE)
    return Attempt(args, ("ast_mutate", "priority.py"), kept=nothing_left(tmp / "runs" / "k"))


def model_free_run(tmp: Path) -> Attempt:
    """ast_mutate with a model file that does not exist: the model is never needed, so never served."""
    args = ("run", "deceptive", "--name", "plain", "--model", str(tmp / NO_GGUF), "--iterations", "2", *MODEL_FREE)

    def check() -> str | None:
        logs = list((tmp / "runs" / "plain").glob("server*.log"))
        return f"a model server was started ({logs[0].name})" if logs else None

    return Attempt(args, ("no model server",), expect="proceed", kept=check)


def second_search(*args: str) -> Callable[[Path], Attempt]:
    """`args` (naming run busy) while another process searches busy: refused, naming the holder's pid."""

    def setup(tmp: Path) -> Attempt:
        searcher, stop = busy_run(tmp, "busy")
        kept = still_searching(searcher, tmp / "runs" / "busy" / "archive.db", "busy")
        return Attempt(args, ("busy", f"pid {searcher.pid}"), kept=kept, stop=stop)

    return setup


def rm_without_yes(tmp: Path) -> Attempt:
    return Attempt(("rm", "r"), ("--yes",), kept=archive_kept(made_run(tmp / "runs", "r")))


def eval_export(
    folder_of: Callable[[Path], Path], cause: tuple[str, ...], *extra: str, wrong: tuple[str, ...] = ()
) -> Callable[[Path], Attempt]:
    return lambda tmp: Attempt(("eval", str(folder_of(tmp)), *EVAL, *extra), cause, wrong=wrong)


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


def raised_limits(tmp: Path) -> Attempt:
    """An export whose benchmark_options raise the benchmark's limits (an hour, 64 GiB) for a program that takes
    1.5 GiB: your limit (1024 MiB) holds."""
    greedy = PACKING.replace("    return", "    hog = bytearray(1536 * 1024 * 1024)\n    return")
    folder = hand_export(tmp / "raised", {"packing.py": greedy}, timeout_s=3600, memory_mb=65536)
    return Attempt(("eval", str(folder), *EVAL), ("out of memory", "1024 MiB"), expect="proceed")


def agent_fm_on(tmp: Path) -> Attempt:
    """An export whose manifest turns agent FM on for circle packing, whose programs call none: no server."""
    config = {"benchmark": "circle_packing", "seed": 0, "evaluation": {"agent_fm": True}}
    folder = hand_export(tmp / "agent-3", {"packing.py": PACKING}, config=config)

    # The model is yours: a missing file, so that a server wrongly started would fail at once, not load one.
    args = ("eval", str(folder), "--split", "search", "--sandbox", "local", "--model", str(tmp / NO_GGUF))
    return Attempt(args, ("no model server",), expect="proceed")


def a_folder(*args: str, cause: tuple[str, ...]) -> Callable[[Path], Attempt]:
    """`args` where a file is wanted and "adir" is a folder."""

    def setup(tmp: Path) -> Attempt:
        made_run(tmp / "runs", "r")
        (tmp / "adir").mkdir()
        return Attempt(args, cause)

    return setup


def toml_file(text: str, *args: str, cause: tuple[str, ...]) -> Callable[[Path], Attempt]:
    def setup(tmp: Path) -> Attempt:
        (tmp / "my.toml").write_text(text)
        return Attempt(tuple(a.replace("{toml}", str(tmp / "my.toml")) for a in args), cause)

    return setup


def runs_dir_is_a_file(tmp: Path) -> Attempt:
    (tmp / "runs").write_text("not a folder\n")
    return Attempt(("run", "deceptive", "--iterations", "1", *MODEL_FREE), ("runs",))


def run_in_read_only_folder(tmp: Path) -> Attempt:
    prefix = as_unprivileged(tmp)
    (tmp / "runs").mkdir(mode=0o555)
    (tmp / "runs").chmod(0o555)
    return Attempt(("run", "deceptive", "--iterations", "1", *MODEL_FREE), ("runs",), prefix=prefix)


PG = f"postgresql+psycopg://cambrian@{DEAD_ADDRESS}/cambrian"

CASES: tuple[Case, ...] = (
    # A damaged archive (the first hole): named, with how to check and rescue it; never changed.
    Case("status-archive-random-bytes", on_damaged("random", "status", "bad")),
    Case("status-archive-truncated", on_damaged("truncated", "status", "bad")),
    Case("tree-archive-random-bytes", on_damaged("random", "tree", "bad")),
    Case("tree-archive-truncated", on_damaged("truncated", "tree", "bad")),
    Case("resume-archive-random-bytes", on_damaged("random", "resume", "bad")),
    Case("resume-archive-truncated", on_damaged("truncated", "resume", "bad")),
    Case("runs-archive-random-bytes", runs_over_damaged("random")),
    Case("runs-archive-truncated", runs_over_damaged("truncated")),
    Case("show-archive-random-bytes", on_damaged("random", "show", "bad", "1")),
    Case("export-archive-truncated", on_damaged("truncated", "export", "bad", "--to", "out")),
    Case("report-archive-random-bytes", on_damaged("random", "report", "bad", "--to", "r.html")),
    Case("rm-archive-random-bytes", on_damaged("random", "rm", "bad", "--yes")),
    Case("db-upgrade-archive-random-bytes", on_damaged("random", "db", "upgrade", "bad")),
    # `export --to` a place it cannot write.
    Case("export-to-an-existing-file", export_to_file),
    Case("export-to-an-uncreatable-path", with_run("export", "r", "--to", "/proc/no-such/x", cause=("/proc/no-such",))),
    Case("export-to-a-read-only-folder", export_to_read_only),
    Case("export-best-0", with_run("export", "r", "--best", "0", "--to", "out", cause=("--best",))),
    Case("export-best-negative", with_run("export", "r", "--best", "-2", "--to", "out", cause=("--best",))),
    Case("export-agent-missing", with_run("export", "r", "--agent", "99", "--to", "out", cause=("99",))),
    Case(
        "export-agent-and-best",
        with_run("export", "r", "--agent", "1", "--best", "2", "--to", "out", cause=("--agent", "--best")),
    ),
    Case("export-over-an-earlier-export", export_over_earlier_export),
    Case("export-to-missing", with_run("export", "r", cause=("--to",))),
    Case("export-run-misspelt", with_run("export", "rr", "--to", "out", cause=("'rr'",))),
    # The UI's address.
    Case("ui-port-99999", plain("ui", "--port", "99999", cause=("--port", "65535"), timeout_s=30)),
    Case("ui-port-in-use", ui_port_in_use),
    Case("ui-host-not-this-machine", plain("ui", "--host", "192.0.2.1", cause=("192.0.2.1",), timeout_s=30)),
    Case("ui-run-missing", plain("ui", "nosuchrun", cause=("nosuchrun",), timeout_s=30)),
    # A run that needs a model it cannot have fails before its seed is scored and leaves nothing behind.
    Case("run-model-missing-gguf", missing_gguf),
    Case("run-model-unknown-name", unknown_model),
    Case("run-api-base-nothing-listens", dead_api_base),
    Case("run-api-key-env-unset", unset_api_key),
    Case("run-hosted-model-no-key", hosted_without_key),
    Case("run-api-base-no-scheme", no_scheme("--api-base", "localhost:8080")),
    Case("run-set-api-base-no-scheme", no_scheme("--set", "fm.api_base=localhost:8080")),
    Case("run-seed-no-operator-can-edit", seed_no_operator_edits),
    Case("run-model-free-starts-no-server", model_free_run),
    # One search of a run at a time.
    Case("resume-while-searched", second_search("resume", "busy")),
    Case("run-name-while-searched", second_search("run", "deceptive", "--name", "busy", *MODEL_FREE)),
    Case("rm-while-searched", second_search("rm", "busy", "--yes")),
    Case("rm-asks-first", rm_without_yes),
    Case("rm-run-missing", plain("rm", "nosuchrun", "--yes", cause=("nosuchrun",))),
    # An export folder someone sent you.
    Case("eval-export-lists-1gb-file", eval_export(huge_file, ("data.py", "1,073,741,824"))),
    Case("eval-export-raises-limits", raised_limits),
    Case("eval-export-hard-link", eval_export(hard_link, ("other.py", "hard link"))),
    Case("eval-export-agent-fm-circle-packing", agent_fm_on),
    Case("eval-export-symlink", eval_export(symlink, ("other.py", "link"))),
    Case("eval-export-fifo", eval_export(fifo, ("pipe.py",))),
    Case("eval-export-path-escapes", eval_export(escaping_path, ("../secret.py",))),
    Case("eval-not-an-export", eval_export(not_an_export, ("manifest.json",))),
    Case("eval-export-damaged-manifest", eval_export(damaged_manifest, ("manifest.json",))),
    Case("eval-export-modified", eval_export(modified_export, ("hash",))),
    Case("eval-export-unknown-benchmark", eval_export(unknown_benchmark_export, ("nosuchbench",))),
    Case("eval-export-bad-option", eval_export(bad_option_export, ("n_circles",))),
    Case("eval-split-unknown", with_run("eval", "r:1", "--split", "tuesday", cause=("tuesday",))),
    Case("eval-agent-missing", with_run("eval", "r:99", cause=("99",))),
    Case("eval-sandbox-unknown", with_run("eval", "r:1", "--sandbox", "vm", cause=("vm",), wrong=("stored config",))),
    Case(
        "eval-export-sandbox-unknown",
        lambda tmp: Attempt(
            (
                "eval",
                str(hand_export(tmp / "agent-3", {"packing.py": PACKING})),
                "--split",
                "search",
                "--sandbox",
                "vm",
            ),
            ("vm",),
            wrong=("stored config",),
        ),
    ),
    Case("eval-agent-not-a-number", with_run("eval", "r:best", cause=("r:best",))),
    Case("eval-run-missing", plain("eval", "nosuchrun:1", cause=("nosuchrun",))),
    Case("eval-target-garbage", plain("eval", "agent-three", cause=("agent-three",))),
    # Browsing a run that is not there, or an agent that is not.
    Case("status-no-runs-folder", plain("status", "myrun", cause=("myrun",))),
    Case("status-run-misspelt", with_run("status", "rr", cause=("'rr'",))),
    Case("tree-run-missing", with_run("tree", "nosuchrun", cause=("nosuchrun",))),
    Case("tree-max-depth-negative", with_run("tree", "r", "--max-depth", "-1", cause=("max-depth",))),
    Case("show-agent-missing", with_run("show", "r", "99", cause=("99",))),
    Case("show-agent-missing-argument", with_run("show", "r", cause=("AGENT",))),
    Case("show-agent-not-a-number", with_run("show", "r", "best", cause=("AGENT", "integer"))),
    Case("diff-agents-missing", with_run("diff", "r", "98", "99", cause=("98",))),
    Case("diff-one-agent-missing", with_run("diff", "r", "1", "99", cause=("99",))),
    Case("runs-runs-dir-missing", plain("runs", "--runs-dir", "no-such-folder", cause=("no-such-folder",))),
    Case("runs-env-runs-dir-missing", plain("runs", cause=("/no/such/runs",), CAMBRIAN_RUNS_DIR="/no/such/runs")),
    Case(
        "status-env-runs-dir-missing", plain("status", "r", cause=("/no/such/runs",), CAMBRIAN_RUNS_DIR="/no/such/runs")
    ),
    Case("report-run-missing", plain("report", "nosuchrun", "--to", "r.html", cause=("nosuchrun",))),
    Case("report-to-a-folder", a_folder("report", "r", "--to", "adir", cause=("adir",))),
    Case("report-best-negative", with_run("report", "r", "--to", "r.html", "--best", "-1", cause=("--best",))),
    Case(
        "report-to-uncreatable-path", with_run("report", "r", "--to", "/proc/no-such/r.html", cause=("/proc/no-such",))
    ),
    Case("resume-run-missing", plain("resume", "myrun", cause=("myrun",))),
    Case(
        "resume-iterations-negative",
        with_run("resume", "r", "--iterations", "-5", cause=("iterations", "-5"), wrong=("stored config",)),
    ),
    Case(
        "resume-wall-seconds-negative",
        with_run("resume", "r", "--wall-seconds", "-1", cause=("wall_seconds",), wrong=("stored config",)),
    ),
    Case("resume-sandbox-unknown", with_run("resume", "r", "--sandbox", "vm", cause=("vm",), wrong=("stored config",))),
    # `run`'s options and config.
    Case("run-benchmark-unknown", plain("run", "circle_pack", *NO_FM, cause=("circle_pack",))),
    Case("run-iterations-negative", plain(*RUN, "--iterations", "-1", cause=("iterations", "-1"))),
    Case("run-strategy-unknown", plain(*RUN, "--strategy", "greedyy", cause=("greedyy",))),
    Case("run-operator-unknown", plain(*RUN, "--set", "search.operators={linez = 1}", cause=("linez",))),
    Case("run-sandbox-unknown", plain(*RUN, "--sandbox", "vm", cause=("vm",))),
    Case("run-executor-unknown", plain(*RUN, "--executor", "slurm", cause=("slurm",))),
    Case("run-set-key-misspelt", plain(*RUN, "--set", "budget.iteration=5", cause=("budget.iteration",))),
    Case("run-set-bad-value", plain(*RUN, "--set", "budget.iterations=many", cause=("budget.iterations",))),
    Case(
        "run-set-bad-toml",
        plain(*RUN, "--set", "search.operators={lines = ", cause=("search.operators",)),
    ),
    Case("run-set-no-equals", plain(*RUN, "--set", "search.strategy", cause=("search.strategy",))),
    Case("run-eval-concurrency-0", plain(*RUN, "--eval-concurrency", "0", cause=("concurrency",))),
    Case("run-wall-seconds-negative", plain(*RUN, "--wall-seconds", "-5", cause=("wall_seconds",))),
    Case("run-budget-usd-negative", plain(*RUN, "--budget-usd", "-1", cause=("usd",))),
    Case("run-config-missing", plain(*RUN, "--config", "my.toml", cause=("my.toml",))),
    Case(
        "run-config-not-toml",
        toml_file('{"budget": {"iterations": 5}}\n', *RUN, "-c", "{toml}", cause=("my.toml",)),
    ),
    Case(
        "run-config-unknown-key",
        toml_file("[budget]\niteration = 5\n", *RUN, "-c", "{toml}", cause=("budget.iteration",)),
    ),
    Case(
        "run-name-with-slash",
        plain(*RUN, "--name", "a/b", "--iterations", "1", "--sandbox", "local", cause=("a/b",)),
    ),
    Case("run-config-is-a-folder", a_folder(*RUN, "-c", "adir", cause=("adir",))),
    Case("run-runs-dir-is-a-file", runs_dir_is_a_file),
    Case("run-runs-dir-read-only", run_in_read_only_folder),
    # `--store` URLs (nothing listens at the PostgreSQL address; no PostgreSQL is started).
    Case(
        "run-store-unreachable-postgres",
        plain(*RUN, "--store", PG, "--sandbox", "local", cause=(DEAD_ADDRESS.split(":")[0],)),
    ),
    Case(
        "run-store-unknown-scheme",
        plain(*RUN, "--store", "mongodb://localhost/runs", "--sandbox", "local", cause=("mongodb",)),
    ),
    Case("run-store-not-a-url", plain(*RUN, "--store", "runs.db", "--sandbox", "local", cause=("runs.db",))),
    Case(
        "run-store-password-in-argv",
        plain(*RUN, "--store", "postgresql://me:hunter2@db/runs", cause=("password",)),
    ),
    Case("runs-store-unreachable-postgres", plain("runs", "--store", PG, cause=(DEAD_ADDRESS.split(":")[0],))),
    Case("run-set-store-not-a-url", plain(*RUN, "--set", "store=runs.db", "--sandbox", "local", cause=("runs.db",))),
    Case(
        "run-config-store-not-a-url",
        toml_file('store = "runs.db"\n', *RUN, "-c", "{toml}", "--sandbox", "local", cause=("runs.db", "my.toml")),
    ),
    Case("status-store-not-a-url", plain("status", "r", "--store", "runs.db", cause=("runs.db",))),
    Case("show-store-not-a-url", with_run("show", "r", "1", "--store", "archive.db", cause=("archive.db",))),
    Case("status-env-store-not-a-url", plain("status", "r", cause=("runs.db",), CAMBRIAN_STORE="runs.db")),
    Case(
        "status-store-unknown-scheme", plain("status", "r", "--store", "mongodb://localhost/runs", cause=("mongodb",))
    ),
    Case("db-upgrade-run-missing", plain("db", "upgrade", "nosuchrun", cause=("nosuchrun",))),
    Case("db-upgrade-unknown-scheme", plain("db", "upgrade", "mongodb://localhost/runs", cause=("mongodb",))),
    # `config`, `doctor`, `benchmarks`, `models`, `serve`, `sandbox`, and the command itself.
    Case("config-file-missing", plain("config", "-c", "my.toml", cause=("my.toml",))),
    Case("config-file-not-toml", toml_file("budget:\n  iterations: 5\n", "config", "-c", "{toml}", cause=("my.toml",))),
    Case("config-set-bad-toml", plain("config", "--set", "search.params={alpha0 = }", cause=("search.params",))),
    Case("config-set-key-unknown", plain("config", "--set", "search.strateg=greedy", cause=("search.strateg",))),
    Case("doctor-config-missing", plain("doctor", "--quick", "-c", "my.toml", cause=("my.toml",))),
    Case(
        "doctor-api-base-no-scheme",
        plain(
            "doctor",
            "--quick",
            "--model",
            "qwen",
            "--api-base",
            "localhost:8080",
            cause=("localhost:8080", "http://"),
            wrong=("nothing answers",),
        ),
    ),
    Case("doctor-model-unknown", plain("doctor", "--quick", "--model", "qwen-nosuch", cause=("qwen-nosuch",))),
    Case("benchmarks-extra-argument", plain("benchmarks", "circle_packing", cause=("circle_packing",))),
    Case("models-pull-unknown", plain("models", "pull", "qwen-nosuch", cause=("qwen-nosuch",))),
    Case("models-pull-source-unknown", plain("models", "pull", "smollm2-135m", "--source", "ftp", cause=("ftp",))),
    Case("serve-model-unknown", plain("serve", "--model", "qwen-nosuch", cause=("qwen-nosuch",))),
    Case("serve-model-missing-gguf", plain("serve", "--model", NO_GGUF, cause=(NO_GGUF,))),
    Case("serve-port-99999", plain("serve", "--port", "99999", cause=("--port", "65535"), timeout_s=30)),
    Case("serve-backend-unknown", plain("serve", "--backend", "ollama", cause=("ollama",))),
    Case("sandbox-check-unknown", plain("sandbox", "check", "--sandbox", "vm", cause=("vm",))),
    Case(
        "sandbox-check-image-missing",
        plain("sandbox", "check", "--sandbox", "docker", "--image", "nosuch:tag", cause=("nosuch:tag",)),
    ),
    Case("sandbox-build-method-unknown", plain("sandbox", "build", "--method", "podman", cause=("podman",))),
    Case("command-misspelt", plain("stauts", cause=("stauts",))),
    Case("option-misspelt", plain(*RUN, "--iteration", "5", cause=("--iteration",))),
)


# ----- running and judging -----------------------------------------------------------------------


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


def judge(attempt: Attempt, code: int, out: str, lost: str | None) -> tuple[str, str, str]:
    """(verdict, reason, first error line) of one finished command; `out` is stderr then stdout."""
    lines = out.splitlines()
    first = next((i for i, line in enumerate(lines) if ERROR_LINE.match(line)), None)
    first_error = lines[first].strip() if first is not None else ""
    if TRACEBACK in out:
        after = out.rsplit(TRACEBACK, 1)[1].splitlines()[1:]
        raised = next((line for line in after if line.strip() and not line.startswith(" ")), "")
        return "traceback", "a traceback", raised
    flat = lambda text: " ".join(text.split()).lower()  # noqa: E731 - rich wraps long lines
    if attempt.expect == "proceed":
        missing = [word for word in attempt.cause if word.lower() not in flat(out)]
        said = next((line.strip() for line in lines if attempt.cause[0].lower() in line.lower()), first_error)
        if code != 0:
            return "confusing", f"exit {code} where it should go on", first_error
        if missing:
            return "confusing", f"never says {', '.join(missing)}", said
        return ("confusing", f"lost: {lost}", said) if lost else ("clear", "", said)
    if code == 0:
        return "confusing", "exit 0 for a bad input", first_error
    if first is None:
        return "confusing", "no error line", next((x.strip() for x in lines if x.strip()), "")
    ends = next((i for i in range(first, len(lines)) if FIX_LINE.match(lines[i])), len(lines) - 1)
    message = flat("\n".join(lines[first : ends + 1]))
    missing = [word for word in attempt.cause if word.lower() not in message]
    has_fix = any(FIX_LINE.match(line) for line in lines[first:]) or any(USAGE_FIX.match(line) for line in lines)
    if missing:
        return "confusing", f"the cause ({', '.join(missing)}) is not named", first_error
    blamed = [word for word in attempt.wrong if word.lower() in message]
    if blamed:
        return "confusing", f"blames the wrong thing ({', '.join(blamed)})", first_error
    if not has_fix:
        return "confusing", "no fix", first_error
    if lost:
        return "confusing", f"lost: {lost}", first_error
    return "clear", "", first_error


def shown(args: tuple[str, ...], tmp: Path) -> str:
    return "cambrian " + shlex.join(args).replace(str(tmp), "$TMP")


def run_case(case: Case) -> Row:
    with tempfile.TemporaryDirectory(prefix="cambrian-bad-") as scratch:
        tmp = Path(scratch)
        attempt = case.setup(tmp)
        command = [*attempt.prefix, sys.executable, "-m", "cambrian", *attempt.args]
        start, lost = time.monotonic(), None
        # A session of its own: a command that hangs is stopped with whatever it started (a model server).
        cli = subprocess.Popen(
            command,
            cwd=tmp,
            env=cli_env(attempt.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        hung = False
        try:
            stdout, stderr = cli.communicate(timeout=attempt.timeout_s)
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(cli.pid, signal.SIGKILL)
            stdout, stderr = cli.communicate()
        seconds = time.monotonic() - start
        try:
            lost = attempt.kept() if attempt.kept else None
        except Exception as error:  # noqa: BLE001 - a check that cannot read what it checks counts as a loss
            lost = f"the check failed: {type(error).__name__}: {error}"
        finally:
            if attempt.stop:
                attempt.stop()
        out = (stderr + "\n" + stdout).replace(str(tmp), "$TMP")
        if hung:
            verdict, reason, first_error = "hangs", f"still running after {attempt.timeout_s:.0f} s", ""
        else:
            verdict, reason, first_error = judge(attempt, cli.returncode, out, lost)
        code = None if hung else cli.returncode
        return Row(
            case.name, shown(attempt.args, tmp), code, verdict, reason, first_error, round(seconds, 2), out[-3000:]
        )


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        "+dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated words: run the cases whose names hold one")
    parser.add_argument("--list", action="store_true", help="list the cases, run nothing")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the rows go (JSON)")
    args = parser.parse_args()
    words = [w for w in args.only.split(",") if w]
    cases = [case for case in CASES if not words or any(w in case.name for w in words)]
    assert len({case.name for case in CASES}) == len(CASES), "two cases share a name"
    if args.list:
        for case in cases:
            print(case.name)
        return
    rows: list[Row] = []
    for case in cases:
        row = run_case(case)
        rows.append(row)
        code = "-" if row.exit is None else str(row.exit)
        print(f"{row.name:<40} {code:>4}  {row.verdict:<9}  {row.command}", flush=True)
        print(f"{'':<40}       {row.first_error[:200]}" + (f"  [{row.reason}]" if row.reason else ""), flush=True)
    counts = {v: sum(r.verdict == v for r in rows) for v in ("clear", "confusing", "traceback", "hangs")}
    line = (
        f"{counts['clear']} clear, {counts['confusing']} confusing, {counts['traceback']} tracebacks, "
        f"{counts['hangs']} hangs of {len(rows)}"
    )
    print(line)
    result = {
        "commit": commit(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "count": line,
        **counts,
        "cases": len(rows),
        "rows": [asdict(row) for row in rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"rows in {args.out}")


if __name__ == "__main__":
    main()
