"""Would several completions per prompt (`n` > 1) make more proposals per minute on this machine?

Two measurements. `--calls`: it starts the local model server with two slots (llama.cpp answers `n` up to its
slots), and alternates one request for two completions with two requests for one completion each, with the
server's prompt cache off (every prompt processed anew) and on (the same prompt again, as a search's siblings
send). `--logs`: where a search's FM time goes, read from its runs' server logs (`bench/generality.py
--keep-runs DIR` keeps them): the share of prompt processing in each call, and the prompt tokens the cache
held. `n` = 2 can only save the prompt processing of the second reply; what decoding two replies at once
costs against one after another is the first measurement's question.

    .venv/bin/python bench/completions.py --model smollm2-135m --threads 1
    .venv/bin/python bench/completions.py --model qwen2.5-coder-1.5b --reps 2
    .venv/bin/python bench/completions.py --logs /work/suite-i40          # no server: the runs' logs only
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import urllib.request
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: A prompt of the size a search sends (about 1,600 tokens: a program and an instruction).
PROMPT = (
    "Here is a Python program:\n"
    + "\n".join(f"def f{i}(x):\n    return x * {i} + {i * i}  # step {i}" for i in range(60))
    + "\nRewrite f3 to be faster. Reply with code."
)


def ask(base_url: str, *, n: int, seed: int, cache: bool, max_tokens: int) -> tuple[float, int]:
    """One request for `n` completions: its seconds and the prompt tokens the server processed."""
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "n": n,
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "seed": seed,
        "cache_prompt": cache,
    }
    request = urllib.request.Request(
        f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=1200) as response:
        reply = json.loads(response.read())
    assert len(reply["choices"]) == n, reply
    return time.perf_counter() - started, int(reply.get("timings", {}).get("prompt_n", -1))


def measure_calls(model: str, threads: int | None, reps: int, max_tokens: int) -> list[dict[str, object]]:
    from cambrian.meta_agent.llm.models import resolve
    from cambrian.meta_agent.llm.serve import LocalServer

    rows: list[dict[str, object]] = []
    server = LocalServer(resolve(model), alias="bench", n_parallel=2, threads=threads)
    try:
        server.start()
        for cache in (False, True):
            ask(server.base_url, n=1, seed=0, cache=cache, max_tokens=8)  # warm (and, with the cache, fill it)
            for rep in range(reps):
                both, prompt_n = ask(server.base_url, n=2, seed=100 + rep, cache=cache, max_tokens=max_tokens)
                one_a, _ = ask(server.base_url, n=1, seed=200 + rep, cache=cache, max_tokens=max_tokens)
                one_b, _ = ask(server.base_url, n=1, seed=300 + rep, cache=cache, max_tokens=max_tokens)
                row = {"cache": cache, "rep": rep, "n2_s": both, "two_n1_s": one_a + one_b, "prompt_n": prompt_n}
                rows.append(row)
                print(
                    f"| {'on' if cache else 'off'} | {rep} | {both:.2f} | {one_a + one_b:.2f} | {prompt_n} |",
                    flush=True,
                )
    finally:
        server.stop()
    return rows


_PROMPT = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")
_DECODE = re.compile(r"\s eval time =\s+([\d.]+) ms /\s+(\d+) tokens")
_CONTEXT = re.compile(r"stop processing: n_tokens = (\d+)")


def read_logs(folder: Path) -> list[dict[str, object]]:
    """Per run folder under `folder` with a server.log: FM calls, seconds of prompt processing and of decoding,
    and the share of the prompt tokens the server's cache held (the rest it processed)."""
    rows: list[dict[str, object]] = []
    for log in sorted(folder.glob("*/server.log")):
        text = log.read_text(encoding="utf-8", errors="replace")
        prompts = [(float(ms), int(tokens)) for ms, tokens in _PROMPT.findall(text)]
        decodes = [(float(ms), int(tokens)) for ms, tokens in _DECODE.findall(text)]
        contexts = [int(n) for n in _CONTEXT.findall(text)]
        if not prompts:
            continue
        prompt_s = sum(ms for ms, _ in prompts) / 1000
        decode_s = sum(ms for ms, _ in decodes) / 1000
        processed = sum(tokens for _, tokens in prompts)
        prompt_tokens = sum(contexts) - sum(tokens for _, tokens in decodes)
        row = {
            "run": log.parent.name,
            "calls": len(prompts),
            "prompt_s": round(prompt_s, 1),
            "decode_s": round(decode_s, 1),
            "prompt_share": round(prompt_s / (prompt_s + decode_s), 3),
            "cached_share": round(1 - processed / prompt_tokens, 3) if prompt_tokens > 0 else None,
        }
        rows.append(row)
        print(
            f"| {row['run']} | {row['calls']} | {prompt_s:.0f} | {decode_s:.0f} | {row['prompt_share']:.0%} | "
            f"{row['cached_share']:.0%} |"
        )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: one per core)")
    parser.add_argument("--reps", type=int, default=3, help="alternations per cache setting")
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--logs", type=Path, default=None, help="read a search's server logs instead")
    args = parser.parse_args(argv)
    meta = {"cores": os.cpu_count(), "load": os.getloadavg()[0], "date": datetime.now(timezone.utc).isoformat()}
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.2f} before starting")
    if args.logs is not None:
        print(
            "| run | FM calls | prompt s | decode s | prompt share | prompt tokens cached |\n|---|---|---|---|---|---|"
        )
        rows = read_logs(args.logs)
        out = RESULTS_DIR / f"completions-logs-{args.logs.name}.json"
        meta["logs"] = str(args.logs)
    else:
        print("| prompt cache | rep | one request, n=2 (s) | two requests, n=1 (s) | prompt tokens processed |")
        print("|---|---|---|---|---|")
        rows = measure_calls(args.model, args.threads, args.reps, args.max_tokens)
        for cache in (False, True):
            pick = [r for r in rows if r["cache"] is cache]
            n2 = statistics.median(float(r["n2_s"]) for r in pick)  # type: ignore[arg-type]
            n1 = statistics.median(float(r["two_n1_s"]) for r in pick)  # type: ignore[arg-type]
            print(
                f"prompt cache {'on' if cache else 'off'}: median n=2 {n2:.2f} s, two n=1 {n1:.2f} s ({n1 / n2:.2f}x)"
            )
        out = RESULTS_DIR / f"completions-{args.model}.json"
        meta.update(model=args.model, threads=args.threads, max_tokens=args.max_tokens)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
