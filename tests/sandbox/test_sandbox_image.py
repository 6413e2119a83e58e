"""How the sandbox image is built: the registry probe and the build decision, recipe labels and
stale images, the debootstrap recipe's package trimming, and fresh builds that really run numpy
and scipy.

The real Docker engine wherever it can show the behaviour. A scripted fake client only where this
machine cannot (a registry that answers, a probe that raises); those tests say `with_fake_engine`.

Fresh builds reuse the debootstrap root fs named by CAMBRIAN_SANDBOX_ROOTFS (`.ci/run` keeps one
under ~/.cache/cambrian/sandbox-rootfs/) so that they take seconds, not minutes. Without a ready root
fs there and without a registry, a fresh build would debootstrap for about three minutes: those
tests then skip, except under CAMBRIAN_REQUIRE_DOCKER=1, where they debootstrap (into that folder,
kept for next time, or into a temp folder).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import docker
import docker.errors
import pytest
import requests.exceptions

from cambrian.sandbox.base import RunSpec, SandboxError
from cambrian.sandbox.image import (
    DEFAULT_IMAGE,
    RECIPE_LABEL,
    RECIPE_VERSION,
    ImageStatus,
    connect_engine,
    engine_available,
    image_status,
    recipe_of,
)
from cambrian.sandbox.image_build import BASE_IMAGE, build_image, choose_build_method, registry_answers
from cambrian.sandbox.image_debootstrap import packages_to_purge, rootfs_kind
from tests.conftest import skip_without_docker

ROOTFS_ENV = "CAMBRIAN_SANDBOX_ROOTFS"
REQUIRED = os.environ.get("CAMBRIAN_REQUIRE_DOCKER") == "1"
SCIENTIFIC_PROGRAM = textwrap.dedent(
    """
    import numpy, scipy.optimize
    best = scipy.optimize.minimize(lambda x: float(((x - 0.3) ** 2).sum()), numpy.zeros(3))
    print(round(float(best.x.sum()), 3), numpy.__version__, scipy.__version__)
    """
)


# ----- a scripted engine, for what this machine's engine cannot show ----------------------------


class FakeAPI:
    """The low-level client: answers (or raises on) the registry probe and records its timeout."""

    def __init__(self, probe: BaseException | None) -> None:
        self.timeout: float = 60
        self.probe = probe
        self.probe_timeouts: list[float] = []

    def inspect_distribution(self, image: str) -> dict[str, object]:
        self.probe_timeouts.append(self.timeout)
        if self.probe is not None:
            raise self.probe
        return {"Descriptor": {"mediaType": "application/vnd.oci.image.index.v1+json"}, "image": image}


class FakeImages:
    """Holds built images by tag; `build` records the Dockerfile and its LABEL line."""

    def __init__(self) -> None:
        self.by_tag: dict[str, SimpleNamespace] = {}
        self.dockerfiles: list[str] = []

    def get(self, tag: str) -> SimpleNamespace:
        if tag not in self.by_tag:
            raise docker.errors.ImageNotFound(f"No such image: {tag}")
        return self.by_tag[tag]

    def build(self, *, fileobj: io.BytesIO, tag: str, **_options: object) -> None:
        text = fileobj.read().decode()
        self.dockerfiles.append(text)
        label_line = next(line for line in text.splitlines() if line.startswith("LABEL "))
        labels = dict(pair.split("=", 1) for pair in label_line.split()[1:])
        self.by_tag[tag] = SimpleNamespace(id="sha256:" + "f" * 64, labels=labels, attrs={"Size": 123_000_000})


class FakeEngine:
    """Enough of docker.DockerClient for build_image's "dockerfile" path."""

    def __init__(self, probe: BaseException | None = None) -> None:
        self.api = FakeAPI(probe)
        self.images = FakeImages()
        self.smoke_tests: list[list[str]] = []
        self.containers = SimpleNamespace(run=self._run)
        self.closed = False

    def _run(self, tag: str, command: list[str], **_options: object) -> bytes:
        self.smoke_tests.append(command)
        return b"2.1.0 1.14.0\n"

    def close(self) -> None:
        self.closed = True


