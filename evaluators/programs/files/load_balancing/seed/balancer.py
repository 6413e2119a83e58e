"""Which machine runs each arriving job: an online load balancer."""


# EVOLVE-BLOCK-START
class Balancer:
    """Places jobs one at a time on `machines` identical machines, without knowing the jobs to come."""

    def __init__(self, machines: int) -> None:
        self.machines = machines
        self.arrived = 0

    def assign(self, job: float) -> int:
        """The machine (0..machines-1) that runs this job of size `job`: round robin, whatever its size."""
        machine = self.arrived % self.machines
        self.arrived += 1
        return machine


# EVOLVE-BLOCK-END
