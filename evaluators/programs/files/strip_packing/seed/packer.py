"""Strip packing: place rectangles in a strip of fixed width, as low as possible.

`pack(width, rects)` is the entry point. The strip is `width` wide (x from 0 to width) and open
upwards (y from 0). Each rectangle is `[w, h]` in the same units and keeps its orientation (no
rotation). The answer is one `[x, y]` per rectangle, in the order given: its lower-left corner.
Rectangles may touch but not overlap, and each must lie inside the strip. The lower the top of
the highest rectangle, the better the packing.

The placement is chosen by the module constants below: an ordering of the rectangles, then a
placement policy (three kinds of shelves, or a bottom-left search without shelves).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# EVOLVE-BLOCK-START

#: The order in which rectangles are placed: "none" (as given) or, decreasing, "height", "width",
#: "area", "perimeter" or "max_side".
SORT_KEY = "none"
#: Where each rectangle goes: "next_fit" (shelves; only the newest shelf takes rectangles), "first_fit"
#: (shelves; the lowest shelf with room), "best_fit" (shelves; the one left with the least width to
#: spare) or "bottom_left" (no shelves: dropped at the lowest of a grid of left edges).
SHELF_POLICY = "next_fit"
#: A shelf opened by a rectangle of height h is h * SHELF_SLACK tall (>= 1): head room for a later,
#: slightly taller rectangle, paid for in the gap it leaves above the shorter ones.
SHELF_SLACK = 1.0
#: Spacing, in strip width units, of the left edges the bottom-left search tries.
BOTTOM_LEFT_STEP = 1.0
#: Float slack in comparisons: edges that meet within it touch, they do not overlap.
EPS = 1e-9


@dataclass(frozen=True)
class Rect:
    """One rectangle to place: its position in the input list, its width and height (> 0)."""

    index: int
    width: float
    height: float

    @property
    def area(self) -> float:
        return self.width * self.height


@dataclass(frozen=True)
class Placement:
    """A rectangle put at (x, y), its lower-left corner."""

    rect: Rect
    x: float
    y: float

    @property
    def right(self) -> float:
        return self.x + self.rect.width

    @property
    def top(self) -> float:
        return self.y + self.rect.height


@dataclass
class Shelf:
    """A horizontal band of the strip: rectangles stand on its floor side by side, left to right.

    y: the floor; height: the band's height, set when the shelf opens and raised only while it is the top
    shelf (nothing stands on it yet); used: the width taken so far, from the left wall.
    """

    y: float
    height: float
    used: float = 0.0

    def room(self, strip_width: float) -> float:
        """The width still free at the right end of the shelf."""
        return strip_width - self.used

    def fits(self, rect: Rect, strip_width: float, *, on_top: bool = False) -> bool:
        """Whether `rect` has room here; the top shelf (`on_top`) has nothing above it, so it can grow."""
        tall_enough = on_top or rect.height <= self.height + EPS
        return tall_enough and rect.width <= self.room(strip_width) + EPS

    def put(self, rect: Rect) -> Placement:
        """Place `rect` at the shelf's first free x, raising the shelf if `rect` is taller; the caller checked."""
        placement = Placement(rect, self.used, self.y)
        self.used += rect.width
        self.height = max(self.height, rect.height)
        return placement


# ----- input checks ------------------------------------------------------------------------------


def validate_width(width: float) -> float:
    """The strip width as a float; ValueError unless it is a positive finite number."""
    if isinstance(width, bool) or not isinstance(width, (int, float)):
        raise ValueError(f"strip width must be a number, got {width!r}")
    if not math.isfinite(width) or width <= 0:
        raise ValueError(f"strip width must be positive and finite, got {width!r}")
    return float(width)


def validate_rects(rects: list[list[float]], width: float) -> list[Rect]:
    """The rectangles as `Rect`s, in input order; ValueError for a malformed one or one wider than the strip."""
    checked = []
    for index, pair in enumerate(rects):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"rectangle {index} must be [w, h], got {pair!r}")
        w, h = (float(side) for side in pair)
        if not (math.isfinite(w) and math.isfinite(h)) or w <= 0 or h <= 0:
            raise ValueError(f"rectangle {index} needs positive finite sides, got {pair!r}")
        if w > width + EPS:
            raise ValueError(f"rectangle {index} is {w} wide, wider than the strip ({width})")
        checked.append(Rect(index, w, h))
    return checked


# ----- ordering ----------------------------------------------------------------------------------


def sort_key(rect: Rect, key: str) -> float:
    """The number rectangles are sorted by, decreasing, for ordering `key` (see SORT_KEY)."""
    if key == "height":
        return rect.height
    if key == "width":
        return rect.width
    if key == "area":
        return rect.area
    if key == "perimeter":
        return rect.width + rect.height
    if key == "max_side":
        return max(rect.width, rect.height)
    raise ValueError(f"unknown sort key {key!r}")


def order_rects(rects: list[Rect], key: str) -> list[Rect]:
    """The rectangles in placing order; ties keep the input order, so the result is deterministic."""
    if key == "none":
        return list(rects)
    return sorted(rects, key=lambda rect: (-sort_key(rect, key), rect.index))


# ----- shelf policies ----------------------------------------------------------------------------


def open_shelf(shelves: list[Shelf], rect: Rect, slack: float) -> Shelf:
    """A new shelf on top of the highest one, tall enough for `rect` plus the slack."""
    floor = shelves[-1].y + shelves[-1].height if shelves else 0.0
    shelf = Shelf(y=floor, height=rect.height * slack)
    shelves.append(shelf)
    return shelf


