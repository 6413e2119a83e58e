"""Contract test suites: what every sandbox backend and every benchmark must do, written once.

A backend's or a benchmark's test module subclasses one and says how to build the thing under test;
pytest then runs every `test_*` method against it. A quirk overrides one test (and says why).

    class TestLocalSandbox(SandboxContract):
        def make_sandbox(self):
            return LocalSandbox()

    class TestCurveFit(BenchmarkContract):
        benchmark_name = "example"
        def secrets(self, benchmark, task):
            return [repr(target(x)) for x in task.inputs["xs"]]

The classes import pytest only inside their tests, so importing this module costs nothing at run time.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from cambrian.evaluators.base import Benchmark, BenchmarkError, Task
from cambrian.evaluators.registry import get_benchmark
from cambrian.evaluators.runner import AgentResult, evaluate_agent
from cambrian.sandbox.base import RunSpec, Sandbox, SandboxError, SandboxSession
from cambrian.sandbox.local import LocalSandbox

_WRITE_RESULT = "import json\nopen('result.json', 'w').write(json.dumps({'sum': sum(range(10))}))\nprint('done')\n"


def _py(code: str, **limits: Any) -> RunSpec:
    return RunSpec(files={"main.py": code}, command=("{python}", "main.py"), **limits)


class SandboxContract:
    """What every `Sandbox` backend does; subclass it with `make_sandbox()` (a new, open backend).

    Isolation beyond these (network, other users' files, root) is a backend's own promise and its own
    tests': the local backend makes none of them, Docker adds its hardening checks.
    """

    def make_sandbox(self) -> Sandbox:
        """A new backend to test; the suite closes it."""
        raise TypeError(f"{type(self).__name__} must define make_sandbox() to run the SandboxContract")

    @contextmanager
    def _sandbox(self) -> Iterator[Sandbox]:
        sandbox = self.make_sandbox()
        try:
            yield sandbox
        finally:
            sandbox.close()

    def test_follows_the_protocol(self) -> None:
        with self._sandbox() as sandbox:
            assert isinstance(sandbox, Sandbox) and sandbox.name and isinstance(sandbox.isolated, bool)
            with sandbox.session() as session:
                assert isinstance(session, SandboxSession)

    def test_runs_a_program_places_files_and_collects_its_result(self) -> None:
        spec = RunSpec(
            files={
                "main.py": "from pkg.util import total\n" + _WRITE_RESULT.replace("sum(range(10))", "total()"),
                "pkg/__init__.py": "",
                "pkg/util.py": "def total():\n    return 45\n",
            },
            command=("{python}", "main.py"),
            collect=("result.json", "never-written.txt"),
        )
        with self._sandbox() as sandbox:
            result = sandbox.run(spec)
        assert result.ok and result.exit_code == 0 and "done" in result.stdout, result.stderr
        assert json.loads(result.files["result.json"]) == {"sum": 45}
        assert "never-written.txt" not in result.files

    def test_a_crash_reports_its_exit_code_and_stderr(self) -> None:
        with self._sandbox() as sandbox:
            result = sandbox.run(_py("import sys\nprint('oops', file=sys.stderr)\nraise SystemExit(3)\n"))
        assert not result.ok and result.exit_code == 3 and "oops" in result.stderr
        assert result.failure_reason() == "exited with code 3"

    def test_a_program_past_its_time_limit_is_killed(self) -> None:
        with self._sandbox() as sandbox:
            result = sandbox.run(_py("while True:\n    pass\n", timeout_s=1.0))
        assert result.timed_out and not result.ok and result.duration_s < 30

    def test_a_flood_of_output_is_cut_and_killed(self) -> None:
        with self._sandbox() as sandbox:
            result = sandbox.run(_py("while True:\n    print('x' * 1000)\n", max_output_bytes=10_000, timeout_s=20))
        assert result.output_truncated and not result.ok and len(result.stdout) <= 20_000

    def test_a_huge_allocation_does_not_succeed(self) -> None:
        with self._sandbox() as sandbox:
            result = sandbox.run(_py("x = bytearray(4 * 1024**3)\nprint('allocated')\n", memory_mb=256))
        assert not result.ok and "allocated" not in result.stdout

    def test_host_environment_does_not_leak(self) -> None:
        os.environ["CAMBRIAN_CONTRACT_CANARY"] = "canary-8d1f"
        try:
            with self._sandbox() as sandbox:
                result = sandbox.run(_py("import os\nprint(sorted(os.environ.items()))\n", env={"GIVEN": "yes"}))
        finally:
            del os.environ["CAMBRIAN_CONTRACT_CANARY"]
        assert result.ok and "canary-8d1f" not in result.stdout and "GIVEN" in result.stdout

    def test_paths_outside_the_work_dir_are_refused(self) -> None:
        import pytest

        with self._sandbox() as sandbox:
            for bad in ("/etc/evil.py", "../escape.py", "pkg/../../escape.py"):
                with pytest.raises(SandboxError):
                    sandbox.run(RunSpec(files={bad: "x = 1\n"}, command=("{python}", "-c", "pass")))

    def test_numpy_and_scipy_import(self) -> None:
        code = "import numpy, scipy.optimize\nprint(numpy.__version__, scipy.__version__)\n"
        with self._sandbox() as sandbox:
            result = sandbox.run(_py(code, timeout_s=60))
        assert result.ok, result.stderr

    def test_a_session_wipes_files_and_processes_between_runs(self) -> None:
        leave = (
            "import subprocess, sys\nopen('left.txt', 'w').write('x')\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        )
        look = "import os\nprint(sorted(os.listdir('.')))\n"
        with self._sandbox() as sandbox, sandbox.session() as session:
            assert session.run(_py(leave, timeout_s=20)).ok
            after = session.run(_py(look, timeout_s=20))
        assert after.ok and "left.txt" not in after.stdout

    def test_runs_from_several_threads_at_once(self) -> None:
        results: list[Any] = []
        with self._sandbox() as sandbox:

            def one(i: int) -> None:
                results.append(sandbox.run(_py(f"print({i} * {i})\n", timeout_s=30)))

            threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert sorted(int(r.stdout.strip()) for r in results) == [0, 1, 4, 9]

    def test_close_twice_is_harmless(self) -> None:
        sandbox = self.make_sandbox()
        sandbox.close()
        sandbox.close()


class BenchmarkContract:
    """What every benchmark does; subclass it with `benchmark_name` (and `options`), and `secrets(...)`.

    seed_runs_without_fm: False for a benchmark whose seed agent calls the FM (it is then only required
    to be scored, not valid, when evaluated without one).
    """

    benchmark_name: str = ""
    options: Mapping[str, Any] = {}
    seed_runs_without_fm: bool = True

    def make_benchmark(self) -> Benchmark:
        if not self.benchmark_name:
            raise TypeError(f"{type(self).__name__} must set benchmark_name to run the BenchmarkContract")
        return get_benchmark(self.benchmark_name, dict(self.options))

    def secrets(self, benchmark: Benchmark, task: Task) -> Iterable[str]:
        """Text only the host may know for `task`: its answer, its hidden tests. None by default."""
        return ()

    def make_sandbox(self) -> Sandbox:
        return LocalSandbox()

    def evaluate_seed(self, benchmark: Benchmark) -> AgentResult:
        """The seed evaluated on the search split (staged), in a sandbox of `make_sandbox`."""
        sandbox = self.make_sandbox()
        try:
            return evaluate_agent(benchmark, benchmark.seed(), sandbox)
        finally:
            sandbox.close()

    # ----- the contract ------------------------------------------------------------------------

    def test_the_seed_is_scored(self) -> None:
        result = self.evaluate_seed(self.make_benchmark())
        assert math.isfinite(result.score) and result.task_results
        assert all(math.isfinite(t.score) and t.split == "search" for t in result.task_results)
        if self.seed_runs_without_fm:
            assert result.valid, f"the seed is invalid: {result.invalid_reason}"

    def test_splits_and_stages_are_consistent(self) -> None:
        benchmark = self.make_benchmark()
        search = [task.id for task in benchmark.tasks("search")]
        holdout = [task.id for task in benchmark.tasks("holdout")]
        assert search and len(set(search)) == len(search) and len(set(holdout)) == len(holdout)
        assert not set(search) & set(holdout), "a task is in both splits"
        staged = [task_id for stage in benchmark.stages() for task_id in stage.task_ids]
        assert sorted(staged) == sorted(search), "the stages must list every search task exactly once"
        assert benchmark.contract.strip() and benchmark.seed().entry in benchmark.seed().files

    def test_run_specs_never_carry_answers_or_hidden_tests(self) -> None:
        benchmark = self.make_benchmark()
        seed = benchmark.seed()
        tasks = [*benchmark.tasks("search"), *benchmark.tasks("holdout")]
        public = benchmark.contract
        for task in tasks:
            secrets = [s for s in self.secrets(benchmark, task) if s and s not in public]
            if not secrets:
                continue
            for other in tasks:
                spec = benchmark.run_spec(seed, other)
                text = "\n".join([*spec.files.values(), *spec.command, *spec.env.values()])
                leaked = [s for s in secrets if s in text]
                assert not leaked, f"the run of {other.id} carries what only the host may know of {task.id}: {leaked}"

    def test_holdout_never_reaches_search_feedback(self) -> None:
        benchmark = self.make_benchmark()
        result = self.evaluate_seed(benchmark)
        shown = "\n".join([result.feedback, result.invalid_reason or "", *(t.feedback for t in result.task_results)])
        for task in benchmark.tasks("holdout"):
            leaked = [s for s in self.secrets(benchmark, task) if s and s in shown]
            assert not leaked, f"search feedback shows what only the host may know of holdout task {task.id}"

    def test_unknown_options_are_refused_with_the_cause(self) -> None:
        import pytest

        with pytest.raises(BenchmarkError) as refused:
            get_benchmark(self.benchmark_name, {**self.options, "no_such_option_xyz": 1})
        assert "no_such_option_xyz" in str(refused.value) and refused.value.fix


def json_forms(value: Any) -> list[str]:
    """The ways a value is usually written as JSON (compact and spaced), for `secrets`."""
    return [json.dumps(value), json.dumps(value, separators=(",", ":"))]
