"""The FM a run calls: an endpoint per model (starting a local inference server for a local model, probing a
remote one), the client a run's `fm.*` settings describe, the agents' own model, the llama.cpp threads and
concurrency of local models, and the code embedder of `search.novelty.embedding_model`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

from cambrian.archive.novelty import EndpointEmbedder
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import ConfigError
from cambrian.meta_agent.llm import EmbeddingUnavailable, Endpoint, Ledger, LLMClient, probe_endpoint
from cambrian.meta_agent.llm.embeddings import LocalEmbeddings, StoredEmbeddings
from cambrian.meta_agent.llm.models import is_local_model, model_label, resolve
from cambrian.meta_agent.llm.serve import (
    GRAMMAR_FIELDS,
    LocalServer,
    choose_backend,
    default_threads,
    server_grammar_field,
)
from cambrian.meta_agent.search._reporter import Reporter


@contextlib.contextmanager
def fm_endpoint(config: RunConfig, reporter: Reporter, *, model: str | None = None) -> Iterator[tuple[Endpoint, str]]:
    """An endpoint for `model` (default: fm.model), starting (and finally stopping) a local server if needed."""
    spec = model or config.fm.model
    if is_local_model(spec):
        path = resolve(spec, progress=reporter.info)
        label = model_label(spec)
        reporter.info(f"starting a local inference server for {label} ({path})")
        server = LocalServer(
            path,
            alias=label,
            n_ctx=config.fm.n_ctx,
            n_parallel=config.fm.concurrency,
            threads=server_threads(config),
            log_path=config.run_dir() / ("server.log" if spec == config.fm.model else f"server-{label}.log"),
        )
        with server:
            reporter.info(f"model server ready at {server.base_url}")
            yield server.endpoint(), label
        return
    if "/" not in spec and config.fm.api_base is None:
        raise ConfigError(
            f"model {spec!r} is neither a local model nor a litellm model string",
            fix="use a name from `cambrian models list`, a .gguf path, or a provider/model string such as "
            "openai/gpt-4o-mini (with --api-base for an OpenAI-compatible server)",
        )
    # A dead or misconfigured endpoint fails now, in about a second, before the seed is evaluated.
    probe_endpoint(Endpoint(model=spec, api_base=config.fm.api_base, api_key_env=config.fm.api_key_env))
    # An OpenAI-compatible server may be a llama.cpp or vLLM server that takes grammars: ask it which.
    grammar_field = (
        server_grammar_field(config.fm.api_base)
        if config.fm.api_base is not None and config.fm.constrained != "off"
        else None
    )
    endpoint = Endpoint(
        model=spec,
        api_base=config.fm.api_base,
        api_key_env=config.fm.api_key_env,
        label=spec,
        grammar_field=grammar_field,
    )
    yield endpoint, spec


def server_threads(config: RunConfig) -> int | None:
    """llama.cpp threads of each local model server: fm.threads if set; else, when the run serves several
    local models at once (fm.models, evaluation.agent_model), the cores split between them, since threads
    past the cores spin against each other (two servers of one thread per core each on 2 cores: a 0.5B
    agent call of 203 tokens took 24 s and another ran past the 300 s FM timeout); None: one per core."""
    if config.fm.threads is not None:
        return config.fm.threads
    specs = [config.fm.model, *config.fm.models, *filter(None, [config.evaluation.agent_model])]
    local = {model_label(spec) for spec in specs if is_local_model(spec)}
    return max(1, default_threads() // len(local)) if len(local) > 1 else None


def resolve_fm_concurrency(config: RunConfig) -> RunConfig:
    """fm.concurrency, unless set, is 1 for models that llama.cpp serves on the CPU: a second request at
    once halves the speed of both (1.5B on 2 cores: 4 calls of 1,113 prompt + 200 reply tokens took 70 s
    either way, 17 s each alone and 29-44 s each in pairs), and each slot keeps its own prompt cache."""
    if "concurrency" in config.fm.model_fields_set:
        return config
    models = [config.fm.model, *config.fm.models, *filter(None, [config.evaluation.agent_model])]
    if not all(is_local_model(spec) for spec in models) or choose_backend() != "llamacpp":
        return config
    return config.model_copy(update={"fm": config.fm.model_copy(update={"concurrency": 1})})


def client_for_agents(
    config: RunConfig,
    reporter: Reporter,
    models: contextlib.ExitStack,
    llm: LLMClient,
    clients: dict[str, LLMClient],
    ledger: Ledger,
) -> LLMClient:
    """The client the gateway serves agents (`evaluation.agent_model`, default fm.model): one of the run's
    proposal models' clients when it names one of them, else a client (and a local server) of its own."""
    spec = config.evaluation.agent_model
    if spec is None:
        return llm
    reporter.info(f"agents call {model_label(spec)} (evaluation.agent_model)")
    if model_label(spec) in clients:
        return clients[model_label(spec)]
    endpoint, _label = models.enter_context(fm_endpoint(config, reporter, model=spec))
    return make_llm_client(endpoint, config, ledger=ledger, warn=reporter.warn)


