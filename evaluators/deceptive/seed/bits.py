"""Seed program for the deceptive benchmark: a list of numbers read as bits.

`solution()` returns the numbers of `VALUES`. The host reads each number as a
bit (1 when the nearest integer is odd, 0 when it is even), groups the bits into
blocks and scores every block with a trap function; the benchmark's contract
states the exact rule. This seed has half of the bits of every block set.
"""

# EVOLVE-BLOCK-START
VALUES = [1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0]
# EVOLVE-BLOCK-END


def solution() -> list[float]:
    """The numbers to be read as bits, in block order (ints are returned as they are: exact parity)."""
    return list(VALUES)
