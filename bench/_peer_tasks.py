"""The tasks bench/peer_efficacy.py can put Cambrian, OpenEvolve and ShinkaEvolve side by side on.

- `circle_packing`: OpenEvolve's own example (bench/peers/circle_packing/: its initial program, evaluator and
  config), the common ground of the first comparison. Each system is scored by its own evaluator (Cambrian's
  circle-packing scorer for Cambrian, OpenEvolve's evaluator.py for both peers) and every best is re-scored
  with both.
- a generality-suite task with a one-file seed (`knapsack`, `symbolic_regression`, `tsp`, `fast_primes`,
  `job_order`): the seed is the Cambrian benchmark's seed program, the peers' task description is the
  benchmark's contract (what Cambrian's prompts say of the task), and there is no peer evaluator, so every
  system's programs are scored by the benchmark itself in Cambrian's sandbox (bench/peers/cambrian_score.py,
  called by the peers through bench/peers/suite_scoring.py). The peers run with their own defaults for a new
  task: OpenEvolve's default `Config()` (diffs, five islands) with the contract as its system message, and
  ShinkaEvolve's shipped default with the contract as its task message.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

PEERS = Path(__file__).resolve().parent / "peers"
EXAMPLE = PEERS / "circle_packing"
#: The suite's tasks whose seed is one file (the peers evolve one program file).
SUITE_TASKS = ("knapsack", "symbolic_regression", "tsp", "fast_primes", "job_order")
TASKS = ("circle_packing", *SUITE_TASKS)
#: Cambrian's entry point over OpenEvolve's fixed `run_packing()`; appended below the EVOLVE-BLOCK, never evolved.
ADAPTER = """

# Fixed (not evolved): Cambrian's entry point, scoring what run_packing() returns.
def pack_circles(n):
    centers, radii, _ = run_packing()
    return [(float(x), float(y), float(r)) for (x, y), r in zip(centers, radii)]
"""


class PeerTask(Protocol):
    """What bench/peer_efficacy.py needs of a task: the seed, Cambrian's benchmark and genome, and each peer's
    evaluator and settings."""

    name: str
    #: The evaluators every best program is re-scored with ("openevolve": OpenEvolve's evaluator.py).
    evaluators: tuple[str, ...]

    @property
    def entry(self) -> str: ...

    def seed_program(self) -> str: ...

    def genome(self, code: str) -> Any: ...

    def benchmark(self, options: Mapping[str, Any] | None = None, feedback_policy: Any = None) -> Any: ...

    def openevolve_args(self, folder: Path) -> list[str]: ...

    def shinka_args(self, folder: Path) -> list[str]: ...

    def peer_env(self, seed: int) -> dict[str, str]: ...


class CirclePackingTask:
    """OpenEvolve's circle-packing example: its initial program, evaluator and config (n = 26)."""

    name = "circle_packing"
    evaluators = ("openevolve", "cambrian")
    entry = "packing.py"  # Cambrian's entry file for the genome

    def seed_program(self) -> str:
        return circle_packing_seed()

    def genome(self, code: str) -> Any:
        """A program in OpenEvolve's form as Cambrian's genome: the adapter appended unless it is there already."""
        from cambrian.evaluators.base import Genome

        return Genome(files={self.entry: code if "def pack_circles(" in code else code + ADAPTER}, entry=self.entry)

    def benchmark(self, options: Mapping[str, Any] | None = None, feedback_policy: Any = None) -> Any:
        """Cambrian's circle packing (n = 26), started from OpenEvolve's initial program with the adapter."""
        from cambrian.evaluators.circle_packing import CirclePacking

        task = self

        class OpenEvolveSeedPacking(CirclePacking):
            def seed(self) -> Any:
                return task.genome(task.seed_program())

            def _contract(self) -> str:
                return super()._contract() + (
                    "\nIn this program `pack_circles(n)` is fixed, outside the EVOLVE-BLOCK: it calls "
                    "`run_packing()`, which calls `construct_packing()`. Improve `construct_packing()` and its "
                    "helpers inside the block; it must return (centers, radii, sum_of_radii): numpy arrays of "
                    "shape (26, 2) and (26,), and their sum."
                )

        return OpenEvolveSeedPacking.from_options(options or {}, feedback_policy=feedback_policy)

    def openevolve_args(self, folder: Path) -> list[str]:
        """The example's evaluator and config_phase_1.yaml (the score: sum_radii)."""
        return ["--evaluator", str(EXAMPLE / "evaluator.py"), "--config", str(EXAMPLE / "config_phase_1.yaml")]

    def shinka_args(self, folder: Path) -> list[str]:
        return []  # the driver's defaults: Shinka's circle-packing task message, OpenEvolve's evaluator

    def peer_env(self, seed: int) -> dict[str, str]:
        return {}


