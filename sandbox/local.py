"""The subprocess sandbox: for machines without Docker.

Where bubblewrap can make Linux namespaces (`cambrian.sandbox._namespaces`: `bwrap` installed, and as a non-root user
unprivileged user namespaces allowed), each run is in namespaces of its own: no network, its own processes
only (its own /proc), a private /tmp, /var/tmp and /dev, and of the host file system only /usr, the
interpreter's standard library, numpy, scipy, its work dir and its mounts (`LocalSandbox.namespaces`). It still
shares the kernel with Cambrian: Docker isolates more.

WITHOUT NAMESPACES ISOLATION IS WEAK. The program runs under the same kernel as Cambrian, sees the
host's file system and network, and can read every world-readable file. What it
protects depends on who runs Cambrian:

- as root: each run gets its own unprivileged uid (no groups, no_new_privs, so no
  setuid program climbs back): it cannot write host files (only world-writable
  ones), cannot read the Cambrian process's environment or memory, and every
  process of that uid, setsid() or not, is killed when the run ends;
  RLIMIT_NPROC binds per run. The interpreter must be reachable by that uid
  (every folder on its path searchable by others): where it is not, the
  sandbox refuses and says which folder to open (`chmod o+x`);
- as another user: the program runs as that user and can read and write what
  the user can; Cambrian's own process is non-dumpable (prctl), so its
  environment (API keys) and memory are not readable through /proc, but a
  process the program starts with setsid() can outlive the run.

Always:
- a fresh temporary work dir (cwd, HOME and TMPDIR), removed after the run;
- a scrubbed environment: PATH, HOME, TMPDIR, LANG, two PYTHON* flags,
  PYTHONPATH (the package folder below), OPENBLAS_NUM_THREADS and
  OMP_NUM_THREADS (the spec's `cpus`, at least 1) and the spec's own `env`,
  nothing from the host (no API keys);
- rlimits: address space (`memory_mb`), CPU seconds (ceil(timeout) + 1),
  largest file written (`max_file_bytes`), processes (`pids`), open files, no
  core dumps;
- its own session / process group, SIGKILLed as a whole on timeout, on too much
  output, and always once the program exits;
- capped stdout/stderr.

Not enforced here: `network`, `cpus`, read-only mounts. Use the Docker backend
for anything you would not run on your own account.

Python: "{python}" as a whole argument becomes `<sys.executable> -S`. `-S`
skips site-packages so a program sees the standard library, plus numpy and
scipy as in the Docker image, and nothing else of the interpreter's
site-packages (which hold Cambrian's own dependencies, litellm among them): a
read-only folder holding only links to the interpreter's numpy and scipy (and
the `numpy.libs` / `scipy.libs` folders their wheels bundle, where present) is
put on PYTHONPATH. Where the interpreter has no numpy or scipy, that folder
lacks them and importing them fails. The script's own directory stays on
sys.path (unlike `-I`), which the harness needs to import the agent's files.
Inside a longer argument "{python}" becomes the bare interpreter path.

Limits are set by a tiny launcher (`python -S -c LAUNCHER`, `guest.launch`) that calls
setrlimit and then execs the command, rather than by `preexec_fn`: the loop
runs sandboxes from several threads, and `preexec_fn` is documented as unsafe
in the presence of threads. The rest of a run (watch, kill, collect, its
result) is the run protocol the Docker backend's runner follows too
(`cambrian.sandbox.guest`); the uids of runs as root are `_run_uids`'.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from cambrian.sandbox import _namespaces, _run_uids, guest
from cambrian.sandbox.base import Mount, RunResult, RunSpec, SandboxError

#: Runs in the child between Popen and the program: the rlimits, as root the drop to the run's uid, exec
#: (`guest.launch`).
_LAUNCHER = guest.launcher_source()

#: PATH inside the sandbox; the interpreter is always given by absolute path.
_SANDBOX_PATH = "/usr/bin:/bin"
#: What a program may import besides the standard library. Each package's `<name>.libs` folder
#: (shared libraries a manylinux wheel bundles, found through $ORIGIN-relative rpaths) is linked too.
_SHARED_PACKAGES = ("numpy", "scipy")
_PACKAGE_QUERY_TIMEOUT_S = 30.0  # asking another interpreter where its numpy/scipy live
#: Run by an interpreter other than Cambrian's own: prints {name: folder} without importing anything.
_PACKAGE_QUERY = """\
import importlib.util, json
found = {}
for name in %r:
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations:
        found[name] = list(spec.submodule_search_locations)[0]
