"""JSON for the browser: safe inside a `<script type="application/json">` block and for JS to read.

`<`, `>` and `&` become \\u003c, \\u003e, \\u0026 (so no `</script>` or `<!--` can end or bend the
block), as do U+2028 and U+2029; NaN and infinities become null, which JSON has no other word for.
"""

from __future__ import annotations

import json
import math
from typing import Any

from markupsafe import Markup

_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def dumps(value: Any) -> str:
    """`value` as compact JSON with the characters above escaped; NaN and ±inf as null."""
    text = json.dumps(_finite(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for char, escape in _ESCAPES.items():
        text = text.replace(char, escape)
    return text


def script_json(value: Any) -> Markup:
    """`dumps(value)` marked safe for a template's `<script type="application/json">` block."""
    return Markup(dumps(value))  # every character that could end the block is escaped
