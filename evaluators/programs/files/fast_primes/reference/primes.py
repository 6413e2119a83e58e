"""Counting the primes below a number."""

# EVOLVE-BLOCK-START
import math


def count_primes(n: int) -> int:
    """How many primes are below n (n >= 0): a sieve of Eratosthenes on a bytearray."""
    if n < 3:
        return 0
    sieve = bytearray([1]) * n
    sieve[0] = sieve[1] = 0
    for p in range(2, math.isqrt(n - 1) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytes(len(range(p * p, n, p)))
    return sum(sieve)


# EVOLVE-BLOCK-END
