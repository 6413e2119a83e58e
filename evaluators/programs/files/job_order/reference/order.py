"""The order in which one machine runs its jobs."""


# EVOLVE-BLOCK-START
def order(jobs: list[dict]) -> list[int]:
    """The job ids, the first to run first: the most weight per unit of length first (Smith's rule, optimal)."""
    return [job["id"] for job in sorted(jobs, key=lambda job: -job["weight"] / job["length"])]


# EVOLVE-BLOCK-END
