"""`cambrian`: start a search, browse its lineage, export the best agents.

The app (`app`, `main`) and its command groups, one module each: `run`/`resume`/`db upgrade` (`_run`),
`runs`/`status`/`tree`/`show`/`diff`/`export` (`_browse`), `eval` (`_eval`, over
`cambrian.meta_agent.search.holdout`: scoring a folder or an archived agent apart from the search),
`doctor`/`config`/`benchmarks` (`_setup`, with `_doctor`), `models`/`serve` (`_models`), `sandbox
build|check` (`_sandbox`) and `ui`/`report` (`_ui`: the browser UI and the self-contained HTML report, from
the `ui` package). Each is a thin layer: the work is done by the same calls the library API (`cambrian`)
makes. Importing this package registers them all. Also public: `diagnose` and `Finding` (what `cambrian doctor` checks).
"""

# isort: off
# Importing a command module registers its commands; the help lists them in this order.
from cambrian.meta_agent.cli import _run, _browse, _eval, _setup, _models, _sandbox, _ui  # noqa: F401 - imported for their side effect

# isort: on
from typing import TYPE_CHECKING

from cambrian.meta_agent._lazy import lazy_exports
from cambrian.meta_agent.cli._app import app, main

if TYPE_CHECKING:
    from cambrian.meta_agent.cli._doctor import Finding, diagnose


# The doctor's pieces, imported on first use (meta_agent/_lazy.py): a command needs neither.
__getattr__ = lazy_exports(
    __name__,
    {
        "cambrian.meta_agent.cli._doctor": ("Finding", "diagnose"),
    },
)

__all__ = ["Finding", "app", "diagnose", "main"]
