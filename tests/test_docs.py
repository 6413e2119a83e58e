"""Every code block of the documentation (docs/**/*.md and README.md) does what it says.

- Python blocks run, each in a fresh interpreter, in order, in one temporary folder per page (a later block may
  read a run an earlier one made), with a timeout. The example package (examples/cambrian-example-benchmark)
  is on PYTHONPATH, as if installed. A block that must not run here (it needs an API key, a GPU, a cluster,
  a database) says so in its title, which starts with "needs": ```` ```python title="needs an API key" ````.
  It is still compiled, so it cannot rot syntactically.
- Shell blocks: every `cambrian` command (also as `.venv/bin/cambrian` or `python -m cambrian`) names a
  real command of the Typer app and real options, with values of the right type; nothing is run.
- TOML blocks parse; one that is a run config (no [project], [build-system] or [tool] table) is validated as
  `cambrian run --config` would validate it.
- `--8<-- "path"` lines (pymdownx.snippets) are replaced by the repository file they name, as the site does.
- Every fenced block names its language, so none escapes these checks unnoticed.

Real parts: the real CLI app, real searches in the local sandbox (`ast_mutate`, no model), real archives.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
EXAMPLE_PACKAGE = ROOT / "examples" / "cambrian-example-benchmark"
LANGUAGES = {"python", "bash", "toml", "text"}
SHELLS = {"bash"}
BLOCK_TIMEOUT_S = 120

FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`]*)$")
TITLE = re.compile(r'title="(?P<title>[^"]*)"')
SNIPPET = re.compile(r'^\s*--8<--\s+"(?P<path>[^"]+)"\s*$')


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    title: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _resolve_snippets(text: str) -> str:
    lines = []
    for line in text.splitlines():
        match = SNIPPET.match(line)
        lines.append((ROOT / match["path"]).read_text() if match else line + "\n")
    return "".join(lines)


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    lines = page.read_text().splitlines()
    opening: tuple[int, str, str] | None = None  # (line, indent, info)
    body: list[str] = []
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line)
        if opening is None and match:
            opening, body = (number, match["indent"], match["info"].strip()), []
        elif opening is not None and line.strip() == "```":
            start, indent, info = opening
            title = TITLE.search(info)
            text = "\n".join(row[len(indent) :] if row.startswith(indent) else row for row in body) + "\n"
            language = info.split()[0] if info.split() else ""
            found.append(Block(page, start, language, title["title"] if title else "", _resolve_snippets(text)))
            opening = None
        elif opening is not None:
            body.append(line)
    assert opening is None, f"{page.relative_to(ROOT)}:{opening[0]}: a code block is never closed"
    return found


def all_blocks(language: str | None = None) -> list[Block]:
    return [block for page in PAGES for block in blocks(page) if language in (None, block.language)]


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


# ----- every block -------------------------------------------------------------------------------------------


def test_every_code_block_names_a_language_these_tests_check() -> None:
    unnamed = [f"{b.where}: ```{b.language}" for b in all_blocks() if b.language not in LANGUAGES]
    assert not unnamed, f"fenced blocks must be one of {sorted(LANGUAGES)}:\n" + "\n".join(unnamed)


def test_the_pages_hold_python_shell_and_toml_blocks() -> None:
    """A guard against a parser that silently finds nothing."""
    counts = {language: len(all_blocks(language)) for language in ("python", "bash", "toml")}
    assert counts["python"] >= 15 and counts["bash"] >= 15 and counts["toml"] >= 4, counts


# ----- Python ------------------------------------------------------------------------------------------------

PYTHON_PAGES = [page for page in PAGES if any(b.language == "python" for b in blocks(page))]


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CAMBRIAN_RUNS_DIR", "CAMBRIAN_STORE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLE_PACKAGE), os.environ.get("PYTHONPATH")]))
    return env


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=_id)
def test_python_blocks_run(page: Path, tmp_path: Path) -> None:
    for index, block in enumerate(b for b in blocks(page) if b.language == "python"):
        compile(block.text, block.where, "exec")  # a block marked "needs ..." is compiled, not run
        if block.title.startswith("needs"):
            continue
        script = tmp_path / f"block_{index}.py"
        script.write_text(block.text)
        try:
            done = subprocess.run(
                [sys.executable, str(script)],
                cwd=tmp_path,
                env=_environment(),
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{block.where}: the block ran past {BLOCK_TIMEOUT_S} s")
        assert done.returncode == 0, f"{block.where} failed:\n{block.text}\n--- stderr ---\n{done.stderr[-4000:]}"


# ----- shell: cambrian commands ------------------------------------------------------------------------------

PREFIXES = (
    ("cambrian",),
    (".venv/bin/cambrian",),
    ("python", "-m", "cambrian"),
    ("python3", "-m", "cambrian"),
    (".venv/bin/python", "-m", "cambrian"),
)
SEPARATORS = {";", "&&", "||", "|", "&"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def shell_commands(text: str) -> Iterator[list[str]]:
    """Each simple command of a shell block as words: continuations joined, comments dropped, split at ; && || |."""
    for line in text.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        command: list[str] = []
        for word in [*lexer, ";"]:
            if word in SEPARATORS:
                while command and ASSIGNMENT.match(command[0]):
                    command.pop(0)  # VAR=value before a command
                if command:
                    yield command
                command = []
            else:
                command.append(word)


def cambrian_arguments(words: list[str]) -> list[str] | None:
    """The arguments after the `cambrian` program in `words`, or None when it runs something else."""
    for prefix in PREFIXES:
        if tuple(words[: len(prefix)]) == prefix:
            return words[len(prefix) :]
    return None


def _app() -> Any:
    import typer

    from cambrian.meta_agent.cli import app

    return typer.main.get_command(app)


def _value_problem(param: Any, value: str) -> str | None:
    """Why `value` is not of the parameter's type (int or float), or None."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    for kind in (int, float):
        if annotation is kind:
            try:
                kind(value)
            except ValueError:
                return f"{value!r} is not {'an int' if kind is int else 'a number'}"
    return None


