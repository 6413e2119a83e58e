"""Everything the agent page shows of one agent, read in one go from a read-only archive.

Its code, its diff against its parent (and any agent chosen), scores, per-task results, the FM
calls that made it or that it made from its sandbox with their full prompts and replies, its
lineage from the seed, the islands it is on (in a run with islands), and the `cambrian export` command for it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cambrian.archive.errors import AgentNotFound
from cambrian.archive.islands import islands_of
from cambrian.archive.models import Agent, Evaluation, IslandMigrant, LLMCall, Run
from cambrian.archive.store import Archive
from cambrian.ui._code import FileDiff, diff_files
from cambrian.ui._data import run_config, shown_store

#: What the page says for a call whose request was never stored.
PROMPT_NOT_RECORDED = "prompt not recorded (archive written before prompts were kept)"


@dataclass(frozen=True)
class Message:
    """One chat message of an FM request."""

    role: str
    content: str


@dataclass(frozen=True)
class CallView:
    """One FM call with what it sent and got back; messages None when the request was not recorded."""

    call: LLMCall
    messages: list[Message] | None
    params: dict[str, Any]
    reply: str | None


@dataclass(frozen=True)
class AgentDetail:
    """The agent page's data. files: path -> text ({} for an agent with no code)."""

    run: Run
    agent: Agent
    files: dict[str, str]
    entry: str | None
    lineage: list[Agent]  # the seed ... the agent
    children: list[Agent]
    evaluations: list[Evaluation]
    calls: list[CallView]
    parent_diff: list[FileDiff] | None
    against: Agent | None = None
    against_diff: list[FileDiff] | None = None
    export_command: str = ""
    notes: list[str] = field(default_factory=list)
    islands: list[int] = field(default_factory=list)  # the islands it is on, its home first; [] without islands
    joined: list[IslandMigrant] = field(default_factory=list)  # its migrations to other islands, in order


def run_agent(archive: Archive, run: Run, agent_id: int) -> Agent:
    """The agent with this id if it belongs to `run`; AgentNotFound otherwise."""
    agent = archive.get_agent(agent_id)
    if agent.run_id != run.id:
        raise AgentNotFound(
            f"agent {agent_id} is not in run {run.name!r}", fix="pick an agent from the run's tree or score plot"
        )
    return agent


def agent_files(archive: Archive, agent: Agent) -> tuple[dict[str, str], str | None]:
    """(path -> text, entry) of the agent's genome; ({}, None) for an agent with no code."""
    if not agent.genome_hash:
        return {}, None
    return archive.get_genome(agent.genome_hash)


def fm_calls(archive: Archive, agent_id: int) -> list[CallView]:
    """The FM calls attributed to the agent, oldest first, each with its request messages and reply."""
    calls = archive.agent_llm_calls(agent_id)
    requests, responses = archive.llm_exchanges(call.request_hash for call in calls)
    views = []
    for call in calls:
        request = requests.get(call.request_hash)
        response = responses.get(call.request_hash)
        views.append(
            CallView(
                call=call,
                messages=None if request is None else _messages(request.messages),
                params={} if request is None else _object(request.params),
                reply=None if response is None else response.text,
            )
        )
    return views


def _messages(text: str) -> list[Message]:
    try:
        raw = json.loads(text)
    except ValueError:
        return [Message("?", text)]
    if not isinstance(raw, list):
        return [Message("?", text)]
    return [
        Message(str(m.get("role", "?")), _content(m.get("content"))) if isinstance(m, dict) else Message("?", str(m))
        for m in raw
    ]


def _content(content: Any) -> str:
    """A message's text: a string as is; a list of parts (the multi-part form) joined; anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", p)) if isinstance(p, dict) else str(p) for p in content)
    return json.dumps(content, indent=2)


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def export_command(runs_dir: Path, run: Run, agent_id: int, store: str | None = None) -> str:
    """The shell command that exports this agent as a standalone folder."""
    where = (
        f"--runs-dir {shlex.quote(str(runs_dir))}" if store is None else f"--store {shlex.quote(shown_store(store))}"
    )
    return (
        f"cambrian export {shlex.quote(run.name)} --agent {agent_id} --to {shlex.quote(f'exports/agent-{agent_id}')}"
        f" {where}"
    )


def agent_detail(
    archive: Archive, run: Run, agent_id: int, *, runs_dir: Path, against: int | None = None, store: str | None = None
) -> AgentDetail:
    """The agent page's data; AgentNotFound when the agent (or `against`) is not in the run."""
    agent = run_agent(archive, run, agent_id)
    files, entry = agent_files(archive, agent)
    ancestors = archive.ancestors(agent.key)
    parent_diff = None
    notes = []
    if agent.parent_id is not None:
        parent_files, _ = agent_files(archive, ancestors[0])
        parent_diff = diff_files(parent_files, files) if files else None
        if not files:
            notes.append("this agent has no code (its proposal failed before a genome was stored): no diff")
    count = int((run_config(run).get("search") or {}).get("islands", 1))
    joined = [m for m in archive.island_migrants(run.key) if m.agent_id == agent.id] if agent.island is not None else []
    other, other_diff = None, None
    if against is not None:
        other = run_agent(archive, run, against)
        other_diff = diff_files(agent_files(archive, other)[0], files)
    return AgentDetail(
        run=run,
        agent=agent,
        files=files,
        entry=entry,
        lineage=[*reversed(ancestors), agent],
        children=archive.children(agent.key),
        evaluations=archive.evaluations(agent.key),
        calls=fm_calls(archive, agent.key),
        parent_diff=parent_diff,
        against=other,
        against_diff=other_diff,
        export_command=export_command(runs_dir, run, agent.key, store),
        notes=notes,
        islands=islands_of(agent, joined, count) if count > 1 or agent.island is not None else [],
        joined=joined,
    )
