"""The sandbox image: build it once, reuse it from the engine's cache afterwards.

Two ways to get `cambrian-sandbox:bookworm` (Python 3.11 with numpy and scipy,
a non-root sandbox user with uid/gid 10001):

- "dockerfile": `FROM python:3.11-slim`, `pip install numpy scipy`, the user;
  built by the engine. Needs a registry (and PyPI) the engine can reach.
- "debootstrap": fully offline. `debootstrap --variant=minbase
  --include=python3,python3-numpy,python3-scipy bookworm DIR MIRROR` makes a
  Debian root fs (needs root and the `debootstrap` program), which is streamed
  as a tar into `docker import`, with the sandbox user added to /etc/passwd on
  the way. bookworm's python3-scipy Depends on python3-pythran, a compiler used
  only to build scipy, which pulls in gcc, g++, boost and OpenBLAS headers
  (about 700 MB); the recipe purges every package that only that subtree
  needs (`dpkg --purge` in a chroot) and apt's download cache. numpy and scipy
  then use Debian's reference BLAS/LAPACK: single-threaded, as suits a
  one-CPU container. An existing root fs (`rootfs_dir=`) is reused as is, so
  CI and tests need not debootstrap twice; one made by an older recipe (no
  numpy or scipy in it) is refused, never silently reused.

Sandbox programs run as `python3 -S` (no site-packages), so both recipes link
numpy and scipy (and the wheels' bundled `*.libs` folders) into the standard
library's folder: a program sees the standard library plus numpy and scipy,
nothing else.

Every image carries the label `cambrian.sandbox.recipe=RECIPE_VERSION`. An
image with an older or missing recipe label is stale: `build_image` rebuilds
it, and `DockerSandbox` refuses it with the fix `cambrian sandbox build`.

"auto" asks the engine whether the registry answers (a few seconds at most;
any failure of that probe means "no") and picks "dockerfile" if it does, else
"debootstrap". A current image already present is returned at once unless
`force=True`.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

import docker
import docker.errors
import requests.exceptions

from cambrian.sandbox.base import DEFAULT_IMAGE, SandboxError

SANDBOX_UID = 10001  # uid and gid the sandbox runs as; not 0, not any host user's usual id
BASE_IMAGE = "python:3.11-slim"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
IMAGE_LABEL = "sandbox"
RECIPE_LABEL = "cambrian.sandbox.recipe"
#: What the image holds, as a number: 1 = Python only (no label was written then), 2 = Python + numpy + scipy.
RECIPE_VERSION = 2
#: Debian packages debootstrap installs on top of minbase.
DEBIAN_PACKAGES = ("python3", "python3-numpy", "python3-scipy")
#: Packages a sandbox program can import besides the standard library (checked after every build).
SCIENTIFIC_PACKAGES = ("numpy", "scipy")

BuildMethod = Literal["auto", "dockerfile", "debootstrap"]
Progress = Callable[[str], None]

_PING_TIMEOUT_S = 3.0  # engine_available(): a live local engine answers in milliseconds
_REGISTRY_PROBE_TIMEOUT_S = 8.0  # "auto": how long the engine may take to reach the registry
_BUILD_TIMEOUT_S = 1800.0  # API timeout for build/import calls, which stream for minutes
_DEBOOTSTRAP_TIMEOUT_S = 1800.0
_PIPE_CHUNK = 1 << 20  # bytes per read of the tar stream sent to the engine
_SOURCES_FILES = ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list")
_ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SMOKE_TEST = "import numpy, scipy, scipy.optimize; print(numpy.__version__, scipy.__version__)"
_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
RUN pip install --no-cache-dir --root-user-action=ignore numpy scipy \\
 && site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \\
 && stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])') \\
 && for name in numpy numpy.libs scipy scipy.libs; do \\
      if [ -e "$site/$name" ]; then ln -s "$site/$name" "$stdlib/$name"; fi; \\
    done \\
 && python3 -S -c '{_SMOKE_TEST}'
RUN groupadd -g {SANDBOX_UID} sandbox \\
 && useradd -u {SANDBOX_UID} -g {SANDBOX_UID} -M -d /work -s /usr/sbin/nologin sandbox \\
 && mkdir -p /work && chmod 1777 /work
ENV LANG=C.UTF-8
WORKDIR /work
USER {SANDBOX_UID}:{SANDBOX_UID}
LABEL {IMAGE_LABEL}=1 {RECIPE_LABEL}={RECIPE_VERSION}
"""


@dataclass(frozen=True)
class ImageInfo:
    """What `build_image` produced or found.

    method: "dockerfile" or "debootstrap" when built now, "existing" when reused.
    size_bytes: the image's size as the engine reports it, bytes.
    duration_s: wall clock of this call, seconds.
    replaced: why an image that was there was rebuilt ("" when none was, or it was reused).
    """

    tag: str
    image_id: str
    size_bytes: int
    method: str
    built: bool
    duration_s: float
    replaced: str = ""


