"""The bad-inputs cases (bench/bad_inputs.py): what each one types, the words that must name its cause, and
what the command must not lose.

A `Case` is a name and a setup: a function that builds what the case needs in a fresh folder (with the
helpers of `_bad_input_setups`) and returns the `Attempt`, the command and how to judge it. `CASES` is the
table the batch runs, grouped by the hole each group closes.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from _bad_input_setups import (
    DEAD_ADDRESS,
    EVAL,
    MODEL_FREE,
    NO_FM,
    NO_GGUF,
    PACKING,
    RUN,
    archive_kept,
    as_unprivileged,
    bad_option_export,
    busy_run,
    bytes_kept,
    damaged_manifest,
    damaged_run,
    escaping_path,
    fifo,
    hand_export,
    hard_link,
    huge_file,
    made_run,
    modified_export,
    not_an_export,
    nothing_left,
    still_searching,
    symlink,
    text_kept,
    unknown_benchmark_export,
)


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
