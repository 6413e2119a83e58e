"""Genome identity and shape: the content hash an agent's files are stored under, and the path rules."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from cambrian.archive.errors import InvalidGenome

__all__ = ["check_genome_paths", "genome_hash"]


def genome_hash(files: Mapping[str, str]) -> str:
    """sha256 hex digest (64 chars) of the sorted (path, text) pairs.

    The pairs are JSON-encoded, so two different genomes never encode to the same bytes
    (plain concatenation would let {"a": "bc"} and {"ab": "c"} collide).
    """
    pairs = sorted((str(path), str(text)) for path, text in files.items())
    encoded = json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()


def check_genome_paths(files: Mapping[str, str], entry: str) -> None:
    """Raise InvalidGenome unless every path is relative, inside the genome, and `entry` is one."""
    if not files:
        raise InvalidGenome("a genome needs at least one file", fix="pass the agent's files")
    for path in files:
        parts = Path(path).parts
        if not path or path.startswith(("/", "\\")) or ".." in parts or "\\" in path or ":" in path:
            raise InvalidGenome(
                f"genome path {path!r} is not a plain relative path",
                fix="use forward-slash paths inside the agent folder, without '..', drive letters or a leading '/'",
            )
    if entry not in files:
        raise InvalidGenome(
            f"entry file {entry!r} is not among the genome's files {sorted(files)}",
            fix="set entry to the relative path of one of the agent's files",
        )
