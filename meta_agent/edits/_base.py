"""What every edit module shares: `EditError`, `EditBlock` and the fence and line helpers.

`_evolve_blocks` (EVOLVE-BLOCK regions), `_search_replace` (SEARCH/REPLACE blocks) and `_extract`
(whole-file replies) import from here, so none of them imports another's internals in a cycle.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cambrian.errors import CambrianError

_FENCE_RE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^\s`]*)")
# A line holding nothing but a fence, opening (```python) or closing (```): never a line of code.
_FENCE_ONLY_RE = re.compile(r"^\s*(?:`{3,}|~{3,})\s*[\w+.#-]*\s*$")


class EditError(CambrianError):
    """An FM reply that could not be turned into a child genome (the candidate's fault).

    `str(error)` is the public reason, complete on its own; `fix` names the fix.
    """

    def __init__(self, message: str, *, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix or "follow the reply format shown in the prompt exactly"


@dataclass(frozen=True)
class EditBlock:
    """One SEARCH/REPLACE block of a reply.

    path: the file named on the line before `<<<<<<< SEARCH`, or None (the entry file).
    search, replace: the lines of each section, each ending in a newline ("" = no lines).
    index: the block's number in the reply, from 1.
    """

    path: str | None
    search: str
    replace: str
    index: int


def _join_lines(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in lines)