def command_problems(args: list[str]) -> list[str]:
    """What is wrong with `cambrian ARGS`, checked against the app without running it."""
    command, path = _app(), ["cambrian"]
    i = 0
    while hasattr(command, "list_commands"):  # a group: the next word names a sub-command
        if i == len(args) or args[i] == "--help":
            return []
        sub = command.get_command(None, args[i])
        if sub is None:
            return [f"`{' '.join(path)}` has no command {args[i]!r} (it has {', '.join(command.list_commands(None))})"]
        command, path, i = sub, [*path, args[i]], i + 1
    name = " ".join(path)
    options = {opt: p for p in command.params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("-")}
    arguments = [p for p in command.params if not p.opts[0].startswith("-")]
    problems: list[str] = []
    positional: list[str] = []
    while i < len(args):
        word, i = args[i], i + 1
        if word == "--help":
            return []
        if word == "--":
            positional += args[i:]
            break
        if not word.startswith("-") or word == "-" or re.fullmatch(r"-\d+(\.\d+)?", word):
            positional.append(word)
            continue
        option, has_value, value = word.partition("=")
        param = options.get(option)
        if param is None:
            problems.append(f"`{name}` has no option {option} (it has {', '.join(sorted(options))})")
            continue
        if getattr(param, "is_flag", False):
            if has_value:
                problems.append(f"`{name} {option}` is a flag and takes no value")
            continue
        if not has_value:
            if i == len(args):
                problems.append(f"`{name} {option}` needs a value")
                continue
            value, i = args[i], i + 1
        problem = _value_problem(param, value)
        if problem:
            problems.append(f"`{name} {option}`: {problem}")
    unlimited = any(p.nargs == -1 for p in arguments)
    if len(positional) > len(arguments) and not unlimited:
        problems.append(f"`{name}` takes {len(arguments)} argument(s), got {positional}")
    required = sum(1 for p in arguments if p.required)
    if len(positional) < required:
        problems.append(f"`{name}` needs {required} argument(s), got {positional}")
    for param, value in zip(arguments, positional):
        problem = _value_problem(param, value)
        if problem:
            problems.append(f"`{name}` {(param.metavar or param.name).upper()}: {problem}")
    return problems


