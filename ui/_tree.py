"""The lineage tree at a level of detail: what the run page draws, laid out on the server.

The whole run is read once as columns; numpy gives every agent its parent row, depth, clade size
and clade best score (the best search score in its subtree). A request then walks only the part a
person can look at: from a root down to `depth` levels, plus the nodes asked open (`expand`),
minus those asked shut (`collapse`). A node left shut with descendants is a *clade* node carrying
how many agents it hides and their best score; a parent with more than `max_children` children
shows its best ones and one *more* node for the rest. `max_nodes` caps the answer, so a request
costs the same at 1k agents and at 100k. The path from the root to the run's best agent stays open.

Layout is a tidy tree: leaves get x = 0, 1, 2, ... in depth-first order, a parent sits at the
middle of its first and last child, and y is the depth.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from cambrian.ui._columns import AgentColumns

#: Defaults of one tree request: levels below the root, nodes in all, children shown per parent.
DEFAULT_DEPTH = 6
DEFAULT_MAX_NODES = 3000
DEFAULT_MAX_CHILDREN = 40


@dataclass(frozen=True)
class Lineage:
    """Per-row lineage columns of a run (rows as in AgentColumns): the tree's structure, once."""

    parent_rows: np.ndarray  # int64, -1 for a root
    depth: np.ndarray  # int64, 0 for a root
    clade_size: np.ndarray  # int64, the agent and all its descendants
    clade_best: np.ndarray  # float64, best search score in the clade, NaN when none
    child_order: np.ndarray  # rows sorted by parent row (stable: by id within a parent)
    child_start: np.ndarray  # child_order[child_start[r]:child_start[r + 1]] are row r's children
    best_path: frozenset[int]  # rows from a root to the best agent


def lineage(columns: AgentColumns) -> Lineage:
    """The lineage columns of `columns`, vectorised (pointer jumping for depth, one pass per level for sums)."""
    n = len(columns)
    ids = columns.ids
    rows = np.minimum(np.searchsorted(ids, columns.parent_ids), max(n - 1, 0))
    parent_rows = np.where((columns.parent_ids >= 0) & (ids[rows] == columns.parent_ids), rows, -1) if n else rows
    depth = (parent_rows >= 0).astype(np.int64)
    jump = parent_rows.copy()
    for _ in range(max(n, 1).bit_length() + 1):
        active = np.flatnonzero(jump >= 0)
        if active.size == 0:
            break
        hop = jump[active]
        depth[active] += depth[hop]
        jump[active] = jump[hop]
    size = np.ones(n, dtype=np.int64)
    evaluated = np.fromiter((s == "evaluated" for s in columns.statuses), dtype=bool, count=n)
    best = np.where(evaluated, columns.scores, np.nan)
    best_filled = np.where(np.isnan(best), -np.inf, best)
    order = np.argsort(-depth, kind="stable")
    levels = np.flatnonzero(np.r_[True, np.diff(depth[order]) != 0]) if n else np.empty(0, dtype=np.int64)
    for start, stop in zip(levels, np.r_[levels[1:], n]):
        level = order[start:stop]
        level = level[parent_rows[level] >= 0]
        if level.size == 0:
            continue
        np.add.at(size, parent_rows[level], size[level])
        np.maximum.at(best_filled, parent_rows[level], best_filled[level])
    clade_best = np.where(np.isinf(best_filled), np.nan, best_filled)
    child_order = np.argsort(parent_rows, kind="stable")
    counts = np.bincount(parent_rows[parent_rows >= 0], minlength=n) if n else np.zeros(0, dtype=np.int64)
    n_roots = int(np.sum(parent_rows < 0))
    child_start = n_roots + np.r_[0, np.cumsum(counts)]
    path: set[int] = set()
    if n and not np.all(np.isnan(best)):
        row = int(np.nanargmax(np.where(np.isnan(best), -np.inf, best)))
        while row >= 0:
            path.add(row)
            row = int(parent_rows[row])
    return Lineage(parent_rows, depth, size, clade_best, child_order, child_start, frozenset(path))


def _children(tree: Lineage, row: int) -> np.ndarray:
    return tree.child_order[tree.child_start[row] : tree.child_start[row + 1]]


def _roots(tree: Lineage) -> np.ndarray:
    return tree.child_order[: tree.child_start[0]]


