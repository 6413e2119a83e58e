"""The Docker sandbox against real containers: hostile programs are contained and the next task is unaffected.

Needs a running Docker engine and the sandbox image; `.ci/run` provides both
(locally: start dockerd, then `cambrian sandbox build`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.sandbox.base import Mount, RunSpec, SandboxError
from cambrian.sandbox.image import DEFAULT_IMAGE, engine_available
from cambrian.sandbox.image_build import build_image
from cambrian.sandbox.local import UnsafePathError
from tests.conftest import skip_without_docker

skip_without_docker()

import docker  # noqa: E402 - only once the engine is known to answer
import docker.errors  # noqa: E402 - as above

from cambrian.sandbox.docker import DockerSandbox, DockerSession  # noqa: E402 - as above
from cambrian.sandbox.docker_check import run_check  # noqa: E402 - as above

NORMAL = "print(sum(range(10)))\n"


def py(code: str, **limits: object) -> RunSpec:
    """A spec running `code` as main.py with "{python}"."""
    return RunSpec(files={"main.py": textwrap.dedent(code)}, command=("{python}", "main.py"), **limits)  # type: ignore[arg-type]


def assert_next_task_works(session: DockerSession) -> None:
    result = session.run(py(NORMAL))
    assert result.ok, result
    assert result.stdout == "45\n"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[DockerSandbox]:
    box = DockerSandbox(pool_size=2, run_label="pytest")
    try:
        yield box
    finally:
        box.close()


@pytest.fixture()
def session(sandbox: DockerSandbox) -> Iterator[DockerSession]:
    with sandbox.session() as one:
        yield one


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    own = docker.from_env()
    try:
        yield own
    finally:
        own.close()


def test_work_dir_is_wiped_between_runs(session: DockerSession) -> None:
    assert session.run(py("open('left.txt', 'w').write('x'); open('/tmp/t', 'w').write('x')")).ok
    result = session.run(py("import os; print(sorted(os.listdir('.')), sorted(os.listdir('/tmp')))"))
    assert result.stdout == "['main.py'] []\n"


def test_network_is_unreachable(session: DockerSession) -> None:
    result = session.run(
        py(
            """
            import socket
            try:
                socket.create_connection(("1.1.1.1", 53), timeout=3)
                print("connected")
            except OSError as exc:
                print("blocked", exc)
            """
        )
    )
    assert result.stdout.startswith("blocked"), result
    assert_next_task_works(session)


def test_cannot_write_outside_work_dir(session: DockerSession) -> None:
    result = session.run(
        py(
            """
            for path in ("/etc/evil", "/usr/evil", "/evil", "/var/tmp/evil", "/home/evil"):
                try:
                    open(path, "w").write("x")
                    print("wrote", path)
                except OSError as exc:
                    print("refused", path, exc.errno)
            """
        )
    )
    assert "wrote" not in result.stdout
    assert result.stdout.count("refused") == 5
    assert_next_task_works(session)


def test_host_files_are_not_visible(session: DockerSession, tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    canary = tmp_path / "canary.txt"
    canary.write_text(token)
    result = session.run(
        py(
            f"""
            import os
            token = {token[::-1]!r}[::-1]  # reversed so this program's own text does not hold the token
            found = os.path.exists({str(canary)!r})
            for root in ("/tmp", "/work", "/home", "/root", "/mnt", "/opt", "/srv"):
                for folder, _dirs, names in os.walk(root):
                    for name in names:
                        try:
                            if token in open(os.path.join(folder, name), errors="replace").read(1_000_000):
                                found = True
                        except OSError:
                            pass
            print("found" if found else "absent")
            print(open("/etc/hostname").read().strip())
            """
        )
    )
    assert result.ok, result
    lines = result.stdout.splitlines()
    assert lines[0] == "absent"
    host_name = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else socket.gethostname()
    assert lines[1] != host_name
    assert_next_task_works(session)


def test_fork_bomb_is_contained(session: DockerSession, sandbox: DockerSandbox) -> None:
    result = session.run(
        py(
            """
            import os
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
            """,
            timeout_s=1.5,
        )
    )
    assert result.timed_out or result.exit_code != 0
    result = session.run(py("import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]))"))
    assert result.stdout == "2\n"
    assert_next_task_works(session)


def test_allocating_4_gb_is_oom(session: DockerSession) -> None:
    result = session.run(py("block = bytearray(4 * 1024**3)\nprint(len(block))\n"))
    assert result.oom_killed, result
    assert "MemoryError" in result.stderr
    assert_next_task_works(session)


def test_container_memory_limit_is_oom() -> None:
    """A spec allowing more memory than the container: the cgroup's OOM killer stops it, reported as OOM."""
    with DockerSandbox(pool_size=0, memory_mb=128, run_label="pytest-oom") as small, small.session() as one:
        result = one.run(py("data = b'x' * (400 * 1024**2)\nprint(len(data))\n", memory_mb=2048, timeout_s=30))
        assert result.oom_killed, result
        assert not result.ok
        assert_next_task_works(one)


