"""Which machine runs each arriving job: an online load balancer."""


# EVOLVE-BLOCK-START
class Balancer:
    """Places jobs one at a time on `machines` identical machines, without knowing the jobs to come."""

    def __init__(self, machines: int) -> None:
        self.loads = [0.0] * machines

    def assign(self, job: float) -> int:
        """The machine (0..machines-1) that runs this job of size `job`: the least loaded so far."""
        machine = min(range(len(self.loads)), key=self.loads.__getitem__)
        self.loads[machine] += job
        return machine


# EVOLVE-BLOCK-END