@dataclass(frozen=True)
class SuiteTask:
    """A generality-suite benchmark as a peer task: its seed's entry file is the program every system evolves."""

    name: str
    evaluators = ("cambrian",)

    @functools.cached_property
    def _benchmark(self) -> Any:
        """The task's benchmark with default options, kept for its seed and contract."""
        return self.benchmark()

    def benchmark(self, options: Mapping[str, Any] | None = None, feedback_policy: Any = None) -> Any:
        """A fresh Cambrian benchmark of this task."""
        from cambrian.evaluators.registry import get_benchmark

        return get_benchmark(self.name, options, feedback_policy=feedback_policy)

    @property
    def entry(self) -> str:
        return str(self._benchmark.seed().entry)

    def seed_program(self) -> str:
        """The benchmark's seed program, as Cambrian's own search starts from it."""
        seed = self._benchmark.seed()
        return str(seed.files[seed.entry])

    def genome(self, code: str) -> Any:
        """A program file as Cambrian's genome of this task."""
        from cambrian.evaluators.base import Genome

        return Genome(files={self.entry: code}, entry=self.entry)

    def task_message(self) -> str:
        """What the peers are told of the task: the words Cambrian's prompts use (the benchmark's contract)."""
        return (
            f'You improve a Python program for the task "{self.name}". Your goal is a higher score.\n\n'
            f"{self._benchmark.contract.strip()}\n"
            f"The program is the file {self.entry}; keep its entry function's name and signature."
        )

    def openevolve_args(self, folder: Path) -> list[str]:
        """OpenEvolve's defaults but the system message (the task's) and cascade evaluation (one stage here),
        scored by the Cambrian benchmark (bench/peers/openevolve_suite_evaluator.py)."""
        config = folder / "openevolve_config.yaml"
        settings = {
            "llm": {},
            "prompt": {"system_message": self.task_message()},
            "evaluator": {"cascade_evaluation": False},
        }
        config.write_text(json.dumps(settings, indent=1))  # JSON is YAML: the driver reads it with yaml
        evaluator = PEERS / "openevolve_suite_evaluator.py"
        return ["--evaluator", str(evaluator), "--config", str(config), "--score-key", "combined_score"]

    def shinka_args(self, folder: Path) -> list[str]:
        """Shinka's defaults but the task message, scored by the Cambrian benchmark."""
        message = folder / "task_message.txt"
        message.write_text(self.task_message())
        return ["--evaluate", str(PEERS / "shinka_suite_evaluate.py"), "--task-message", str(message)]

    def peer_env(self, seed: int) -> dict[str, str]:
        """What bench/peers/suite_scoring.py reads in the peers' evaluators: Cambrian's interpreter, the task,
        the run seed."""
        return {
            "CAMBRIAN_PEERS_PYTHON": sys.executable,
            "CAMBRIAN_PEERS_TASK": self.name,
            "CAMBRIAN_PEERS_SEED": str(seed),
        }


def circle_packing_seed() -> str:
    """OpenEvolve's initial program exactly as it ships: the copy without its provenance header."""
    lines = (EXAMPLE / "initial_program.py").read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("# EVOLVE-BLOCK-START"))
    return "".join(lines[start:])


def peer_task(name: str) -> PeerTask:
    """The task called `name` (one of TASKS); ValueError naming the choices for any other."""
    if name == "circle_packing":
        return CirclePackingTask()
    if name not in SUITE_TASKS:
        raise ValueError(f"no peer task {name!r}; the tasks are {', '.join(TASKS)}")
    return SuiteTask(name)
