"""The sandbox image: what it is, and whether the Docker engine holds a current one.

`cambrian-sandbox:bookworm` is Python 3.11 with numpy and scipy and a non-root
sandbox user with uid/gid 10001. Sandbox programs run as `python3 -S` (no
site-packages), so both recipes (`image_build`) link numpy and scipy into the
standard library's folder: a program sees the standard library plus numpy and
scipy, nothing else.

Every image carries the label `cambrian.sandbox.recipe=RECIPE_VERSION`. An
image with an older or missing recipe label is stale: `image_build.build_image`
rebuilds it, and `DockerSandbox` refuses it with the fix `cambrian sandbox build`.
The container's runner is not in the image: each container gets it as source on
its command line (`docker_container.runner_command`), so changing it needs no
rebuild.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import docker
import docker.errors
import requests.exceptions

from cambrian.sandbox.base import DEFAULT_IMAGE, SandboxError

SANDBOX_UID = 10001  # uid and gid the sandbox runs as; not 0, not any host user's usual id
IMAGE_LABEL = "sandbox"
RECIPE_LABEL = "cambrian.sandbox.recipe"
#: What the image holds, as a number: 1 = Python only (no label was written then), 2 = Python + numpy + scipy.
RECIPE_VERSION = 2
#: Packages a sandbox program can import besides the standard library (checked after every build).
SCIENTIFIC_PACKAGES = ("numpy", "scipy")

Progress = Callable[[str], None]  # a build's report: called with one line of text per step

_PING_TIMEOUT_S = 3.0  # engine_available(): a live local engine answers in milliseconds


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
