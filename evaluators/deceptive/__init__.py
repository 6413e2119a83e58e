"""Deceptive benchmark: concatenated trap functions, where greedy improvement is lured to a local optimum."""

from cambrian.evaluators.deceptive.benchmark import (
    DeceptiveOptions,
    DeceptiveTrap,
    TrapCheck,
    check_values,
    trap,
    value_to_bit,
)

__all__ = ["DeceptiveOptions", "DeceptiveTrap", "TrapCheck", "check_values", "trap", "value_to_bit"]
