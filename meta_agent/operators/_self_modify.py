"""The `self_modify` operator (the Darwin Goedel Machine's move): the parent agent writes its child.

`propose` has the search run the parent's own entry function in the sandbox on a task prompt built
here (`task_prompt`, through `env.run_parent`) and turns what it returned into the child genome
(`apply`) with the shared reply helpers of `_replies`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import ClassVar

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import EditError
from cambrian.meta_agent.operators._base import Operator, OperatorEnv, Proposal
from cambrian.meta_agent.operators._prompting import (
    PromptContext,
    PromptLimits,
    format_score,
    recent_attempts,
    render,
    truncate,
)
from cambrian.meta_agent.operators._replies import (
    _BLOCK_MARKER_RE,
    _apply_rewrite,
    _apply_search_replace,
    _parses,
    _replace_entry,
)

# A line opening a fenced block: a returned module's own strings may hold ``` mid-line, never this.
_FENCE_LINE_RE = re.compile(r"^\s*(?:`{3,}|~{3,})", re.MULTILINE)
# The task block `self_modify.txt` appends to the agent's source, up to the end of the text.
_TASK_BLOCK_RE = re.compile(r"^# -{10,}\n# TASK: the module above.*\Z", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class SelfModifyOperator(Operator):
    """The parent agent rewrites its own entry file (name "self_modify").

    function / signature: the entry function the child must keep, as the benchmark's
    contract names it. The default limits are short: the prompt goes through the
    agent's own, budgeted FM calls.
    """

    name: ClassVar[str] = "self_modify"
    runs_agent: ClassVar[bool] = True
    limits: PromptLimits = field(
        default_factory=lambda: PromptLimits(max_failed_attempts=2, max_attempt_chars=300, max_feedback_chars=800)
    )
    function: str = "solve"
    signature: str = "solve(task, llm) -> str"

    async def propose(self, context: PromptContext, env: OperatorEnv) -> Proposal:
        """The parent agent's rewrite of itself, from its run on `task_prompt(context)`."""
        parent = context.parent.genome
        returned = await env.run_parent(parent, self.task_prompt(context))
        return env.check(self.apply(parent, returned), parent)

    def task_prompt(self, ctx: PromptContext) -> str:
        """Python source for the agent to complete: its own entry file, then a comment block with the
        task (rewrite the whole module, keep the signature, stdlib only) and what to improve, built
        from the parent's feedback and failed attempts (truncated to `limits`)."""
        parent = ctx.parent
        lines: list[str] = []
        feedback = (parent.feedback or "").strip()
        if feedback:
            lines += ["", "Fix the failures of its last evaluation:"]
            lines += ["  " + line for line in truncate(feedback, max_chars=self.limits.max_feedback_chars).splitlines()]
        attempts = recent_attempts(ctx.failed_attempts, self.limits)
        if attempts:
            lines += ["", "These earlier rewrites were refused; do not repeat them:"]
            for number, reason in enumerate(attempts, start=1):
                lines += [f"  {number}. " + reason.replace("\n", "\n     ")]
        if not lines:
            lines = ["", f"Its last evaluation showed no failures: make {self.function}() more reliable."]
        instructions = "\n".join(("# " + line).rstrip() for text in lines for line in text.splitlines())
        return render(
            "self_modify",
            {
                "source": parent.genome.files[parent.genome.entry].rstrip(),
                "benchmark": ctx.benchmark,
                "score": format_score(parent.score),
                "function": self.function,
                "signature": self.signature,
                "instructions": instructions,
            },
        )

    def apply(self, parent: Genome, returned: object) -> Genome:
        """The child the agent's return value describes.

        returned: what the parent's entry function returned; must be a non-empty str.
        SEARCH/REPLACE blocks are applied when present; otherwise the text (a fenced
        block, or raw code) replaces the entry file as in `rewrite`; a copy of the task
        block `task_prompt` appended is dropped. Raises EditError
        for a non-str or empty value, code that does not parse, a child without a
        top-level `function` taking two arguments, and a child equal to its parent.
        """
        if not isinstance(returned, str):
            raise EditError(
                f"the agent's {self.function}() returned a {type(returned).__name__}, not the new module as a str",
                fix=f"make {self.function}() return the complete new module source as a str",
            )
        if not returned.strip():
            raise EditError(
                f"the agent's {self.function}() returned an empty string instead of the new module",
                fix=f"make {self.function}() return the complete new module source",
            )
        # An agent that echoes its prompt returns the task block too; kept, it would pile up over generations.
        returned = _TASK_BLOCK_RE.sub("", returned)
        if _BLOCK_MARKER_RE.search(returned):
            child = _apply_search_replace(parent, returned)
        elif _FENCE_LINE_RE.search(returned) and not _parses(returned):
            child = _apply_rewrite(parent, returned)
        else:
            # Raw code, whose own strings may hold ``` (the seed agent's do): the parse check names
            # a syntax error rather than asking for a fence.
            child = _replace_entry(parent, returned.strip("\n") + "\n")
        self._check_defines_function(child)
        return child

    def _check_defines_function(self, child: Genome) -> None:
        tree = ast.parse(child.files[child.entry])
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == self.function:
                positional = len(node.args.posonlyargs) + len(node.args.args)
                if positional >= 2 or node.args.vararg is not None:
                    return
                raise EditError(
                    f"the new {child.entry} defines {self.function}() with {positional} positional "
                    f"argument(s); the signature must stay {self.signature}",
                    fix=f"keep the signature {self.signature}",
                )
        raise EditError(
            f"the new {child.entry} does not define {self.function}() at top level",
            fix=f"keep a top-level def {self.signature}",
        )
