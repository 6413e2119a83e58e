"""What an operator is: the kinds the loop drives, their protocols and errors.

Operators do no I/O besides reading their prompt templates; the loop does the
calls in between. Each has a `kind` (see OPERATOR_KINDS) that tells the loop how
to drive it:

- "fm" (`rewrite`, `diff`, `crossover`): `messages(ctx)` -> one FM call -> `apply(parent, reply)`.
  `rewrite` wants the whole entry file in a fenced block (only its EVOLVE-BLOCK's code when the
  file has one region); `diff` wants SEARCH/REPLACE blocks (see `edits`); `crossover` shows
  two parents and wants one whole file combining them (`needs_second_parent`). Each says what
  its reply must look like as a grammar (`grammar(ctx)`, for constrained decoding) and in
  words (`format_hint(ctx)`, for the repair message after a reply that could not be used).
- "fm_two_step" (`diagnose`): `plan_messages(ctx)` -> FM -> `parse_plan(reply)`, then
  `messages(ctx with plan)` -> FM -> `apply(parent, reply)`.
- "sandbox" (`self_modify`, the Darwin Goedel Machine's move): the parent agent itself
  writes its child. The loop runs the parent's own entry function in the sandbox on
  `benchmark.self_modify_task(operator.task_prompt(ctx))` and passes what it returned
  to `apply(parent, returned)`. Only benchmarks with `self_modify_task` support it.
- "local" (`ast_mutate`, `AstMutation`): `mutate(parent, rng)`, no FM.

`apply` raises `EditError` with a public reason when the reply cannot become a
child genome; the loop stores that reason on the invalid agent and shows it to
the next prompt of the same parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from cambrian_errors import CambrianError
from evaluators.base import Genome
from meta_agent.operators._prompting import PromptContext

#: Operator name -> how the loop drives it: "fm", "fm_two_step", "sandbox" or "local".
OPERATOR_KINDS: Mapping[str, str] = MappingProxyType(
    {
        "rewrite": "fm",
        "diff": "fm",
        "lines": "fm",
        "crossover": "fm",
        "diagnose": "fm_two_step",
        "self_modify": "sandbox",
        "ast_mutate": "local",
    }
)

#: Names of the operators `make_operator` builds.
OPERATORS: tuple[str, ...] = tuple(OPERATOR_KINDS)


class UnknownOperatorError(CambrianError, ValueError):
    """An operator name that does not exist (or a plugin that is broken). `fix` lists the valid names."""


class OperatorWeightsError(CambrianError, ValueError):
    """Operator weights that cannot be sampled from (negative, not finite, all zero)."""


@runtime_checkable
class Operator(Protocol):
    """Turns a parent into FM messages, and the FM's reply into a child genome."""

    name: str
    kind: ClassVar[str]  # "fm" or "fm_two_step"

    def messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """OpenAI chat messages (role, content) asking the FM for a variant of `ctx.parent`."""
        ...

    def apply(self, parent: Genome, reply: str) -> Genome:
        """The child genome the reply describes; raises EditError with a public reason."""
        ...

    def grammar(self, ctx: PromptContext) -> str | None:
        """GBNF the reply must follow under constrained decoding (`_grammars.py`), or None."""
        ...

    def format_hint(self, ctx: PromptContext) -> str:
        """A few words on the reply format, for the repair message after a reply that could not be used."""
        ...


@runtime_checkable
class TwoStepOperator(Operator, Protocol):
    """An FM operator that first asks for a plan, then for the edit implementing it."""

    def plan_messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """Messages asking the FM for a plan (no code)."""
        ...

    def parse_plan(self, reply: str) -> str:
        """The plan in the FM's reply; EditError when there is none."""
        ...


@runtime_checkable
class SandboxOperator(Protocol):
    """The parent agent writes its child: its entry function runs in the sandbox on a task prompt."""

    name: str
    kind: ClassVar[str]  # "sandbox"

    def task_prompt(self, ctx: PromptContext) -> str:
        """The prompt the parent agent is given as its task."""
        ...

    def apply(self, parent: Genome, returned: object) -> Genome:
        """The child genome the agent's return value describes; raises EditError with a public reason."""
        ...


@runtime_checkable
class LocalOperator(Protocol):
    """A mutation without FM or sandbox, drawn from a seeded rng."""

    name: str
    kind: ClassVar[str]  # "local"

    def mutate(self, parent: Genome, rng: np.random.Generator) -> Genome:
        """A child of `parent`."""
        ...


AnyOperator = Operator | SandboxOperator | LocalOperator


def supports_self_modify(benchmark: object) -> bool:
    """Whether a benchmark can run `self_modify`: it builds the agent's task with `self_modify_task`."""
    return callable(getattr(benchmark, "self_modify_task", None))
