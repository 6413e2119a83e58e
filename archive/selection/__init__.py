"""Parent selection: pure, seeded strategies over an `ArchiveView`.

Every strategy answers two questions: `probabilities(view)` (the chance each view row is picked by one
draw; sums to 1) and `select(view, k, rng)` (k agent ids, drawn independently with replacement). Nothing
here does I/O; the same view and the same seeded `np.random.Generator` give the same parents. Everything
is vectorised: at 100k agents one `select` costs about 0.1-2 ms (rank-based strategies reuse the view's
incremental ranking; `hgm` draws n Beta samples per pick, about 10 ms).

- `ParentSelector`: the protocol;
- the classic strategies `Uniform`, `Greedy`, `Tournament`, `PowerLaw`, `DGM`;
- the open-ended ones `HGM` (Huxley-Goedel clade metaproductivity), `MapElites`, `Novelty`;
- `make_selector(name, **params)`, `SELECTORS` (built-ins, then the strategies installed packages register
  under `cambrian.selectors`), `STRATEGY_NAMES`, `SELECTOR_CLASSES` (the built-ins): strategies by name;
  `build_selector(factory, name, params)` and `selector_parameters(factory)` for any strategy class;
- `SelectorNeeds` / `selector_needs(selector)`: what a strategy reads besides scores (descriptor axes,
  k nearest neighbours), so the loop can check the run provides it.
"""

from cambrian.archive.selection._base import ParentSelector, SelectorNeeds, selector_needs
from cambrian.archive.selection._classic import DGM, Greedy, PowerLaw, Tournament, Uniform
from cambrian.archive.selection._open_ended import HGM, MapElites, Novelty
from cambrian.archive.selection._registry import (
    SELECTOR_CLASSES,
    SELECTORS,
    STRATEGY_NAMES,
    build_selector,
    make_selector,
    selector_parameters,
)

__all__ = [
    "DGM",
    "HGM",
    "SELECTOR_CLASSES",
    "SELECTORS",
    "STRATEGY_NAMES",
    "Greedy",
    "MapElites",
    "Novelty",
    "ParentSelector",
    "PowerLaw",
    "SelectorNeeds",
    "Tournament",
    "Uniform",
    "build_selector",
    "make_selector",
    "selector_needs",
    "selector_parameters",
]
