"""The distribution as users get it: one import name, `cambrian`, over the repository's folders.

The wheel is built from this checkout (offline, `--no-build-isolation`) and read as a zip: every file it
installs lies under `cambrian/` (or its dist-info), and it carries the non-Python files the code reads at run
time (prompts, seeds, harness files, migrations, UI templates). Then the wheel is installed into a fresh
virtual environment that sees this one's packages, and imported from a folder outside the checkout.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Files read at run time, not imported: each must reach the wheel.
DATA = (
    "cambrian/meta_agent/operators/prompts/lines.txt",
    "cambrian/evaluators/circle_packing/seed/rings.py",
    "cambrian/evaluators/harness/run_program.py",
    "cambrian/archive/migrations/script.py.mako",
    "cambrian/ui/templates/base.html",
    "cambrian/py.typed",
    "cambrian/sandbox/container_runner.py",
    "cambrian/sandbox/guest.py",  # sent into each container with the runner
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(ROOT)]
    # Offline first (the [test] extra brings a setuptools with bdist_wheel); else pip's isolated build.
    done = subprocess.run([*build, "--no-build-isolation"], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        done = subprocess.run(build, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = out.glob("cambrian-*.whl")
    return built


def test_the_wheels_only_top_level_import_name_is_cambrian(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"cambrian"}, tops
    assert not [name for name in DATA if name not in names]
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "cambrian = cambrian.meta_agent.cli:main" in entry_points


def test_the_installed_wheel_imports_as_cambrian_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # This environment's packages (the dependencies) are visible through a .pth file; the wheel is unpacked
    # into the new one's own site-packages, which comes first.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    zipfile.ZipFile(wheel).extractall(site)
    ours = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "dependencies.pth").write_text(ours + "\n")
    probe = (
        "import cambrian, cambrian.meta_agent.cli, cambrian.archive.store, cambrian.evaluators.circle_packing as c;"
        "print(cambrian.__file__); print(c.CirclePacking().seed().entry)\n"
        "import importlib.util\n"
        "print([n for n in ('archive', 'meta_agent', 'sandbox', 'evaluators', 'ui', 'cambrian_errors')"
        " if importlib.util.find_spec(n) is not None])"
    )
    done = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    where, entry, old_names = done.stdout.strip().splitlines()
    assert where.startswith(site) and entry == "packing.py"
    assert old_names == "[]"  # no generic top-level name is installed


def test_a_missing_extra_is_a_clear_error_naming_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray and psycopg are extras (`cambrian[ray]`, `cambrian[postgres]`): without them, the run that needs one
    says which, before it starts."""
    import importlib.util

    from cambrian.archive.store import Archive
    from cambrian.errors import CambrianError
    from cambrian.meta_agent.config import RunConfig
    from cambrian.meta_agent.search._executor import make_executor

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed: importing it fails
    with pytest.raises(CambrianError) as no_driver:
        Archive("postgresql+psycopg://someone@127.0.0.1:1/cambrian")
    assert "psycopg" in str(no_driver.value) and no_driver.value.fix == "pip install 'cambrian[postgres]'"

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real_find_spec(name, *a)
    )
    config = RunConfig.model_validate({"evaluation": {"executor": "ray"}})
    with pytest.raises(CambrianError) as no_ray:
        make_executor(config, None, warn=lambda message: None)
    assert "Ray" in str(no_ray.value) and "pip install 'cambrian[ray]'" in no_ray.value.fix