@dataclass(frozen=True)
class ImageStatus:
    """Whether the engine holds `tag`, and which recipe built it.

    recipe: the image's recipe label as a number; None when the image or the label is missing.
    """

    tag: str
    present: bool
    recipe: int | None = None

    @property
    def current(self) -> bool:
        """True when the image is there and made by this recipe (or a newer one)."""
        return self.present and self.recipe is not None and self.recipe >= RECIPE_VERSION

    @property
    def stale(self) -> bool:
        """True when the image is there but made by an older recipe (or carries no recipe label)."""
        return self.present and not self.current

    def stale_reason(self) -> str:
        """One phrase saying why the image is stale ("" when it is not)."""
        if not self.stale:
            return ""
        made_by = f"recipe {self.recipe}" if self.recipe is not None else f"no {RECIPE_LABEL} label"
        return f"it has {made_by}, but this Cambrian needs recipe {RECIPE_VERSION}: Python with numpy and scipy"


def engine_url() -> str:
    """The Docker engine address the SDK will use (DOCKER_HOST or the default socket)."""
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def engine_unreachable(cause: object) -> SandboxError:
    """The error every part of the Docker backend raises when the engine does not answer."""
    return SandboxError(
        f"cannot reach the Docker engine at {engine_url()}: {cause}",
        fix="start it (`dockerd &` as root, or `sudo systemctl start docker`), or use --sandbox local",
    )


def connect_engine(*, timeout_s: float = 60.0) -> docker.DockerClient:
    """A client of the engine that has answered a ping; SandboxError if none answers.

    timeout_s: the client's per-API-call timeout, seconds (the ping uses at most 3 s).
    """
    try:
        client = docker.from_env(timeout=int(max(1, timeout_s)))
    except docker.errors.DockerException as exc:
        raise engine_unreachable(exc) from exc
    try:
        client.api.timeout = _PING_TIMEOUT_S
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        client.close()
        raise engine_unreachable(exc) from exc
    finally:
        client.api.timeout = int(max(1, timeout_s))
    return client


def engine_available() -> bool:
    """True when a Docker engine answers a ping within ~3 s."""
    try:
        connect_engine(timeout_s=_PING_TIMEOUT_S).close()
    except SandboxError:
        return False
    return True


def image_exists(tag: str = DEFAULT_IMAGE, *, client: docker.DockerClient | None = None) -> bool:
    """True when the engine holds an image named `tag` (False also when no engine answers)."""
    try:
        own = client or connect_engine(timeout_s=10)
    except SandboxError:
        return False
    try:
        own.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False
    finally:
        if client is None:
            own.close()


def recipe_of(labels: dict[str, str] | None) -> int | None:
    """The recipe number in an image's labels; None when the label is missing or not a number."""
    try:
        return int((labels or {})[RECIPE_LABEL])
    except (KeyError, TypeError, ValueError):
        return None


def image_status(tag: str = DEFAULT_IMAGE, *, client: docker.DockerClient | None = None) -> ImageStatus:
    """Whether `tag` is in the engine and which recipe made it (not present also when no engine answers)."""
    try:
        own = client or connect_engine(timeout_s=10)
    except SandboxError:
        return ImageStatus(tag, present=False)
    try:
        image = own.images.get(tag)
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return ImageStatus(tag, present=False)
    finally:
        if client is None:
            own.close()
    return ImageStatus(tag, present=True, recipe=recipe_of(image.labels))


def image_stale(status: ImageStatus) -> SandboxError:
    """The error raised when the sandbox image was made by an older recipe."""
    return SandboxError(
        f"the sandbox image {status.tag!r} is stale: {status.stale_reason()}",
        fix=f"rebuild it with `cambrian sandbox build{'' if status.tag == DEFAULT_IMAGE else f' --tag {status.tag}'}`",
    )


def image_missing(tag: str) -> SandboxError:
    """The error raised when the sandbox image is not in the engine."""
    return SandboxError(
        f"the sandbox image {tag!r} is not in the Docker engine",
        fix="build it once with `cambrian sandbox build` (offline: `cambrian sandbox build --method debootstrap`)",
    )


