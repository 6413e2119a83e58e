"""What every benchmark says when a run produced no value: a timeout, a crash, no result file.

One text for all benchmarks, following the `FeedbackPolicy` it is given (error
type, message, traceback and printed output each shown only when the policy
allows). Benchmarks whose runs see no hidden answer (circle packing, the trap
functions) pass `opened(policy)`: everything the program raised and printed is
its own, so its traceback and output are shown whatever the run's policy says.
Plugin benchmarks use the same helpers:

    failure = run_failure(result, self.feedback_policy, who="the program")
    if failure is not None:
        return failure
"""

from __future__ import annotations

import dataclasses

from cambrian.evaluators.base import FeedbackPolicy, TaskScore
from cambrian.evaluators.harness.run_program import RESULT_FILE, HarnessOutcome, read_outcome
from cambrian.sandbox.base import RunResult

TAIL_LINES = 12  # of a traceback or of printed output


def opened(policy: FeedbackPolicy) -> FeedbackPolicy:
    """`policy` with the traceback and printed output shown: for runs that saw no hidden answer."""
    return dataclasses.replace(policy, traceback=True, output=True)


def run_failure(result: RunResult, policy: FeedbackPolicy, *, who: str) -> TaskScore | None:
    """A not-executed TaskScore when the run gave no value, else None (the caller scores the value).

    who: how the feedback names the code, e.g. "the program", "the agent" or "transform".
    """
    if result.timed_out or result.oom_killed or result.output_truncated:
        return not_executed(f"{who} {result.failure_reason()}", policy)
    outcome = read_outcome(result.files)
    if outcome is None:
        how = result.failure_reason() or "exited"
        text = f"no result: {who} {how} without writing {RESULT_FILE}"
        return not_executed(text + _printed(result, policy), policy)
    if not outcome.ok:
        return not_executed(f"{who} crashed" + _error(outcome, policy) + _printed(result, policy), policy)
    return None


def not_executed(feedback: str, policy: FeedbackPolicy) -> TaskScore:
    """Score 0: the code did not produce a usable value; `feedback` clipped to the policy's length."""
    return TaskScore(score=0.0, passed=False, executed=False, feedback=policy.clip(feedback))


def tail_lines(text: str, count: int = TAIL_LINES) -> str:
    """The last `count` non-blank-trimmed lines of `text`."""
    return "\n".join(text.strip().splitlines()[-count:])


def _error(outcome: HarnessOutcome, policy: FeedbackPolicy) -> str:
    described = policy.describe_error(outcome.error_type, outcome.error)
    text = f": {described}" if described else ""
    if policy.traceback and outcome.traceback.strip():
        text += "\n" + tail_lines(outcome.traceback)
    return text


def _printed(result: RunResult, policy: FeedbackPolicy) -> str:
    if not policy.output:
        return ""
    printed = "\n".join(part for part in (tail_lines(result.stdout), tail_lines(result.stderr)) if part)
    return f"\noutput:\n{printed}" if printed else ""
