"""Turning an FM's reply into a checked child: SEARCH/REPLACE blocks, fenced code, EVOLVE-BLOCK rules,
and the static check every child passes before it may spend sandbox time.

Pure functions, no I/O (`EditPool` runs the same functions in worker processes). Every refusal is an
`EditError` whose message is PUBLIC: it is stored on the invalid agent and shown to the next prompt,
so it names the block, the file and the line, and says what to do differently.

- `parse_search_replace`, `apply_blocks`, `FORMAT_HINT`: SEARCH/REPLACE blocks (aider / OpenEvolve
  style, 5-9 marker characters), matched exactly, then by indentation and trailing space;
- `extract_code`, `trim_prose`: the code of a whole-file reply;
- `evolve_regions`, `check_outside_unchanged`, `splice_into_region`: EVOLVE-BLOCK-START/END regions,
  the only part of a file an edit may change when the file has them;
- `check_child`, `CheckedChild`, `KNOWN_IMPORTS`: compiles, no undefined names (a dropped well-known
  import is added back), the entry function still callable, not a neutral copy;
- `behaviour_key`: a module's AST without what cannot change what it does (the neutral-copy test);
- `EditPool`, `edit_processes`: making and checking children in worker processes (`search.edit_processes`);
- `EditError`, `EditBlock`.

The block format:

    <<<<<<< SEARCH
    old lines
    =======
    new lines
    >>>>>>> REPLACE
"""

from cambrian.meta_agent.edits._base import EditBlock, EditError
from cambrian.meta_agent.edits._evolve_blocks import check_outside_unchanged, evolve_regions, splice_into_region
from cambrian.meta_agent.edits._extract import extract_code, trim_prose
from cambrian.meta_agent.edits._neutral import behaviour_key
from cambrian.meta_agent.edits._pool import EditPool, edit_processes
from cambrian.meta_agent.edits._search_replace import FORMAT_HINT, apply_blocks, parse_search_replace
from cambrian.meta_agent.edits._static_check import KNOWN_IMPORTS, CheckedChild, check_child

__all__ = [
    "FORMAT_HINT",
    "KNOWN_IMPORTS",
    "CheckedChild",
    "EditBlock",
    "EditError",
    "EditPool",
    "apply_blocks",
    "behaviour_key",
    "check_child",
    "check_outside_unchanged",
    "edit_processes",
    "evolve_regions",
    "extract_code",
    "parse_search_replace",
    "splice_into_region",
    "trim_prose",
]
