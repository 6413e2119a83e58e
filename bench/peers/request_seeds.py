"""Per-request sampling seeds for the peers, derived the way Cambrian derives its own.

Neither peer sends a seed per request: ShinkaEvolve sends none, and OpenEvolve sends one seed, derived from the
run seed, with every request, so an identical prompt (a parent redrawn while the archive has not changed) gets
an identical reply from the shared llama.cpp server. Each driver gives request number k of a run with seed s
the seed sha256("s:k"), so replies differ between requests and a run is repeatable.
"""

from __future__ import annotations

import hashlib

_SEED_RANGE = 2**31  # llama.cpp takes a signed 32-bit seed


def request_seed(run_seed: int, request: int) -> int:
    """The seed of request number `request` (0, 1, ...) of a run seeded with `run_seed`."""
    digest = hashlib.sha256(f"{run_seed}:{request}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % _SEED_RANGE
