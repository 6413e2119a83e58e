"""Small program-search benchmarks of different shapes: the generality suite's own tasks (bench/generality.py).

Each is one module on `ProgramBenchmark` (`_base.py`) with its seed, a known stronger reference and, where
the agent's function is driven by the benchmark's own code, a probe, under `files/<name>/`:

- `knapsack`: a one-`return` priority function for a greedy packer (FunSearch style);
- `symbolic_regression`: a formula of two variables fitted to data;
- `tsp`: a construction heuristic for the travelling salesman problem;
- `fast_primes`: a function to make faster, scored by measured speed and checked for correctness;
- `load_balancing`: a seed that is a class (online assignment of jobs to machines);
- `graph_colouring`: a two-file genome (the greedy colouring and the vertex order it follows);
- `job_order`: a seed with no numeric constants (single-machine weighted completion time);
- `strip_packing`: a 300-line seed (rectangles in a strip, shelves and a bottom-left search).
"""

from cambrian.evaluators.programs._base import ProgramBenchmark, ProgramOptions
from cambrian.evaluators.programs.fast_primes import FastPrimes
from cambrian.evaluators.programs.graph_colouring import GraphColouring
from cambrian.evaluators.programs.job_order import JobOrder
from cambrian.evaluators.programs.knapsack import Knapsack
from cambrian.evaluators.programs.load_balancing import LoadBalancing
from cambrian.evaluators.programs.strip_packing import StripPacking
from cambrian.evaluators.programs.symbolic_regression import SymbolicRegression
from cambrian.evaluators.programs.tsp import Tsp

#: The suite's program benchmarks.
PROGRAM_BENCHMARKS: tuple[type[ProgramBenchmark], ...] = (
    Knapsack,
    SymbolicRegression,
    Tsp,
    FastPrimes,
    LoadBalancing,
    GraphColouring,
    JobOrder,
    StripPacking,
)

__all__ = [
    "PROGRAM_BENCHMARKS",
    "FastPrimes",
    "GraphColouring",
    "JobOrder",
    "Knapsack",
    "LoadBalancing",
    "ProgramBenchmark",
    "ProgramOptions",
    "StripPacking",
    "SymbolicRegression",
    "Tsp",
]
