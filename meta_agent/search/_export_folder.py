"""An exported agent's folder read as something someone may have sent you: its manifest and its files, safely.

A folder made by `cambrian export` (`archive.export`) holds the agent's files and a `manifest.json` that lists
them. `cambrian eval DIR` trusts neither: before a byte is read, every listed path is checked to be a plain
relative path (the archive's rule), inside the folder, with no link on the way, one regular file (not a
device, fifo, hard link or folder) and within the size limits (`MAX_EXPORT_FILES`, `MAX_EXPORT_FILE_BYTES`,
`MAX_EXPORT_BYTES`). Whatever fails is an `EvalTargetError` naming the file and the fix.

`read_manifest(folder)` and `read_genome(folder, manifest)` are what `holdout` evaluates a folder from;
`checked_size(path, limit=...)` is the one check every file passes.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from cambrian.archive.errors import InvalidGenome
from cambrian.archive.export import MANIFEST_NAME
from cambrian.archive.store import check_genome_paths
from cambrian.evaluators.base import Genome
from cambrian.meta_agent.errors import EvalTargetError

__all__ = [
    "MAX_EXPORT_BYTES",
    "MAX_EXPORT_FILES",
    "MAX_EXPORT_FILE_BYTES",
    "checked_size",
    "read_genome",
    "read_manifest",
]

#: The most an exported folder may hold, checked (lstat, before any read) for a folder someone sent you: a 1 GB
#: file listed in its manifest once drove `cambrian eval` to 7.2 GB of memory before any check.
MAX_EXPORT_FILES = 1000
MAX_EXPORT_FILE_BYTES = 4 * 1024 * 1024
MAX_EXPORT_BYTES = 16 * 1024 * 1024


def checked_size(path: Path, *, limit: int) -> int:
    """The size of `path` from lstat (no read, no link followed); EvalTargetError for what is not one plain file
    of at most `limit` bytes: a link, a device or fifo (a read could block or never end), a hard link (the same
    data under another name, maybe outside the folder), a file too large."""
    fix = "export the agent again with `cambrian export RUN --agent ID --to NEW_DIR`"
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise EvalTargetError(f"{path} is missing: the manifest lists it", fix=fix) from None
    if stat.S_ISLNK(info.st_mode):
        raise EvalTargetError(
            f"{path} is a symbolic link; an exported agent's files are plain files",
            fix="replace the link with the file itself, or export the agent again",
        )
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a device, fifo or socket, not a file"
        raise EvalTargetError(f"{path} is {kind}; an exported agent's files are plain files", fix=fix)
    if info.st_nlink > 1:
        raise EvalTargetError(
            f"{path} is a hard link ({info.st_nlink} names for one file); an export holds copies",
            fix="replace it with a copy of the file, or export the agent again",
        )
    if info.st_size > limit:
        raise EvalTargetError(
            f"{path} has {info.st_size:,} bytes, more than the {limit:,} an exported file may",
            fix="an agent's files are source code: check what this folder holds",
        )
    return info.st_size


def read_manifest(folder: Path) -> dict[str, Any]:
    """The folder's manifest.json, checked before it is read (one plain file of at most MAX_EXPORT_FILE_BYTES)
    and after (a JSON object with its entry, files and config); EvalTargetError naming what is wrong."""
    path = folder / MANIFEST_NAME
    fix = "give a folder made by `cambrian export RUN --to DIR` (the agent-<ID> sub-folder), or RUN:AGENT"
    if not (folder / MANIFEST_NAME).exists() and not (folder / MANIFEST_NAME).is_symlink():
        raise EvalTargetError(f"{folder} has no {MANIFEST_NAME}", fix=fix)
    checked_size(path, limit=MAX_EXPORT_FILE_BYTES)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvalTargetError(f"{folder} has no {MANIFEST_NAME}", fix=fix) from None
    except json.JSONDecodeError as exc:
        raise EvalTargetError(f"{path} is not valid JSON ({exc})", fix=fix) from None
    missing = [key for key in ("entry", "files", "config") if not manifest.get(key)]
    if not isinstance(manifest, dict) or missing:
        raise EvalTargetError(f"{path} lacks {', '.join(missing) or 'its fields'}", fix=fix)
    return manifest


def read_genome(folder: Path, manifest: dict[str, Any]) -> Genome:
    """The agent's files: plain relative paths (the archive's rule), regular files inside `folder`, no links."""
    names, entry = manifest["files"], manifest["entry"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not isinstance(entry, str):
        raise EvalTargetError(
            f"{folder / MANIFEST_NAME}: 'files' must be a list of paths and 'entry' a path",
            fix="export the agent again",
        )
    try:
        check_genome_paths(dict.fromkeys(names, ""), entry)
    except InvalidGenome as exc:
        raise EvalTargetError(f"{folder / MANIFEST_NAME}: {exc}", fix=exc.fix) from None
    if len(names) > MAX_EXPORT_FILES:
        raise EvalTargetError(
            f"{folder / MANIFEST_NAME} lists {len(names):,} files, more than {MAX_EXPORT_FILES:,}",
            fix="an agent is a few source files: check what this folder holds",
        )
    root = folder.resolve()
    files: dict[str, str] = {}
    total = 0
    for relative in names:
        path = folder / relative
        walked = folder
        for part in Path(relative).parts:  # no link anywhere on the way: a link could point at a host file
            walked = walked / part
            if walked.is_symlink():
                raise EvalTargetError(
                    f"{walked} is a symbolic link; an exported agent's files are plain files",
                    fix="replace the link with the file itself, or export the agent again",
                )
        if not path.exists() or not path.resolve().is_relative_to(root):
            raise EvalTargetError(
                f"{folder} lacks {relative}, a file of the exported agent",
                fix="export the agent again with `cambrian export RUN --agent ID --to NEW_DIR`",
            )
        total += checked_size(path, limit=MAX_EXPORT_FILE_BYTES)
        if total > MAX_EXPORT_BYTES:
            raise EvalTargetError(
                f"the files of {folder} hold more than {MAX_EXPORT_BYTES:,} bytes in all",
                fix="an agent is a few source files: check what this folder holds",
            )
        files[relative] = path.read_text(encoding="utf-8")
    return Genome(files=files, entry=entry)