def tree_view(
    columns: AgentColumns,
    tree: Lineage,
    *,
    root: int | None = None,
    depth: int = DEFAULT_DEPTH,
    expand: Collection[int] = (),
    collapse: Collection[int] = (),
    wide: Collection[int] = (),
    max_nodes: int = DEFAULT_MAX_NODES,
    max_children: int = DEFAULT_MAX_CHILDREN,
) -> dict[str, Any]:
    """The visible part of the tree, laid out, as JSON-ready columns (one entry per drawn node).

    root: an agent id (None: every root of the run). depth: levels open below the root. expand /
    collapse: agent ids to open or shut whatever their depth. wide: agent ids whose children are all
    shown (otherwise the best `max_children` are, and one "more" node stands for the rest).
    KeyError when `root` is not an agent of the run.
    """
    if root is not None:
        row = columns.row_of(root)
        if row < 0:
            raise KeyError(root)
        starts = [row]
    else:
        starts = _roots(tree).tolist()
    base = int(tree.depth[starts[0]]) if starts else 0
    expand_rows = {columns.row_of(i) for i in expand} - {-1}
    collapse_rows = {columns.row_of(i) for i in collapse} - {-1}
    wide_rows = {columns.row_of(i) for i in wide} - {-1}
    # Per drawn node: (kind, row, parent index in `drawn`, hidden agents, hidden best); kind agent|clade|more.
    drawn: list[tuple[str, int, int, int, float]] = [("agent", r, -1, 0, math.nan) for r in starts]
    kids_of: dict[int, list[int]] = {}
    queue = list(range(len(drawn)))
    head = 0
    while head < len(queue):
        index = queue[head]
        head += 1
        _, row, parent_index, _, _ = drawn[index]
        children = _children(tree, row)
        if children.size == 0:
            continue
        relative = int(tree.depth[row]) - base
        on_path = row in tree.best_path
        wants_open = row in expand_rows or ((relative < depth or on_path) and row not in collapse_rows)
        shown, rest = children, children[:0]
        if children.size > max_children and row not in wide_rows:
            ranked = children[np.argsort(-np.nan_to_num(tree.clade_best[children], nan=-np.inf), kind="stable")]
            shown, rest = ranked[:max_children], ranked[max_children:]
            on = [r for r in rest.tolist() if r in tree.best_path]
            if on:  # the best path stays visible
                shown = np.r_[shown, on]
                rest = rest[~np.isin(rest, on)]
            shown = np.sort(shown)  # id order within a parent
        needed = len(shown) + (1 if rest.size else 0)
        if not wants_open or len(drawn) + needed > max_nodes:
            hidden = int(tree.clade_size[row]) - 1
            drawn[index] = ("clade", row, parent_index, hidden, _nanmax(tree.clade_best[children]))
            continue
        kids = []
        for child in shown.tolist():
            kids.append(len(drawn))
            queue.append(len(drawn))
            drawn.append(("agent", child, index, 0, math.nan))
        if rest.size:
            kids.append(len(drawn))
            drawn.append(("more", row, index, int(tree.clade_size[rest].sum()), _nanmax(tree.clade_best[rest])))
        kids_of[index] = kids
    xs = _tidy_x(len(drawn), [i for i in range(len(starts))], kids_of)
    return _as_columns(columns, tree, drawn, xs, root=root, depth=depth)


def _nanmax(values: np.ndarray) -> float:
    """The largest non-NaN value, NaN when there is none."""
    finite = values[~np.isnan(values)]
    return float(finite.max()) if finite.size else math.nan


def _tidy_x(n: int, tops: list[int], kids_of: dict[int, list[int]]) -> list[float]:
    """x of each drawn node: leaves 0, 1, 2, ... depth first; a parent midway between its first and last child."""
    xs = [0.0] * n
    next_leaf = 0.0
    stack: list[tuple[int, bool]] = [(top, False) for top in reversed(tops)]
    while stack:  # iterative: a lineage can be thousands of levels deep
        index, done = stack.pop()
        kids = kids_of.get(index)
        if not kids:
            xs[index] = next_leaf
            next_leaf += 1.0
        elif done:
            xs[index] = (xs[kids[0]] + xs[kids[-1]]) / 2.0
        else:
            stack.append((index, True))
            stack.extend((kid, False) for kid in reversed(kids))
    return xs


def _as_columns(
    columns: AgentColumns,
    tree: Lineage,
    drawn: list[tuple[str, int, int, int, float]],
    xs: list[float],
    *,
    root: int | None,
    depth: int,
) -> dict[str, Any]:
    def finite(value: float) -> float | None:
        return None if math.isnan(value) else float(value)

    nodes: dict[str, list[Any]] = {
        key: []
        for key in (
            "id",
            "kind",
            "x",
            "y",
            "parent",
            "score",
            "status",
            "operator",
            "model",
            "hidden",
            "hidden_best",
            "clade_size",
            "clade_best",
            "best_path",
        )
    }
    for (kind, row, parent_index, hidden, hidden_best), x in zip(drawn, xs):
        nodes["id"].append(int(columns.ids[row]))
        nodes["kind"].append(kind)
        nodes["x"].append(x)
        nodes["y"].append(int(tree.depth[row]) + (1 if kind == "more" else 0))
        nodes["parent"].append(parent_index)
        nodes["score"].append(finite(columns.scores[row]) if kind != "more" else finite(hidden_best))
        nodes["status"].append(columns.statuses[row] if kind != "more" else "")
        nodes["operator"].append(columns.operators[row] if kind != "more" else "")
        nodes["model"].append(columns.models[row] if kind != "more" else "")
        nodes["hidden"].append(hidden)
        nodes["hidden_best"].append(finite(hidden_best))
        nodes["clade_size"].append(int(tree.clade_size[row]))
        nodes["clade_best"].append(finite(tree.clade_best[row]))
        nodes["best_path"].append(kind == "agent" and row in tree.best_path)
    return {"total": len(columns), "shown": len(drawn), "root": root, "depth": depth, "nodes": nodes}
