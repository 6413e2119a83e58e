"""A discovered agent as a standalone folder: its files, a manifest, and the diff chain from the seed.

Layout of an export folder:

    <agent files>            exactly the genome, runnable as is
    manifest.json            ids, scores per split, lineage chain, models, frozen config, hashes
    diffs/NNN-agent<ID>.diff one unified diff per lineage step: parent -> agent <ID>, NNN from 001
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cambrian.archive.errors import AgentNotFound, ArchiveError, DestinationNotEmpty, InvalidGenome
from cambrian.archive.models import Agent, Run
from cambrian.archive.store import Archive, check_genome_paths

MANIFEST_NAME = "manifest.json"
DIFFS_DIR = "diffs"
#: Bumped when the manifest's fields change meaning, so readers can tell versions apart.
MANIFEST_FORMAT = 1

_NO_NEWLINE = "\n\\ No newline at end of file\n"


def unified_diff(files_a: Mapping[str, str], files_b: Mapping[str, str], label_a: str, label_b: str) -> str:
    """A git-style unified diff of two genomes, file by file in path order ("" if identical).

    Paths read `<label>/<path>`; an added or removed file diffs against /dev/null.
    """
    sections: list[str] = []
    for path in sorted(set(files_a) | set(files_b)):
        old, new = files_a.get(path), files_b.get(path)
        if old == new:
            continue
        lines = difflib.unified_diff(
            _lines(old or ""),
            _lines(new or ""),
            fromfile=f"{label_a}/{path}" if old is not None else "/dev/null",
            tofile=f"{label_b}/{path}" if new is not None else "/dev/null",
        )
        sections.append("".join(_mark_missing_newline(line) for line in lines))
    return "".join(sections)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _mark_missing_newline(line: str) -> str:
    # difflib would glue a last line without "\n" to the next diff line; say so as git does.
    if line.endswith("\n"):
        return line
    return line + _NO_NEWLINE


def export_agents(archive: Archive, run: Run, to: Path, *, best: int = 1, agent: int | None = None) -> list[Path]:
    """Write the `best` best agents of `run` (or its one agent `agent`) as folders `to/agent-<id>`, with the
    run's frozen config in each manifest; returns the folders (what `cambrian export` and `Run.export` do).

    Refused before anything is written: a `to` that is a file, an `agent` of another run (AgentNotFound,
    naming its run), a run with no evaluated agent yet.
    """
    to = Path(to)
    if to.exists() and not to.is_dir():
        raise ArchiveError(f"{to} is a file, and the export is a folder", fix="export to a folder path")
    if agent is not None:
        row = archive.get_agent(agent)
        if row.run_id != run.id:
            owner = archive.get_run(int(row.run_id)).name
            raise AgentNotFound(
                f"agent {agent} is not in run {run.name}: it belongs to run {owner} in the same archive",
                fix=f"pick an agent of {run.name}: `cambrian tree {run.name}` lists them",
            )
        ids = [agent]
    else:
        ids = [a.key for a in archive.best(run.key, n=best)]
    if not ids:
        raise ArchiveError(
            f"run {run.name} has no evaluated agent to export yet",
            fix=f"wait until its seed is evaluated, or `cambrian resume {run.name}`",
        )
    return [export_agent(archive, i, to / f"agent-{i}", config_json=run.config_json) for i in ids]


def export_agent(archive: Archive, agent_id: int, dest: Path, *, config_json: str | None = None) -> Path:
    """Write agent `agent_id` as a standalone folder at `dest` (created; must be absent or empty).

    `config_json` overrides the run's frozen config in the manifest (e.g. the CLI's resolved
    config). Returns `dest`. Raises DestinationNotEmpty rather than overwrite anything, and
    ArchiveError for an agent without code (an invalid proposal).
    """
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise DestinationNotEmpty(
            f"export destination {dest} already exists and is not an empty folder",
            fix="choose a new --to folder, or remove the old export first",
        )
    agent = archive.get_agent(agent_id)
    if agent.genome_hash is None:
        raise ArchiveError(
            f"agent {agent_id} has no code to export (status {agent.status.value}: {agent.invalid_reason})",
            fix="export an evaluated agent, e.g. `cambrian export RUN --best 1`",
        )
    files, entry = archive.get_genome(agent.genome_hash)
    check_genome_paths(files, entry)
    reserved = [path for path in files if path == MANIFEST_NAME or path.split("/")[0] == DIFFS_DIR]
    if reserved:
        raise InvalidGenome(
            f"agent {agent_id} has files {reserved} that clash with the export's own manifest/diffs",
            fix="rename those files in the agent's genome",
        )
    run = archive.get_run(agent.run_id)
    lineage = [*reversed(archive.ancestors(agent_id)), agent]
    genomes = {a.id: archive.get_genome(a.genome_hash)[0] if a.genome_hash else {} for a in lineage}
    # Everything that can fail is read before the first write: no half-written exports.
    manifest = _manifest(
        archive,
        agent,
        run_name=run.name,
        benchmark=run.benchmark,
        cambrian_version=run.cambrian_version,
        config_json=config_json if config_json is not None else run.config_json,
        entry=entry,
        files=files,
        lineage=lineage,
    )

    dest.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", newline="")  # exact bytes, no newline translation
    diffs = dest / DIFFS_DIR
    diffs.mkdir()
    for step, (parent, child) in enumerate(zip(lineage, lineage[1:]), start=1):
        diff = unified_diff(genomes[parent.id], genomes[child.id], f"agent{parent.id}", f"agent{child.id}")
        (diffs / f"{step:03d}-agent{child.id}.diff").write_text(diff, encoding="utf-8")

    (dest / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return dest


def _manifest(
    archive: Archive,
    agent: Agent,
    *,
    run_name: str,
    benchmark: str,
    cambrian_version: str,
    config_json: str,
    entry: str,
    files: Mapping[str, str],
    lineage: list[Agent],
) -> dict[str, Any]:
    splits: dict[str, dict[str, Any]] = {}
    for evaluation in archive.evaluations(agent.key):
        split = splits.setdefault(evaluation.split, {"n_tasks": 0, "n_passed": 0, "score_sum": 0.0})
        split["n_tasks"] += 1
        split["n_passed"] += int(evaluation.passed)
        split["score_sum"] += evaluation.score
    scores = {
        name: {
            "n_tasks": split["n_tasks"],
            "n_passed": split["n_passed"],
            "mean_task_score": split["score_sum"] / split["n_tasks"],
        }
        for name, split in sorted(splits.items())
    }
    try:
        config = json.loads(config_json) if config_json else None
    except json.JSONDecodeError as error:
        raise ArchiveError(
            f"the config of run {run_name!r} is not valid JSON ({error})",
            fix="pass the run's config explicitly (config_json=...) to export it",
        ) from None
    return {
        "format": MANIFEST_FORMAT,
        "agent_id": agent.id,
        "run_name": run_name,
        "benchmark": benchmark,
        "genome_hash": agent.genome_hash,
        "entry": entry,
        "files": sorted(files),
        "status": agent.status.value,
        "score": agent.score,
        "holdout_score": agent.holdout_score,
        "stage_reached": agent.stage_reached,
        "scores": scores,
        "lineage": [
            {
                "id": a.id,
                "parent_id": a.parent_id,
                "second_parent_id": a.second_parent_id,
                "iteration": a.iteration,
                "operator": a.operator,
                "model": a.model,
                "score": a.score,
                "genome_hash": a.genome_hash,
            }
            for a in lineage
        ],
        "diffs": [f"{DIFFS_DIR}/{step:03d}-agent{a.id}.diff" for step, a in enumerate(lineage[1:], start=1)],
        "models": sorted({a.model for a in lineage if a.model}),
        "config": config,
        "cambrian_version": cambrian_version,
        "exported_at": datetime.now(timezone.utc).isoformat(),
    }
