"""Hostile HumanEval solutions written against the check run's own design: none may score a pass.

Each attack is a program the agent returns; it runs in a real check run (the local sandbox and the Docker
one) against the real hidden tests of a problem that a function returning None fails. The attacks that
forged passes before the solution moved to a child process of its own: walking the interpreter's frames to
the nonce, and a return value whose __eq__ always answers True.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator

import pytest

from cambrian.evaluators.base import Task
from cambrian.evaluators.humaneval import HumanEval
from cambrian.evaluators.humaneval.solution_process import decode, dumps_line, encode, loads_line
from cambrian.sandbox.base import RunResult, Sandbox
from cambrian.sandbox.local import LocalSandbox
from tests.conftest import skip_without_docker

TASK_ID = "HumanEval/0"  # has_close_elements: a function returning None (or anything constant) fails it
ENTRY = "has_close_elements"

WALKS_FRAMES = f"""
import gc, json, os, sys

def _find():
    found = {{}}
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, dict) and value.get('nonce') and value.get('salt'):
                found = value
        frame = frame.f_back
    for value in gc.get_objects():
        if isinstance(value, dict) and value.get('nonce') and value.get('salt'):
            found = value
    return found

secret = _find()
print('frames found a nonce:', bool(secret), file=sys.stderr)
if secret:
    json.dump({{'passed': True, 'salt': secret['salt'], 'nonce': secret['nonce']}}, open('result.json', 'w'))
    os._exit(0)

def {ENTRY}(numbers, threshold):
    return None
"""

READS_THE_CHECK_PROCESS = f"""
import json, os, re, signal, sys

parent = os.getppid()
blob = b''
for name in ('environ', 'cmdline', 'maps', 'mem', 'fd/1'):
    try:
        with open('/proc/%d/%s' % (parent, name), 'rb', 0) as handle:
            handle.read(1)
        print('opened /proc/<check>/' + name, file=sys.stderr)
    except OSError as exc:
        print('refused /proc/<check>/%s: %s' % (name, type(exc).__name__), file=sys.stderr)
try:
    regions = open('/proc/%d/maps' % parent).read().splitlines()
    with open('/proc/%d/mem' % parent, 'rb', 0) as mem:
        for line in regions:
            span, perms = line.split()[:2]
            low, high = (int(x, 16) for x in span.split('-'))
            if 'r' in perms and high - low < (64 << 20):
                try:
                    mem.seek(low)
                    blob += mem.read(high - low)
                except (OSError, OverflowError, ValueError):
                    pass
except OSError:
    pass
match = re.search(rb'"salt": "([0-9a-f]{{32}})", "nonce": "([0-9a-f]{{64}})"', blob)
print('memory gave a nonce:', bool(match), file=sys.stderr)
if match:
    os.kill(parent, signal.SIGKILL)
    with open('result.json', 'w') as handle:
        json.dump({{'passed': True, 'salt': match[1].decode(), 'nonce': match[2].decode()}}, handle)
    os._exit(0)

def {ENTRY}(numbers, threshold):
    return None
"""

EQUALS_ANYTHING = f"""
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __bool__(self):
        return True

def {ENTRY}(numbers, threshold):
    return Anything()
