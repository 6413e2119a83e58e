"""The FM client a run's settings make (`search._run_models`): how long one call may take."""

from __future__ import annotations

from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.llm import Endpoint, MemoryLedger
from cambrian.meta_agent.search._run_models import HOSTED_TIMEOUT_S, LOCAL_TIMEOUT_S, fm_timeout, make_llm_client


def test_a_server_on_this_machine_gets_the_long_default_timeout_a_hosted_api_the_short_one() -> None:
    # A suite run's rewrite (1,024 tokens from a CPU model, the machine busy) timed out at 300 s four times in a
    # row, each retry waiting behind the call it had given up, and the run ended failed.
    config = RunConfig(benchmark="deceptive")
    assert fm_timeout(config, "http://127.0.0.1:52151/v1") == LOCAL_TIMEOUT_S == 1800
    assert fm_timeout(config, "http://localhost:8080/v1") == LOCAL_TIMEOUT_S
    assert fm_timeout(config, "http://[::1]:8080/v1") == LOCAL_TIMEOUT_S
    assert fm_timeout(config, None) == HOSTED_TIMEOUT_S == 300  # a provider's API
    assert fm_timeout(config, "https://gpu-box.example:8000/v1") == HOSTED_TIMEOUT_S
    chosen = RunConfig(benchmark="deceptive", fm={"timeout_s": 42})
    assert fm_timeout(chosen, "http://127.0.0.1:1/v1") == fm_timeout(chosen, None) == 42
    local = Endpoint(model="openai/m", api_base="http://127.0.0.1:9/v1", label="m")
    assert make_llm_client(local, config, ledger=MemoryLedger()).timeout_s == LOCAL_TIMEOUT_S
