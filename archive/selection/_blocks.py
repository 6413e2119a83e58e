"""`BlockWeights`: row weights that change a few rows at a time, drawn from without a pass over every row.

The rows sit in blocks of `BLOCK`; each block's sum is kept and recomputed (exactly, from its rows) when one
of its rows changes. A draw finds its block from the cumulative block sums, then its row from the cumulative
weights inside that block: O(n / BLOCK + BLOCK) per draw instead of a cumulative sum over all n rows.
"""

from __future__ import annotations

import numpy as np

#: Rows per block: about sqrt(n) at 250k rows, where the two searches cost alike.
BLOCK = 512


class BlockWeights:
    """Non-negative weights of rows 0..n-1 (not normalised); `draw` picks rows with probability weight / total."""

    def __init__(self, weights: np.ndarray) -> None:
        self._n = len(weights)
        self._weights = np.zeros(max(BLOCK, -(-self._n // BLOCK) * BLOCK))
        self._weights[: self._n] = weights
        self._sums = self._weights.reshape(-1, BLOCK).sum(axis=1)

    def __len__(self) -> int:
        return self._n

    @property
    def weights(self) -> np.ndarray:
        """The rows' weights (a read-only view; do not keep it across `extend`)."""
        view = self._weights[: self._n]
        view.flags.writeable = False
        return view

    def set(self, rows: np.ndarray, values: np.ndarray) -> None:
        """New weights for existing rows."""
        self._weights[rows] = values
        self._resum(rows)

    def extend(self, values: np.ndarray) -> None:
        """Append rows with these weights."""
        n = self._n + len(values)
        if n > len(self._weights):
            grown = np.zeros(-(-max(n, 2 * len(self._weights)) // BLOCK) * BLOCK)
            grown[: self._n] = self._weights[: self._n]
            self._weights = grown
            self._sums = np.concatenate([self._sums, np.zeros(len(grown) // BLOCK - len(self._sums))])
        rows = np.arange(self._n, n)
        self._weights[rows] = values
        self._n = n
        self._resum(rows)

    def draw(self, u: np.ndarray) -> np.ndarray:
        """The rows that uniform numbers `u` in [0, 1) pick, by inverse CDF over the blocks, then inside one."""
        block_cdf = np.cumsum(self._sums)
        targets = u * block_cdf[-1]
        blocks = np.minimum(np.searchsorted(block_cdf, targets, side="right"), len(block_cdf) - 1)
        rows = np.empty(len(u), dtype=np.int64)
        for i, (block, target) in enumerate(zip(blocks.tolist(), targets.tolist())):
            start = block * BLOCK
            inside = np.cumsum(self._weights[start : start + BLOCK])
            offset = target - (block_cdf[block] - self._sums[block])
            # Float edges: a target at a block's or the last row's end stays inside.
            rows[i] = min(start + int(np.searchsorted(inside, offset, side="right")), start + BLOCK - 1, self._n - 1)
        return rows

    def _resum(self, rows: np.ndarray) -> None:
        for block in {row // BLOCK for row in np.asarray(rows).tolist()}:
            self._sums[block] = self._weights[block * BLOCK : (block + 1) * BLOCK].sum()
