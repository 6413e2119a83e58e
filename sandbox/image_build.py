"""Building the sandbox image (`image.py` says what it is): once, reused from the engine's cache afterwards.

Two recipes:

- "dockerfile": `FROM python:3.11-slim`, `pip install numpy scipy`, the user;
  built by the engine. Needs a registry (and PyPI) the engine can reach.
- "debootstrap": fully offline, from a Debian root fs streamed into
  `docker import` (`image_debootstrap.py`).

"auto" asks the engine whether the registry answers (a few seconds at most;
any failure of that probe means "no") and picks "dockerfile" if it does, else
"debootstrap". A current image already present is returned at once unless
`force=True`; a stale one (an older recipe) is rebuilt, and the image it
replaced removed. Every new image must import numpy and scipy with
`python3 -S` in a container, or it is removed again.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from typing import Literal

import docker
import docker.errors
import requests.exceptions

from cambrian.sandbox.base import DEFAULT_IMAGE, SandboxError
from cambrian.sandbox.image import (
    IMAGE_LABEL,
    RECIPE_LABEL,
    RECIPE_VERSION,
    SANDBOX_UID,
    SCIENTIFIC_PACKAGES,
    Progress,
    connect_engine,
    image_status,
)
from cambrian.sandbox.image_debootstrap import build_from_debootstrap

BASE_IMAGE = "python:3.11-slim"

BuildMethod = Literal["auto", "dockerfile", "debootstrap"]

_REGISTRY_PROBE_TIMEOUT_S = 8.0  # "auto": how long the engine may take to reach the registry
_BUILD_TIMEOUT_S = 1800.0  # API timeout for build/import calls, which stream for minutes
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
            build_from_debootstrap(engine, tag, rootfs_dir=rootfs_dir, mirror=mirror, say=say)
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
