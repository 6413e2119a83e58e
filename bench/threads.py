"""How many llama.cpp threads decode fastest on this machine, idle and beside other work?

For each thread count and each number of background busy processes (pure-Python loops, one core each:
another search's sandbox runs, a test suite), it starts the local model server, asks it for one short
reply several times (the prompt cached after the first), and prints the decoding speed (completion tokens
per second of the call) and the whole call's time. What it informs: `fm.threads` and the default that
`cambrian.meta_agent.llm.serve.default_threads` picks.

    .venv/bin/python bench/threads.py                                  # 1.5B, threads 1 and 2, 0..2 busy
    .venv/bin/python bench/threads.py --model qwen2.5-coder-0.5b --threads 1,2,4 --busy 0,1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
import urllib.request
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PROMPT = "Write a Python function that returns the n-th Fibonacci number, iteratively, with a docstring."


def _spin(stop: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def _ask(base_url: str, alias: str, max_tokens: int) -> tuple[int, float]:
    body = json.dumps(
        {
            "model": alias,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "cache_prompt": True,
        }
    ).encode()
    request = urllib.request.Request(
        f"{base_url}/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        reply = json.loads(response.read())
    return int(reply["usage"]["completion_tokens"]), time.perf_counter() - started


def measure(model: str, threads: int, busy: int, calls: int, max_tokens: int) -> dict[str, float]:
    from cambrian.meta_agent.llm.models import resolve
    from cambrian.meta_agent.llm.serve import LocalServer

    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(busy)]
    for process in spinners:
        process.start()
    server = LocalServer(resolve(model), alias="bench", n_parallel=1, threads=threads)
    try:
        server.start()
        _ask(server.base_url, "bench", 8)  # the prompt into the cache
        speeds, seconds = [], []
        for _ in range(calls):
            tokens, took = _ask(server.base_url, "bench", max_tokens)
            speeds.append(tokens / took)
            seconds.append(took)
    finally:
        server.stop()
        stop.set()
        for process in spinners:
            process.join()
    return {"tokens_per_s": statistics.median(speeds), "seconds": statistics.median(seconds)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--busy", default="0,1,2", help="comma-separated numbers of busy background processes")
    parser.add_argument("--calls", type=int, default=3, help="replies timed per setting (the median is kept)")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    rows = []
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.2f} before starting")
    print("| busy processes | threads | tokens/s | seconds per reply |\n|---|---|---|---|")
    for busy in [int(b) for b in args.busy.split(",")]:
        for threads in [int(t) for t in args.threads.split(",")]:
            result = measure(args.model, threads, busy, args.calls, args.max_tokens)
            rows.append({"busy": busy, "threads": threads, **result})
            print(f"| {busy} | {threads} | {result['tokens_per_s']:.2f} | {result['seconds']:.1f} |", flush=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"threads-{args.model}.json"
    meta = {"model": args.model, "cores": os.cpu_count(), "date": datetime.now(timezone.utc).isoformat()}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
