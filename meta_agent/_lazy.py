"""`lazy_exports`: a package's public names imported from their modules on first use (PEP 562).

A package whose `__init__` imports every module makes each of its users pay for all of them: `cambrian status`
would import the search loop, the sandbox and the FM client to read an archive. A package using this keeps its
names in `__all__` and under `if TYPE_CHECKING:` (for type checkers), and gives `lazy_exports` the same names
by module; `tests/test_layering.py` checks that the two agree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, names: Mapping[str, Sequence[str]]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: `names` maps a module to the names it exports there; a name is
    imported from its module when first read, then kept on the package."""
    where = {name: module for module, exported in names.items() for name in exported}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
