"""What Cambrian's tests use, shipped for plugin authors' tests too.

- `ScriptedFM`: a fake FM that answers with scripted replies and records every request (for tests that
  need exact FM outputs; every other test uses a real local model);
- `SandboxContract`: the test suite every sandbox backend passes (subclass it with `make_sandbox`);
- `BenchmarkContract`: the test suite every benchmark passes: its seed is scored, splits and stages agree,
  no run spec carries an answer or a hidden test, holdout never reaches search feedback, unknown options
  are refused (subclass it with `benchmark_name` and `secrets`); `json_forms` helps write `secrets`;
- `OperatorContract` (with its `ContractEnv`): the test suite every operator passes: it declares what it
  is, makes a checked child of the parent, the same child from the same draws, calls the FM and runs its
  parent only as it declares, leaves the parent as it was, says why it cannot edit a program, and is found by
  its name (subclass it with `make_operator`, `reply` for an FM operator, and `parent_returns` for one whose
  parent agent writes its child);
- `SelectorContract`: the test suite every selection strategy passes: probabilities that are a
  distribution, k draws of view ids that follow them, the same draws from the same seed, the view left as it
  was, an empty view refused, found by its name (subclass it with `make_selector`);
- `SleepBenchmark`: tasks that take a fixed time, staged if asked (throughput benchmarks, executor tests).

The contracts import pytest only inside their tests: pytest is needed to run them, not to import this.
"""

from cambrian.meta_agent.testing._contracts import BenchmarkContract, SandboxContract, json_forms
from cambrian.meta_agent.testing._fake_fm import ScriptedFM
from cambrian.meta_agent.testing._operator_contract import ContractEnv, OperatorContract
from cambrian.meta_agent.testing._selector_contract import SelectorContract
from cambrian.meta_agent.testing._sleep_benchmark import ASKS_FM_AGENT, SleepBenchmark

__all__ = [
    "ASKS_FM_AGENT",
    "BenchmarkContract",
    "ContractEnv",
    "OperatorContract",
    "SandboxContract",
    "ScriptedFM",
    "SelectorContract",
    "SleepBenchmark",
    "json_forms",
]
