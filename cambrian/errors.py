"""The one root of every error Cambrian shows a user: `CambrianError(message, *, fix)`.

`str(error)` names the cause; `error.fix` says what to do about it. Each package derives its own
base from this class (`ArchiveError`, `SandboxError`, `BenchmarkError`, `LLMError`, `EditError`,
`ConfigError`, ...), and the CLI catches this one type, printing both and exiting non-zero.

It lives in a module of its own, importing nothing, because every package needs it and `archive`
and `sandbox` import no other Cambrian package: this module is the one exception they share.
Code that runs inside a sandbox (`evaluators/harness`, `sandbox/container_runner.py`) stays on the
standard library and does not use it.
"""

from __future__ import annotations

__all__ = ["CambrianError"]


class CambrianError(Exception):
    """An error a user can cause or fix: the message names the cause, `fix` the fix (may be empty)."""

    def __init__(self, message: str, *, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix
