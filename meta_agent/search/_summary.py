"""What a finished search amounts to: the gain over the seed, the edits that made it, and why proposals failed.

Read from the archive alone, so `cambrian run`, `resume` and a bench print the same facts. Reasons
are grouped into a few categories (`categorize`) so a histogram says what to fix.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from cambrian.archive.lineage import improves
from cambrian.archive.models import Agent, AgentStatus
from cambrian.archive.store import Archive

_CATEGORIES: tuple[tuple[str, str], ...] = (
    (r"no SEARCH/REPLACE block", "format: no SEARCH/REPLACE block"),
    (r"missing its|more than one =======|no ======= line|REPLACE marker with no", "format: malformed block"),
    (r"no ```\w* block|had no code", "format: no code block"),
    (r"did not match", "SEARCH did not match"),
    (r"matches \d+ places", "SEARCH ambiguous"),
    (r"changes nothing|left the program unchanged|identical to agent", "no change"),
    (r"near-duplicate", "near-duplicate"),
    (r"no code for the EVOLVE-BLOCK region", "rewrite: no code for the region"),  # a content miss, not an edit
    (r"no numeric constants or operators", "nothing for ast_mutate to change"),
    (r"needs a statement in the editable code|found no line of", "no lines to rewrite"),
    (r"writes? an EVOLVE-BLOCK marker", "wrote an EVOLVE-BLOCK marker"),  # not outside: a marker in the new code
    (r"had no new lines", "no new lines"),  # a lines reply of only marker comments is empty, not outside
    (r"EVOLVE-BLOCK", "edit outside EVOLVE-BLOCK"),
    (r"not valid Python|cannot be compiled", "syntax error"),
    (r"undefined name|undefined local", "static: undefined name"),
    (r"no longer defines|cannot be called the way", "static: entry function lost"),
    (r"static check", "static: other"),
    (r"copy of program B", "crossover copied B"),
    (r"the FM refused", "FM refused the prompt"),
    (r"timed out|timeout", "timeout"),
    (r"crashed: (\w+)", "crash: {0}"),
    (r"invalid packing: .*overlap", "invalid packing: overlap"),
    (r"invalid packing: .*(?:extends past|negative)", "invalid packing: outside the square"),
    (r"invalid packing: returned \d+ circles", "invalid packing: wrong number of circles"),
    (r"invalid packing", "invalid packing: other"),
    (r"sandbox fault", "sandbox fault"),
    (r"no result", "no result (exited without an answer)"),
)


def categorize(reason: str) -> str:
    """The histogram bucket of a public refusal or failure reason (e.g. "SEARCH did not match", "crash: NameError")."""
    for pattern, label in _CATEGORIES:
        match = re.search(pattern, reason, flags=re.IGNORECASE)
        if match:
            return label.format(*match.groups()) if match.groups() else label
    first = reason.strip().splitlines()[0] if reason.strip() else "unknown"
    # A benchmark's own words for an unusable result under one short prefix, its numbers as N, so "tour returned
    # 59 indices for 60 points" and "... 58 indices ..." are one bucket, named by what went wrong.
    first = re.sub(r"^did not produce a usable result: (?:unusable result: )?", "unusable result: ", first)
    return re.sub(r"\b\d+(?:\.\d+)?\b", "N", first)[:100]


@dataclass(frozen=True)
class Edit:
    """One step on the path from the seed to the best agent."""

    agent_id: int
    operator: str
    model: str | None
    parent_score: float | None
    score: float


@dataclass(frozen=True)
class RunSummary:
    seed_id: int | None
    seed_score: float | None
    best_id: int | None
    best_score: float | None
    path: tuple[Edit, ...]  # seed (excluded) ... best agent
    proposals: int  # children proposed (iteration > 0), whatever became of them
    valid: int  # children evaluated with a score
    improved: int  # children that scored above their parent
    reasons: dict[str, int] = field(default_factory=dict)  # why the other children did not count, most common first
    store: str | None = None  # the shared store holding the run (password hidden); None: its own archive.db
    #: operator -> (valid children, children proposed), in the order operators first proposed
    by_operator: dict[str, tuple[int, int]] = field(default_factory=dict)
    models: tuple[str, ...] = ()  # the models that proposed children, in the order they first did

    @property
    def improved_on_the_seed(self) -> bool:
        """Whether the best agent scored above the seed by more than rounding (`archive.lineage.improves`)."""
        return bool(improves(self.best_score, self.seed_score))  # None (no seed score, no best) is NaN: False

    @property
    def gain(self) -> float | None:
        if self.best_score is None or self.seed_score is None:
            return None
        return self.best_score - self.seed_score

    def lines(self, run_name: str) -> list[str]:
        """The summary in a few plain lines (no markup)."""
        out: list[str] = []
        rate = f"{self.valid}/{self.proposals} ({self.valid / self.proposals:.0%})" if self.proposals else "0/0"
        reasons = ", ".join(f"{name} {count}" for name, count in list(self.reasons.items())[:3])
        gain = self.gain
        if gain is not None and self.improved_on_the_seed and self.best_id is not None and self.seed_score is not None:
            relative = f" ({gain / abs(self.seed_score):+.1%})" if self.seed_score else ""
            out.append(
                f"best agent #{self.best_id} scores {self.best_score:.4f}: {gain:+.4f}{relative} over the seed's "
                f"{self.seed_score:.4f}"
            )
            steps = "; ".join(
                f"#{e.agent_id} {e.operator}{f' ({e.model})' if e.model else ''} "
                f"{_score(e.parent_score)} -> {e.score:.4f}"
                for e in self.path
            )
            out.append(f"the edit{'s' if len(self.path) > 1 else ''} that made it: {steps}")
            if self.seed_id is not None:
                in_store = f" --store {self.store}" if self.store is not None else ""
                out.append(f"see the change: cambrian diff {run_name} {self.seed_id} {self.best_id}{in_store}")
        elif self.seed_score is not None:
            out.append(f"no child beat the seed's {self.seed_score:.4f}")
        out.append(
            f"children: {self.proposals} proposed, {rate} valid, {self.improved} beat their parent"
            + (f"; did not count: {reasons}" if reasons else "")
        )
        if len(self.by_operator) > 1 or (self.proposals and self.valid == 0):
            out.append(
                "by operator: "
                + ", ".join(f"{name} {valid}/{made} valid" for name, (valid, made) in self.by_operator.items())
            )
        if self.proposals and (self.valid == 0 or (gain is not None and not self.improved_on_the_seed)):
            out.append(self.fix())
        return out

    def fix(self) -> str:
        """What to try when the search improved nothing, from why its children did not count."""
        if self.valid == 0:
            cause = _dominant_cause(self.reasons)
            if cause == "model":
                return (
                    f"fix: the model's replies could not be used ({self._top_reasons()}); use "
                    f"{stronger_model(self.models)}, keep constrained decoding on (fm.constrained=on for a local "
                    "server, the default there), and read the reasons with `cambrian tree RUN`"
                )
            if cause == "program":
                return (
                    "fix: the children ran and failed (" + self._top_reasons() + "); read the failures with "
                    "`cambrian show RUN ID`, and check the contract the FM is shown and the evaluation limits "
                    "(evaluation.timeout_s, evaluation.memory_mb)"
                )
            if cause == "prompt":
                return (
                    "fix: the FM refused the prompts (" + self._top_reasons() + "); raise fm.n_ctx, or shorten the "
                    "benchmark's contract"
                )
            return (
                "fix: no child could be made (" + self._top_reasons() + "); add operators that can edit this program "
                "(search.operators, e.g. rewrite), and read the reasons with `cambrian tree RUN`"
            )
        return (
            "fix: valid children did not score higher; run more iterations (`cambrian resume RUN --iterations N`), "
            f"try {stronger_model(self.models)}, or add operators (search.operators)"
        )

    def _top_reasons(self) -> str:
        return ", ".join(f"{name} {count}" for name, count in list(self.reasons.items())[:3]) or "no reason recorded"


#: Reason categories that say the FM's reply was at fault (the format, the syntax, an edit that changed nothing),
#: the program's run was (a crash, a timeout, a bad result), or the prompt was refused.
_MODEL_CAUSES = (
    "format:",
    "SEARCH ",
    "no change",
    "near-duplicate",
    "syntax error",
    "static:",
    "rewrite:",
    "crossover copied",
    "edit outside",
    "wrote an EVOLVE-BLOCK",
)
_PROGRAM_CAUSES = ("crash:", "timeout", "invalid packing", "no result", "unusable")


def stronger_model(models: Sequence[str]) -> str:
    """What to suggest over the models a run proposed with: a larger model of the local registry than the
    largest one it used, else a hosted one (a run of qwen2.5-coder-1.5b was told to try qwen2.5-coder-1.5b)."""
    from cambrian.meta_agent.llm.models import REGISTRY  # the llm package (its client) only when a fix is asked

    names = [spec.name for spec in REGISTRY]
    if any(model not in names for model in models):  # a hosted or served model: no local one is known stronger
        return "a stronger model"
    larger = names[max((names.index(model) for model in models), default=-1) + 1 :]
    if larger:
        return f"a stronger model (e.g. --model {larger[-1]} or a hosted one)"
    return (
        f"a stronger model than {names[-1]}, the largest local one (a hosted one, e.g. --model "
        "openai/gpt-4o-mini --api-key-env OPENAI_API_KEY, or a larger one served at --api-base)"
    )


def _dominant_cause(reasons: dict[str, int]) -> str:
    """ "model", "program", "prompt" or "other": the kind of cause most of the refused children share."""
    totals = {"model": 0, "program": 0, "prompt": 0, "other": 0}
    for name, count in reasons.items():
        if name.startswith(_MODEL_CAUSES):
            totals["model"] += count
        elif name.startswith(_PROGRAM_CAUSES):
            totals["program"] += count
        elif name.startswith("FM refused"):
            totals["prompt"] += count
        else:
            totals["other"] += count
    return max(totals, key=lambda kind: totals[kind])


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def summarize_run(archive: Archive, run_id: int) -> RunSummary:
    """The facts of a run so far (any status), read from its archive."""
    agents = archive.agents(run_id)
    store = _store_of(archive.get_run(run_id).config_json)
    by_id: dict[int, Agent] = {a.key: a for a in agents}
    seeds = [a for a in agents if a.operator == "seed"]
    seed = seeds[0] if seeds else None
    children = [a for a in agents if a.iteration > 0]
    valid = [a for a in children if a.status == AgentStatus.evaluated]
    improved = 0
    for child in valid:
        parent = by_id.get(int(child.parent_id)) if child.parent_id is not None else None
        if parent is not None and improves(child.score, parent.score):
            improved += 1
    reasons = Counter(categorize(a.invalid_reason or "") for a in children if a.status == AgentStatus.invalid)
    by_operator: dict[str, tuple[int, int]] = {}
    for child in children:
        valid_so_far, made = by_operator.get(child.operator, (0, 0))
        by_operator[child.operator] = (valid_so_far + (child.status == AgentStatus.evaluated), made + 1)
    models = tuple(dict.fromkeys(child.model for child in children if child.model))
    best = archive.best(run_id, 1)
    best_agent = best[0] if best else None
    path: list[Edit] = []
    if best_agent is not None:
        chain = [best_agent, *archive.ancestors(best_agent.key)]
        for agent in reversed(chain):
            if agent.iteration <= 0:
                continue
            parent = by_id.get(int(agent.parent_id)) if agent.parent_id is not None else None
            path.append(
                Edit(
                    agent.key, agent.operator, agent.model, parent.score if parent else None, float(agent.score or 0.0)
                )
            )
    return RunSummary(
        seed_id=seed.key if seed is not None else None,
        seed_score=seed.score if seed is not None else None,
        best_id=best_agent.key if best_agent is not None else None,
        best_score=float(best_agent.score) if best_agent is not None and best_agent.score is not None else None,
        path=tuple(path),
        proposals=len(children),
        valid=len(valid),
        improved=improved,
        reasons=dict(reasons.most_common()),
        store=store,
        by_operator=by_operator,
        models=models,
    )


def _store_of(config_json: str) -> str | None:
    """The store the run's frozen config names, its password hidden; None for a run in its own archive.db."""
    try:
        store = json.loads(config_json).get("store")
        return make_url(store).render_as_string(hide_password=True) if isinstance(store, str) else None
    except (ValueError, AttributeError, ArgumentError):  # no config, or a URL SQLAlchemy cannot parse: no hint to give
        return None
