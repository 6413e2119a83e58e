"""`RunConfig`: everything that defines a search, from a TOML file plus CLI overrides.

The validated config is frozen into the Run row as JSON, so a run can be
resumed, replayed and reported exactly as it was started. Unknown keys and bad
values are rejected with the key named.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import tomllib
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cambrian.meta_agent.errors import ConfigError

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class BudgetConfig(_Section):
    iterations: int = Field(default=20, ge=0, description="proposals (child agents) to make in all")
    usd: float | None = Field(default=None, ge=0, description="stop proposing once FM spend reaches this")
    wall_seconds: float | None = Field(default=None, gt=0, description="per invocation of run/resume")


class FMConfig(_Section):
    model: str = Field(
        # The smallest local model whose searches improved the circle-packing seed (bench/quickstart.py).
        default="qwen2.5-coder-1.5b",
        description="a registry name (`cambrian models list`), a .gguf path, or a litellm model string",
    )
    api_base: str | None = Field(
        default=None,
        description="an OpenAI-compatible server's URL, with http:// or https://, e.g. http://localhost:8080",
    )
    api_key_env: str | None = Field(default=None, description="NAME of the env var holding the API key")
    temperature: float = Field(default=0.8, ge=0, le=2)
    max_tokens: int = Field(default=1024, ge=16, le=65536)
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="seconds per FM call; default 300 for a hosted API, 1800 for a server on this machine",
    )
    retries: int = Field(default=3, ge=0, le=10)
    concurrency: int = Field(
        default=2,
        ge=1,
        le=256,
        description="FM calls at once (default 2; 1 where llama.cpp serves every model on the CPU: there a second "
        "call at once halves the speed of both)",
    )
    n_ctx: int = Field(default=8192, ge=512, description="context of a locally served model")
    threads: int | None = Field(default=None, ge=1, description="CPU threads of a locally served model")
    models: list[str] = Field(
        default_factory=list,
        description="more models for proposals besides `model` (same forms); the bandit or a uniform draw picks one",
    )
    constrained: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="constrained decoding: each reply must follow its format's grammar (SEARCH sections may only "
        "copy lines of the parent). auto: on for local servers (llama.cpp, vLLM), off for hosted APIs",
    )
    model_class: Literal["auto", "small", "large"] = Field(
        default="auto",
        description="what the operator mix is chosen for (search.operators empty): small (a model served here "
        "on the CPU: a few lines and numbers at a time) or large (hosted, or a server at fm.api_base: diffs "
        "and rewrites). auto: small for a local model (a registry name or a .gguf file), else large",
    )
    repair_rounds: int | None = Field(
        default=None,
        ge=0,
        le=3,
        description="a reply that fails to parse, apply or pass the static check, or a child whose run failed, "
        "goes back to the FM with the exact error, in the same conversation, this many times (ledger purpose "
        "`repair`). Unset: by fm.model_class from REPAIR_ROUNDS_BY_MODEL_CLASS (small 0, large 1), frozen so "
        "into the run",
    )
    redraws: int | None = Field(
        default=None,
        ge=0,
        le=3,
        description="a reply that fails to parse, apply or pass the static check (an edit that changes nothing "
        "among them) is drawn again from the same prompt with another seed, this many times, before any repair "
        "round (ledger purpose `redraw`): the server still holds the prompt, so a redraw costs its reply's "
        "decoding. Unset: by fm.model_class from REDRAWS_BY_MODEL_CLASS (small 1, large 0), frozen so into the "
        "run",
    )

    @field_validator("api_base")
    @classmethod
    def _api_base_names_its_scheme(cls, api_base: str | None) -> str | None:
        problem = url_without_scheme(api_base)
        if problem is not None:
            raise ValueError(problem)
        return api_base


def url_without_scheme(url: str | None) -> str | None:
    """What is wrong with a server URL that names no http:// or https:// (None: nothing): without one
    (localhost:8080) it reaches no server, and the FM check would say that nothing answers there."""
    if url is None or url.startswith(("http://", "https://")):
        return None
    return f"{url!r} has no http:// or https://: write e.g. http://{url.split('://')[-1]}"


class NoveltyConfig(_Section):
    """Embeddings, k-NN novelty and the near-duplicate gate (archive/novelty.py)."""

    space: Literal["behaviour", "code"] = Field(
        default="behaviour",
        description="what the `novelty` strategy measures distance in: behaviour (benchmark descriptors and "
        "per-task scores) or code (embeddings of the agent's files)",
    )
    k: int = Field(default=15, ge=1, le=100, description="nearest neighbours kept per agent (novelty uses <= k)")
    duplicate_threshold: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="reject a child whose code embedding has at least this cosine similarity to an existing "
        "agent's, e.g. 0.995 (None: only exact duplicates are rejected). Character n-grams do not see meaning: "
        "on the circle packing grid seed a one-constant edit scores 0.9997, a docstring edit 0.9976 and a loop "
        "rewritten as a comprehension 0.9942 (on the rings seed 0.99993, 0.99945 and 0.99724), so any threshold "
        "that rejects trivial edits rejects small real ones; FM embeddings rank edits better within one program "
        "but no threshold separates them across programs (docs/results/generality.md)",
    )
    max_reproposals: int = Field(default=2, ge=0, le=20, description="re-proposals after a near-duplicate")
    embedding_model: str | None = Field(
        default=None,
        description="code embeddings from an FM, not n-grams (None): a local model as fm.model names one, served "
        "by the run, or a litellm model. They rank trivial edits above real ones better than n-grams, but no one "
        "threshold separates them; 3-6 s per agent (docs/results/generality.md)",
    )
    embedding_dim: int | None = Field(default=None, ge=16, le=8192, description="n-grams: 256; a model: its width")


class BanditConfig(_Section):
    """Choose (model, operator) per proposal by what each has earned in this run (meta_agent/search/bandit.py).

    The reward of a proposal is its child's improvement over its parent (0 for an invalid child or a no-op).
    With cost_aware, arms are ranked by expected reward per FM second (each arm's draw divided by the mean wall
    seconds of its proposals' FM calls): valid improvement per FM second, failures costing what they took.
    The operator weights (`search.operators`) are the arms' priors.
    """

    algorithm: Literal["off", "ucb1", "thompson"] = Field(
        default="thompson",
        description="thompson: each arm drawn by Thompson sampling, the operator weights its prior; ucb1: "
        "every arm once, then the best upper confidence bound; off: operators drawn by their weights, models "
        "uniformly",
    )
    cost_aware: bool = Field(
        default=True, description="rank arms by expected reward per FM second (each arm's mean FM seconds)"
    )
    exploration: float = Field(default=2**0.5, gt=0, description="UCB1's exploration constant")
    prior_strength: float = Field(
        default=2.0,
        ge=0,
        le=100,
        description="how many proposals' worth of belief the operator weights are to Thompson sampling: an arm "
        "with weight share w starts at Beta(1 + s w, 1 + s (1 - w)); 0: a flat prior",
    )


#: The operator mix (and the bandit's priors) by model class: a small local model makes reliable edits of a
#: few lines and numbers, and its whole-file replies run to the token cap; a hosted or large model makes the
#: larger moves (OpenEvolve and ShinkaEvolve run diffs and full rewrites). Chosen on the generality suite
#: (bench/generality.py); `search.operators` set by the user replaces them.
OPERATORS_BY_MODEL_CLASS: Mapping[str, Mapping[str, float]] = {
    "small": {"lines": 0.4, "knob": 0.25, "diff": 0.15, "rewrite": 0.1, "crossover": 0.05, "diagnose": 0.05},
    "large": {"diff": 0.3, "rewrite": 0.25, "lines": 0.15, "crossover": 0.1, "diagnose": 0.1, "knob": 0.1},
}

#: Repair rounds by model class: a 1.5B model on two cores spent a quarter of its FM time on repairs for a
#: tenth of its valid children, and proposed faster without them (docs/results/generality.md, "Where the FM
#: time goes").
REPAIR_ROUNDS_BY_MODEL_CLASS: Mapping[str, int] = {"small": 0, "large": 1}

#: Redraws by model class: a 1.5B model drawn again from its cached prompt made valid children from the replies
#: it could not use at less FM time each than its fresh proposals did (docs/results/generality.md,
#: "Redraws"). A large model keeps its repair round instead.
REDRAWS_BY_MODEL_CLASS: Mapping[str, int] = {"small": 1, "large": 0}


class SearchConfig(_Section):
    strategy: str = "dgm"
    params: dict[str, float | int | bool | str | list[str]] = Field(
        default_factory=dict, description="strategy parameters"
    )
    operators: dict[str, float] = Field(
        default_factory=dict,
        description="operator name -> weight: the bandit's prior, or with the bandit off the chance of each. "
        "Empty (the default): chosen by fm.model_class from OPERATORS_BY_MODEL_CLASS (small: lines 0.4, knob "
        "0.25, diff 0.15, rewrite 0.1, crossover 0.05, diagnose 0.05; large: diff 0.3, rewrite 0.25, lines "
        "0.15, crossover 0.1, diagnose 0.1, knob 0.1), and frozen so into the run",
    )
    inspirations: int = Field(default=2, ge=0, le=10, description="other good agents shown in prompts")
    ideas: bool = Field(
        default=True,
        description="give each whole-program FM proposal (diff, rewrite, diagnose; not lines, knob or crossover) "
        "one direction to try, drawn (seeded) from the benchmark's `ideas`",
    )
    failed_attempts_shown: int = Field(default=3, ge=0, le=20)
    reflect_every: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="every N finished proposals, the FM reads what the recent edits did to the score and writes "
        "a few notes (which kinds of change raised it, which failed and why, what to try next), shown to later "
        "prompts (ShinkaEvolve's meta-recommendations; ledger purpose reflect). 0: off",
    )
    max_pending: int | None = Field(
        default=None,
        ge=1,
        description="children queued or under evaluation before proposing pauses "
        "(default: evaluation.concurrency + fm.concurrency; 1 makes a search strictly sequential and reproducible)",
    )
    edit_processes: int | Literal["auto"] = Field(
        default="auto",
        description="processes that parse, apply and statically check FM replies away from the loop's thread "
        "(0: in it; auto: cores - 2, at most 4, so none on a 2-core machine); the children are the same either way",
    )
    islands: int = Field(
        default=1,
        description="populations searched apart (OpenEvolve's and ShinkaEvolve's islands): proposal k draws its "
        "parents with search.strategy from island (k - 1) mod N alone (its children, its migrants and the seed), "
        "and its child lives there. 1 (the default): one population",
    )
    migration_every: int = Field(
        default=10,
        description="with islands > 1: every N finished proposals (scored or refused), each island's best "
        "evaluated members join the next island unless it has them already (a ring: the last island's join the first)",
    )
    migrants: int = Field(
        default=1, description="with islands > 1: members of each island that join the next at a migration (0: none)"
    )
    novelty: NoveltyConfig = Field(default_factory=NoveltyConfig)
    bandit: BanditConfig = Field(default_factory=BanditConfig)

    @field_validator("islands")
    @classmethod
    def _islands_in_range(cls, islands: int) -> int:
        if not 1 <= islands <= 256:
            raise ValueError("use 1 island (one population, the default) up to 256 islands, e.g. 4")
        return islands

    @field_validator("migration_every")
    @classmethod
    def _migration_every_positive(cls, every: int) -> int:
        if every < 1:
            raise ValueError("use a number of finished proposals >= 1 between migrations, e.g. 10")
        return every

    @field_validator("migrants")
    @classmethod
    def _migrants_not_negative(cls, migrants: int) -> int:
        if migrants < 0:
            raise ValueError("use a number of migrants >= 0 per island (0: islands never exchange agents), e.g. 1")
        return migrants

    @field_validator("edit_processes")
    @classmethod
    def _processes_not_negative(cls, processes: int | str) -> int | str:
        if isinstance(processes, int) and processes < 0:
            raise ValueError("use a number of processes >= 0 (0: in the loop's thread), or auto")
        return processes

    @field_validator("operators")
    @classmethod
    def _weights_positive(cls, weights: dict[str, float]) -> dict[str, float]:
        if weights and (any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0):
            raise ValueError("operator weights must be >= 0 with a positive sum, e.g. {diff = 1}")
        return weights


class FeedbackConfig(_Section):
    """What the meta-agent sees of a task's failure (evaluators.base.FeedbackPolicy; hidden tests never shown).

    max_chars: characters of feedback kept per task (>= 40). error_type / error_message: the exception's
    name and message. traceback: the agent's traceback lines. output: the tail of what the agent printed.
    """

    max_chars: int = Field(default=2000, ge=40, le=100_000, description="feedback characters kept per task")
    error_type: bool = Field(default=True, description="show the exception's type, e.g. ZeroDivisionError")
    error_message: bool = Field(default=True, description="show the exception's message")
    traceback: bool = Field(default=False, description="show the agent's traceback")
    output: bool = Field(default=False, description="show the tail of the agent's printed output")


class EvaluationConfig(_Section):
    sandbox: Literal["auto", "docker", "local"] = "auto"
    image: str = Field(default="cambrian-sandbox:bookworm", description="Docker image (`cambrian sandbox build`)")
    concurrency: int = Field(default=2, ge=1, le=256)
    timeout_s: float | None = Field(default=None, gt=0, description="per task; default: the benchmark's")
    memory_mb: int | None = Field(default=None, ge=64)
    max_output_bytes: int | None = Field(default=None, ge=1024)
    max_attempts: int = Field(default=3, ge=1, le=20, description="tries after infrastructure faults")
    repeats: int | Literal["auto"] = Field(
        default="auto",
        description="evaluations an agent's score is the mean of, each with other random seeds for its tasks (the "
        "harness seeds random and numpy per task: one evaluation gives the same score every time unless the "
        "program reads the clock or another source of chance). auto: one, but the seed program is evaluated "
        "twice when a run starts and, where its score varies, every agent 3 times; and an agent that beats the "
        "run's best is evaluated once more, its score the mean of both",
    )
    agent_fm: bool = Field(default=True, description="serve the FM to agents through the gateway socket")
    agent_model: str | None = Field(
        default=None,
        description="the FM agents call through the gateway, as fm.model is named (a local model, a .gguf "
        "path or a litellm string, with fm.api_base); None: fm.model. A strong model improving agents that "
        "call a cheap one, as ADAS and the Darwin Goedel Machine run",
    )
    agent_fm_calls: int = Field(
        default=8,
        ge=0,
        description="FM calls an agent may make per task; an evaluation's budget is this times "
        "its tasks, shared by them (a parent writing its child: one run)",
    )
    agent_fm_tokens: int = Field(default=20_000, ge=0, description="FM tokens an agent may use per task, likewise")
    feedback: FeedbackConfig = Field(default_factory=FeedbackConfig, description="what failures show the FM")
    executor: Literal["local", "ray"] = Field(
        default="local", description="where tasks run: this machine's sandbox pool, or a Ray cluster's nodes"
    )
    ray_address: str | None = Field(
        default=None,
        description="the Ray cluster: 'auto' attaches to a running one, HOST:PORT to that head; "
        "None: RAY_ADDRESS if set, else a local cluster started for the run",
    )
    gateway_host: str | None = Field(
        default=None,
        description="with executor = ray: the address Ray nodes reach this machine's FM gateway at; "
        "None: this machine's IP as Ray reports it",
    )
    gateway_port: int = Field(default=0, ge=0, le=65535, description="its TCP port; 0: a free one")
    gateway_tls: bool = Field(
        default=True,
        description="TLS on that link (a certificate made for the run, pinned by the nodes); false: plain TCP, "
        "for a private network only",
    )

    @field_validator("repeats")
    @classmethod
    def _repeats_positive(cls, repeats: int | str) -> int | str:
        if isinstance(repeats, int) and not 1 <= repeats <= 20:
            raise ValueError("use a number of evaluations from 1 to 20, or auto")
        return repeats


class RunConfig(_Section):
    name: str | None = None
    benchmark: str = "circle_packing"
    seed: int = Field(default=0, ge=0)
    runs_dir: Path = Path("runs")
    store: str | None = Field(
        default=None,
        description="the archive's SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db (several runs share "
        "it, each under its name); None: SQLite at RUNS_DIR/<name>/archive.db",
    )
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    fm: FMConfig = Field(default_factory=FMConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    benchmark_options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str | None) -> str | None:
        if name is not None and not _NAME_RE.match(name):
            raise ValueError("use letters, digits, '.', '_' and '-' (at most 100), starting with a letter or digit")
        return name

    @model_validator(mode="after")
    def _defaults_for_the_model(self) -> RunConfig:
        """search.operators, fm.repair_rounds and fm.redraws left unset: the model class's
        (OPERATORS_BY_MODEL_CLASS, REPAIR_ROUNDS_BY_MODEL_CLASS, REDRAWS_BY_MODEL_CLASS)."""
        if not self.search.operators:
            self.search.operators = dict(OPERATORS_BY_MODEL_CLASS[model_class(self.fm)])
        self.fm.repair_rounds = fm_repair_rounds(self.fm)
        self.fm.redraws = fm_redraws(self.fm)
        return self

    def with_default_name(self) -> RunConfig:
        if self.name:
            return self
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return self.model_copy(update={"name": f"{self.benchmark}-{stamp}"})

    def run_dir(self) -> Path:
        assert self.name, "call with_default_name() first"
        return self.runs_dir / self.name

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        data = json.loads(text)
        if isinstance(data, dict) and isinstance(data.get("fm"), dict):
            data["fm"].setdefault("redraws", 0)  # stored before redraws existed: the run drew each reply once
        return _validate(data, source="the run's stored config")


def model_class(fm: FMConfig) -> str:
    """ "small" or "large": fm.model_class, or with auto small for a model served here (a registry name or a
    .gguf file; fm.api_base points elsewhere) and large for anything else (a hosted model)."""
    if fm.model_class != "auto":
        return fm.model_class
    from cambrian.meta_agent.llm.models import is_local_model  # the registry of local models, read where it is needed

    return "small" if fm.api_base is None and is_local_model(fm.model) else "large"


def fm_repair_rounds(fm: FMConfig) -> int:
    """fm.repair_rounds, or where unset the rounds of the model's class (REPAIR_ROUNDS_BY_MODEL_CLASS)."""
    return REPAIR_ROUNDS_BY_MODEL_CLASS[model_class(fm)] if fm.repair_rounds is None else fm.repair_rounds


def fm_redraws(fm: FMConfig) -> int:
    """fm.redraws, or where unset the redraws of the model's class (REDRAWS_BY_MODEL_CLASS)."""
    return REDRAWS_BY_MODEL_CLASS[model_class(fm)] if fm.redraws is None else fm.redraws


def load_config(
    path: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    sets: list[str] | None = None,
) -> RunConfig:
    """Read a TOML file (optional), apply `--set key.path=value` strings and named overrides.

    `overrides` maps dotted keys to Python values (None values are ignored, so CLI
    options left unset do not override the file).
    """
    data: dict[str, Any] = {}
    source = "the command line"
    if path is not None:
        source = str(path)
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist", fix="check the path given to --config") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}", fix="fix the TOML syntax at that line") from None
    for item in sets or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r} is not KEY=VALUE", fix="write e.g. --set search.strategy=greedy")
        _assign(data, key.strip(), _parse_value(raw.strip()))
    for key, value in (overrides or {}).items():
        if value is not None:
            _assign(data, key, value)
    return _validate(data, source=source)


