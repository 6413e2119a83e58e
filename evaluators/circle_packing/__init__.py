"""Circle packing: n circles in the unit square, maximise the sum of radii (program search)."""

from cambrian.evaluators.circle_packing.benchmark import (
    CirclePacking,
    CirclePackingOptions,
    PackingCheck,
    check_packing,
)

__all__ = ["CirclePacking", "CirclePackingOptions", "PackingCheck", "check_packing"]
