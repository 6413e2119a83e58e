"""How early a greedy knapsack packer tries an item."""


# EVOLVE-BLOCK-START
def priority(value: float, weight: float, capacity: float) -> float:
    """Items with a higher priority are tried first."""
    return value


# EVOLVE-BLOCK-END
