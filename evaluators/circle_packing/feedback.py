"""What limits a valid packing's score, in a few lines the meta-agent reads in every prompt.

Small models improve a packing only when told what holds the sum down: how far
it is from the best known sum, which circles are small and how much room each
has to grow before it touches a neighbour or a wall, how much of the square is
uncovered and where the largest empty spot is. All of it is computed here on
the host from the returned circles; nothing is estimated by running the program.
"""

from __future__ import annotations

import numpy as np

TOUCH = 1e-6  # room below this (unit-square units) counts as touching
EQUAL_RADII = 1e-9  # radii that differ by less than this count as equal
SMALLEST_SHOWN = 3  # smallest circles named with their room
EMPTY_SPOT_GRID = 128  # probe points per side when searching for the largest empty spot
#: Sums a plain optimiser over all centres and radii (scipy.optimize.minimize, SLSQP) reaches, quoted in the hint.
OPTIMISER_SUMS = {26: 2.6}


def room_to_grow(centres: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """How much each circle's radius could grow, its centre fixed, before it touches a neighbour or a wall.

    centres: (n, 2) array, radii: (n,) array of a valid packing. Returns (n,) values >= 0, unit-square units.
    """
    x, y = centres[:, 0], centres[:, 1]
    wall = np.minimum.reduce([x - radii, 1 - x - radii, y - radii, 1 - y - radii])
    gaps = np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1) - radii[:, None] - radii[None, :]
    np.fill_diagonal(gaps, np.inf)
    return np.maximum(np.minimum(wall, gaps.min(axis=1)), 0.0)


def largest_empty_spot(centres: np.ndarray, radii: np.ndarray) -> tuple[float, float, float]:
    """(x, y, r): about the largest circle that fits in the square without touching the packing.

    The best of an EMPTY_SPOT_GRID^2 grid of probe points, so x, y and r are good to about
    1/EMPTY_SPOT_GRID. Coarse to fine, with the same answer as probing every point: the clearance is
    1-Lipschitz, so a coarse cell whose centre's clearance plus the distance to its farthest fine point
    cannot reach the best fine clearance found holds no better point, and its fine points are skipped.
    """
    fine_ticks = (np.arange(EMPTY_SPOT_GRID) + 0.5) / EMPTY_SPOT_GRID
    step = _COARSE_STEP if EMPTY_SPOT_GRID % _COARSE_STEP == 0 else 1
    coarse = EMPTY_SPOT_GRID // step
    coarse_ticks = fine_ticks.reshape(coarse, step).mean(axis=1)
    cx, cy = (axis.ravel() for axis in np.meshgrid(coarse_ticks, coarse_ticks))
    coarse_clearance = _clearance(cx, cy, centres, radii)
    half_span = (step - 1) / 2 / EMPTY_SPOT_GRID
    reach = float(np.hypot(half_span, half_span))  # coarse centre to its farthest fine point
    # Fine points of the cells in order of promise; the first cell gives the bar the others must reach.
    order = np.argsort(-coarse_clearance, kind="stable")
    best_value, best_index = -np.inf, -1
    offsets = np.arange(step)
    for start in range(0, len(order), _CELLS_PER_BATCH):
        cells = order[start : start + _CELLS_PER_BATCH]
        cells = cells[coarse_clearance[cells] + reach >= best_value]
        if len(cells) == 0:
            break  # sorted: every later cell is further below the bar
        rows = (cells // coarse)[:, None, None] * step + offsets[None, :, None]
        cols = (cells % coarse)[:, None, None] * step + offsets[None, None, :]
        index = (rows * EMPTY_SPOT_GRID + cols).ravel()
        values = _clearance(fine_ticks[index % EMPTY_SPOT_GRID], fine_ticks[index // EMPTY_SPOT_GRID], centres, radii)
        top = values.max()
        # Ties go to the lowest grid index, as a plain argmax over every probe point would pick.
        candidate = int(index[values == top].min())
        if top > best_value or (top == best_value and candidate < best_index):
            best_value, best_index = float(top), candidate
    x, y = fine_ticks[best_index % EMPTY_SPOT_GRID], fine_ticks[best_index // EMPTY_SPOT_GRID]
    return float(x), float(y), max(best_value, 0.0)


#: Fine probe points per coarse cell side, and coarse cells refined per numpy batch.
_COARSE_STEP = 4
_CELLS_PER_BATCH = 16


def _clearance(px: np.ndarray, py: np.ndarray, centres: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """At each probe point: the distance to the nearest wall or circle edge (negative inside a circle)."""
    clearance = np.minimum.reduce([px, 1 - px, py, 1 - py])
    if len(radii):
        gaps = np.hypot(px[:, None] - centres[None, :, 0], py[:, None] - centres[None, :, 1]) - radii[None, :]
        clearance = np.minimum(clearance, gaps.min(axis=1))
    return clearance


def describe_valid_packing(
    centres: np.ndarray, radii: np.ndarray, *, best_known: float | None, seconds: float | None = None
) -> str:
    """The feedback for a valid packing: sum and gap, radii, the smallest circles' room, empty area, a hint.

    centres: (n, 2) array, radii: (n,) array, unit-square units. best_known: the best published sum for
    this n, or None where none is known (then no target is quoted). seconds: pack_circles' wall time.
    """
    n, total = len(radii), float(radii.sum())
    took = f"; took {seconds:.2f} s" if seconds is not None else ""
    target = ""
    if best_known is not None:
        gap = best_known - total
        where = f"{gap:.3f} below" if gap > 0 else "at or above"
        target = f" ({where} the best known {best_known} for n={n})"
    lines = [f"valid packing of {n} circles; sum of radii {total:.6f}{target}{took}"]

    room = room_to_grow(centres, radii)
    equal = float(radii.max() - radii.min()) < EQUAL_RADII
    if equal:
        lines.append(f"all {n} radii equal {radii[0]:.4f} (a grid of equal circles)")
    else:
        lines.append(f"radii from {radii.min():.4f} to {radii.max():.4f}")
    growing = int((room > TOUCH).sum())
    if growing == 0:
        lines.append("every circle touches a neighbour or a wall: none can grow unless others move")
    else:
        smallest = np.argsort(radii, kind="stable")[:SMALLEST_SHOWN]
        named = ", ".join(
            f"#{i} r={radii[i]:.4f} " + (f"can grow {room[i]:.4f}" if room[i] > TOUCH else "touching") for i in smallest
        )
        lines.append(f"smallest: {named}; {growing} of {n} circles can grow without moving others")

    spot_x, spot_y, spot_r = largest_empty_spot(centres, radii)
    uncovered = 1.0 - float(np.pi * np.square(radii).sum())
    lines.append(
        f"uncovered: {uncovered:.1%} of the square; the largest empty spot fits r={spot_r:.3f} "
        f"at ({spot_x:.2f}, {spot_y:.2f})"
    )
    reach = f" (about {OPTIMISER_SUMS[n]})" if n in OPTIMISER_SUMS else ""
    grid = "equal circles on a square grid waste space; " if equal else ""
    # Concrete moves, smallest first: what packing work (and OpenEvolve's circle-packing prompt) names.
    lines.append(
        f"hint: {grid}ideas that raise the sum: offset (hexagonal) rows; fewer large circles with small ones in "
        "the gaps; grow each circle until it touches a neighbour or a wall; optimise all centres and radii "
        f"together from the current packing (scipy.optimize.minimize, SLSQP, non-overlap constraints){reach}"
    )
    return "\n".join(lines)