def _parse_value(raw: str) -> Any:
    """A --set value as TOML would read it (numbers, booleans, inline tables), else a string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def config_keys(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Every dotted config key (tables' keys included), e.g. 'search.strategy'."""
    keys: list[str] = []
    for name, field in (model or RunConfig).model_fields.items():
        dotted = f"{prefix}{name}"
        keys.append(dotted)
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += config_keys(annotation, f"{dotted}.")
    return keys


def _assign(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {dotted}: {part} is not a table", fix="check the key path")
        node = child
    node[parts[-1]] = value


def _validate(data: Mapping[str, Any], *, source: str) -> RunConfig:
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":
                close = difflib.get_close_matches(key, config_keys(), n=1, cutoff=0.75)
                problems.append(f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            else:
                problems.append(f"{key}: {err['msg']} (got {err.get('input')!r})")
        raise ConfigError(
            f"bad config in {source}: " + "; ".join(problems),
            fix="every key with its default and meaning: `cambrian config --show-defaults`",
        ) from None
    _check_names(config)
    return config


def _check_names(config: RunConfig) -> None:
    """Names that live in registries (built-in or installed plugins), checked up front so a run never starts
    half-wrong."""
    from cambrian.archive.errors import SelectorConfigError
    from cambrian.archive.selection import SELECTORS, make_selector
    from cambrian.meta_agent.operators import OPERATOR_REGISTRY, operator_names

    if config.search.strategy not in SELECTORS:
        raise ConfigError(
            f"search.strategy: unknown strategy {config.search.strategy!r}",
            fix=f"use one of {', '.join(SELECTORS.names())}, or install a package that registers it "
            f"under {SELECTORS.group!r}",
        )
    try:
        make_selector(config.search.strategy, **config.search.params)
    except SelectorConfigError as exc:
        raise ConfigError(f"search.params: {exc}", fix=exc.fix) from None
    unknown = sorted(name for name in config.search.operators if name not in OPERATOR_REGISTRY)
    if unknown:
        raise ConfigError(
            f"search.operators: unknown operator(s) {', '.join(unknown)}",
            fix=f"use some of {', '.join(operator_names())}, or install a package that registers them "
            f"under {OPERATOR_REGISTRY.group!r}",
        )
