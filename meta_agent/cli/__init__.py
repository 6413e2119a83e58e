"""`cambrian`: start a search, browse its lineage, export the best agents.

The app (`app`, `main`) and its command groups, one module each: `run`/`resume`/`db upgrade` (`_run`),
`runs`/`status`/`tree`/`show`/`diff`/`export` (`_browse`), `eval` (`_eval`, with `_holdout`: scoring a
folder or an archived agent apart from the search), `doctor`/`config`/`benchmarks` (`_setup`, with
`_doctor`), `models`/`serve` (`_models`), `sandbox build|check` (`_sandbox`) and `ui`/`report` (`_ui`: the browser
UI and the self-contained HTML report, from the `ui` package). Importing this package
registers them all. Also public: `diagnose` (what `cambrian doctor` checks) and the eval pieces
`evaluate_target` (an `EvalOutcome`), `folder_config`, `EvalTargetError`, `HOLDOUT_FILE`.
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
    from cambrian.meta_agent.cli._holdout import (
        HOLDOUT_FILE,
        EvalOutcome,
        EvalTargetError,
        evaluate_target,
        folder_config,
    )


# The doctor's and the eval pieces, imported on first use (meta_agent/_lazy.py): a command needs neither.
__getattr__ = lazy_exports(
    __name__,
    {
        "cambrian.meta_agent.cli._doctor": ("Finding", "diagnose"),
        "cambrian.meta_agent.cli._holdout": (
            "HOLDOUT_FILE",
            "EvalOutcome",
            "EvalTargetError",
            "evaluate_target",
            "folder_config",
        ),  # fmt: skip
    },
)

__all__ = [
    "HOLDOUT_FILE", "EvalOutcome", "EvalTargetError", "Finding", "app", "diagnose", "evaluate_target", "folder_config",
    "main",
]  # fmt: skip