def place_next_fit(rects: list[Rect], width: float, slack: float) -> list[Placement]:
    """Next-fit shelves: a rectangle goes on the newest shelf if it fits, else it opens a new one.

    Shelves below the newest are closed for good, however much room they keep.
    """
    shelves: list[Shelf] = []
    placements = []
    for rect in rects:
        if not shelves or not shelves[-1].fits(rect, width, on_top=True):
            open_shelf(shelves, rect, slack)
        placements.append(shelves[-1].put(rect))
    return placements


def place_first_fit(rects: list[Rect], width: float, slack: float) -> list[Placement]:
    """First-fit shelves: a rectangle goes on the lowest shelf where it fits, else on a new one."""
    shelves: list[Shelf] = []
    placements = []
    for rect in rects:
        shelf = next((s for s in shelves if s.fits(rect, width, on_top=s is shelves[-1])), None)
        if shelf is None:
            shelf = open_shelf(shelves, rect, slack)
        placements.append(shelf.put(rect))
    return placements


def place_best_fit(rects: list[Rect], width: float, slack: float) -> list[Placement]:
    """Best-fit shelves: a rectangle goes on the shelf it leaves with the least spare width."""
    shelves: list[Shelf] = []
    placements = []
    for rect in rects:
        fitting = [s for s in shelves if s.fits(rect, width, on_top=s is shelves[-1])]
        if fitting:
            shelf = min(fitting, key=lambda s: (s.room(width) - rect.width, s.y))
        else:
            shelf = open_shelf(shelves, rect, slack)
        placements.append(shelf.put(rect))
    return placements


# ----- bottom-left search ------------------------------------------------------------------------


def drop_height(placements: list[Placement], x: float, rect: Rect) -> float:
    """How low `rect` comes to rest when let fall at left edge `x`: on the highest top below its span.

    It falls from above everything, so it stops on the first rectangle it meets; a gap under that
    one stays empty.
    """
    resting = 0.0
    for placed in placements:
        if placed.x < x + rect.width - EPS and x < placed.right - EPS:
            resting = max(resting, placed.top)
    return resting


def candidate_lefts(rect: Rect, width: float, step: float) -> list[float]:
    """The left edges tried for `rect`: multiples of `step` that keep it inside, and flush right."""
    count = int((width - rect.width) / step + EPS)
    lefts = [i * step for i in range(count + 1)]
    flush_right = width - rect.width
    if flush_right - lefts[-1] > EPS:
        lefts.append(flush_right)
    return lefts


def place_bottom_left(rects: list[Rect], width: float, step: float) -> list[Placement]:
    """Each rectangle dropped at the left edge where it rests lowest (the leftmost on a tie)."""
    placements: list[Placement] = []
    for rect in rects:
        best_y, best_x = math.inf, 0.0
        for x in candidate_lefts(rect, width, step):
            y = drop_height(placements, x, rect)
            if y < best_y - EPS:
                best_y, best_x = y, x
        placements.append(Placement(rect, best_x, best_y))
    return placements


def place(rects: list[Rect], width: float, policy: str) -> list[Placement]:
    """The placements of `rects` in the given order under `policy` (see SHELF_POLICY)."""
    if policy == "next_fit":
        return place_next_fit(rects, width, SHELF_SLACK)
    if policy == "first_fit":
        return place_first_fit(rects, width, SHELF_SLACK)
    if policy == "best_fit":
        return place_best_fit(rects, width, SHELF_SLACK)
    if policy == "bottom_left":
        return place_bottom_left(rects, width, BOTTOM_LEFT_STEP)
    raise ValueError(f"unknown shelf policy {policy!r}")


# ----- self-check --------------------------------------------------------------------------------


def overlaps(a: Placement, b: Placement) -> bool:
    """Whether two placed rectangles share area (touching along an edge or a corner is allowed)."""
    return a.x < b.right - EPS and b.x < a.right - EPS and a.y < b.top - EPS and b.y < a.top - EPS


def check_packing(placements: list[Placement], width: float) -> None:
    """AssertionError naming the first rectangle outside the strip or the first overlapping pair."""
    for p in placements:
        if p.x < -EPS or p.right > width + EPS or p.y < -EPS:
            raise AssertionError(f"rectangle {p.rect.index} at ({p.x}, {p.y}) leaves the strip")
    for i, a in enumerate(placements):
        for b in placements[i + 1 :]:
            if overlaps(a, b):
                raise AssertionError(f"rectangles {a.rect.index} and {b.rect.index} overlap")


def packed_height(placements: list[Placement]) -> float:
    """The top of the highest rectangle: the height of strip the packing uses."""
    return max((p.top for p in placements), default=0.0)


# ----- entry point -------------------------------------------------------------------------------


def pack(width: float, rects: list[list[float]]) -> list[list[float]]:
    """The lower-left corner [x, y] of each rectangle of `rects` ([w, h] each), in input order.

    width: the strip's width (> 0); every rectangle must be at most that wide.
    """
    strip_width = validate_width(width)
    items = validate_rects(rects, strip_width)
    if SHELF_SLACK < 1:
        raise ValueError(f"SHELF_SLACK must be at least 1, got {SHELF_SLACK}")
    if BOTTOM_LEFT_STEP <= 0:
        raise ValueError(f"BOTTOM_LEFT_STEP must be positive, got {BOTTOM_LEFT_STEP}")
    placements = place(order_rects(items, SORT_KEY), strip_width, SHELF_POLICY)
    # A bug in a policy should fail loudly here rather than hand back an infeasible packing.
    check_packing(placements, strip_width)
    by_index = sorted(placements, key=lambda p: p.rect.index)
    return [[p.x, p.y] for p in by_index]


# EVOLVE-BLOCK-END
