"""HumanEval (agent level): agents that call the FM write functions; hidden tests run in a separate sandbox."""

from cambrian.evaluators.humaneval.benchmark import CONTRACT, HumanEval, HumanEvalOptions
from cambrian.evaluators.humaneval.checking import CheckVerdict, assemble_program
from cambrian.evaluators.humaneval.data import Problem, load_problems, split_task_ids

__all__ = [
    "CONTRACT",
    "CheckVerdict",
    "HumanEval",
    "HumanEvalOptions",
    "Problem",
    "assemble_program",
    "load_problems",
    "split_task_ids",
]