#: Seconds an FM call may take by default (`fm.timeout_s`): a hosted API, and a server on this machine, whose
#: CPU model may write for minutes on a busy machine.
HOSTED_TIMEOUT_S = 300.0
LOCAL_TIMEOUT_S = 1800.0


def fm_timeout(config: RunConfig, api_base: str | None) -> float:
    """`fm.timeout_s`, or its default for the endpoint at `api_base`: LOCAL_TIMEOUT_S for a server on this
    machine (a loopback address), HOSTED_TIMEOUT_S otherwise. A CPU model's 1,024-token reply on a busy 2-core
    machine took over 300 s, and each retry waited behind the call it had given up, until the run failed."""
    if config.fm.timeout_s is not None:
        return config.fm.timeout_s
    host = urllib.parse.urlsplit(api_base or "").hostname or ""
    local = host == "localhost" or host.startswith("127.") or host == "::1"
    return LOCAL_TIMEOUT_S if local else HOSTED_TIMEOUT_S


def make_llm_client(
    endpoint: Endpoint, config: RunConfig, *, ledger: Ledger, warn: Callable[[str], None] | None = None
) -> LLMClient:
    """The FM client a run's settings (`fm.*`) describe, recording every call in `ledger`.

    fm.constrained: "auto" sends reply grammars where the endpoint takes them (local llama.cpp and vLLM
    servers, and OpenAI-compatible servers that say they are one); "on" sends them to any endpoint (in
    llama.cpp's `grammar` field where the server's kind is unknown); "off" never. A server that refuses
    a grammar gets the call again without it, and `warn` is told once.
    """
    if config.fm.constrained == "on" and endpoint.grammar_field is None:
        endpoint = dataclasses.replace(endpoint, grammar_field=GRAMMAR_FIELDS["llamacpp"])
    return LLMClient(
        endpoint,
        ledger=ledger,
        concurrency=config.fm.concurrency,
        timeout_s=fm_timeout(config, endpoint.api_base),
        retries=config.fm.retries,
        temperature=config.fm.temperature,
        max_tokens=config.fm.max_tokens,
        constrained=config.fm.constrained != "off",
        on_warning=warn,
    )


