"""The sandbox image: build it once, reuse it from the engine's cache afterwards.

Two ways to get `cambrian-sandbox:bookworm` (Python 3.11, a non-root sandbox
user with uid/gid 10001):

- "dockerfile": `FROM python:3.11-slim` plus the user, built by the engine.
  Needs a registry the engine can pull from.
- "debootstrap": fully offline. `debootstrap --variant=minbase
  --include=python3 bookworm DIR MIRROR` makes a Debian root fs (about 85 s,
  260 MB; needs root and the `debootstrap` program), which is streamed as a tar
  into `docker import`, with the sandbox user added to /etc/passwd on the way.
  An existing root fs (`rootfs_dir=`) is reused as is, so CI and tests need
  not debootstrap twice.

"auto" asks the engine whether the registry answers (a few seconds at most)
and picks "dockerfile" if it does, else "debootstrap". An image already
present is returned at once unless `force=True`.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal

import docker
import docker.errors
import requests.exceptions

from sandbox.base import SandboxError

DEFAULT_IMAGE = "cambrian-sandbox:bookworm"
SANDBOX_UID = 10001  # uid and gid the sandbox runs as; not 0, not any host user's usual id
BASE_IMAGE = "python:3.11-slim"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
IMAGE_LABEL = "cambrian.sandbox"

BuildMethod = Literal["auto", "dockerfile", "debootstrap"]
Progress = Callable[[str], None]

_PING_TIMEOUT_S = 3.0  # engine_available(): a live local engine answers in milliseconds
_REGISTRY_PROBE_TIMEOUT_S = 8.0  # "auto": how long the engine may take to reach the registry
_BUILD_TIMEOUT_S = 1800.0  # API timeout for build/import calls, which stream for minutes
_DEBOOTSTRAP_TIMEOUT_S = 1800.0
_PIPE_CHUNK = 1 << 20  # bytes per read of the tar stream sent to the engine
_SOURCES_FILES = ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list")
_ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
RUN groupadd -g {SANDBOX_UID} sandbox \\
 && useradd -u {SANDBOX_UID} -g {SANDBOX_UID} -M -d /work -s /usr/sbin/nologin sandbox \\
 && mkdir -p /work && chmod 1777 /work
ENV LANG=C.UTF-8
WORKDIR /work
USER {SANDBOX_UID}:{SANDBOX_UID}
LABEL {IMAGE_LABEL}=1
"""


@dataclass(frozen=True)
class ImageInfo:
    """What `build_image` produced or found.

    method: "dockerfile" or "debootstrap" when built now, "existing" when reused.
    size_bytes: the image's size as the engine reports it.
    duration_s: wall clock of this call, seconds.
    """

    tag: str
    image_id: str
    size_bytes: int
    method: str
    built: bool
    duration_s: float


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
) -> ImageInfo:
    """Build (or find) the sandbox image `tag`; SandboxError with a fix when it cannot.

    rootfs_dir: for "debootstrap": a root fs to reuse (it must hold usr/bin/python3),
        or an empty/new folder to debootstrap into and keep. None: a temp folder, removed after.
    mirror: Debian mirror for debootstrap (default: the host's apt sources, else deb.debian.org).
    force: rebuild even when the image exists.
    progress: called with one line of text per step.
    """
    say = progress or (lambda _line: None)
    started = time.monotonic()
    if method not in ("auto", "dockerfile", "debootstrap"):
        raise SandboxError(
            f"unknown image build method {method!r}", fix="use one of: auto, dockerfile, debootstrap"
        )
    client = connect_engine(timeout_s=_BUILD_TIMEOUT_S)
    try:
        if not force and image_exists(tag, client=client):
            say(f"image {tag} already present; reusing it")
            return _info(client, tag, method="existing", built=False, started=started)
        chosen = method
        if method == "auto":
            reachable = _registry_answers(client)
            chosen = "dockerfile" if reachable else "debootstrap"
            say(f"registry {'answers' if reachable else 'unreachable'}: building with {chosen}")
        if chosen == "dockerfile":
            _build_from_dockerfile(client, tag, say)
        else:
            _build_from_debootstrap(client, tag, rootfs_dir=rootfs_dir, mirror=mirror, say=say)
        return _info(client, tag, method=chosen, built=True, started=started)
    finally:
        client.close()


def _info(client: docker.DockerClient, tag: str, *, method: str, built: bool, started: float) -> ImageInfo:
    image = client.images.get(tag)
    return ImageInfo(
        tag=tag,
        image_id=image.id,
        size_bytes=int(image.attrs.get("Size", 0)),
        method=method,
        built=built,
        duration_s=time.monotonic() - started,
    )


def _registry_answers(client: docker.DockerClient) -> bool:
    """Ask the engine (not this process: the engine may have its own proxy) for the base image's manifest."""
    probe = docker.APIClient(base_url=client.api.base_url, timeout=int(_REGISTRY_PROBE_TIMEOUT_S))
    try:
        probe.inspect_distribution(BASE_IMAGE)
        return True
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False
    finally:
        probe.close()


def _build_from_dockerfile(client: docker.DockerClient, tag: str, say: Progress) -> None:
    say(f"building {tag} from {BASE_IMAGE}")
    try:
        client.images.build(
            fileobj=io.BytesIO(_DOCKERFILE.encode()), tag=tag, rm=True, forcerm=True, pull=True
        )
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


def _rootfs_ready(path: Path) -> bool:
    return (path / "usr" / "bin" / "python3").exists() and (path / "etc" / "passwd").is_file()


def _build_from_debootstrap(
    client: docker.DockerClient,
    tag: str,
    *,
    rootfs_dir: str | os.PathLike[str] | None,
    mirror: str | None,
    say: Progress,
) -> None:
    keep = rootfs_dir is not None
    rootfs = Path(rootfs_dir) if keep else Path(tempfile.mkdtemp(prefix="cambrian-rootfs-"))
    try:
        if _rootfs_ready(rootfs):
            say(f"reusing the root fs at {rootfs}")
        else:
            if rootfs.exists() and any(rootfs.iterdir()):
                raise SandboxError(
                    f"{rootfs} is neither empty nor a debootstrap root fs with python3",
                    fix="pass an empty or new folder as --rootfs, or one made by an earlier build",
                )
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
    rootfs.mkdir(parents=True, exist_ok=True)
    say(f"debootstrap {SUITE} into {rootfs} from {mirror} (about 1.5 min)")
    argv = [program, "--variant=minbase", "--include=python3", SUITE, str(rootfs), mirror]
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
            fix=f"check that the mirror {mirror} is reachable; remove the half-made {rootfs} and retry",
        )


def _import_rootfs(client: docker.DockerClient, rootfs: Path, tag: str) -> None:
    """Stream a tar of `rootfs` (plus the sandbox user and /work) into `docker import`."""
    repository, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    read_fd, write_fd = os.pipe()
    failure: list[BaseException] = []

    def write_tar() -> None:
        try:
            with os.fdopen(write_fd, "wb") as sink, tarfile.open(fileobj=sink, mode="w|") as tar:
                _write_rootfs_tar(tar, rootfs)
        except BaseException as exc:  # handed to the importing thread, which raises it
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
                    f"LABEL {IMAGE_LABEL}=1",
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
    """Everything under `rootfs`, with passwd/group gaining the sandbox user and an empty /work."""
    replaced = {"./etc/passwd": "sandbox:x:{uid}:{uid}:cambrian sandbox:/work:/usr/sbin/nologin\n",
                "./etc/group": "sandbox:x:{uid}:\n"}

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