print(json.dumps(found))
""" % (_SHARED_PACKAGES,)


class UnsafePathError(SandboxError):
    """A spec path that is absolute or climbs out of the work dir with `..`."""


def check_relative_path(path: str) -> PurePosixPath:
    """Return `path` as a relative POSIX path, or raise UnsafePathError.

    Refuses empty paths, absolute paths, backslashes and any `..` part: a file
    the spec places or collects must stay inside the work dir.
    """
    pure = PurePosixPath(path)
    if (
        not path
        or "\\" in path
        or "\x00" in path
        or pure.is_absolute()
        or ".." in pure.parts
        or pure == PurePosixPath(".")
    ):
        raise UnsafePathError(
            f"sandbox path {path!r} is not a plain relative path inside the work dir",
            fix="use relative paths without '..', such as 'pkg/module.py'",
        )
    return pure


class LocalSandbox:
    """Runs each spec as a subprocess in a fresh temp dir (weak isolation: see the module doc).

    python: the interpreter that "{python}" stands for (default: the one running Cambrian).
    root: where work dirs are created (default: the system temp dir).
    """

    name = "local"
    isolated = False

    def __init__(
        self, *, python: str | None = None, root: str | os.PathLike[str] | None = None, namespaces: bool | None = None
    ) -> None:
        self.python = python or sys.executable
        self.root = None if root is None else str(root)
        #: Runs in Linux namespaces through bubblewrap (`cambrian.sandbox._namespaces`): None uses them where they work.
        if namespaces and not _namespaces.available():
            raise SandboxError(
                "the local sandbox was asked for namespaces, and bubblewrap cannot make them here",
                fix="install bubblewrap (apt-get install bubblewrap) and allow unprivileged user namespaces, or "
                "run without namespaces",
            )
        self.namespaces = _namespaces.available() if namespaces is None else namespaces
        #: As root without namespaces, a run's uid reaches its FM socket by its host path (`socket_folder_mode`).
        self.shares_host_paths = os.geteuid() == 0 and not self.namespaces
        self._closed = False
        self._running: set[int] = set()  # process groups of the runs in progress, killed by close()
        self._running_lock = threading.Lock()
        self._packages_lock = threading.Lock()
        self._packages_dir: Path | None = None  # made on the first run, removed by close()
        self._remove_packages: weakref.finalize | None = None
        #: As root, each run gets an unprivileged uid of its own; otherwise runs keep the user's uid.
        self.drops_privileges = os.geteuid() == 0
        guest.make_undumpable()  # programs of this user cannot read this process's memory or environment

    def run(self, spec: RunSpec) -> RunResult:
        """Run `spec` to completion or to its limits; SandboxError only for faults of this backend."""
        if self._closed:
            raise SandboxError("this LocalSandbox was closed", fix="create a new LocalSandbox for further runs")
        for path in [*spec.files, *spec.collect]:
            check_relative_path(path)
        argv = self._expand_command(spec.command)
        if self.drops_privileges:
            _run_uids.check_reachable(self.python, self.root, _LAUNCHER)
        try:
            workdir = Path(tempfile.mkdtemp(prefix="cambrian-local-", dir=self.root))
        except OSError as exc:
            raise SandboxError(
                f"cannot create a work dir for the local sandbox: {exc}",
                fix="check that the temp dir (TMPDIR or the sandbox root) exists, is writable and has free space",
            ) from exc
        uid = _run_uids.take_uid() if self.drops_privileges else -1
        try:
            self._place_files(workdir, spec)
            if uid >= 0:
                _run_uids.give_tree(workdir, uid)
            return self._execute(workdir, argv, spec, uid)  # kills what the run left before it returns
        except BaseException:
            if uid >= 0:
                _run_uids.kill_uid(self.python, uid)
            raise
        finally:
            if uid >= 0:
                _run_uids.give_back_uid(uid)
            _remove_tree(workdir)

    def session(self) -> _LocalSession:
        """Every local run already starts in a fresh work dir with its process group killed at the end."""
        return _LocalSession(self)

    def close(self) -> None:
        """Kill the runs in progress (each raises SandboxError), remove the package folder; later `run` calls
        are refused. Idempotent."""
        with self._running_lock:
            self._closed = True
            for group in self._running:
                guest.kill_group(group)
        with self._packages_lock:
            if self._remove_packages is not None:
                self._remove_packages()

    def packages_dir(self) -> Path:
        """The read-only folder put on PYTHONPATH: links to numpy and scipy of `self.python`, nothing else.

        Made on first use (one folder per LocalSandbox, under the system temp dir), removed by close().
        """
        with self._packages_lock:
            if self._packages_dir is None:
                try:
                    folder = Path(tempfile.mkdtemp(prefix="cambrian-packages-"))
                except OSError as exc:
                    raise SandboxError(
                        f"cannot create the local sandbox's package folder: {exc}",
                        fix="check that the temp dir (TMPDIR) exists, is writable and has free space",
                    ) from exc
                for name, target in _package_folders(self.python).items():
                    (folder / name).symlink_to(target, target_is_directory=True)
                folder.chmod(0o555)  # a program cannot add modules next to numpy and scipy
                self._remove_packages = weakref.finalize(self, _remove_tree, folder)
                self._packages_dir = folder
            return self._packages_dir

    def _expand_command(self, command: tuple[str, ...]) -> list[str]:
        if not command:
            raise SandboxError("the run spec has an empty command", fix="give the command to run as argv")
        argv = guest.expand_command(command, self.python)
        if os.sep not in argv[0] and shutil.which(argv[0], path=_SANDBOX_PATH) is None:
            raise SandboxError(
                f"the sandbox command {argv[0]!r} is not on the sandbox PATH ({_SANDBOX_PATH})",
                fix="give an absolute path or '{python}' as the first argument",
            )
        return argv

    def _place_files(self, workdir: Path, spec: RunSpec) -> None:
        try:
            for rel, text in spec.files.items():
                target = workdir / check_relative_path(rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SandboxError(
                f"cannot write the run's files into {workdir}: {exc}",
                fix="check free space in the temp dir, and that no file path is also used as a folder",
            ) from exc
        for mount in spec.mounts:
            self._place_mount(workdir, mount)

    def _place_mount(self, workdir: Path, mount: Mount) -> None:
        # Everything on the host is visible anyway; a mount only needs a name
        # inside the work dir when its sandbox path is relative.
        if PurePosixPath(mount.sandbox_path).is_absolute():
            if os.path.abspath(mount.sandbox_path) != os.path.abspath(mount.host_path):
                raise SandboxError(
                    f"the local sandbox cannot show {mount.host_path!r} at the absolute path {mount.sandbox_path!r}",
                    fix="give the mount a relative sandbox_path (placed in the work dir) or the host path itself",
                )
            return
        link = workdir / check_relative_path(mount.sandbox_path)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.abspath(mount.host_path))

    def _execute(self, workdir: Path, argv: list[str], spec: RunSpec, uid: int = -1) -> RunResult:
        threads = str(max(1, int(spec.cpus)))  # BLAS threads: one per core would blow RLIMIT_AS on big hosts
        env = guest.scrubbed_env(
            path=_SANDBOX_PATH,
            home=str(workdir),
            extra={
                "PYTHONPATH": str(self.packages_dir()),
                "OPENBLAS_NUM_THREADS": threads,
                "OMP_NUM_THREADS": threads,
                **spec.env,
            },
        )
        limits = guest.rlimits(
            memory_mb=spec.memory_mb,
            timeout_s=spec.timeout_s,
            max_file_bytes=spec.max_file_bytes,
            max_processes=spec.pids,  # as root, the run's uid is its own; as another user, the user's processes
        )
        launcher = [self.python, "-S", "-c", _LAUNCHER, guest.limits_arg(limits), str(uid), *argv]
        if self.namespaces:
            packages = self.packages_dir()
            targets = [os.path.realpath(link) for link in packages.iterdir()]
            # A socket named by the run's env (the FM gateway's: the local sandbox promises runs that its host
            # path works as it is) is shown where it is.
            sockets = [Mount(host_path=v, sandbox_path=v, read_only=True) for v in spec.env.values() if _is_socket(v)]
            try:
                launcher = [
                    *_namespaces.command(
                        python=self.python,
                        workdir=workdir,
                        packages_dir=packages,
                        packages=targets,
                        mounts=[*spec.mounts, *sockets],
                    ),
                    *launcher,
                ]
            except (OSError, subprocess.SubprocessError, ValueError) as exc:  # the interpreter's paths unknown
                raise SandboxError(
                    f"cannot tell which folders {self.python} needs inside the namespaces: {exc}",
                    fix="point LocalSandbox(python=...) at a working Python 3.10+ interpreter",
                ) from exc
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                launcher,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise SandboxError(
                f"cannot start the sandbox interpreter {self.python!r}: {exc}",
                fix="point LocalSandbox(python=...) at a working Python 3.10+ interpreter",
            ) from exc
        with self._running_lock:
            self._running.add(proc.pid)
            if self._closed:  # closed since `run` began: this run goes the way of those close() killed
                guest.kill_group(proc.pid)
        assert proc.stdout is not None and proc.stderr is not None
        try:
            seen = guest.watch(
                proc.stdout.fileno(),
                proc.stderr.fileno(),
                group=proc.pid,
                leader_exited=functools.partial(_has_exited, proc.pid),
                deadline=started + spec.timeout_s,
                max_output_bytes=spec.max_output_bytes,
            )
        finally:
            proc.stdout.close()
            proc.stderr.close()
            guest.kill_group(proc.pid)
            if uid >= 0:
                _run_uids.kill_uid(self.python, uid)  # before collecting: nothing of the run may still change its files
            proc.wait()
            with self._running_lock:
                self._running.discard(proc.pid)  # reaped only now: the pid was not free for reuse before
        if self._closed:
            raise SandboxError(
                "the local sandbox was closed during this run, which killed it (a second Ctrl-C does this)",
                fix="evaluate the agent again: `cambrian resume RUN` takes up the runs that were killed",
            )
        duration = time.monotonic() - started
        files, notes = guest.collect(
            str(workdir),
            spec.collect,
            max_bytes=spec.max_collect_bytes,
            refuse_hard_links=True,  # as root, the collector reads what the run's uid could not
        )
        return RunResult(**guest.result(seen, exit_code=proc.returncode, duration_s=duration, files=files, notes=notes))


def _package_folders(python: str) -> dict[str, str]:
    """Link name -> folder of numpy, scipy and their bundled `*.libs` for the interpreter `python`.

    Cambrian's own interpreter is asked in-process (find_spec imports nothing); another one is
    asked by running it. A package that interpreter lacks is simply left out.
    """
    if python == sys.executable:
        found = {}
        for name in _SHARED_PACKAGES:
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations:
                found[name] = list(spec.submodule_search_locations)[0]
    else:
        try:
            done = subprocess.run(
                [python, "-I", "-c", _PACKAGE_QUERY],
                capture_output=True,
                text=True,
                timeout=_PACKAGE_QUERY_TIMEOUT_S,
                check=True,
            )
            found = dict(json.loads(done.stdout))
        except (OSError, subprocess.SubprocessError, ValueError):
            return {}  # no such interpreter (run() then says so) or no answer: standard library only
    # Real paths: a venv reached through a link (.venv -> elsewhere) is bound, in namespaces, where it really is.
    found = {name: os.path.realpath(folder) for name, folder in found.items()}
    folders = dict(found)
    for name, package_dir in found.items():
        bundled = os.path.join(os.path.dirname(package_dir), f"{name}.libs")
        if os.path.isdir(bundled):
            folders[f"{name}.libs"] = bundled
    return folders


def _has_exited(pid: int) -> bool:
    """True once `pid` has exited; WNOWAIT leaves it unreaped (its pid stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _is_socket(value: str) -> bool:
    """Whether `value` is the absolute path of an existing Unix socket."""
    if not value.startswith("/"):
        return False
    try:
        return stat.S_ISSOCK(os.stat(value).st_mode)
    except (OSError, ValueError):
        return False


def isolation_summary() -> str:
    """One sentence on what the local sandbox protects here (who runs Cambrian decides it), for warnings."""
    if _namespaces.available():
        who = "an unprivileged uid of its own" if os.geteuid() == 0 else "your user"
        return (
            f"each program runs as {who} in Linux namespaces (bubblewrap): no network, its own processes only, a "
            "private /tmp, and of your files only the interpreter, numpy, scipy and its work dir; it shares the "
            "kernel with Cambrian"
        )
    if os.geteuid() == 0:
        return (
            "each program runs as an unprivileged uid of its own: it cannot write your files or read "
            "Cambrian's memory or keys, but it can read world-readable files and use the network"
        )
    return (
        "programs run as your user: they can read and write your files and use the network "
        "(Cambrian's own memory and keys stay unreadable); install bubblewrap for namespaces"
    )


def _remove_tree(path: Path) -> None:
    """Remove the work dir even where the program made parts of it read-only. Only what lies inside it is
    ever made writable: never the folder that holds it (/tmp, say, which a chmod 0700 would close to every
    other user), not even when removing the work dir itself fails or it is already gone."""
    root = os.path.abspath(path)

    def make_writable_and_retry(func: Callable[..., Any], failed: str, exc: Any) -> None:
        if isinstance(exc[1], FileNotFoundError):
            return  # gone already
        try:
            parent = os.path.dirname(os.path.abspath(failed))
            if parent == root or parent.startswith(root + os.sep):
                os.chmod(parent, stat.S_IRWXU)
            os.chmod(failed, stat.S_IRWXU)
            func(failed)
        except OSError:
            pass  # leave it; the temp dir cleaner will get it

    shutil.rmtree(path, onerror=make_writable_and_retry)


class _LocalSession:
    """The runs of one agent on the local backend: each run is already isolated from the last."""

    def __init__(self, sandbox: LocalSandbox) -> None:
        self._sandbox = sandbox

    def run(self, spec: RunSpec) -> RunResult:
        return self._sandbox.run(spec)

    def fm_socket_host_path(self) -> str | None:
        return None  # runs see the host filesystem: the socket's host path works as it is

    def close(self) -> None:
        pass

    def __enter__(self) -> _LocalSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
