"""The order in which one machine runs its jobs."""


# EVOLVE-BLOCK-START
def order(jobs: list[dict]) -> list[int]:
    """The job ids, the first to run first: the heaviest weight first."""
    return [job["id"] for job in sorted(jobs, key=lambda job: -job["weight"])]


# EVOLVE-BLOCK-END