def test_infinite_loop_times_out(session: DockerSession) -> None:
    # Only the timeout ends this loop: how soon it fires is bench/sandbox_throughput.py's to measure.
    result = session.run(py("while True:\n    pass\n", timeout_s=1.0))
    assert result.timed_out and result.exit_code is None
    assert_next_task_works(session)


def test_flood_of_stdout_is_truncated(session: DockerSession) -> None:
    result = session.run(py("import sys\nsys.stdout.write('x' * 100_000_000)\n", max_output_bytes=100_000))
    assert result.output_truncated
    assert len(result.stdout) <= 100_000
    assert_next_task_works(session)


def test_background_process_is_gone_before_next_task(session: DockerSession) -> None:
    result = session.run(
        py(
            """
            import os, subprocess, sys, time
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"], start_new_session=True)
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(1000)
                os._exit(0)
            print("started")
            """
        )
    )
    assert result.ok and result.stdout == "started\n"
    listing = session.run(
        py(
            """
            import os
            pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
            print(pids == sorted([1, os.getpid()]), pids)
            """
        )
    )
    assert listing.stdout.startswith("True"), listing.stdout


def test_host_canary_env_is_absent(session: DockerSession, monkeypatch: pytest.MonkeyPatch) -> None:
    token = uuid.uuid4().hex
    monkeypatch.setenv("CAMBRIAN_CANARY", token)
    result = session.run(
        py(
            "import json, os\nprint(json.dumps(dict(os.environ)))\n"
            "try:\n    print(open('/proc/1/environ', 'rb').read())\n"
            "except OSError as exc:\n    print(type(exc).__name__)\n"
        )
    )
    assert result.ok, result
    assert token not in result.stdout
    assert result.stdout.splitlines()[1] == "PermissionError"  # the runner is non-dumpable
    env = json.loads(result.stdout.splitlines()[0])
    assert "CAMBRIAN_CANARY" not in env and env["HOME"] == "/work"


def test_runs_as_non_root(session: DockerSession) -> None:
    result = session.run(py("import os; print(os.getuid(), os.geteuid(), os.getgid())"))
    assert result.stdout.split() == ["10001", "10001", "10001"]


def test_pool_gives_each_session_its_own_container(sandbox: DockerSandbox, client: docker.DockerClient) -> None:
    first, second = sandbox.session(), sandbox.session()
    try:
        assert first.run(py(NORMAL)).ok and second.run(py(NORMAL)).ok
        assert first.container_id is not None and second.container_id is not None
        assert first.container_id != second.container_id
        closed = first.container_id
    finally:
        first.close()
        second.close()
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(closed)
    assert closed not in sandbox.container_ids()


def test_hardened_settings_on_the_container(session: DockerSession, client: docker.DockerClient) -> None:
    assert session.run(py(NORMAL)).ok
    assert session.container_id is not None
    attrs = client.containers.get(session.container_id).attrs
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Memory"] == host["MemorySwap"] == 1024 * 1024 * 1024
    assert host["PidsLimit"] == 64 and host["NanoCpus"] == 1_000_000_000
    assert host["Binds"] in (None, []) and not host.get("Mounts")
    assert attrs["Config"]["User"] == "10001:10001"
    assert attrs["Config"]["Labels"]["cambrian.pid"] == str(os.getpid())


def test_watchdog_kills_a_frozen_container_and_session_goes_on(
    session: DockerSession, client: docker.DockerClient
) -> None:
    assert session.run(py(NORMAL)).ok
    frozen = session.container_id
    assert frozen is not None
    client.containers.get(frozen).pause()  # the runner itself can no longer answer
    result = session.run(py(NORMAL, timeout_s=1.0))  # answered by the watchdog (WATCHDOG_GRACE_S past 1 s)
    assert result.timed_out
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(frozen)
    assert_next_task_works(session)
    assert session.container_id != frozen


