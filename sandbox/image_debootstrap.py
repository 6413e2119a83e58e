"""The offline recipe of the sandbox image: a Debian root fs, trimmed, streamed into `docker import`.

`debootstrap --variant=minbase --include=python3,python3-numpy,python3-scipy
bookworm DIR MIRROR` makes a Debian root fs (needs root and the `debootstrap`
program), which is streamed as a tar into `docker import`, with the sandbox
user added to /etc/passwd on the way. bookworm's python3-scipy Depends on
python3-pythran, a compiler used only to build scipy, which pulls in gcc, g++,
boost and OpenBLAS headers (about 700 MB); the recipe purges every package that
only that subtree needs (`dpkg --purge` in a chroot) and apt's download cache.
numpy and scipy then use Debian's reference BLAS/LAPACK: single-threaded, as
suits a one-CPU container. An existing root fs (`rootfs_dir=`) is reused as is,
so CI and tests need not debootstrap twice; one made by an older recipe (no
numpy or scipy in it) is refused, never silently reused.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Literal

import docker
import docker.errors
import requests.exceptions

from cambrian.sandbox.base import SandboxError
from cambrian.sandbox.image import (
    IMAGE_LABEL,
    RECIPE_LABEL,
    RECIPE_VERSION,
    SANDBOX_UID,
    SCIENTIFIC_PACKAGES,
    Progress,
    image_exists,
)

DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
#: Debian packages debootstrap installs on top of minbase.
DEBIAN_PACKAGES = ("python3", "python3-numpy", "python3-scipy")

_DEBOOTSTRAP_TIMEOUT_S = 1800.0
_PIPE_CHUNK = 1 << 20  # bytes per read of the tar stream sent to the engine
_SOURCES_FILES = ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list")
_ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def debian_mirror() -> str:
    """The host's Debian mirror from its apt sources (deb822 or one-line), else deb.debian.org."""
    for name in _SOURCES_FILES:
        try:
            text = Path(name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "URIs:" and "security" not in words[1]:
                return words[1]
            if len(words) >= 3 and words[0] == "deb" and "security" not in line:
                uri = next((w for w in words[1:] if "://" in w), None)
                if uri:
                    return uri
    return DEFAULT_MIRROR


_DIST_PACKAGES = Path("usr/lib/python3/dist-packages")  # where Debian's python3-* packages live
#: Installed only to build scipy; what nothing else needs of its dependencies is purged.
_BUILD_ONLY_PACKAGES = frozenset({"python3-pythran"})


def rootfs_kind(path: str | os.PathLike[str]) -> Literal["empty", "ready", "old recipe", "other"]:
    """What a --rootfs folder holds: nothing, a root fs of this recipe, one of an older recipe, or else."""
    path = Path(path)
    if not path.exists() or not any(path.iterdir()):
        return "empty"
    if not ((path / "usr" / "bin" / "python3").exists() and (path / "etc" / "passwd").is_file()):
        return "other"
    has_all = all((path / _DIST_PACKAGES / name / "__init__.py").is_file() for name in SCIENTIFIC_PACKAGES)
    return "ready" if has_all and _stdlib_dir(path) is not None else "old recipe"


def _stdlib_dir(rootfs: Path) -> PurePosixPath | None:
    """The root fs's standard library folder (e.g. usr/lib/python3.11), relative; None if not found."""
    found = sorted((rootfs / "usr" / "lib").glob("python3.*/os.py"))
    return PurePosixPath(found[-1].parent.relative_to(rootfs).as_posix()) if found else None


def build_from_debootstrap(
    client: docker.DockerClient,
    tag: str,
    *,
    rootfs_dir: str | os.PathLike[str] | None,
    mirror: str | None,
    say: Progress,
) -> None:
    """Import a root fs of this recipe into the engine as `tag`: the one at `rootfs_dir` when it is ready,
    else one debootstrapped into it (kept) or into a temp folder (removed after). SandboxError with a fix
    for a root fs of an older recipe, a folder that is no root fs, or a failed debootstrap or import.

    mirror: the Debian mirror (default: the host's apt sources, else deb.debian.org).
    """
    keep = rootfs_dir is not None
    rootfs = Path(rootfs_dir) if rootfs_dir is not None else Path(tempfile.mkdtemp(prefix="cambrian-rootfs-"))
    try:
        kind = rootfs_kind(rootfs)
        if kind == "ready":
            say(f"reusing the root fs at {rootfs}")
        elif kind == "old recipe":
            raise SandboxError(
                f"the root fs at {rootfs} was made by an older recipe: it lacks "
                f"{' or '.join(SCIENTIFIC_PACKAGES)} ({_DIST_PACKAGES})",
                fix=f"remove it (`rm -rf {rootfs}`) or pass an empty or new folder as --rootfs; "
                "the build then debootstraps a current one",
            )
        elif kind == "other":
            raise SandboxError(
                f"{rootfs} is neither empty nor a debootstrap root fs with python3",
                fix="pass an empty or new folder as --rootfs, or one made by an earlier build",
            )
        else:
            _debootstrap(rootfs, mirror=mirror or debian_mirror(), say=say)
        say(f"importing {rootfs} into the engine as {tag}")
        _import_rootfs(client, rootfs, tag)
    finally:
        if not keep:
            shutil.rmtree(rootfs, ignore_errors=True)


def _debootstrap(rootfs: Path, *, mirror: str, say: Progress) -> None:
    program = shutil.which("debootstrap") or next(
        (p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if os.path.exists(p)), None
    )
    if program is None:
        raise SandboxError(
            "the debootstrap program is not installed",
            fix="install it (`apt-get install -y debootstrap` as root), or build with --method dockerfile",
        )
    if os.geteuid() != 0:
        raise SandboxError(
            "debootstrap needs root to build the sandbox root fs",
            fix="run `cambrian sandbox build` as root (e.g. with sudo), or use --method dockerfile",
        )
    # Into a sibling folder first, moved into place only when complete: a failed or killed
    # debootstrap never leaves a half-made root fs where the next build would look.
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{rootfs.name}.partial-", dir=rootfs.parent))
    say(f"debootstrap {SUITE} with {', '.join(DEBIAN_PACKAGES)} into {rootfs} from {mirror} (about 3 min)")
    argv = [program, "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}", SUITE, str(partial), mirror]
    try:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=_DEBOOTSTRAP_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise SandboxError(
                f"debootstrap did not finish within {_DEBOOTSTRAP_TIMEOUT_S:.0f} s",
                fix=f"check that the mirror {mirror} is reachable and fast, then retry",
            ) from exc
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise SandboxError(
                f"debootstrap failed (exit {done.returncode}): {' | '.join(tail)}",
                fix=f"check that the mirror {mirror} is reachable, then retry",
            )
        _trim_rootfs(partial, say)
        if rootfs.exists():
            rootfs.rmdir()  # empty (checked by the caller); os.replace needs it gone or empty
        os.replace(partial, rootfs)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _trim_rootfs(rootfs: Path, say: Progress) -> None:
    """Purge the packages only scipy's build tools need, and apt's download cache (see the module doc)."""
    status = (rootfs / "var" / "lib" / "dpkg" / "status").read_text(encoding="utf-8", errors="replace")
    doomed = sorted(packages_to_purge(status, keep=DEBIAN_PACKAGES))
    if doomed:
        say(f"purging {len(doomed)} packages needed only to build scipy ({', '.join(doomed[:4])}, ...)")
        env = {"PATH": _ENV_PATH, "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
        argv = ["chroot", str(rootfs), "dpkg", "--purge", "--force-depends", *doomed]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise SandboxError(
                f"purging scipy's build tools from the root fs failed (exit {done.returncode}): {' | '.join(tail)}",
                fix="retry `cambrian sandbox build`; if it fails again, report it with this message",
            )
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / cache).glob("*"):
            if entry.is_file():
                entry.unlink()


def packages_to_purge(dpkg_status: str, *, keep: tuple[str, ...]) -> set[str]:
    """Installed packages that neither `keep`, nor an essential or required package, needs.

    Dependencies are followed through Depends and Pre-Depends; of alternatives (`a | b`) the
    first installed one (or installed provider of a virtual one) counts; `_BUILD_ONLY_PACKAGES`
    are never followed, so what only they need is purged with them.
    """
    installed: dict[str, dict[str, str]] = {}
    for block in dpkg_status.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" in fields and fields.get("Status", "").endswith(" installed"):
            installed[fields["Package"]] = fields
    providers: dict[str, list[str]] = {}
    for name, fields in installed.items():
        for provided in fields.get("Provides", "").split(","):
            virtual = provided.strip().split(" ")[0].split(":")[0]
            if virtual:
                providers.setdefault(virtual, []).append(name)

    def candidates(dependency: str) -> list[str]:
        name = dependency.strip().split(" ")[0].split(":")[0]
        return [name] if name in installed else sorted(providers.get(name, []))

    needed: set[str] = set()
    todo = [n for n, f in installed.items() if f.get("Essential") == "yes" or f.get("Priority") == "required"]
    todo += [name for name in keep if name in installed]
    while todo:
        name = todo.pop()
        if name in needed or name in _BUILD_ONLY_PACKAGES:
            continue
        needed.add(name)
        for field in ("Depends", "Pre-Depends"):
            for group in filter(str.strip, installed[name].get(field, "").split(",")):
                chosen = next((found[0] for found in map(candidates, group.split("|")) if found), None)
                if chosen is not None:
                    todo.append(chosen)
    return set(installed) - needed


def _import_rootfs(client: docker.DockerClient, rootfs: Path, tag: str) -> None:
    """Stream a tar of `rootfs` (plus the sandbox user and /work) into `docker import`."""
    repository, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    read_fd, write_fd = os.pipe()
    failure: list[BaseException] = []

    def write_tar() -> None:
        try:
            with os.fdopen(write_fd, "wb") as sink, tarfile.open(fileobj=sink, mode="w|") as tar:
                _write_rootfs_tar(tar, rootfs)
        except BaseException as exc:  # noqa: BLE001 - handed to the importing thread, which raises it
            failure.append(exc)

    def chunks(source: io.BufferedReader) -> Iterator[bytes]:
        while chunk := source.read(_PIPE_CHUNK):
            yield chunk

    writer = threading.Thread(target=write_tar, name="cambrian-rootfs-tar", daemon=True)
    writer.start()
    try:
        with os.fdopen(read_fd, "rb") as source:
            client.api.import_image(
                src=chunks(source),
                repository=repository,
                tag=version,
                stream_src=True,
                changes=[
                    f"ENV PATH={_ENV_PATH}",
                    "ENV LANG=C.UTF-8",
                    "WORKDIR /work",
                    f"USER {SANDBOX_UID}:{SANDBOX_UID}",
                    f"LABEL {IMAGE_LABEL}=1 {RECIPE_LABEL}={RECIPE_VERSION}",
                ],
            )
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        raise SandboxError(
            f"docker import of {rootfs} failed: {exc}",
            fix="check free disk space of the engine's data root, then retry `cambrian sandbox build`",
        ) from exc
    finally:
        writer.join()
    if failure:
        raise SandboxError(
            f"reading the root fs {rootfs} failed: {failure[0]}",
            fix="run the build as root (the root fs has root-only files), or debootstrap a fresh one",
        ) from failure[0]
    if not image_exists(tag, client=client):
        raise SandboxError(
            f"docker import finished but {tag} is not in the engine",
            fix="look at the engine's log (dockerd) for the import error, then retry",
        )


def _write_rootfs_tar(tar: tarfile.TarFile, rootfs: Path) -> None:
    """Everything under `rootfs`, with passwd/group gaining the sandbox user, an empty /work, and
    links to numpy and scipy in the standard library's folder (programs run as `python3 -S`)."""
    replaced = {
        "./etc/passwd": "sandbox:x:{uid}:{uid}:cambrian sandbox:/work:/usr/sbin/nologin\n",
        "./etc/group": "sandbox:x:{uid}:\n",
    }

    def skip_replaced(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if info.name in replaced else info

    for entry in sorted(os.listdir(rootfs)):
        tar.add(str(rootfs / entry), arcname=f"./{entry}", recursive=True, filter=skip_replaced)
    for name, line in replaced.items():
        original = (rootfs / name[2:]).read_bytes()
        if not original.endswith(b"\n"):
            original += b"\n"
        data = original + line.format(uid=SANDBOX_UID).encode()
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    if not (rootfs / "work").exists():
        work = tarfile.TarInfo("./work")
        work.type, work.mode, work.mtime = tarfile.DIRTYPE, 0o1777, int(time.time())
        tar.addfile(work)
    stdlib = _stdlib_dir(rootfs)
    if stdlib is None:
        return
    for name in SCIENTIFIC_PACKAGES:
        if (rootfs / stdlib / name).exists() or (rootfs / stdlib / name).is_symlink():
            continue
        link = tarfile.TarInfo(f"./{stdlib}/{name}")
        link.type, link.mode, link.mtime = tarfile.SYMTYPE, 0o777, int(time.time())
        link.linkname = f"/{_DIST_PACKAGES}/{name}"
        tar.addfile(link)
