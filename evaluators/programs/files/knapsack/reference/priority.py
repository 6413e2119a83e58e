"""How early a greedy knapsack packer tries an item."""


# EVOLVE-BLOCK-START
def priority(value: float, weight: float, capacity: float) -> float:
    """Items with a higher priority are tried first: the most value per unit of weight."""
    return value / weight


# EVOLVE-BLOCK-END
