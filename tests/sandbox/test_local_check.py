"""The local sandbox's hardening self-test (`cambrian sandbox check --sandbox local`), live on this machine.

In namespaces every item holds; without them the test must *see* the attacks of the hostile review (argv,
loopback, /tmp files, Cambrian's environment, shared temp folders): a self-test that passes everywhere would
prove nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys

from cambrian.sandbox.local_check import run_local_check
from tests.conftest import local_sandbox

#: What the review did to the local sandbox without namespaces, each the name of one self-test item.
ATTACKS = {
    "network unreachable",
    "host loopback unreachable",
    "host processes hidden",
    "host files not visible",
    "Cambrian's files not visible",
    "temp folders private",
}


def test_in_namespaces_every_hardening_item_holds() -> None:
    box = local_sandbox(True)
    try:
        report = run_local_check(box)
    finally:
        box.close()
    failed = {item.name: item.detail for item in report.items if not item.passed}
    assert not failed and report.ok, failed
    assert ATTACKS <= {item.name for item in report.items}
    assert report.backend == "local" and report.engine_version.startswith("bubblewrap ")
    assert set(report.packages) == {"numpy", "scipy"}


def test_without_namespaces_the_self_test_sees_each_attack_of_the_review() -> None:
    box = local_sandbox(False)
    try:
        report = run_local_check(box)
    finally:
        box.close()
    failed = {item.name for item in report.items if not item.passed}
    assert ATTACKS <= failed and not report.ok
    # What it still holds without namespaces: a scrubbed env, rlimits, and (as root) an own uid and no survivor.
    holds = {item.name for item in report.items if item.passed}
    assert {"host environment absent", "pids limit holds", "numpy and scipy import"} <= holds
    if os.geteuid() == 0:
        assert {"runs as non-root", "no process survives a run"} <= holds


def test_cli_checks_the_local_sandbox_and_says_which_namespaces() -> None:
    local_sandbox(True).close()  # skipped (or failed, where CI demands them) without namespaces
    done = subprocess.run(
        [sys.executable, "-m", "cambrian", "sandbox", "check", "--sandbox", "local"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "namespaces: bubblewrap" in done.stdout and "host loopback unreachable" in done.stdout
    assert "FAIL" not in done.stdout
