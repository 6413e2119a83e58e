"""One interface over local inference servers: llama.cpp (CPU, via xllamacpp) and vLLM (GPU).

The server always runs in a child process of its own (its own process group),
so a crash inside llama.cpp or vLLM cannot take the search loop down with it,
and `stop()` can kill everything it started. Both backends speak the OpenAI
API, so the rest of Cambrian only ever sees an `Endpoint`.

`python -m cambrian.meta_agent.llm --model PATH --alias A --port P` (this module's `main`) is that child for the
llama.cpp backend.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal

from cambrian.meta_agent.llm._client import Endpoint
from cambrian.meta_agent.llm._errors import ServerStartError
from cambrian.meta_agent.llm.models import is_local_model, resolve

__all__ = [
    "Backend",
    "Pooling",
    "choose_backend",
    "default_threads",
    "free_port",
    "gpu_available",
    "GRAMMAR_FIELDS",
    "LocalServer",
    "serve_forever",
    "server_grammar_field",
]

Backend = Literal["auto", "llamacpp", "vllm"]
#: How llama.cpp pools a text's token vectors into one embedding: their mean, or the last token's.
Pooling = Literal["mean", "last"]
_POOLING_TYPES = {"mean": 1, "last": 3}  # llama.cpp's enum llama_pooling_type


def default_threads() -> int:
    """One llama.cpp thread per core this process may use (more threads than cores only contend)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


#: The request field that carries a GBNF grammar, per server (llama.cpp's `grammar`, vLLM's `guided_grammar`).
GRAMMAR_FIELDS = {"llamacpp": "grammar", "vllm": "guided_grammar"}
_LOAD_ERROR_EXIT = 3  # the child's exit status when the model file cannot be loaded