def test_registry_answers_means_dockerfile_with_numpy_and_scipy_with_fake_engine() -> None:
    engine = FakeEngine(probe=None)
    lines: list[str] = []
    info = build_image(tag="cambrian-test:fake", client=engine, progress=lines.append)  # type: ignore[arg-type]
    assert info.method == "dockerfile" and info.built and info.replaced == ""
    assert "registry answers: building with dockerfile" in lines
    assert engine.api.probe_timeouts == [8.0] and engine.api.timeout == 60  # short probe, then restored
    (dockerfile,) = engine.images.dockerfiles
    assert dockerfile.startswith(f"FROM {BASE_IMAGE}\n")
    assert "pip install --no-cache-dir --root-user-action=ignore numpy scipy" in dockerfile
    assert "python3 -S -c 'import numpy, scipy, scipy.optimize" in dockerfile  # the build itself checks -S
    assert f"{RECIPE_LABEL}={RECIPE_VERSION}" in dockerfile
    assert engine.smoke_tests and engine.smoke_tests[0][:2] == ["python3", "-S"]
    assert not engine.closed  # a client given to build_image stays the caller's


@pytest.mark.parametrize(
    "failure",
    [
        docker.errors.DockerException("Invalid bind address protocol: http+docker://localhost"),
        docker.errors.APIError("500 Server Error: Get https://registry-1.docker.io/v2/: no such host"),
        requests.exceptions.ReadTimeout("read timed out after 8 s"),
        RuntimeError("a bug in the SDK"),
    ],
    ids=["sdk-client-error", "engine-api-error", "timeout", "any-other-exception"],
)
def test_probe_that_raises_means_debootstrap_without_traceback_with_fake_engine(failure: BaseException) -> None:
    engine = FakeEngine(probe=failure)
    assert registry_answers(engine) is False  # type: ignore[arg-type]
    lines: list[str] = []
    assert choose_build_method(engine, "auto", lines.append) == "debootstrap"  # type: ignore[arg-type]
    assert lines == ["registry unreachable: building with debootstrap"]
    assert engine.api.timeout == 60


def test_explicit_method_does_not_probe_with_fake_engine() -> None:
    engine = FakeEngine(probe=RuntimeError("must not be asked"))
    for method in ("dockerfile", "debootstrap"):
        assert choose_build_method(engine, method, lambda _line: None) == method  # type: ignore[arg-type]
    assert engine.api.probe_timeouts == []


# ----- pure parts ----------------------------------------------------------------------------------


def test_recipe_labels_and_image_status() -> None:
    assert recipe_of({RECIPE_LABEL: str(RECIPE_VERSION)}) == RECIPE_VERSION
    assert recipe_of({}) is None and recipe_of(None) is None and recipe_of({RECIPE_LABEL: "two"}) is None
    assert ImageStatus("t", present=True, recipe=RECIPE_VERSION).current
    assert ImageStatus("t", present=True, recipe=RECIPE_VERSION + 1).current  # made by a newer Cambrian
    old = ImageStatus("t", present=True, recipe=1)
    unlabelled = ImageStatus("t", present=True, recipe=None)
    assert old.stale and unlabelled.stale
    assert "recipe 1" in old.stale_reason() and f"no {RECIPE_LABEL} label" in unlabelled.stale_reason()
    missing = ImageStatus("t", present=False)
    assert not missing.current and not missing.stale and missing.stale_reason() == ""


DPKG_STATUS = """\
Package: base-files
Status: install ok installed
Priority: required
Essential: yes

Package: libc6
Status: install ok installed
Priority: optional

Package: python3
Status: install ok installed
Depends: libc6, libpython3.11-stdlib (>= 3.11)

Package: libpython3.11-stdlib
Status: install ok installed
Depends: libc6

Package: python3-numpy
Status: install ok installed
Depends: python3 (<< 3.12), python3:any, libblas3 | libblas.so.3, liblapack3 | liblapack.so.3

Package: python3-scipy
Status: install ok installed
Depends: python3-numpy (>= 1:1.22.0), python3-pythran,
 libblas3 | libblas.so.3, libgfortran5 (>= 8)

Package: python3-pythran
Status: install ok installed
Depends: g++ | c++-compiler, libopenblas-dev | libblas-dev, python3-numpy, libc6

Package: g++
Status: install ok installed
Depends: libstdc++-dev, libc6

Package: libstdc++-dev
Status: install ok installed
Depends: libc6

Package: libopenblas-dev
Status: install ok installed
Depends: libopenblas0

Package: libopenblas0
Status: install ok installed
Provides: libblas.so.3, liblapack.so.3

Package: libblas3
Status: install ok installed

Package: libgfortran5
Status: install ok installed

Package: old-removed-package
Status: deinstall ok config-files
"""


