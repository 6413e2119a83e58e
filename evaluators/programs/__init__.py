"""Small program-search benchmarks of different shapes: the generality suite's own tasks (bench/generality.py).

Each is one module on `ProgramBenchmark` (`_base.py`) with its seed, a known stronger reference and, where
the agent's function is driven by the benchmark's own code, a probe, under `files/<name>/`:

- `knapsack`: a one-`return` priority function for a greedy packer (FunSearch style);
"""

from evaluators.programs._base import ProgramBenchmark, ProgramOptions
from evaluators.programs.knapsack import Knapsack

#: The suite's program benchmarks, by name.
PROGRAM_BENCHMARKS: tuple[type[ProgramBenchmark], ...] = (Knapsack,)

__all__ = ["PROGRAM_BENCHMARKS", "Knapsack", "ProgramBenchmark", "ProgramOptions"]
