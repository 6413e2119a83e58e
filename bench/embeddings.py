"""Do FM embeddings from a local model separate trivial edits from real ones better than character n-grams,
and what do they cost per agent on this machine?

Each embedder -- the hashing vectorizer of character n-grams (Cambrian's default, 256 features) and each
local model of `--models`, served as a run serves `search.novelty.embedding_model` (`LocalEmbeddings`: a
llama.cpp server of its own, one thread per core, 496-token chunks, `--pooling`) -- embeds eight real
programs (bench/_embedding_edits.py: the benchmarks' seeds and reference programs) and 33 edits of them,
one genome per call as a run does. It prints:

1. seconds per genome embedding: the median over the 41 genomes, per 1,000 tokens, and for the circle
   packing seed (what each agent of a default run costs);
2. each edit's cosine similarity to its parent, by kind;
3. whether one threshold (`search.novelty.duplicate_threshold`) separates the classes: the lowest trivial
   and the highest real similarity and their gap (> 0: a threshold between them refuses every trivial edit
   and no real one), the share of (trivial, real) pairs whose trivial edit is the more similar (1.0: ordered
   perfectly; 0.5: chance), over all programs and within each program; and the mean similarity of
   unrelated programs (how much of the scale an embedder uses).

    .venv/bin/python bench/embeddings.py
    .venv/bin/python bench/embeddings.py --models smollm2-135m --pooling mean last --label smollm2-135m
    .venv/bin/python bench/embeddings.py --report bench/results/embeddings-smollm2-135m.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _embedding_edits import REAL, TRIVIAL, Case, cases

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
KINDS = ("constant", "docstring", "rename", "comprehension", "algorithm")

Embed = Callable[[Mapping[str, str]], np.ndarray]


@contextmanager
def embedder(name: str, pooling: str, threads: int | None) -> Iterator[tuple[Embed, Callable[[str], int] | None]]:
    """(files -> unit vector, text -> token count or None) for "ngrams" or a local model served for embeddings."""
    from cambrian.archive.novelty import CodeEmbedder, EndpointEmbedder

    if name == "ngrams":
        ngrams = CodeEmbedder()
        yield ngrams.embed, None
        return
    from cambrian.meta_agent.llm.embeddings import LocalEmbeddings
    from cambrian.meta_agent.llm.models import resolve

    with LocalEmbeddings(resolve(name), alias=name, threads=threads, pooling=pooling) as server:  # type: ignore[arg-type]
        model = EndpointEmbedder(embed_fn=server.embed, dim=server.dim)
        yield model.embed, lambda text: len(server.tokens(text))


def measure(
    label: str, embed: Embed, count_tokens: Callable[[str], int] | None, programs: Sequence[Case]
) -> list[dict]:
    """One row per genome: its case, kind, class, size, seconds to embed and cosine similarity to its parent."""
    from cambrian.archive.novelty import genome_text

    rows = []
    parents: dict[str, np.ndarray] = {}
    for case in programs:
        for kind, klass, what, files in [("parent", "parent", "", case.parent)] + [
            (e.kind, e.label, e.what, e.files) for e in case.edits
        ]:
            started = time.perf_counter()
            vector = embed(files)
            seconds = time.perf_counter() - started
            if kind == "parent":
                parents[case.name] = vector
            text = genome_text(files)
            similarity = None if kind == "parent" else float(np.dot(parents[case.name], vector))
            rows.append(
                {
                    "embedder": label,
                    "case": case.name,
                    "kind": kind,
                    "class": klass,
                    "what": what,
                    "chars": len(text),
                    "tokens": count_tokens(text) if count_tokens is not None else None,
                    "seconds": seconds,
                    "similarity": similarity,
                }
            )
            shown = "" if similarity is None else f"{similarity:.4f}"
            print(f"  {label:34s} {case.name[:24]:24s} {kind:13s} {seconds:7.3f} s  {shown}", flush=True)
    vectors = list(parents.values())
    unrelated = [float(np.dot(a, b)) for a, b in itertools.combinations(vectors, 2)]
    rows.append(
        {"embedder": label, "kind": "unrelated", "class": "unrelated", "similarity": statistics.mean(unrelated)}
    )
    return rows


def ordered_share(trivial: Sequence[float], real: Sequence[float]) -> float:
    """The share of (trivial, real) pairs whose trivial similarity is the higher (ties count half)."""
    pairs = [(t > r) + 0.5 * (t == r) for t in trivial for r in real]
    return sum(pairs) / len(pairs) if pairs else float("nan")


def summary(rows: Sequence[dict]) -> dict:
    """Per embedder: cost, similarity by kind, and how well one threshold separates trivial from real."""
    edits = [r for r in rows if r["class"] in (TRIVIAL, REAL)]
    genomes = [r for r in rows if r["class"] in (TRIVIAL, REAL, "parent")]
    trivial = [r["similarity"] for r in edits if r["class"] == TRIVIAL]
    real = [r["similarity"] for r in edits if r["class"] == REAL]
    within = []
    for case in dict.fromkeys(r["case"] for r in edits):
        mine = [r for r in edits if r["case"] == case]
        share = ordered_share(
            [r["similarity"] for r in mine if r["class"] == TRIVIAL],
            [r["similarity"] for r in mine if r["class"] == REAL],
        )
        within.append(share)
    tokens = [r["tokens"] for r in genomes if r["tokens"] is not None]
    seed = next(r for r in genomes if r["case"].startswith("circle_packing") and r["kind"] == "parent")
    return {
        "median_s": statistics.median(r["seconds"] for r in genomes),
        "s_per_1k_tokens": 1000 * sum(r["seconds"] for r in genomes) / sum(tokens) if tokens else None,
        "circle_seed_s": seed["seconds"],
        "by_kind": {k: statistics.mean(r["similarity"] for r in edits if r["kind"] == k) for k in KINDS},
        "min_trivial": min(trivial),
        "max_real": max(real),
        "gap": min(trivial) - max(real),
        "ordered": ordered_share(trivial, real),
        "ordered_within": statistics.mean(within),
        "unrelated": next(r["similarity"] for r in rows if r["class"] == "unrelated"),
    }


def print_tables(summaries: Mapping[str, dict]) -> None:
    print("\n| embedder | median s / genome | s / 1k tokens | circle seed s |")
    print("|---|---|---|---|")
    for label, s in summaries.items():
        per_k = "-" if s["s_per_1k_tokens"] is None else f"{s['s_per_1k_tokens']:.2f}"
        print(f"| {label} | {s['median_s']:.3f} | {per_k} | {s['circle_seed_s']:.3f} |")
    print("\n| embedder | " + " | ".join(KINDS) + " | unrelated programs |")
    print("|---|" + "---|" * (len(KINDS) + 1))
    for label, s in summaries.items():
        print(f"| {label} | " + " | ".join(f"{s['by_kind'][k]:.5f}" for k in KINDS) + f" | {s['unrelated']:.5f} |")
    print("\n| embedder | lowest trivial | highest real | gap | pairs ordered | within a program |")
    print("|---|---|---|---|---|---|")
    for label, s in summaries.items():
        print(
            f"| {label} | {s['min_trivial']:.5f} | {s['max_real']:.5f} | {s['gap']:+.5f} | {s['ordered']:.2f} | "
            f"{s['ordered_within']:.2f} |"
        )


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        "+dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["smollm2-135m", "qwen2.5-coder-0.5b"], help="local models")
    parser.add_argument("--pooling", nargs="+", default=["mean"], choices=["mean", "last"])
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: one per core)")
    parser.add_argument("--label", default="smollm2-qwen0.5b", help="names the results file")
    parser.add_argument("--report", type=Path, default=None, help="print the tables of an earlier results file")
    args = parser.parse_args(argv)
    if args.report is not None:
        print_tables(json.loads(args.report.read_text())["summaries"])
        return
    meta = {
        "command": " ".join(["bench/embeddings.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "cores": len(os.sched_getaffinity(0)),
        "threads": args.threads,
        "load_before": os.getloadavg()[0],
    }
    print(f"{meta['cores']} cores; load {meta['load_before']:.2f} before starting (other work on this machine)")
    programs = cases()
    rows: list[dict] = []
    summaries: dict[str, dict] = {}
    loads = {}
    for name, pooling in [("ngrams", "")] + [(m, p) for m in args.models for p in args.pooling]:
        label = "n-grams (hashing, 256)" if name == "ngrams" else f"{name} ({pooling})"
        with embedder(name, pooling, args.threads) as (embed, count_tokens):
            mine = measure(label, embed, count_tokens, programs)
        summaries[label] = summary(mine)
        loads[label] = os.getloadavg()[0]
        rows += mine
    print_tables(summaries)
    meta["load_after"] = loads
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"embeddings-{args.label}.json"
    out.write_text(json.dumps({"meta": meta, "summaries": summaries, "rows": rows}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
