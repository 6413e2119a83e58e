"""Cambrian: open-ended search for self-improving agents.

The library's face:

- `search(benchmark, *, model, iterations, sandbox, runs_dir, name, config) -> Run`: a search to its budget,
  as `cambrian run` does; `search_async` is its twin for an event loop;
- `open_run(name_or_path, *, runs_dir, store) -> Run`: a run made earlier, by the CLI or another process;
- `Run`: `.seed_score`, `.best(n)`, `.agent(id)`, `.lineage()`, `.to_pandas()`, `.export(dir, best=n)`,
  `.evaluate(agent, split=...)`, `.report(path)`; `Agent`: one agent as plain data, its code included;
- `CambrianError`: the root of every error a user sees (`str(error)` the cause, `error.fix` the fix).

One import package over the repository's folders: `cambrian.archive` (the lineage store),
`cambrian.meta_agent` (the search loop, operators, FM access, CLI), `cambrian.sandbox` (where untrusted
code runs), `cambrian.evaluators` (benchmarks: plugins import `cambrian.evaluators.base`) and `cambrian.ui`
(the browser UI). The names above are imported on first use, so `import cambrian` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cambrian.errors import CambrianError

if TYPE_CHECKING:
    from cambrian._api import Agent, Run, open_run, search, search_async

__version__ = "0.1.0"
__all__ = ["Agent", "CambrianError", "Run", "open_run", "search", "search_async"]

_API = frozenset({"Agent", "Run", "open_run", "search", "search_async"})


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(importlib.import_module("cambrian._api"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cambrian' has no attribute {name!r}")