"""

BOOL_SUBCLASS = f"""
class Yes(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__

def {ENTRY}(numbers, threshold):
    return Yes(1)
"""

READS_THE_TESTS = f"""
import glob, os, sys
found = [p for p in glob.glob('*') + glob.glob('.*') if p not in ('solution.py',)]
print('files next to the solution:', found, file=sys.stderr)
for name in found:
    try:
        if 'def check' in open(name).read():
            print('TESTS FOUND in', name, file=sys.stderr)
    except OSError:
        pass

def {ENTRY}(numbers, threshold):
    return None
"""

KILLS_THE_CHECK = f"""
import json, os, signal
json.dump({{'passed': True, 'salt': 'x', 'nonce': 'y'}}, open('result.json', 'w'))
os.kill(os.getppid(), signal.SIGKILL)

def {ENTRY}(numbers, threshold):
    return None
"""

PLANTS_A_MODULE = f"""
# a json.py and a traceback.py in the work dir: the check must never import them
for name in ('json', 'traceback', 'linecache', 'encodings', 'subprocess'):
    with open(name + '.py', 'w') as handle:
        handle.write("import os\\nopen('result.json', 'w').write('{{\\"passed\\": true}}')\\nos._exit(0)\\n")

def {ENTRY}(numbers, threshold):
    raise ValueError('fail after planting')
"""

EXITS_DURING_A_CALL = f"""
import os

def {ENTRY}(numbers, threshold):
    os._exit(0)
"""

LEAVES_A_WRITER_BEHIND = f"""
import json, os, time
# A grandchild in a session of its own (out of any process group the check kills) that waits for the
# verdict and rewrites the failure details the meta-agent is shown.
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for _ in range(400):
            time.sleep(0.01)
            try:
                verdict = json.load(open('result.json'))
            except (OSError, ValueError):
                continue
            verdict.update(error_type='Forged', error='the grandchild wrote this')
            open('result.json', 'w').write(json.dumps(verdict))
            break
    os._exit(0)

def {ENTRY}(numbers, threshold):
    raise ValueError('the real failure')
"""

ATTACKS = {
    "walks_frames": WALKS_FRAMES,
    "reads_the_check_process": READS_THE_CHECK_PROCESS,
    "equals_anything": EQUALS_ANYTHING,
    "int_subclass_equals_anything": BOOL_SUBCLASS,
    "reads_the_tests": READS_THE_TESTS,
    "kills_the_check": KILLS_THE_CHECK,
    "plants_a_module": PLANTS_A_MODULE,
    "exits_during_a_call": EXITS_DURING_A_CALL,
}


@pytest.fixture(scope="module", params=["local", "docker"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    if request.param == "local":
        box: Sandbox = LocalSandbox()
    else:
        skip_without_docker()
        from cambrian.sandbox.docker import DockerSandbox

        box = DockerSandbox(pool_size=1, run_label="pytest-hostile-humaneval")
    try:
        yield box
    finally:
        box.close()


def check(sandbox: Sandbox, program: str, *, task_id: str = TASK_ID) -> tuple[bool, str, RunResult]:
    """(passed, feedback, the check run) for a solution program, on the search split (cases shown)."""
    bench = HumanEval()
    task = Task(id=task_id, split="search", inputs={})
    answer = json.dumps({"ok": True, "value": program, "seconds": 0.01})
    agent_run = RunResult(exit_code=0, stdout="", stderr="", duration_s=0.1, files={"result.json": answer})
    spec = bench.check_spec(task, agent_run)
    assert spec is not None
    run = sandbox.run(spec)
    score = bench.score(task, agent_run, check=run)
    return score.passed, score.feedback, run


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_hostile_solution_does_not_pass(sandbox: Sandbox, attack: str) -> None:
    passed, feedback, run = check(sandbox, textwrap.dedent(ATTACKS[attack]))
    assert not passed, f"{attack} forged a pass: {feedback}\n{run.stderr}"


def test_the_solution_cannot_reach_the_check_process_or_the_tests(sandbox: Sandbox) -> None:
    _, _, run = check(sandbox, textwrap.dedent(READS_THE_CHECK_PROCESS))
    assert "memory gave a nonce: False" in run.stderr, run.stderr
    for name in ("environ", "mem", "fd/1"):
        assert f"refused /proc/<check>/{name}" in run.stderr, run.stderr
    _, _, run = check(sandbox, textwrap.dedent(READS_THE_TESTS))
    assert "files next to the solution: []" in run.stderr, run.stderr
    assert "TESTS FOUND" not in run.stderr
    _, _, run = check(sandbox, textwrap.dedent(WALKS_FRAMES))
    assert "frames found a nonce: False" in run.stderr, run.stderr


def test_failures_say_what_the_solution_did(sandbox: Sandbox) -> None:
    _, feedback, _ = check(sandbox, textwrap.dedent(EQUALS_ANYTHING))
    assert "NotPlainData" in feedback and "Anything" in feedback, feedback
    _, feedback, _ = check(sandbox, textwrap.dedent(EXITS_DURING_A_CALL))
    assert "ended during a call" in feedback, feedback
    _, feedback, _ = check(sandbox, textwrap.dedent(PLANTS_A_MODULE))
    assert "ValueError: fail after planting" in feedback, feedback


def test_a_grandchild_of_the_solution_cannot_rewrite_the_verdict_after_it_is_written(sandbox: Sandbox) -> None:
    passed, feedback, run = check(sandbox, textwrap.dedent(LEAVES_A_WRITER_BEHIND))
    assert not passed and "ValueError: the real failure" in feedback, feedback
    assert "Forged" not in feedback and "the grandchild" not in feedback, feedback


def test_a_correct_solution_still_passes_with_tuples_sets_and_floats(sandbox: Sandbox) -> None:
    bench = HumanEval()
    for task_id in ("HumanEval/0", "HumanEval/8", "HumanEval/32", "HumanEval/107", "HumanEval/112"):
        problem = bench.problem(task_id)  # 8, 107, 112 return tuples; 32 floats through the prompt's poly
        passed, feedback, _ = check(sandbox, problem.prompt + problem.canonical_solution, task_id=task_id)
        assert passed, feedback


def test_plain_data_round_trips_exactly_and_refuses_everything_else() -> None:
    values = [
        None,
        True,
        0,
        -7,
        2**100,
        1.5,
        -0.0,
        float("inf"),
        "é\n",
        b"\x00\xff",
        1 + 2j,
        [1, (2, 3)],
        (),
        {"a": [1], 2: (3,)},
        {1, 2},
        frozenset({"x"}),
        [[[]]],
    ]
    for value in values:
        back = decode(loads_line(dumps_line(encode(value))))
        assert back == value and type(back) is type(value), value
    nan = decode(loads_line(dumps_line(encode(float("nan")))))
    assert nan != nan
    for hostile in (type("S", (str,), {})("x"), object(), [1, object()], type("I", (int,), {})(3)):
        with pytest.raises(Exception, match="type|object|S|I"):
            encode(hostile)
    for line in (
        b'{"t": [1], "s": [2]}\n',
        b'{"x": 1}\n',
        b"NaN\n",
        b'{"s": [[1]]}\n',
        b"[" * 100000 + b"\n",
        b'{"d": [[[1], 2]]}\n',
    ):
        with pytest.raises(Exception):  # noqa: B017 - each line is malformed differently, so fails differently
            decode(loads_line(line))
