"""Counting the primes below a number."""


# EVOLVE-BLOCK-START
def count_primes(n: int) -> int:
    """How many primes are below n (n >= 0): trial division of every k < n by every odd d up to sqrt(k)."""
    count = 0
    for k in range(2, n):
        if k % 2 == 0:
            count += k == 2
            continue
        d = 3
        while d * d <= k:
            if k % d == 0:
                break
            d += 2
        else:
            count += 1
    return count


# EVOLVE-BLOCK-END
