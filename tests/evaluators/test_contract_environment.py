"""Every built-in benchmark's contract and seed tell the truth about the sandbox: numpy and scipy are installed."""

from __future__ import annotations

import pytest

from cambrian.evaluators.registry import get_benchmark

BUILT_IN = ("circle_packing", "humaneval", "arc", "arc-program", "deceptive")


@pytest.mark.parametrize("name", BUILT_IN)
def test_contract_says_numpy_and_scipy_are_installed(name: str) -> None:
    bench = get_benchmark(name)
    contract = " ".join(bench.contract.split())  # one line: contracts wrap their text
    assert "standard library plus numpy and scipy (both installed)" in contract
    assert "no network" in contract
    for stale in ("only the standard library", "standard library only", "may be missing"):
        assert stale not in contract.lower(), stale


@pytest.mark.parametrize("name", BUILT_IN)
def test_seed_does_not_claim_the_standard_library_alone(name: str) -> None:
    for path, text in get_benchmark(name).seed().files.items():
        lowered = " ".join(text.lower().split())
        for stale in ("only the standard library is guaranteed", "standard library only."):
            assert stale not in lowered, (path, stale)