def gpu_available() -> bool:
    """True when `nvidia-smi` runs and lists at least one GPU."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False
    try:
        done = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and "GPU" in done.stdout


def choose_backend(requested: Backend = "auto") -> Literal["llamacpp", "vllm"]:
    """The backend to use: vLLM when a GPU answers and vLLM is installed, llama.cpp otherwise."""
    if requested == "llamacpp":
        return "llamacpp"
    vllm_installed = importlib.util.find_spec("vllm") is not None  # importing vllm takes seconds
    if requested == "vllm":
        if not vllm_installed:
            raise ServerStartError(
                "backend 'vllm' was asked for but vllm is not installed",
                fix="`pip install vllm` on a machine with an NVIDIA GPU, or use --backend llamacpp",
            )
        return "vllm"
    return "vllm" if vllm_installed and gpu_available() else "llamacpp"


def server_grammar_field(api_base: str, *, timeout_s: float = 3.0) -> str | None:
    """The grammar field of the OpenAI-compatible server at `api_base`, from who owns its models
    (`GET /models`: llama.cpp says "llamacpp", vLLM "vllm"); None when it is neither or does not answer."""
    try:
        with urllib.request.urlopen(f"{api_base.rstrip('/')}/models", timeout=timeout_s) as response:
            listing = json.loads(response.read(1 << 20))
    except (urllib.error.URLError, OSError, ValueError):
        return None
    owners = {str(item.get("owned_by", "")).lower() for item in listing.get("data", []) if isinstance(item, dict)}
    return next((GRAMMAR_FIELDS[name] for name in GRAMMAR_FIELDS if name in owners), None)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LocalServer:
    """A local OpenAI-compatible inference server in a child process.

    model_path: a GGUF file (llama.cpp), or what `vllm serve` accepts (vLLM).
    alias: the model name clients send; `endpoint()` uses "openai/<alias>".
    port: None picks a free one. n_ctx: context length per request (tokens);
    llama.cpp allocates n_ctx * n_parallel KV cells so every slot gets the
    full length. n_parallel: requests decoded at once (1..64). threads: CPU
    threads for llama.cpp (default: one per core this process may use).
    log_path: where the server's output goes (default: a temp file removed at
    `stop()`). embeddings: None, or how `/v1/embeddings` pools token vectors
    (llama.cpp only). Such a server still answers completions (measured: the
    same text as without), but an embedding request waits while it generates,
    so a run embeds through a server of its own (`embeddings.LocalEmbeddings`).
    One embedding input must fit one batch: n_batch = n_ubatch = n_ctx.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        alias: str,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = 8192,
        n_parallel: int = 2,
        threads: int | None = None,
        backend: Backend = "auto",
        log_path: Path | None = None,
        embeddings: Pooling | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        self.alias = alias
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.n_ctx = n_ctx
        self.n_parallel = n_parallel
        self.threads = threads if threads is not None else default_threads()
        self.backend = choose_backend(backend)
        if embeddings is not None and self.backend != "llamacpp":
            raise ValueError("an embedding server runs on llama.cpp: pass backend='llamacpp'")
        self.embeddings = embeddings
        self._own_log = log_path is None
        self.log_path = log_path  # None: a temp file, made at start()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI API root, e.g. http://127.0.0.1:8080/v1."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The server process id while it runs (also its process group id)."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def exit_status(self) -> int | None:
        """The server process's exit status once it has exited by itself; None while it runs or when not started."""
        return self._process.poll() if self._process is not None else None

    def endpoint(self) -> Endpoint:
        """How a client reaches this server.

        llama.cpp reuses the KV cache of a slot's previous prompt (`cache_prompt`): prompts that share
        their start (system message, contract, parent) skip most of the prompt processing. Its answers
        then depend slightly on what the slot held before; exact replay comes from the archive's response
        cache, keyed by the request, not from the server.
        """
        extra_body = {"cache_prompt": True} if self.backend == "llamacpp" else {}
        return Endpoint(
            model=f"openai/{self.alias}",
            api_base=self.base_url,
            api_key_env=None,
            extra_body=extra_body,
            label=self.alias,
            grammar_field=GRAMMAR_FIELDS[self.backend],
        )

    def command(self) -> list[str]:
        """The argv of the server process."""
        if self.backend == "llamacpp":
            return [
                sys.executable,
                "-m",
                "cambrian.meta_agent.llm",
                "--model",
                str(self.model_path),
                "--alias",
                self.alias,
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--n-ctx",
                str(self.n_ctx),
                "--n-parallel",
                str(self.n_parallel),
                "--threads",
                str(self.threads),
                "--parent-pid",
                str(os.getpid()),
                *(["--embeddings", self.embeddings] if self.embeddings else []),
            ]
        vllm = shutil.which("vllm", path=str(Path(sys.executable).parent)) or shutil.which("vllm")
        prefix = [vllm] if vllm else [sys.executable, "-m", "vllm.entrypoints.cli.main"]
        return [
            *prefix,
            "serve",
            str(self.model_path),
            "--served-model-name",
            self.alias,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.n_ctx),
            "--max-num-seqs",
            str(self.n_parallel),
        ]

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the server and wait until `/health` answers 200 (at most `timeout_s` seconds).

        Raises ServerStartError, with the tail of the server log, when the
        model file is missing, the process dies, or it is not healthy in time.
        """
        if self.running:
            return
        if self.backend == "llamacpp" and not self.model_path.is_file():
            raise ServerStartError(
                f"model file {self.model_path} does not exist",
                fix="check the path, or pass a registry name (`cambrian models list`)",
            )
        if self.log_path is None:
            self.log_path = _temp_log_path(self.alias)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            # A session of its own: stop() signals the whole group, vLLM's workers included.
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            if self._wait_healthy(timeout_s):
                return
        except BaseException:
            self.stop(keep_log=True)  # a death or a Ctrl-C while loading must not leak the process
            raise
        self.stop(keep_log=True)
        raise ServerStartError(
            f"{self.backend} server for {self.model_path} was not healthy after {timeout_s:.0f} s; "
            f"log tail:\n{self.log_tail()}",
            fix=f"give it longer (a larger model loads slower), or read the whole log at {self.log_path}",
        )

    def stop(self, timeout_s: float = 10.0, *, keep_log: bool = False) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL after `timeout_s` seconds."""
        process, self._process = self._process, None
        if process is not None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
            # Children that outlive the leader (vLLM workers) still belong to the group.
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
        if self._own_log and not keep_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path = None

    def log_tail(self, n_chars: int = 3000) -> str:
        """The last `n_chars` characters of the server log."""
        if self.log_path is None:
            return "(no log)"
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return "(no log)"
        return data[-n_chars:].decode("utf-8", errors="replace")

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_healthy(self, timeout_s: float) -> bool:
        """Poll `/health` until 200 (True) or `timeout_s` passes (False); ServerStartError if it dies."""
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self._process.poll()
            if status is not None:
                raise ServerStartError(self._died_message(status), fix=self._died_fix(status))
            if self._healthy():
                return True
            time.sleep(0.2)
        return False

    def _healthy(self) -> bool:
        root = self.base_url.removesuffix("/v1")
        try:
            with urllib.request.urlopen(f"{root}/health", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False  # not listening yet, or 503 while the model loads

    def _died_message(self, status: int) -> str:
        what = (
            f"could not load the model {self.model_path}"
            if status == _LOAD_ERROR_EXIT
            else f"exited with status {status} while starting (model {self.model_path})"
        )
        return f"{self.backend} server {what}; log tail:\n{self.log_tail()}"

    def _died_fix(self, status: int) -> str:
        if status == _LOAD_ERROR_EXIT:
            return (
                f"check that {self.model_path} is a complete GGUF file, e.g. re-pull it with "
                "`cambrian models pull NAME`"
            )
        return f"read the log above; if port {self.port} is taken pick another with --port"


def serve_forever(
    model: str | os.PathLike[str],
    *,
    alias: str | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    n_ctx: int = 8192,
    n_parallel: int = 2,
    threads: int | None = None,
    backend: Backend = "auto",
    print_fn: Callable[[str], None] = print,
) -> None:
    """Serve `model` until Ctrl-C (the `cambrian serve` command); `print_fn` gets the status lines.

    model: a registry name (pulled if missing) or a .gguf path; with vLLM also
    a Hugging Face model id or folder. alias: the name clients send (default:
    the registry name or the file's stem).
    """
    spec = os.fspath(model)
    chosen = choose_backend(backend)
    if chosen == "llamacpp" or is_local_model(spec):
        path = resolve(spec, progress=print_fn)
    else:
        path = Path(spec)
    alias = alias or (Path(spec).stem if spec.endswith(".gguf") else Path(spec).name)
    server = LocalServer(
        path,
        alias=alias,
        host=host,
        port=port,
        n_ctx=n_ctx,
        n_parallel=n_parallel,
        threads=threads,
        backend=chosen,
    )
    print_fn(f"starting {chosen} for {path} ...")
    server.start()
    try:
        print_fn(f"serving {alias!r} with {chosen} (pid {server.pid})")
        print_fn(f"  api_base: {server.base_url}")
        print_fn(f"  model:    openai/{alias}")
        print_fn("press Ctrl-C to stop")
        while server.running:
            time.sleep(0.5)
        print_fn(f"the server exited on its own; log tail:\n{server.log_tail()}")
    except KeyboardInterrupt:
        print_fn("stopping")
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """The llama.cpp server process: serve until SIGTERM/SIGINT or until the parent dies."""
    parser = argparse.ArgumentParser(prog="python -m cambrian.meta_agent.llm")
    parser.add_argument("--model", required=True, help="path to a .gguf file")
    parser.add_argument("--alias", required=True, help="model name clients send")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n-ctx", type=int, default=8192, help="context per request (tokens)")
    parser.add_argument("--n-parallel", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="default: one per core")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    parser.add_argument("--embeddings", choices=sorted(_POOLING_TYPES), default=None, help="serve /v1/embeddings")
    args = parser.parse_args(argv)

    import xllamacpp  # only the child loads the native library

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}  # a set of names: a plain str would become its characters
    params.hostnames = [args.host]
    params.port = args.port
    # llama.cpp splits n_ctx across slots; scale it so each request gets the full length.
    params.n_ctx = args.n_ctx * args.n_parallel
    params.n_parallel = args.n_parallel
    threads = args.threads or default_threads()
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    if args.embeddings:
        params.embedding = True
        params.pooling_type = _POOLING_TYPES[args.embeddings]
        params.n_batch = params.n_ubatch = params.n_ctx  # an embedding input is processed in one batch

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server = xllamacpp.Server(params)  # serves from its own threads until deleted
    except RuntimeError as exc:
        print(f"cambrian: llama.cpp could not load {args.model}: {exc}", file=sys.stderr, flush=True)
        return _LOAD_ERROR_EXIT
    print(f"cambrian: serving {args.alias} at http://{args.host}:{args.port}/v1", flush=True)
    while not stop.wait(1.0):
        if args.parent_pid is not None and os.getppid() != args.parent_pid:
            break  # an orphaned server would hold the port and RAM forever
    del server  # its destructor stops the HTTP loop and frees the model
    return 0


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _temp_log_path(alias: str) -> Path:
    fd, name = tempfile.mkstemp(prefix=f"cambrian-serve-{_safe(alias)}-", suffix=".log")
    os.close(fd)
    return Path(name)


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:40]
