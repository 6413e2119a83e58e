"""The subprocess sandbox, run for real: limits, kills, output caps, the scrubbed environment."""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.sandbox.base import Mount, RunSpec, Sandbox, SandboxError
from cambrian.sandbox.local import LocalSandbox, UnsafePathError
from tests.conftest import LOCAL_MODES, local_sandbox


@pytest.fixture(params=LOCAL_MODES)
def sandbox(request: pytest.FixtureRequest) -> Iterator[LocalSandbox]:
    box = local_sandbox(request.param)
    yield box
    box.close()


def writable(folder: Path) -> tuple[Mount, ...]:
    """`folder` shown to the run where it is on the host, writable (in namespaces nothing else of the host is)."""
    return (Mount(host_path=str(folder), sandbox_path=str(folder), read_only=False),)


def stays_quiet(heartbeat: Path) -> bool:
    """Whether nothing writes `heartbeat` any more (a process left behind would go on beating)."""
    size = heartbeat.stat().st_size if heartbeat.exists() else 0
    time.sleep(0.3)
    return (heartbeat.stat().st_size if heartbeat.exists() else 0) == size


def python_spec(code: str, **overrides: object) -> RunSpec:
    return RunSpec(files={"main.py": textwrap.dedent(code)}, command=("{python}", "main.py"), **overrides)


