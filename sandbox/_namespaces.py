"""Linux namespaces for the local sandbox, through bubblewrap (`bwrap`): a program that shares the host no more
than it needs.

Measured on the local sandbox without them (a hostile review of 19453f1): a program read another process's
command line (a store password) in /proc, reached a loopback PostgreSQL with it and rewrote the archive, read
HumanEval's answer key from Cambrian's virtual environment, and could write /tmp, /var/tmp and /dev/shm. Inside
bwrap a run gets:

- its own PID namespace and /proc: it sees its own processes only, and they all die with it;
- no network at all (its own empty network namespace: no loopback service of the host);
- its own IPC and UTS namespaces, a fresh /dev, a private empty /tmp;
- of the host file system, read-only: /usr (and the /bin, /lib, /lib64, /sbin links or folders), the
  interpreter's own installation (its standard library; its site-packages hidden) and, of its packages,
  numpy and scipy alone (no other file of Cambrian's environment: no data package, no answer key); read-write:
  the run's work dir; and the run's mounts (the FM socket).

As root, the program still runs as an unprivileged uid of its own (the launcher drops to it inside), so no user
namespace is made; as another user, bwrap makes one (unprivileged user namespaces must be allowed, as on Debian
and Ubuntu by default). `available()` says whether it works here; where it does not, the local sandbox runs
without namespaces and says so (`cambrian doctor`, the sandbox warning).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from cambrian.sandbox.base import Mount

#: The unshare flags: every namespace but the user one as root (the launcher drops to the run's uid, a real
#: host uid that a user namespace made by root could not map), all of them otherwise.
_AS_ROOT = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try")
_AS_USER = ("--unshare-all",)
_TOP_LEVEL = ("/bin", "/lib", "/lib64", "/sbin")  # links into /usr on merged-/usr systems, folders elsewhere
_QUERY = (
    "import json, os, sys, sysconfig\n"
    "paths = sysconfig.get_paths(vars={'base': sys.base_prefix, 'platbase': sys.base_prefix})\n"
    "print(json.dumps({'base': sys.base_prefix, 'executable': os.path.realpath(sys.executable),"
    " 'site': sorted({paths['purelib'], paths['platlib']})}))"
)


def bwrap() -> str | None:
    """The bwrap binary on PATH, or None."""
    return shutil.which("bwrap")


@functools.cache
def available() -> bool:
    """Whether bwrap runs a program in new namespaces here (it is installed, and the kernel lets this user make
    them). Asked once per process."""
    binary = bwrap()
    if binary is None:
        return False
    try:
        done = subprocess.run(
            [
                binary,
                *_unshare(),
                "--die-with-parent",
                "--ro-bind",
                "/",
                "/",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "true",
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@functools.cache
def interpreter(python: str) -> tuple[str, str, tuple[str, ...]]:
    """(installation prefix, real executable, site-packages folders) of `python`: the prefix is bound, the
    site-packages hidden."""
    done = subprocess.run([python, "-S", "-c", _QUERY], capture_output=True, text=True, timeout=60, check=True)
    found = json.loads(done.stdout)
    return str(found["base"]), str(found["executable"]), tuple(found["site"])


def command(
    *,
    python: str,
    workdir: Path,
    packages_dir: Path,
    packages: Iterable[str],
    mounts: Sequence[Mount],
) -> list[str]:
    """The bwrap argv that runs what follows it inside the namespaces (see the module doc).

    python: the interpreter runs use (its venv's bin folder and pyvenv.cfg are bound too, so its path works
    as it is). packages: the folders the package links of `packages_dir` point to.
    """
    binary = bwrap()
    assert binary is not None, "call available() first"
    base, executable, site = interpreter(python)
    argv = [binary, *_unshare(), "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for top in _TOP_LEVEL:
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    interpreter_paths = _outermost([base, os.path.dirname(executable), *_venv_parts(python)])
    package_paths = _outermost([str(packages_dir), *packages])
    mount_paths = [(os.path.abspath(m.host_path), m.read_only) for m in mounts]
    # The folders above what is bound are made here, open to every uid (bwrap's own are 0700, which the run's
    # unprivileged uid could not pass through); those inside a bound folder exist in it already.
    bound = [*interpreter_paths, *site, *package_paths, str(workdir), *(path for path, _ in mount_paths)]
    parents = _parents(bound, inside=[*interpreter_paths, "/usr"])
    in_tmp = [folder for folder in parents if _inside(folder, "/tmp")]  # made once /tmp is its own tmpfs
    for folder in parents:
        if folder not in in_tmp:
            argv += ["--perms", "0755", "--dir", folder]
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    for folder in in_tmp:
        if folder != "/tmp":
            argv += ["--perms", "0755", "--dir", folder]
    argv += ["--perms", "0755", "--dir", "/var", "--perms", "1777", "--tmpfs", "/var/tmp"]
    # Binds after the fresh /tmp (an interpreter, a package folder or a work dir may live under it).
    for path in interpreter_paths:
        argv += ["--ro-bind", path, path]
    for folder in site:  # the interpreter's own site-packages: what is installed there stays out of reach
        if os.path.isdir(folder):
            argv += ["--tmpfs", folder]
    for path in package_paths:  # after the site-packages are hidden: numpy and scipy come back, alone
        argv += ["--ro-bind", path, path]
    argv += ["--bind", str(workdir), str(workdir)]
    for host, read_only in mount_paths:
        argv += ["--ro-bind" if read_only else "--bind", host, host]
    return [*argv, "--chdir", str(workdir)]


def _parents(paths: Iterable[str], *, inside: Sequence[str]) -> list[str]:
    """The folders above `paths` (shallowest first), but "/" and those in or above a folder of `inside` that
    a bind or tmpfs makes anyway."""
    found: set[str] = set()
    for path in paths:
        for parent in Path(path).parents:
            text = str(parent)
            if text != "/" and not any(_inside(text, outer) for outer in inside):
                found.add(text)
    return sorted(found, key=lambda folder: (folder.count("/"), folder))


def _unshare() -> tuple[str, ...]:
    return _AS_ROOT if os.geteuid() == 0 else _AS_USER


def _venv_parts(python: str) -> list[str]:
    """A venv interpreter's bin folder and pyvenv.cfg (its path then works as it is); nothing for another."""
    venv = Path(python).parent.parent
    return [str(Path(python).parent), str(venv / "pyvenv.cfg")] if (venv / "pyvenv.cfg").is_file() else []


def _outermost(paths: Iterable[str]) -> list[str]:
    """The existing paths, absolute, without repeats and without those inside another of them."""
    kept: list[str] = []
    for path in sorted({os.path.abspath(p) for p in paths if os.path.exists(p)}, key=len):
        if not any(_inside(path, outer) for outer in kept):
            kept.append(path)
    return kept


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
