"""The knapsack benchmark's greedy packer: it asks the agent's priority for each item (runs in the sandbox)."""

import importlib


def evaluate(module, values, weights, capacity):
    """The indices of the items packed, in the order they went in."""
    priority = importlib.import_module(module).priority
    ranks = []
    for index, (value, weight) in enumerate(zip(values, weights)):
        rank = priority(float(value), float(weight), float(capacity))
        if isinstance(rank, bool) or not isinstance(rank, (int, float)) or rank != rank:
            raise TypeError(f"priority returned {rank!r} for item {index}; it must return a number")
        ranks.append((-float(rank), index))
    room = capacity
    packed = []
    for _, index in sorted(ranks):
        if weights[index] <= room:
            packed.append(index)
            room -= weights[index]
    return packed
