"""A third-party operator and selection strategy, registered next to the benchmark in `pyproject.toml`.

    [project.entry-points."cambrian.operators"]
    scale_constant = "cambrian_example_benchmark.search:ScaleConstant"

    [project.entry-points."cambrian.selectors"]
    top_fraction = "cambrian_example_benchmark.search:TopFraction"

then `cambrian run example --set 'search.operators={scale_constant=1}' --strategy top_fraction
--set search.params.fraction=0.3`. Both work with any benchmark whose seed has numbers in its
EVOLVE-BLOCK. An operator subclasses `cambrian.meta_agent.operators.Operator`: a `name` and one method,
`propose(context, env)`; this one calls no FM, one seeded draw (`env.rng()`) per child, and hands
the child to the static check (`env.check`) as every operator does. A strategy is a
`ParentSelector` (see `cambrian.archive.selection`): `probabilities(view)` and `select(view, k, rng)`, pure.
`cambrian.meta_agent.testing` has the contract suites both pass (`OperatorContract`, `SelectorContract`).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

import numpy as np

from cambrian.archive.errors import EmptyView  # what every strategy raises for an empty archive
from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import EditError  # its message is the public reason a child could not be made
from cambrian.meta_agent.operators import Operator, OperatorEnv, PromptContext, Proposal

START, END = "# EVOLVE-BLOCK-START", "# EVOLVE-BLOCK-END"


class ScaleConstant(Operator):
    """Multiply one number inside the entry file's EVOLVE-BLOCK by exp(N(0, 0.5)) (a 0 becomes N(0, 1))."""

    name = "scale_constant"

    async def propose(self, context: PromptContext, env: OperatorEnv) -> Proposal:
        parent = context.parent.genome
        return env.check(self.mutate(parent, env.rng()), parent)

    def mutate(self, parent: Genome, rng: np.random.Generator) -> Genome:
        source = parent.files[parent.entry]
        lines = source.splitlines(keepends=True)
        inside = _block_lines(lines)
        numbers = [
            node
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant)
            and type(node.value) in (int, float)
            and node.lineno in inside
            and node.lineno == node.end_lineno
        ]
        if not numbers:
            raise EditError(f"{parent.entry} has no number inside its EVOLVE-BLOCK to scale")
        node = numbers[int(rng.integers(len(numbers)))]
        value = float(node.value)
        new = value * math.exp(rng.normal(0.0, 0.5)) if value else rng.normal(0.0, 1.0)
        line = lines[node.lineno - 1].encode()  # ast offsets count UTF-8 bytes
        edited = line[: node.col_offset] + repr(round(new, 6)).encode() + line[node.end_col_offset :]
        lines[node.lineno - 1] = edited.decode()
        return Genome(files={**parent.files, parent.entry: "".join(lines)}, entry=parent.entry)


def _block_lines(lines: list[str]) -> set[int]:
    """1-based numbers of the lines between the EVOLVE-BLOCK markers (all lines when there are none)."""
    starts = [i for i, line in enumerate(lines, 1) if line.strip() == START]
    ends = [i for i, line in enumerate(lines, 1) if line.strip() == END]
    if not starts or not ends:
        return set(range(1, len(lines) + 1))
    return set(range(starts[0] + 1, ends[0]))


@dataclass(frozen=True, kw_only=True)
class TopFraction:
    """Uniform over the best `fraction` (0 < fraction <= 1) of the evaluated agents; ties at the cut are in."""

    fraction: float = 0.5
    name: str = field(default="top_fraction", init=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.fraction, (int, float)) and 0.0 < self.fraction <= 1.0):
            raise ValueError(f"fraction must be a number in (0, 1], got {self.fraction!r}")

    def probabilities(self, view) -> np.ndarray:  # view: archive.view.ArchiveView
        if len(view) == 0:
            raise EmptyView("top_fraction: the archive has no evaluated agent to select", fix="evaluate the seed first")
        scores = view.scores
        keep = max(1, math.ceil(self.fraction * len(scores)))
        cut = np.partition(scores, len(scores) - keep)[len(scores) - keep]
        chosen = (scores >= cut).astype(float)
        return chosen / chosen.sum()

    def select(self, view, k: int, rng: np.random.Generator) -> np.ndarray:
        return view.ids[rng.choice(len(view), size=k, p=self.probabilities(view))]
