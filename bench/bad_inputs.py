"""Is every bad input a new user might give answered clearly? The bad-inputs batch.

Runs each case (`CASES`, in bench/_bad_input_cases.py; what they build is in bench/_bad_input_setups.py)
through the real CLI, as a user would type it: `python -m cambrian ...` in a fresh temporary folder (the
default `runs` folder is that folder's), COLUMNS=250, NO_COLOR=1, CAMBRIAN_STORE and CAMBRIAN_RUNS_DIR unset.
Each case is a small function that builds what it needs (a runs folder with a run, a damaged archive, a
read-only folder, an export folder with a hostile manifest, a bad TOML config, a run being searched by another
process, ...) and names one command, the words that name its cause, and what the command must not lose. One
row per case: its name, the command, the exit code, the verdict and the first error line; then "N clear, N
confusing, N tracebacks, N hangs of N".

    .venv/bin/python bench/bad_inputs.py                       # every case; rows to bench/results/bad_inputs.json
    .venv/bin/python bench/bad_inputs.py --only export,eval    # the cases whose names contain a word
    .venv/bin/python bench/bad_inputs.py --list                # the cases and their commands, nothing run

Verdicts. Most cases are inputs the CLI must refuse (`expect="refuse"`):

- traceback: "Traceback (most recent call last)" in stdout or stderr;
- hangs: the command ran past its timeout (60 s unless the case says less);
- confusing: exit 0; or no error line (`error:`, click's `Error:`, `run NAME failed:`, the doctor's `FAIL`);
  or the message (from the first error line to its fix) does not hold every word of the case's `cause`; or no
  fix (a `fix:` line after the error, or click's usage form, whose `Try '... --help'` line is its fix); or the
  command lost something the case checks (an archive changed, a file overwritten, a run folder left behind);
- clear: none of these.

A few inputs are ones the CLI should ride out (`expect="proceed"`): a runs folder with one damaged archive
among healthy ones is still listed; an operator that needs no model runs without one; an export's options
cannot raise your limits or turn a model server on for programs that call none. There clear means exit 0,
every word of `cause` in the output (the line that says what was ignored or refused), and the case's check.

The rows go to bench/results/bad_inputs.json with the commit and the date. Every case fails fast; none starts
a model server or downloads anything (a run that needs a model names one that is missing or unreachable). A
read-only folder is one this user may not write: as root, the command runs as nobody (setpriv) over it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from _bad_input_cases import CASES, Attempt, Case
from _bad_input_setups import REPO, cli_env

RESULTS = REPO / "bench" / "results" / "bad_inputs.json"
TRACEBACK = "Traceback (most recent call last)"
ERROR_LINE = re.compile(r"^\s*(error:|Error:|run \S+ failed:|FAIL\b)")
FIX_LINE = re.compile(r"^\s*fix:")
USAGE_FIX = re.compile(r"^Try '.+ --help' for help\.")


@dataclass
class Row:
    name: str
    command: str
    exit: int | None
    verdict: str
    reason: str
    first_error: str
    seconds: float
    output_tail: str = field(default="", repr=False)


# ----- running and judging -----------------------------------------------------------------------


def judge(attempt: Attempt, code: int, out: str, lost: str | None) -> tuple[str, str, str]:
    """(verdict, reason, first error line) of one finished command; `out` is stderr then stdout."""
    lines = out.splitlines()
    first = next((i for i, line in enumerate(lines) if ERROR_LINE.match(line)), None)
    first_error = lines[first].strip() if first is not None else ""
    if TRACEBACK in out:
        after = out.rsplit(TRACEBACK, 1)[1].splitlines()[1:]
        raised = next((line for line in after if line.strip() and not line.startswith(" ")), "")
        return "traceback", "a traceback", raised
    flat = lambda text: " ".join(text.split()).lower()  # noqa: E731 - rich wraps long lines
    if attempt.expect == "proceed":
        missing = [word for word in attempt.cause if word.lower() not in flat(out)]
        said = next((line.strip() for line in lines if attempt.cause[0].lower() in line.lower()), first_error)
        if code != 0:
            return "confusing", f"exit {code} where it should go on", first_error
        if missing:
            return "confusing", f"never says {', '.join(missing)}", said
        return ("confusing", f"lost: {lost}", said) if lost else ("clear", "", said)
    if code == 0:
        return "confusing", "exit 0 for a bad input", first_error
    if first is None:
        return "confusing", "no error line", next((x.strip() for x in lines if x.strip()), "")
    ends = next((i for i in range(first, len(lines)) if FIX_LINE.match(lines[i])), len(lines) - 1)
    message = flat("\n".join(lines[first : ends + 1]))
    missing = [word for word in attempt.cause if word.lower() not in message]
    has_fix = any(FIX_LINE.match(line) for line in lines[first:]) or any(USAGE_FIX.match(line) for line in lines)
    if missing:
        return "confusing", f"the cause ({', '.join(missing)}) is not named", first_error
    blamed = [word for word in attempt.wrong if word.lower() in message]
    if blamed:
        return "confusing", f"blames the wrong thing ({', '.join(blamed)})", first_error
    if not has_fix:
        return "confusing", "no fix", first_error
    if lost:
        return "confusing", f"lost: {lost}", first_error
    return "clear", "", first_error


def shown(args: tuple[str, ...], tmp: Path) -> str:
    return "cambrian " + shlex.join(args).replace(str(tmp), "$TMP")


def run_case(case: Case) -> Row:
    with tempfile.TemporaryDirectory(prefix="cambrian-bad-") as scratch:
        tmp = Path(scratch)
        attempt = case.setup(tmp)
        command = [*attempt.prefix, sys.executable, "-m", "cambrian", *attempt.args]
        start, lost = time.monotonic(), None
        # A session of its own: a command that hangs is stopped with whatever it started (a model server).
        cli = subprocess.Popen(
            command,
            cwd=tmp,
            env=cli_env(attempt.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        hung = False
        try:
            stdout, stderr = cli.communicate(timeout=attempt.timeout_s)
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(cli.pid, signal.SIGKILL)
            stdout, stderr = cli.communicate()
        seconds = time.monotonic() - start
        try:
            lost = attempt.kept() if attempt.kept else None
        except Exception as error:  # noqa: BLE001 - a check that cannot read what it checks counts as a loss
            lost = f"the check failed: {type(error).__name__}: {error}"
        finally:
            if attempt.stop:
                attempt.stop()
        out = (stderr + "\n" + stdout).replace(str(tmp), "$TMP")
        if hung:
            verdict, reason, first_error = "hangs", f"still running after {attempt.timeout_s:.0f} s", ""
        else:
            verdict, reason, first_error = judge(attempt, cli.returncode, out, lost)
        code = None if hung else cli.returncode
        return Row(
            case.name, shown(attempt.args, tmp), code, verdict, reason, first_error, round(seconds, 2), out[-3000:]
        )


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        "+dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated words: run the cases whose names hold one")
    parser.add_argument("--list", action="store_true", help="list the cases, run nothing")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the rows go (JSON)")
    args = parser.parse_args()
    words = [w for w in args.only.split(",") if w]
    cases = [case for case in CASES if not words or any(w in case.name for w in words)]
    assert len({case.name for case in CASES}) == len(CASES), "two cases share a name"
    if args.list:
        for case in cases:
            print(case.name)
        return
    rows: list[Row] = []
    for case in cases:
        row = run_case(case)
        rows.append(row)
        code = "-" if row.exit is None else str(row.exit)
        print(f"{row.name:<40} {code:>4}  {row.verdict:<9}  {row.command}", flush=True)
        print(f"{'':<40}       {row.first_error[:200]}" + (f"  [{row.reason}]" if row.reason else ""), flush=True)
    counts = {v: sum(r.verdict == v for r in rows) for v in ("clear", "confusing", "traceback", "hangs")}
    line = (
        f"{counts['clear']} clear, {counts['confusing']} confusing, {counts['traceback']} tracebacks, "
        f"{counts['hangs']} hangs of {len(rows)}"
    )
    print(line)
    result = {
        "commit": commit(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "count": line,
        **counts,
        "cases": len(rows),
        "rows": [asdict(row) for row in rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"rows in {args.out}")


if __name__ == "__main__":
    main()