def is_running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (an unreaped corpse runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pid: int, within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not is_running(pid):
            return True
        time.sleep(0.05)
    return not is_running(pid)


def test_implements_protocol(sandbox: LocalSandbox) -> None:
    assert isinstance(sandbox, Sandbox)
    assert sandbox.name == "local" and sandbox.isolated is False


def test_numpy_and_scipy_import_the_rest_of_site_packages_does_not(sandbox: LocalSandbox) -> None:
    code = """
        import importlib.util, json, math, sys
        import numpy, scipy, scipy.optimize
        best = scipy.optimize.minimize(lambda x: float(((x - 0.25) ** 2).sum()), numpy.zeros(4))
        hidden = {name: importlib.util.find_spec(name) is None
                  for name in ("litellm", "sqlalchemy", "sklearn", "docker", "meta_agent", "sandbox")}
        print(json.dumps({"pi": math.pi, "solved": bool(abs(best.x - 0.25).max() < 1e-4),
                          "hidden": hidden, "numpy_at": numpy.__file__}))
    """
    result = sandbox.run(python_spec(code))
    assert result.ok, result.stderr
    seen = json.loads(result.stdout)
    assert seen["solved"]
    assert all(seen["hidden"].values()), seen["hidden"]
    assert seen["numpy_at"].startswith(str(sandbox.packages_dir()))
    for forbidden in ("litellm", "sqlalchemy"):
        failed = sandbox.run(python_spec(f"import {forbidden}"))
        assert failed.exit_code == 1 and f"No module named '{forbidden}'" in failed.stderr


@pytest.mark.parametrize("namespaces", LOCAL_MODES)
def test_an_interpreter_reached_through_a_linked_venv_folder_still_imports_numpy(namespaces: bool) -> None:
    """`.venv -> /elsewhere/venv`: the package links point where the packages really are, which is what
    namespaces bind (a link's path was not there, and numpy was missing)."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("Cambrian runs outside a virtual environment here")
    holder = Path(tempfile.mkdtemp(prefix="cambrian-venvlink-", dir="/tmp"))
    try:
        os.chmod(holder, 0o755)
        (holder / "venv").symlink_to(sys.prefix, target_is_directory=True)
        box = local_sandbox(namespaces)
        linked = LocalSandbox(python=str(holder / "venv" / "bin" / "python"), namespaces=box.namespaces)
        box.close()
        try:
            result = linked.run(python_spec("import numpy, scipy.optimize\nprint(numpy.zeros(2).sum())"))
        finally:
            linked.close()
        assert result.ok and result.stdout.strip() == "0.0", result.stderr
    finally:
        shutil.rmtree(holder, ignore_errors=True)


def test_package_folder_holds_only_numpy_and_scipy_and_is_read_only(sandbox: LocalSandbox) -> None:
    folder = sandbox.packages_dir()
    names = {entry.name for entry in folder.iterdir()}
    assert {"numpy", "scipy"} <= names <= {"numpy", "numpy.libs", "scipy", "scipy.libs"}
    assert all((folder / name).is_symlink() for name in names)
    result = sandbox.run(python_spec(f"open({str(folder / 'evil.py')!r}, 'w').write('x')"))
    assert result.exit_code == 1 or os.geteuid() == 0  # root ignores the folder's mode bits
    sandbox.close()
    assert not folder.exists()


def test_other_interpreter_without_numpy_gets_the_standard_library_only() -> None:
    # Not under tmp_path: pytest keeps that private to its user (0700), and as root the runs use other uids.
    home = Path(tempfile.mkdtemp(prefix="cambrian-bare-"))
    home.chmod(0o755)
    bare = home / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    box = LocalSandbox(python=str(bare / "bin" / "python"))
    try:
        assert list(box.packages_dir().iterdir()) == []
        result = box.run(python_spec("import json; print(json.dumps([1]))"))
        assert result.ok and result.stdout == "[1]\n", result.stderr
        assert "No module named 'numpy'" in box.run(python_spec("import numpy")).stderr
    finally:
        box.close()
        shutil.rmtree(home, ignore_errors=True)


def test_crash_reports_exit_code_and_stderr(sandbox: LocalSandbox) -> None:
    result = sandbox.run(python_spec("import sys\nprint('before')\nsys.exit(3)"))
    assert result.exit_code == 3
    assert result.stdout == "before\n"
    result = sandbox.run(python_spec("1 / 0"))
    assert result.exit_code == 1
    assert "ZeroDivisionError: division by zero" in result.stderr
    assert result.failure_reason() == "exited with code 1"


def test_timeout_kills_program_and_its_child(sandbox: LocalSandbox, open_dir: Path) -> None:
    heartbeat = open_dir / "child.beat"
    code = f"""
        import subprocess, sys, time
        beat = "import time\\nwhile True:\\n    open({str(heartbeat)!r}, 'a').write('.')\\n    time.sleep(0.05)"
        child = subprocess.Popen([sys.executable, "-c", beat])
        time.sleep(120)
    """
    result = sandbox.run(python_spec(code, timeout_s=1.0, mounts=writable(open_dir)))
    assert result.timed_out
    assert result.exit_code is None
    assert result.failure_reason() is not None and result.failure_reason().startswith("timed out")
    assert heartbeat.exists() and stays_quiet(heartbeat)  # the child beat, and died with the run


def test_background_child_does_not_outlive_a_finished_run(sandbox: LocalSandbox, open_dir: Path) -> None:
    heartbeat = open_dir / "heartbeat"
    code = f"""
        import subprocess, sys
        beat = "import time\\nwhile True:\\n    open({str(heartbeat)!r}, 'a').write('.')\\n    time.sleep(0.05)"
        child = subprocess.Popen([sys.executable, "-c", beat])
        print(child.pid)
    """
    result = sandbox.run(python_spec(code, timeout_s=20.0, mounts=writable(open_dir)))
    assert result.exit_code == 0 and not result.timed_out
    if not sandbox.namespaces:  # in its own PID namespace the child's number means nothing out here
        assert wait_gone(int(result.stdout.strip()))
    assert stays_quiet(heartbeat)


def test_huge_output_is_capped_and_killed(sandbox: LocalSandbox) -> None:
    code = """
        import sys
        block = "x" * 1_000_000
        for _ in range(100):
            sys.stdout.write(block)
    """
    peak_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = sandbox.run(python_spec(code, max_output_bytes=1_000_000, timeout_s=30.0))
    peak_after_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.output_truncated
    assert result.exit_code is None
    assert len(result.stdout) == 1_000_000
    # Buffering the 100 MB would raise this process's peak by about that much.
    assert peak_after_kib - peak_before_kib < 50 * 1024


def test_huge_allocation_is_an_oom(sandbox: LocalSandbox) -> None:
    result = sandbox.run(python_spec("buffer = bytearray(4 * 1024 ** 3)", memory_mb=256))
    assert result.oom_killed
    assert not result.ok
    assert "MemoryError" in result.stderr


def test_every_limit_of_the_spec_binds_the_program(sandbox: LocalSandbox) -> None:
    code = """
        import json, resource
        names = ["RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_CORE"]
        print(json.dumps({name: resource.getrlimit(getattr(resource, name)) for name in names}))
    """
    result = sandbox.run(python_spec(code, memory_mb=300, timeout_s=7.5, max_file_bytes=12345, pids=17))
    assert result.ok, result.stderr
    seen = json.loads(result.stdout)
    wanted = {
        "RLIMIT_AS": 300 * 1024 * 1024,
        "RLIMIT_CPU": 9,
        "RLIMIT_FSIZE": 12345,
        "RLIMIT_NPROC": 17,
        "RLIMIT_NOFILE": 256,
        "RLIMIT_CORE": 0,
    }
    for name, value in wanted.items():
        _, host_hard = resource.getrlimit(getattr(resource, name))
        bound = value if host_hard == resource.RLIM_INFINITY else min(value, host_hard)
        assert seen[name] == [bound, bound], name  # soft and hard: the program cannot raise it again


def test_host_environment_does_not_leak(sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAMBRIAN_CANARY_SECRET", "canary-7f3a9c")
    code = """
        import json, os
        print(json.dumps(dict(os.environ)))
    """
    result = sandbox.run(python_spec(code, env={"TASK_SEED": "7"}))
    assert result.ok, result.stderr
    assert "canary-7f3a9c" not in result.stdout
    assert "CAMBRIAN_CANARY_SECRET" not in result.stdout
    env = json.loads(result.stdout)
    assert env["TASK_SEED"] == "7"
    assert env["PATH"] == "/usr/bin:/bin"
    assert env["HOME"] == env["TMPDIR"]
    assert set(env) <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "PYTHONPATH",
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "TASK_SEED",
        "LC_CTYPE",
    }
    assert env["PYTHONPATH"] == str(sandbox.packages_dir())
    assert env["OPENBLAS_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "1"


def test_files_placed_and_collected(sandbox: LocalSandbox) -> None:
    code = """
        from pkg.helper import VALUE
        open("out/result.txt", "w").write(VALUE * 2)
        open("big.txt", "w").write("y" * 5000)
    """
    spec = RunSpec(
        files={
            "main.py": textwrap.dedent(code),
            "pkg/__init__.py": "",
            "pkg/helper.py": "VALUE = 'ab'\n",
            "out/.keep": "",
        },
        command=("{python}", "main.py"),
        collect=("out/result.txt", "missing.txt", "big.txt"),
        max_collect_bytes=1000,
    )
    result = sandbox.run(spec)
    assert result.ok, result.stderr
    assert result.files == {"out/result.txt": "abab"}
    assert "big.txt skipped" in result.stderr


def test_work_dir_is_removed(sandbox: LocalSandbox) -> None:
    result = sandbox.run(python_spec("import os; print(os.getcwd())"))
    assert not Path(result.stdout.strip()).exists()


@pytest.mark.parametrize("bad_path", ["/etc/evil.py", "../escape.py", "pkg/../../escape.py", ""])
def test_path_escape_rejected(sandbox: LocalSandbox, bad_path: str) -> None:
    with pytest.raises(UnsafePathError) as info:
        sandbox.run(RunSpec(files={bad_path: "x = 1"}, command=("{python}", "-c", "pass")))
    assert info.value.fix
    with pytest.raises(UnsafePathError):
        sandbox.run(RunSpec(files={}, command=("{python}", "-c", "pass"), collect=(bad_path,)))


def test_symlink_out_of_work_dir_is_not_collected(sandbox: LocalSandbox, tmp_path: Path) -> None:
    secret = tmp_path / "host_secret.txt"
    secret.write_text("host secret")
    code = f"import os; os.symlink({str(secret)!r}, 'result.json')"
    result = sandbox.run(python_spec(code, collect=("result.json",)))
    assert result.files == {}
    assert "outside the work dir" in result.stderr


def test_infrastructure_faults_raise_sandbox_error(tmp_path: Path) -> None:
    with pytest.raises(SandboxError) as info:
        LocalSandbox(python=str(tmp_path / "no-such-python")).run(python_spec("pass"))
    assert info.value.fix
    with pytest.raises(SandboxError):
        LocalSandbox(root=tmp_path / "missing" / "dir").run(python_spec("pass"))
    with pytest.raises(SandboxError):
        LocalSandbox().run(RunSpec(files={}, command=("no-such-program-xyz",)))


def test_close_is_idempotent() -> None:
    box = LocalSandbox()
    box.close()
    box.close()
    with pytest.raises(SandboxError):
        box.run(python_spec("pass"))


def test_close_kills_the_runs_in_progress_and_each_raises() -> None:
    """A second Ctrl-C closes the sandbox: a run in progress dies now (not at its 60 s limit) and is a
    SandboxError, an infrastructure fault the loop retries on resume, never a crash of the agent."""
    import threading

    box = LocalSandbox(namespaces=False)  # the same kill either way: the run's process group (bwrap's, in them)
    folder = Path(tempfile.mkdtemp(prefix="cambrian-test-close-"))
    os.chmod(folder, 0o777)  # the run's own uid (as root) writes the marker there
    marker = folder / "started"
    outcomes: list[object] = []

    def run() -> None:
        code = f"""
            import pathlib, time
            pathlib.Path({str(marker)!r}).write_text("up")
            time.sleep(60)
            print("never")
        """
        try:
            outcomes.append(box.run(python_spec(code, timeout_s=60.0)))
        except SandboxError as exc:
            outcomes.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline and worker.is_alive(), f"the run never started: {outcomes}"
        time.sleep(0.05)
    box.close()
    worker.join(timeout=30)
    assert not worker.is_alive()
    shutil.rmtree(folder)
    [outcome] = outcomes
    assert isinstance(outcome, SandboxError) and "closed during this run" in str(outcome), outcome
    assert "cambrian resume" in outcome.fix


def test_removing_a_work_dir_never_changes_the_folder_that_holds_it(tmp_path: Path) -> None:
    # A work dir already gone, or one whose own removal fails, once made its parent 0700: run from /tmp, that
    # closed /tmp to every other user (the local sandbox's uids, PostgreSQL) for the rest of the session.
    from cambrian.sandbox.local import _remove_tree

    holder = tmp_path / "holder"
    holder.mkdir()
    holder.chmod(0o1777)
    _remove_tree(holder / "gone")
    work = holder / "work"
    (work / "locked").mkdir(parents=True)
    (work / "locked" / "file").write_text("x")
    (work / "locked").chmod(0o500)  # a program made part of its work dir read-only
    _remove_tree(work)
    assert not work.exists() and stat.S_IMODE(holder.stat().st_mode) == 0o1777