def build_image(
    *,
    tag: str = DEFAULT_IMAGE,
    method: BuildMethod = "auto",
    rootfs_dir: str | os.PathLike[str] | None = None,
    mirror: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
    client: docker.DockerClient | None = None,
) -> ImageInfo:
    """Build (or find) the sandbox image `tag`; SandboxError with a fix when it cannot.

    rootfs_dir: for "debootstrap": a root fs to reuse (it must hold python3, numpy and scipy),
        or an empty/new folder to debootstrap into and keep. None: a temp folder, removed after.
    mirror: Debian mirror for debootstrap (default: the host's apt sources, else deb.debian.org).
    force: rebuild even when a current image exists (a stale one is always rebuilt).
    progress: called with one line of text per step.
    client: the engine to use (default: connect to DOCKER_HOST / the local socket); left open.
    """
    say = progress or (lambda _line: None)
    started = time.monotonic()
    if method not in ("auto", "dockerfile", "debootstrap"):
        raise SandboxError(f"unknown image build method {method!r}", fix="use one of: auto, dockerfile, debootstrap")
    engine = client or connect_engine(timeout_s=_BUILD_TIMEOUT_S)
    try:
        status = image_status(tag, client=engine)
        if status.current and not force:
            say(f"image {tag} already present (recipe {status.recipe}); reusing it")
            return _info(engine, tag, method="existing", built=False, started=started)
        replaced = status.stale_reason() if status.stale else ("--force" if status.present else "")
        if status.stale:
            say(f"image {tag} is stale ({replaced}): rebuilding it")
        old_id = _image_id(engine, tag) if status.present else None
        chosen = choose_build_method(engine, method, say)
        if chosen == "dockerfile":
            _build_from_dockerfile(engine, tag, say)
        else:
            _build_from_debootstrap(engine, tag, rootfs_dir=rootfs_dir, mirror=mirror, say=say)
        _smoke_test(engine, tag, say)
        if old_id is not None:
            _remove_replaced(engine, old_id, tag, say)
        return _info(engine, tag, method=chosen, built=True, started=started, replaced=replaced)
    finally:
        if client is None:
            engine.close()


def choose_build_method(client: docker.DockerClient, method: BuildMethod, say: Progress) -> str:
    """ "dockerfile" or "debootstrap": `method` itself, or for "auto" what the registry probe allows."""
    if method != "auto":
        return method
    reachable = registry_answers(client)
    chosen = "dockerfile" if reachable else "debootstrap"
    say(f"registry {'answers' if reachable else 'unreachable'}: building with {chosen}")
    return chosen


def registry_answers(client: docker.DockerClient, *, timeout_s: float = _REGISTRY_PROBE_TIMEOUT_S) -> bool:
    """True when the engine can read the base image's manifest from its registry within `timeout_s` seconds.

    The engine is asked (not this process: the engine may have its own proxy), through the
    client already connected. Any failure of the probe, whatever its type, means False: an
    unreachable or erroring registry only means building offline.
    """
    saved = client.api.timeout
    try:
        client.api.timeout = timeout_s
        client.api.inspect_distribution(BASE_IMAGE)
        return True
    except Exception:  # noqa: BLE001 - the probe must never stop a build: every failure means "no"
        return False
    finally:
        client.api.timeout = saved


def _image_id(client: docker.DockerClient, tag: str) -> str | None:
    try:
        return str(client.images.get(tag).id)
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return None


def _info(
    client: docker.DockerClient, tag: str, *, method: str, built: bool, started: float, replaced: str = ""
) -> ImageInfo:
    image = client.images.get(tag)
    return ImageInfo(
        tag=tag,
        image_id=image.id,
        size_bytes=int(image.attrs.get("Size", 0)),
        method=method,
        built=built,
        duration_s=time.monotonic() - started,
        replaced=replaced,
    )


def _smoke_test(client: docker.DockerClient, tag: str, say: Progress) -> None:
    """Import numpy and scipy in a container of the new image, as sandbox programs do (`python3 -S`)."""
    try:
        output = client.containers.run(
            tag, ["python3", "-S", "-c", _SMOKE_TEST], network_mode="none", remove=True, stderr=True
        )
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        try:
            client.images.remove(tag, force=True)  # a broken image must not pass for a current one
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            pass
        raise SandboxError(
            f"the new image {tag} cannot import {' and '.join(SCIENTIFIC_PACKAGES)} with `python3 -S`, "
            f"so it was removed again: {exc}",
            fix="build again from scratch: `cambrian sandbox build` (with --rootfs, give an empty folder)",
        ) from exc
    versions = output.decode(errors="replace").split()
    say(f"{tag}: numpy and scipy import with `python3 -S` (versions {', '.join(versions[:2])})")


def _remove_replaced(client: docker.DockerClient, old_id: str, tag: str, say: Progress) -> None:
    """Remove the image `tag` named before the rebuild; one still used by a container stays."""
    if _image_id(client, tag) == old_id:
        return
    try:
        client.images.remove(old_id)
        say(f"removed the replaced image {old_id[:19]}")
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        say(f"kept the replaced image {old_id[:19]} ({exc}); `docker image prune` removes it once unused")


def _build_from_dockerfile(client: docker.DockerClient, tag: str, say: Progress) -> None:
    say(f"building {tag} from {BASE_IMAGE}")
    try:
        client.images.build(fileobj=io.BytesIO(_DOCKERFILE.encode()), tag=tag, rm=True, forcerm=True, pull=True)
    except (docker.errors.BuildError, docker.errors.APIError) as exc:
        raise SandboxError(
            f"building {tag} from {BASE_IMAGE} failed: {exc}",
            fix="check that the engine can pull from its registry, or build offline with --method debootstrap",
        ) from exc


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


def _build_from_debootstrap(
    client: docker.DockerClient,
    tag: str,
    *,
    rootfs_dir: str | os.PathLike[str] | None,
    mirror: str | None,
    say: Progress,
) -> None:
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
