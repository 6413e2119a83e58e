"""A Ray node killed mid-run leaves its pool folder behind; the next pool started on the host removes it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cambrian.meta_agent.search._ray_node import NODE_DIR_PREFIX, remove_dead_node_dirs


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.skipif(os.getuid() != 0, reason="gives a folder to another user (chown needs root; CI runs as root)")
def test_only_the_folders_of_dead_pools_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f"{NODE_DIR_PREFIX}{dead_pid()}-abc123"
    (dead / "fm").mkdir(parents=True)
    (dead / "fm" / "socket-name").write_text("left behind")
    live = tmp_path / f"{NODE_DIR_PREFIX}{os.getpid()}-def456"
    live.mkdir()
    unnamed = tmp_path / f"{NODE_DIR_PREFIX}xyz789"  # an older Cambrian's name: no pid, never guessed at
    unnamed.mkdir()
    target = tmp_path / "not-a-pool"
    target.mkdir()
    link = tmp_path / f"{NODE_DIR_PREFIX}{dead_pid()}-link00"
    link.symlink_to(target)
    others = tmp_path / f"{NODE_DIR_PREFIX}{dead_pid()}-other0"
    others.mkdir()
    os.chown(others, 65534, 65534)  # nobody's folder: not ours to remove (the tests run as root in CI)

    removed = remove_dead_node_dirs(str(tmp_path))

    assert removed == [dead] and not dead.exists()
    assert live.is_dir() and unnamed.is_dir() and link.is_symlink() and target.is_dir() and others.is_dir()
