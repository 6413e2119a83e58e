"""What both ARC benchmarks say when a run produced no value: a timeout, a crash, no result file.

The text follows the benchmark's `FeedbackPolicy` (error type, message,
traceback and printed output each shown only when the policy allows). No
expected grid is ever part of it: these runs never saw one.
"""

from __future__ import annotations

from evaluators.base import FeedbackPolicy, TaskScore
from evaluators.harness.run_program import RESULT_FILE, HarnessOutcome, read_outcome
from sandbox.base import RunResult

_TAIL_LINES = 12  # of a traceback or of printed output


def run_failure(result: RunResult, policy: FeedbackPolicy, *, who: str) -> TaskScore | None:
    """A not-executed TaskScore when the run gave no value, else None (the caller scores the value).

    who: how the feedback names the code, e.g. "the agent" or "transform".
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
    """Score 0: the code did not produce a usable value."""
    return TaskScore(score=0.0, passed=False, executed=False, feedback=policy.clip(feedback))


def _error(outcome: HarnessOutcome, policy: FeedbackPolicy) -> str:
    described = policy.describe_error(outcome.error_type, outcome.error)
    text = f": {described}" if described else ""
    if policy.traceback and outcome.traceback.strip():
        text += "\n" + _tail(outcome.traceback)
    return text


def _printed(result: RunResult, policy: FeedbackPolicy) -> str:
    if not policy.output:
        return ""
    printed = "\n".join(part for part in (_tail(result.stdout), _tail(result.stderr)) if part)
    return f"\noutput:\n{printed}" if printed else ""


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-_TAIL_LINES:])
