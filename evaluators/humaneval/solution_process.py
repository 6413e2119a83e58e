"""The HumanEval check run's solution process: the child that imports the agent's solution and answers the
tests' calls, the proxy the tests call it through, and the plain-data channel between them (standard library
only: it runs inside the sandbox, shipped next to `check_driver.py` at its package path).

The child is `python -S -c <CODEC_SOURCE + CHILD_SOURCE> ENTRY_POINT` in the work dir. It imports `solution`
(its import-time code runs THERE, never in the check's process) and then answers calls: one JSON line per
call each way, over pipes, with the values in the plain-data encoding below. A value whose `__eq__` always
answers True cannot cross, and anything that is not plain data (None, bool, int, float, complex, str,
bytes, and lists, tuples, sets, frozensets and dicts of them) fails the check.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

MAX_ERROR_CHARS = 1000
MAX_TRACEBACK_CHARS = 2000
MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # one line from the child; a longer one fails the check

# The plain-data encoding, run both here and in the child (one text, so the two cannot disagree).
# JSON carries None, bool, int, finite floats, str and lists as themselves; the rest is tagged:
# {"t": [...]} tuple, {"s": [...]} set, {"fs": [...]} frozenset, {"d": [[k, v], ...]} dict,
# {"b": "hex"} bytes, {"c": [re, im]} complex, {"f": "nan" | "inf" | "-inf"} float.
# Only exact built-in types encode (a subclass does not); decoding builds fresh built-in objects.
CODEC_SOURCE = r"""
import json as _json
import math as _math

MAX_DEPTH = 60


class NotPlainData(Exception):
    pass


