"""The layering the package docstrings promise, read from the source: who may import whom.

`archive` and `sandbox` import no other Cambrian package; `evaluators` imports only `sandbox`; `ui` (the
browser UI) only `archive`; `meta_agent` and `cambrian` itself (the library's face) may import them all.
Every package may import `cambrian.errors`, the error root, which imports nothing. No module imports itself
back through others: imports inside functions count, and so do those under `if TYPE_CHECKING:` (a type
checker follows them).
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("archive", "sandbox", "evaluators", "meta_agent", "ui")
#: The root layer: modules every package may import, which import no other Cambrian module.
ROOT_MODULES = ("cambrian.errors", "cambrian.plugins")
ROOT_LAYER = {"errors", "plugins"}
#: Who may import whom, by the name under `cambrian.` ("" is the package's face, `cambrian` itself).
ALLOWED = {
    "archive": {"archive", *ROOT_LAYER},
    "sandbox": {"sandbox", *ROOT_LAYER},
    "evaluators": {"evaluators", "sandbox", *ROOT_LAYER},
    "meta_agent": {*PACKAGES, *ROOT_LAYER},
    "ui": {"ui", "archive", *ROOT_LAYER},
    "errors": set(),
    "plugins": set(),
    "": {*PACKAGES, *ROOT_LAYER},
}


def _module_name(path: Path) -> str:
    parts = ["cambrian", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    """The name under `cambrian.` a module belongs to: cambrian.archive.store -> archive; cambrian -> ""."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, imported module) of every absolute import, in functions and under TYPE_CHECKING too (this
    code base uses no relative imports)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from pkg import module` imports the module too
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> dict[str, list[tuple[int, str]]]:
    modules = {
        _module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    for root_module in ROOT_MODULES:
        modules[root_module] = ROOT / "cambrian" / f"{root_module.split('.')[1]}.py"
    modules["cambrian"] = ROOT / "cambrian" / "__init__.py"
    graph: dict[str, list[tuple[int, str]]] = {}
    for name, path in modules.items():
        targets = []
        for line, imported in _imports(ast.parse(path.read_text(), filename=str(path))):
            if imported in modules:
                targets.append((line, imported))
        graph[name] = targets
    return graph


def test_each_package_imports_only_what_its_layer_allows() -> None:
    broken = []
    for module, targets in _graph().items():
        for line, target in targets:
            if _layer(target) not in ALLOWED[_layer(module)]:
                broken.append(f"{module.removeprefix('cambrian.').replace('.', '/')}.py:{line} imports {target}")
    assert not broken, "imports across the layering:\n" + "\n".join(broken)


def test_no_module_imports_itself_back() -> None:
    graph = {module: sorted({t for _, t in targets if t != module}) for module, targets in _graph().items()}

    # A package's __init__ importing its own submodules (and they importing siblings through the package)
    # is how a public face works; a cycle is one between modules that are not each other's package.
    def related(a: str, b: str) -> bool:
        return a.startswith(b + ".") or b.startswith(a + ".")

    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in graph.get(module, []):
            if state.get(target) == 1:
                cycle = stack[stack.index(target) :] + [target]
                if not all(related(a, b) for a, b in zip(cycle, cycle[1:])):
                    cycles.append(" -> ".join(cycle))
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_search_package_exports_lazily_exactly_what_it_imports_for_type_checkers() -> None:
    """meta_agent.search imports its submodules on first use; its name -> module table must say what the
    `if TYPE_CHECKING:` imports say, or a name would type-check and fail at run time (or the reverse)."""
    import cambrian.meta_agent.search as search

    source = (ROOT / "meta_agent" / "search" / "__init__.py").read_text()
    guarded = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    imported = {
        alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    assert imported == {name: module for module, names in search._NAMES.items() for name in names}
    assert sorted(imported) == sorted(search.__all__)
    for name in search.__all__:
        assert getattr(search, name) is not None


def test_a_read_command_imports_no_search_loop_docker_client_or_alembic() -> None:
    """`cambrian runs`/`status`/`tree`/`show` start without the loop, the sandbox's Docker client or Alembic
    (about 0.5 s of a read command's imports); a run imports them when it starts."""
    import subprocess
    import sys

    probe = (
        "import sys; from cambrian.meta_agent.cli import app; "
        "print(' '.join(m for m in ('cambrian.meta_agent.search._loop', 'cambrian.meta_agent.search.session', "
        "'docker', 'alembic', 'cambrian.meta_agent.llm', 'rich.progress') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_the_formatter_formats_every_file() -> None:
    """No formatter-skip comments: where a call reads badly once formatted, it has too many arguments. The
    peers' circle-packing files in bench/peers are OpenEvolve's, kept byte for byte."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    vendored = "bench/peers/circle_packing/"
    skipped = [
        f"{name}:{number}"
        for name in tracked.stdout.split()
        if not name.startswith(vendored)
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"#\s*fmt:\s*(skip|off)\b", line)
    ]
    assert not skipped, skipped