@contextlib.contextmanager
def code_embedder(config: RunConfig, reporter: Reporter) -> Iterator[EndpointEmbedder | None]:
    """The embedder of `search.novelty.embedding_model` (None: the hashing vectorizer of character n-grams).

    A local model (named as fm.model is: a registry name or a .gguf path) gets a llama.cpp server of its own in
    embedding mode (`LocalEmbeddings`), started here and stopped when the run ends; a litellm model is asked
    for one embedding now, so a dead endpoint fails before the run does any work. Either way the embedding
    length is the model's, checked against search.novelty.embedding_dim where that is set, and the vectors are
    kept in the run's folder (`StoredEmbeddings`: each genome embedded once, a resumed run only its new ones).
    Nothing is started where nothing in the run uses code embeddings (no duplicate gate, novelty on behaviour).
    """
    novelty = config.search.novelty
    spec = novelty.embedding_model
    if spec is None:
        yield None
        return
    if novelty.duplicate_threshold is None and novelty.space != "code":
        reporter.warn(
            f"search.novelty.embedding_model = {spec!r} is not used: nothing in this run compares code embeddings "
            "(set search.novelty.duplicate_threshold, or search.novelty.space = code)"
        )
        yield None
        return
    if not is_local_model(spec):
        embed = _litellm_embedding(config, spec)
        dim = len(embed([_PROBE_TEXT])[0])
        stored = StoredEmbeddings(embed, _store_path(config, spec), identity={"model": spec, "dim": dim})
        yield _checked(EndpointEmbedder(embed_fn=stored, dim=dim), config, spec)
        return
    label = model_label(spec)
    path = resolve(spec, progress=reporter.info)
    reporter.info(f"starting a local embedding server for {label} ({path})")
    server = LocalEmbeddings(
        path,
        alias=label,
        threads=config.fm.threads,
        timeout_s=fm_timeout(config, "http://127.0.0.1"),
        log_path=config.run_dir() / f"server-embeddings-{label}.log",
    )
    with server:
        identity = {"model": label, "dim": server.dim, "pooling": server.pooling, "chunk_tokens": server.chunk_tokens}
        stored = StoredEmbeddings(server.embed, _store_path(config, label), identity=identity)
        reporter.info(
            f"embedding server ready at {server.server.base_url} ({server.dim} dimensions; {len(stored)} genomes "
            "embedded before)"
        )
        yield _checked(EndpointEmbedder(embed_fn=stored, dim=server.dim), config, label)


def _store_path(config: RunConfig, label: str) -> Path:
    """Where a run keeps its code embeddings (`StoredEmbeddings`): its folder, a file per embedding model."""
    return config.run_dir() / f"embeddings-{''.join(c if c.isalnum() or c in '-_.' else '_' for c in label)}.jsonl"


_PROBE_TEXT = "def f():\n    return 0\n"  # what a litellm embedding model is first asked to embed


def _checked(embedder: EndpointEmbedder, config: RunConfig, label: str) -> EndpointEmbedder:
    """`embedder`, when search.novelty.embedding_dim is unset or its model's width; else a ConfigError."""
    wanted = config.search.novelty.embedding_dim
    if wanted is not None and wanted != embedder.dim:
        raise ConfigError(
            f"search.novelty.embedding_dim is {wanted}, but the embedding model {label} makes vectors of "
            f"{embedder.dim}",
            fix=f"remove search.novelty.embedding_dim (unset, the model's width is used), or set it to {embedder.dim}",
        )
    return embedder


def _litellm_embedding(config: RunConfig, model: str) -> Callable[[list[str]], list[list[float]]]:
    """texts -> vectors through litellm's embedding call (fm.api_base, fm.api_key_env), failures as
    EmbeddingUnavailable."""
    api_key = os.environ.get(config.fm.api_key_env) if config.fm.api_key_env else None

    def embed(texts: list[str]) -> list[list[float]]:
        import litellm  # imported on first use: it is slow to import and most runs never need it

        try:
            response = litellm.embedding(model=model, input=texts, api_base=config.fm.api_base, api_key=api_key)
        except Exception as exc:  # noqa: BLE001 - litellm raises provider-specific classes
            raise EmbeddingUnavailable(
                f"the embedding model {model!r} failed: {type(exc).__name__}: {exc}",
                fix="check search.novelty.embedding_model (a local model such as smollm2-135m, a .gguf path, or a "
                "litellm embedding model), or remove it to use the hashing vectorizer of character n-grams",
            ) from None
        return [list(item["embedding"]) for item in response.data]

    return embed