def test_packages_to_purge_drops_only_what_scipys_build_tools_need() -> None:
    purged = packages_to_purge(DPKG_STATUS, keep=("python3", "python3-numpy", "python3-scipy"))
    # liblapack3 is not installed: numpy's `liblapack3 | liblapack.so.3` is met by libopenblas0's Provides.
    assert purged == {"python3-pythran", "g++", "libstdc++-dev", "libopenblas-dev"}
    assert packages_to_purge(DPKG_STATUS, keep=("python3-pythran",)) >= {"python3-scipy"}


def make_rootfs(path: Path, *, python: bool = True, numpy: bool = True) -> Path:
    (path / "etc").mkdir(parents=True)
    (path / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (path / "usr" / "bin").mkdir(parents=True)
    (path / "usr" / "lib" / "python3.11").mkdir(parents=True)
    (path / "usr" / "lib" / "python3.11" / "os.py").write_text("")
    if python:
        (path / "usr" / "bin" / "python3").write_text("")
    for name in ("numpy", "scipy") if numpy else ():
        package = path / "usr" / "lib" / "python3" / "dist-packages" / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
    return path


def test_rootfs_kind_tells_this_recipe_from_an_older_one(tmp_path: Path) -> None:
    assert rootfs_kind(tmp_path / "new") == "empty"
    (tmp_path / "empty").mkdir()
    assert rootfs_kind(tmp_path / "empty") == "empty"
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("x")
    assert rootfs_kind(tmp_path / "junk") == "other"
    assert rootfs_kind(make_rootfs(tmp_path / "old", numpy=False)) == "old recipe"
    assert rootfs_kind(make_rootfs(tmp_path / "ready")) == "ready"


# ----- the real engine -----------------------------------------------------------------------------


def require_engine() -> None:
    if engine_available():
        return
    reason = "no Docker engine answers: run `.ci/run`, or start dockerd as root"
    if REQUIRED:
        pytest.fail(f"Docker is required here (CAMBRIAN_REQUIRE_DOCKER=1) but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture()
def client() -> Iterator[docker.DockerClient]:
    require_engine()
    engine = connect_engine()
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture()
def test_tag(client: docker.DockerClient) -> Iterator[str]:
    """A fresh image name for one test; whatever image it names at the end is removed."""
    tag = f"cambrian-sandbox-test:{uuid.uuid4().hex[:12]}"
    try:
        yield tag
    finally:
        try:
            client.images.remove(tag, force=True)
        except docker.errors.ImageNotFound:
            pass


@pytest.fixture()
def build_rootfs(client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> str | None:
    """The --rootfs for a fresh "auto" build; None where the registry answers (the Dockerfile needs none)."""
    cached = os.environ.get(ROOTFS_ENV)
    if cached and rootfs_kind(cached) == "ready":
        return cached
    if registry_answers(client):
        return None
    if REQUIRED:
        return cached or str(tmp_path_factory.mktemp("rootfs") / "bookworm")  # debootstrap: ~3 min
    pytest.skip(
        f"a fresh build here would debootstrap for ~3 min: no registry answers and {ROOTFS_ENV} "
        f"({cached or 'unset'}) holds no ready root fs. Skipped: the fresh auto build and the stale-image "
        "rebuild. `.ci/run` sets it; CAMBRIAN_REQUIRE_DOCKER=1 debootstraps instead of skipping."
    )


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from cambrian.meta_agent.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


def test_registry_does_not_answer_here_means_debootstrap(client: docker.DockerClient) -> None:
    if registry_answers(client):
        pytest.skip("this engine reaches a registry; the with_fake_engine tests cover the other branch")
    lines: list[str] = []
    assert choose_build_method(client, "auto", lines.append) == "debootstrap"
    assert lines == ["registry unreachable: building with debootstrap"]


def test_old_recipe_rootfs_is_refused_not_reused(client: docker.DockerClient, test_tag: str, tmp_path: Path) -> None:
    old = make_rootfs(tmp_path / "old-rootfs", numpy=False)
    with pytest.raises(SandboxError, match="older recipe") as caught:
        build_image(tag=test_tag, method="debootstrap", rootfs_dir=old, client=client)
    assert f"rm -rf {old}" in caught.value.fix
    assert not image_status(test_tag, client=client).present


def test_fresh_auto_build_makes_a_working_image(
    client: docker.DockerClient, test_tag: str, build_rootfs: str | None
) -> None:
    """`cambrian sandbox build` from nothing, the probe included: no traceback, and numpy/scipy run inside."""
    from cambrian.sandbox.docker import DockerSandbox

    assert not image_status(test_tag, client=client).present
    done = run_cli("sandbox", "build", "--tag", test_tag, *(["--rootfs", build_rootfs] if build_rootfs else []))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Traceback" not in output
    assert "registry unreachable: building with debootstrap" in output or "registry answers" in output
    assert image_status(test_tag, client=client).current
    with DockerSandbox(image=test_tag, pool_size=0, run_label="pytest-image", client=client) as sandbox:
        result = sandbox.run(RunSpec(files={"main.py": SCIENTIFIC_PROGRAM}, command=("{python}", "main.py")))
        assert result.ok, result
        assert result.stdout.split()[0] == "0.9"
        # pkg_resources is installed in both recipes' site-packages, and hidden from `python3 -S` programs.
        hidden = sandbox.run(RunSpec(files={}, command=("{python}", "-c", "import pkg_resources")))
        assert hidden.exit_code == 1 and "No module named 'pkg_resources'" in hidden.stderr


def make_stale_copy(client: docker.DockerClient, tag: str, *, recipe_label: str) -> str:
    """`tag`: the current default image with its recipe label overwritten (no registry needed). Its id."""
    dockerfile = f"FROM {DEFAULT_IMAGE}\nLABEL {RECIPE_LABEL}={recipe_label}\n"
    image, _logs = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, pull=False, rm=True)
    return str(image.id)


@pytest.mark.parametrize("recipe_label", ["1", '""'], ids=["older-recipe", "no-recipe"])
def test_stale_image_is_refused_by_the_docker_sandbox_and_avoided_by_auto(
    client: docker.DockerClient, test_tag: str, recipe_label: str
) -> None:
    from cambrian.meta_agent.config import RunConfig
    from cambrian.meta_agent.search.session import choose_sandbox
    from cambrian.sandbox.docker import DockerSandbox
    from cambrian.sandbox.local import LocalSandbox

    skip_without_docker()
    make_stale_copy(client, test_tag, recipe_label=recipe_label)
    status = image_status(test_tag, client=client)
    assert status.stale and status.recipe == (1 if recipe_label == "1" else None)
    with pytest.raises(SandboxError, match="stale") as caught:
        DockerSandbox(image=test_tag, pool_size=0)
    assert caught.value.fix == f"rebuild it with `cambrian sandbox build --tag {test_tag}`"

    warnings: list[str] = []
    auto = RunConfig.model_validate({"evaluation": {"sandbox": "auto", "image": test_tag}})
    chosen = choose_sandbox(auto, warnings.append)
    try:
        assert isinstance(chosen, LocalSandbox)
    finally:
        chosen.close()
    (warning,) = warnings
    assert f"the image {test_tag} is stale" in warning and "cambrian sandbox build" in warning

    docker_only = RunConfig.model_validate({"evaluation": {"sandbox": "docker", "image": test_tag}})
    with pytest.raises(SandboxError, match="stale") as caught:
        choose_sandbox(docker_only, warnings.append)
    assert "cambrian sandbox build" in caught.value.fix


def test_stale_image_is_rebuilt_saying_why(
    client: docker.DockerClient, test_tag: str, build_rootfs: str | None
) -> None:
    skip_without_docker()
    stale_id = make_stale_copy(client, test_tag, recipe_label="1")
    lines: list[str] = []
    info = build_image(tag=test_tag, rootfs_dir=build_rootfs, progress=lines.append, client=client)
    assert info.built and "recipe 1" in info.replaced
    assert any(line.startswith(f"image {test_tag} is stale (it has recipe 1") for line in lines), lines
    assert image_status(test_tag, client=client).current
    assert info.image_id != stale_id
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(stale_id)  # the replaced image does not linger
    again = build_image(tag=test_tag, rootfs_dir=build_rootfs, client=client)
    assert again.method == "existing" and not again.built