def test_mounts_get_a_dedicated_container(sandbox: DockerSandbox, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("from the host")
    spec = RunSpec(
        files={
            "main.py": "print(open('/gateway/data.txt').read())\n"
            "try:\n    open('/gateway/x', 'w')\nexcept OSError:\n    print('read-only')\n"
        },
        command=("{python}", "main.py"),
        mounts=(Mount(host_path=str(shared), sandbox_path="/gateway"),),
    )
    with sandbox.session() as one:
        result = one.run(spec)
        assert result.stdout == "from the host\nread-only\n", result
        assert_next_task_works(one)  # other mounts: a fresh container of its own


def test_bad_specs_are_refused(session: DockerSession) -> None:
    with pytest.raises(UnsafePathError):
        session.run(RunSpec(files={"../x.py": ""}, command=("{python}", "x.py")))
    with pytest.raises(SandboxError, match="network"):
        session.run(RunSpec(files={}, command=("{python}", "-c", "pass"), network=True))


def test_dead_runs_leftovers_are_removed_others_kept(client: docker.DockerClient) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    labels = {"cambrian": "1", "cambrian.pid": str(dead.pid), "cambrian.host": socket.gethostname()}
    leftover = client.containers.create(DEFAULT_IMAGE, command=["true"], labels=labels)
    someone_elses = client.containers.create(DEFAULT_IMAGE, command=["true"])
    try:
        with DockerSandbox(pool_size=0) as fresh:
            assert fresh.leftovers_removed >= 1
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(leftover.id)
        assert client.containers.get(someone_elses.id).id == someone_elses.id
    finally:
        someone_elses.remove(force=True)


def test_sessions_from_several_threads(sandbox: DockerSandbox) -> None:
    outputs: list[str] = []

    def one_agent(index: int) -> None:
        with sandbox.session() as mine:
            outputs.append(mine.run(py(f"print({index})")).stdout)

    threads = [threading.Thread(target=one_agent, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outputs) == ["0\n", "1\n", "2\n"]


def test_close_removes_every_container(client: docker.DockerClient) -> None:
    box = DockerSandbox(pool_size=1, run_label="pytest-close")
    session = box.session()
    assert session.run(py(NORMAL)).ok
    ids = box.container_ids()
    assert ids
    box.close()
    for container_id in ids:
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(container_id)
    with pytest.raises(SandboxError):
        box.session()


def test_check_reports_every_item_passing(sandbox: DockerSandbox) -> None:
    report = run_check(sandbox)
    assert report.ok, report.items
    names = {item.name for item in report.items}
    assert {"network unreachable", "cannot write outside /work", "runs as non-root", "capabilities dropped"} <= names
    assert {"host environment absent", "pids limit holds", "no process survives a run"} <= names
    assert "numpy and scipy import" in names
    assert {"runner unreachable from the task", "descriptor limit holds", "reply frames capped"} <= names
    assert set(report.packages) == {"numpy", "scipy"} and all(report.packages.values())


def test_check_cli_prints_numpy_and_scipy_versions() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from cambrian.meta_agent.cli import main; main()", "sandbox", "check"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Python packages in the sandbox: numpy " in done.stdout and ", scipy " in done.stdout


def test_numpy_and_scipy_work_and_nothing_else_of_site_packages(session: DockerSession) -> None:
    result = session.run(
        py(
            """
            import importlib.util, json
            import numpy, scipy.optimize
            centres = numpy.array([[0.25, 0.25], [0.75, 0.75]])
            gap = scipy.optimize.minimize_scalar(lambda r: (2 * r - numpy.linalg.norm(centres[0] - centres[1])) ** 2)
            print(json.dumps({"radius": round(float(gap.x), 4),
                              "pkg_resources": importlib.util.find_spec("pkg_resources") is not None}))
            """
        )
    )
    assert result.ok, result
    assert json.loads(result.stdout) == {"radius": round(0.5**0.5 / 2, 4), "pkg_resources": False}


def test_circle_packing_seed_scores_through_docker(sandbox: DockerSandbox) -> None:
    from cambrian.evaluators.circle_packing import CirclePacking
    from cambrian.evaluators.runner import evaluate_agent

    bench = CirclePacking()
    result = evaluate_agent(bench, bench.seed(), sandbox)
    assert result.valid, result
    assert result.score == pytest.approx(1.0917368, abs=1e-6)  # the seed's rings


def test_build_image_reuses_existing_and_refuses_bad_input(tmp_path: Path) -> None:
    info = build_image()
    assert info.method == "existing" and not info.built
    with pytest.raises(SandboxError):
        build_image(method="podman")  # type: ignore[arg-type]
    (tmp_path / "junk.txt").write_text("not a root fs")
    with pytest.raises(SandboxError, match="neither empty nor"):
        build_image(tag="cambrian-sandbox-test:never", method="debootstrap", rootfs_dir=tmp_path)


def test_unreachable_engine_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    assert not engine_available()
    with pytest.raises(SandboxError, match="cannot reach the Docker engine") as caught:
        DockerSandbox(pool_size=0)
    assert "dockerd" in caught.value.fix and "--sandbox local" in caught.value.fix
