"""What an operator is: one base class with one method, what it returns, and what the search lends it.

An operator turns a parent (two for crossover) and its context into one child:

    class MyOperator(Operator):
        name = "my_operator"

        async def propose(self, context: PromptContext, env: OperatorEnv) -> Proposal:
            child = ...  # from context.parent.genome, env.rng(), await env.complete(messages, ...)
            return env.check(child, context.parent.genome)

`env` is what the search gives one proposal (`search.Proposer` makes one per attempt):
seeded draws (`rng`), the FM of the proposal's arm (`complete`, every call in the
ledger, tokens counted for the child), the direction the benchmark suggests (`idea`),
how many times a bad reply is drawn again (`redraws`) or goes back (`repair_rounds`),
the static check every child passes (`check`), and the parent agent's own run in the
sandbox (`run_parent`, for operators whose agents write their children). Operators do
no other I/O besides reading their prompt templates.

Raise `EditError` with a public reason when no child can be made: the search stores
that reason on the invalid agent and shows it to the next prompt of the same parent.
An operator that can tell from the code alone that it cannot edit a parent says so in
`cannot_edit(parent)`: the search asks before spending an FM call and draws another.

What an operator declares, for the search to check and to pick arms:
- `uses_fm`: it calls `env.complete`, so each configured model is an arm and the run needs an FM;
- `runs_agent`: it calls `env.run_parent`, so the benchmark must build agent tasks
  (`self_modify_task`), and its arm is the model the gateway serves agents;
- `needs_second_parent`: the search picks a second parent (`context.second_parent`).

The built-in FM operators share `FMOperator` (`_fm.py`): a prompt, one call, the reply
applied, a repair round in the same conversation when the reply cannot be used.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from cambrian.errors import CambrianError
from cambrian.evaluators.base import AgentsWriteCode, Genome
from cambrian.meta_agent.operators._prompting import PromptContext


class UnknownOperatorError(CambrianError, ValueError):
    """An operator name that does not exist (or a plugin that is broken). `fix` lists the valid names."""


class OperatorWeightsError(CambrianError, ValueError):
    """Operator weights that cannot be sampled from (negative, not finite, all zero)."""


@dataclass(frozen=True)
class Proposal:
    """What one attempt at a child produced: a genome, or the public reason there is none.

    Token, cost and FM-second figures (fm_seconds: the calls' wall time) cover every FM call the attempt made
    (all of them in the ledger too); the search fills them in from `env`. note: a short description of what
    changed, where the operator gives one (ast_mutate). repair_note: what was repaired before evaluation
    (static imports, an FM repair round). idea: the direction the prompt asked the FM to try, if any.
    conversation: the FM conversation that wrote the child, its last reply included (FM operators), where a
    failed run is taken back; repairs_left: how many more times it may go back.
    """

    genome: Genome | None
    reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    fm_seconds: float = 0.0
    note: str = ""
    repair_note: str | None = None
    idea: str | None = None
    conversation: tuple[Mapping[str, str], ...] = ()
    repairs_left: int = 0


class OperatorEnv(Protocol):
    """What the search lends an operator for one proposal."""

    @property
    def repair_rounds(self) -> int:
        """Times a reply that fails to parse, apply or pass the static check may go back to the FM (>= 0)."""
        ...

    @property
    def redraws(self) -> int:
        """Times such a reply is first drawn again from the same messages, with another seed (>= 0)."""
        ...

    def rng(self, salt: int | None = None) -> np.random.Generator:
        """A generator seeded by the run seed, the iteration and the attempt (and `salt`, for a second,
        independent stream): the same proposal of the same run draws the same numbers."""
        ...

    def idea(self) -> str | None:
        """The direction this proposal is asked to try: a seeded draw from the benchmark's `ideas` (None when
        it has none or `search.ideas` is off). Recorded on the child."""
        ...

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        purpose: str,
        grammar: str | None = None,
        max_tokens: int | None = None,
        draw: int = 0,
    ) -> str:
        """The reply of the proposal's FM to `messages` (purpose: "mutate", "redraw", "diagnose" or "repair",
        for the ledger). grammar: GBNF the reply must follow under constrained decoding. max_tokens: a cap below
        `fm.max_tokens` for replies short by nature. draw: 0, or 1, 2, ... to sample the same messages again
        with another seed. FMBadRequest when the prompt itself is refused."""
        ...

    def check(self, child: Genome, parent: Genome, *, note: str = "") -> Proposal:
        """The proposal of `child` after the static check and its repairs (see `edits.check_child`);
        EditError with a line-precise reason when it fails."""
        ...

    async def derive(self, make: Callable[[], Genome], parent: Genome, *, note: str = "") -> Proposal:
        """`check(make(), parent, note=note)`, possibly in another process (`search.edit_processes`): for
        the per-reply work of parsing and applying (`make`, e.g. `functools.partial(self.child, ctx,
        reply)`) and the static check, which a busy loop should not spend on its own thread. `make` must
        be a pure function of what it holds; one that does not pickle runs here."""
        ...

    async def run_parent(self, parent: Genome, prompt: str) -> object:
        """What the parent agent's entry function returned when run in the sandbox on the benchmark's agent
        task for `prompt` (with its FM socket and budget); EditError with the run's failure."""
        ...


class Operator(ABC):
    """A mutation operator: `propose` makes one child (see the module docstring)."""

    #: The operator's name: its key in `search.operators` and in the archive (a plugin's entry point name).
    name: ClassVar[str]
    #: It calls `env.complete`: one arm per configured model, and the run needs an FM.
    uses_fm: ClassVar[bool] = False
    #: It calls `env.run_parent`: the benchmark must build agent tasks (`self_modify_task`).
    runs_agent: ClassVar[bool] = False
    #: The search picks a second parent (`context.second_parent`).
    needs_second_parent: ClassVar[bool] = False
    #: Operators of one kind ask the FM the same question (`knob` is `lines` on other lines; None: its `name`).
    #: An attempt that rebuilt a program the run has is followed by an operator of another kind.
    kind: ClassVar[str | None] = None

    @classmethod
    def kind_name(cls) -> str:
        """The kind of question this operator asks the FM: `kind`, else its name."""
        return cls.kind or cls.name

    @abstractmethod
    async def propose(self, context: PromptContext, env: OperatorEnv) -> Proposal:
        """One child of `context.parent` (see OperatorEnv). EditError when none can be made."""

    def cannot_edit(self, parent: Genome) -> str | None:
        """Why this operator can make no child of `parent` whatever the FM would say (e.g. `lines` on a program
        with no statement to rewrite), or None when it can try. Asked before a proposal spends an FM call:
        the search then draws another operator, and refuses a run whose seed no operator can edit.
        A pure function of the code; the default says it can always try."""
        return None


def supports_self_modify(benchmark: object) -> bool:
    """Whether a benchmark can run operators whose agents write their children: it builds the agent's task
    with `self_modify_task`."""
    return isinstance(benchmark, AgentsWriteCode)
