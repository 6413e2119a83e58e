"""Cambrian: open-ended search for self-improving agents.

One import package over the repository's folders: `cambrian.archive` (the lineage store),
`cambrian.meta_agent` (the search loop, operators, FM access, CLI), `cambrian.sandbox` (where untrusted
code runs), `cambrian.evaluators` (benchmarks) and `cambrian.ui` (the browser UI); `cambrian.errors` holds
`CambrianError`, the root of every error a user sees.
"""

__version__ = "0.1.0"
