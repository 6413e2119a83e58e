"""Parent selection: pure, seeded strategies over an `ArchiveView`.

Every strategy answers two questions: `probabilities(view)` (the chance each view row is picked by one
draw; sums to 1) and `select(view, k, rng)` (k agent ids, drawn independently with replacement). Nothing
here does I/O; the same view and the same seeded `np.random.Generator` give the same parents. Everything
is vectorised: at 100k agents one `select` costs about 0.1-2 ms (rank-based strategies reuse the view's
incremental ranking; `hgm` draws n Beta samples per pick, about 10 ms).

- `ParentSelector`: the protocol;
- the classic strategies `Uniform`, `Greedy`, `Tournament`, `PowerLaw`, `DGM`;
- the open-ended ones `HGM` (Huxley-Goedel clade metaproductivity), `MapElites`, `Novelty`;
- `make_selector(name, **params)` and `STRATEGY_NAMES`: strategies by name.
"""

from archive.selection._base import ParentSelector
from archive.selection._classic import DGM, Greedy, PowerLaw, Tournament, Uniform
from archive.selection._open_ended import HGM, MapElites, Novelty
from archive.selection._registry import STRATEGY_NAMES, make_selector

__all__ = [
    "DGM", "HGM", "STRATEGY_NAMES", "Greedy", "MapElites", "Novelty", "ParentSelector", "PowerLaw", "Tournament",
    "Uniform", "make_selector",
]  # fmt: skip