def encode(value, depth=0):
    if depth > MAX_DEPTH:
        raise NotPlainData("a value nested deeper than %d levels" % MAX_DEPTH)
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return value
    if kind is float:
        return value if _math.isfinite(value) else {"f": repr(value)}
    if kind is list:
        return [encode(item, depth + 1) for item in value]
    if kind is tuple:
        return {"t": [encode(item, depth + 1) for item in value]}
    if kind is set or kind is frozenset:
        return {"s" if kind is set else "fs": [encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [encode(value.real, depth + 1), encode(value.imag, depth + 1)]}
    raise NotPlainData("a %s.%s" % (kind.__module__, kind.__qualname__))


def decode(data, depth=0):
    if depth > MAX_DEPTH:
        raise NotPlainData("a value nested deeper than %d levels" % MAX_DEPTH)
    kind = type(data)
    if data is None or kind is bool or kind is int or kind is float or kind is str:
        return data
    if kind is list:
        return [decode(item, depth + 1) for item in data]
    if kind is dict and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "f" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "b" and type(body) is str:
            try:
                return bytes.fromhex(body)
            except ValueError:
                raise NotPlainData("malformed bytes") from None
        if type(body) is list:
            items = [decode(item, depth + 1) for item in body]
            try:
                if tag == "t":
                    return tuple(items)
                if tag == "s":
                    return set(items)
                if tag == "fs":
                    return frozenset(items)
                if tag == "d" and all(type(pair) is list and len(pair) == 2 for pair in items):
                    return {k: v for k, v in items}
            except TypeError:
                raise NotPlainData("an unhashable set member or dict key") from None
            if tag == "c" and len(items) == 2 and all(type(part) is float for part in items):
                return complex(items[0], items[1])
    raise NotPlainData("not a plain-data encoding")


def _refuse_constant(name):
    raise NotPlainData("the JSON constant %s" % name)


def dumps_line(value):
    return _json.dumps(value, ensure_ascii=True, allow_nan=False).encode("ascii") + b"\n"


def loads_line(line):
    try:
        return _json.loads(line.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise NotPlainData("a malformed message: %s" % type(exc).__name__) from None
"""

# The child: the solution's process. Its stdin/stdout are the pipes to the check; the solution's
# own prints go to stderr. Untrusted once `solution` is imported: the check believes nothing it
# says except a value it can decode as plain data.
CHILD_SOURCE = r"""
import os
import sys
import traceback

_in = os.fdopen(os.dup(0), "rb")
_out = os.fdopen(os.dup(1), "wb")
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.dup2(2, 1)
sys.path.insert(0, os.getcwd())


def _send(message):
    _out.write(dumps_line(message))
    _out.flush()


def _error(exc):
    try:
        text = str(exc)
    except BaseException:
        text = ""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith("solution.py")]
    trace = "".join(traceback.format_list(frames))[-2000:]
    return {"type": type(exc).__name__, "error": text[:1000], "traceback": trace}


try:
    _candidate = getattr(__import__("solution"), sys.argv[1], None)
except BaseException as _exc:
    _send({"import": _error(_exc)})
    os._exit(0)
if not callable(_candidate):
    missing = "solution.py defines no function %r" % sys.argv[1]
    _send({"import": {"type": "NameError", "error": missing, "traceback": ""}})
    os._exit(0)
_send({"ready": True})
while True:
    _line = _in.readline()
    if not _line:
        os._exit(0)
    _args, _kwargs = decode(loads_line(_line))
    try:
        _value = _candidate(*_args, **_kwargs)
    except BaseException as _exc:
        _send({"raised": _error(_exc)})
        continue
    try:
        _reply = {"value": encode(_value)}
    except NotPlainData as _exc:
        _reply = {"raised": {"type": "NotPlainData", "error": "the function returned %s, which is not plain data "
                             "(None, bool, int, float, complex, str, bytes, and lists, tuples, sets and dicts of them)"
                             % _exc, "traceback": ""}}
    except (ValueError, RecursionError) as _exc:
        _reply = {"raised": {"type": type(_exc).__name__, "error": "the returned value cannot be sent: %s" % _exc,
                             "traceback": ""}}
    _send(_reply)
"""

_CODEC: dict[str, Any] = {}
exec(compile(CODEC_SOURCE, "<plain-data codec>", "exec"), _CODEC)  # exec: the same text the child runs
encode, decode, dumps_line, loads_line = _CODEC["encode"], _CODEC["decode"], _CODEC["dumps_line"], _CODEC["loads_line"]
NotPlainData: type[Exception] = _CODEC["NotPlainData"]


class SolutionError(Exception):
    """The solution failed in its own process: raised, exited, hung up or answered what is not plain data.

    error_type, message and traceback_text come from the child: untrusted text, shown only as feedback.
    """

    def __init__(self, error_type: str, message: str, traceback_text: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type if error_type.isidentifier() and len(error_type) <= 100 else "Error"
        self.message = message[:MAX_ERROR_CHARS]
        self.traceback_text = traceback_text[-MAX_TRACEBACK_CHARS:]


class ImportFailed(SolutionError):
    """solution.py did not import in the child, or defines no such function."""


class CandidateProcess:
    """The child process that holds the solution, and the proxy the tests call it through."""

    def __init__(self, workdir: str, entry_point: str) -> None:
        self.process = subprocess.Popen(  # this interpreter, a fixed program
            [sys.executable, "-S", "-c", CODEC_SOURCE + CHILD_SOURCE, entry_point],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=workdir,
            close_fds=True,
        )

    def start(self) -> None:
        """Wait for the child's import of the solution; ImportFailed when it did not import."""
        message = self._receive(during="the import")
        if message == {"ready": True}:
            return
        failed = message.get("import") if isinstance(message, dict) else None
        if not isinstance(failed, dict):
            raise ImportFailed("ProtocolError", "the solution's process sent a malformed first message")
        raise ImportFailed(str(failed.get("type", "")), str(failed.get("error", "")), str(failed.get("traceback", "")))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            request = dumps_line(encode([list(args), kwargs]))
        except (NotPlainData, ValueError) as exc:
            raise TypeError(f"the tests passed the candidate {exc}, which cannot be sent as plain data") from None
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(request)
            self.process.stdin.flush()
        except OSError:
            raise self._ended("a call") from None
        message = self._receive(during="a call")
        if isinstance(message, dict) and len(message) == 1 and "value" in message:
            try:
                return decode(message["value"])
            except NotPlainData as exc:
                raise SolutionError("NotPlainData", f"the solution's answer is not plain data: {exc}") from None
        raised = message.get("raised") if isinstance(message, dict) else None
        if not isinstance(raised, dict):
            raise SolutionError("ProtocolError", "the solution's process sent a malformed answer")
        raise SolutionError(str(raised.get("type", "")), str(raised.get("error", "")), str(raised.get("traceback", "")))

    def stop(self) -> None:
        try:
            self.process.kill()
            self.process.wait()
        except OSError:
            pass  # already gone
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def _receive(self, *, during: str) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline(MAX_MESSAGE_BYTES + 1)
        if not line:
            raise self._ended(during)
        if len(line) > MAX_MESSAGE_BYTES or not line.endswith(b"\n"):
            raise SolutionError("ProtocolError", f"the solution's answer is over {MAX_MESSAGE_BYTES} bytes")
        try:
            return loads_line(line)
        except NotPlainData as exc:
            raise SolutionError("ProtocolError", f"the solution's process sent {exc}") from None

    def _ended(self, during: str) -> SolutionError:
        code = self.process.wait()
        cls = ImportFailed if during == "the import" else SolutionError
        return cls("SystemExit", f"the solution's process ended during {during} (exit code {code})")