def test_cambrian_commands_in_shell_blocks_name_real_commands_and_options() -> None:
    problems, checked = [], 0
    for block in all_blocks():
        if block.language not in SHELLS:
            continue
        for words in shell_commands(block.text):
            args = cambrian_arguments(words)
            if args is None:
                continue
            checked += 1
            problems += [f"{block.where}: {problem}" for problem in command_problems(args)]
    assert checked >= 40, f"only {checked} cambrian commands found: is the block parser broken?"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("cambrian serch knapsack", "has no command 'serch'"),
        ("cambrian run knapsack --iteration 3", "has no option --iteration"),
        ("cambrian show my-run AGENT", "is not an int"),
        ("cambrian export my-run --best", "needs a value"),
        ("cambrian status", "needs 1 argument"),
        ("cambrian models pul smollm2-135m", "has no command 'pul'"),
        ("cambrian tree my-run --best-path=yes", "is a flag"),
    ],
)
def test_the_command_check_catches_what_the_cli_would_refuse(line: str, problem: str) -> None:
    (words,) = list(shell_commands(line))
    args = cambrian_arguments(words)
    assert args is not None
    assert any(problem in found for found in command_problems(args)), command_problems(args)


def test_the_command_check_reads_shell_syntax() -> None:
    text = "export X=1\nA=b cambrian status r1; cambrian tree r1 --best-path && \\\n  .venv/bin/cambrian ui  # a note\n"
    commands = [cambrian_arguments(words) for words in shell_commands(text)]
    assert commands == [None, ["status", "r1"], ["tree", "r1", "--best-path"], ["ui"]]


# ----- TOML --------------------------------------------------------------------------------------------------


def test_toml_blocks_parse_and_run_configs_validate(tmp_path: Path) -> None:
    from cambrian.meta_agent.config import load_config

    for index, block in enumerate(all_blocks("toml")):
        try:
            data = tomllib.loads(block.text)
        except tomllib.TOMLDecodeError as exc:
            pytest.fail(f"{block.where}: not TOML: {exc}")
        if {"project", "build-system", "tool"} & set(data):
            continue  # a pyproject.toml, not a run config
        path = tmp_path / f"config_{index}.toml"
        path.write_text(block.text)
        load_config(path)  # a ConfigError names the bad key


# ----- the README -------------------------------------------------------------------------------------------

README = ROOT / "README.md"
LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(#[^)]*)?\)")


def test_the_readme_is_a_landing_page_whose_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for match in LINK.finditer(text):
        target = match["target"]
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_the_readme_and_getting_started_keep_the_two_commands_ci_and_the_quickstart_bench_run() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    (test_command,) = [line for line in ci.splitlines() if "-m pytest" in line and line.startswith("python3")]
    (readme_args,) = [  # bench/quickstart.py runs the quickstart command as README_ARGS
        ast.literal_eval(node.value)
        for node in ast.parse((ROOT / "bench" / "quickstart.py").read_text()).body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "README_ARGS" for t in node.targets)
    ]
    quickstart = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/cambrian " + " ".join(readme_args)
    for page in (README, ROOT / "docs" / "getting-started.md"):
        commands = [b.text.strip() for b in blocks(page) if b.language == "bash"]
        assert quickstart in commands, f"{page.name} lost the quickstart command"
        assert test_command in commands, f"{page.name} lost the test command that .ci/run runs"
