"""A counting relay in front of the shared model server: every system's FM requests pass through it, so calls,
tokens and their times are measured one way for Cambrian, OpenEvolve and ShinkaEvolve alike.

It forwards each request unchanged (method, path, body, content type, authorization) and the answer unchanged.
A client that hangs up before the answer (its own timeout) makes the relay drop the upstream connection too, so
llama.cpp cancels that request as it would without the relay. Runs in the bench process, one thread per request.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_POLL_S = 0.5  # how often a waiting relay checks whether its client is still there
_UPSTREAM_TIMEOUT_S = 24 * 3600.0  # the clients own their timeouts; the relay only mirrors their hang-ups


@dataclass(frozen=True)
class FMCall:
    """One request through the relay. Times are Unix seconds; tokens from the answer's `usage` (0 if none)."""

    system: str
    path: str
    started: float
    finished: float
    status: int  # HTTP status; 0 when the client hung up before the answer
    prompt_tokens: int
    completion_tokens: int


class FMMeter:
    """Relay at `base_url` (an OpenAI API root) to the server at `upstream` (e.g. http://127.0.0.1:8080/v1).

    `system` names whose requests come next (the systems run one after another); `calls()` lists them all.
    """

    def __init__(self, upstream: str, *, host: str = "127.0.0.1") -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.system = ""
        self._calls: list[FMCall] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, 0), _relay_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fm-meter", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def calls(self, system: str | None = None) -> list[FMCall]:
        """Every call so far (of `system` only, when given), in the order they finished."""
        with self._lock:
            return [c for c in self._calls if system is None or c.system == system]

    def record(self, call: FMCall) -> None:
        with self._lock:
            self._calls.append(call)

    def __enter__(self) -> FMMeter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _relay_handler(meter: FMMeter) -> type[BaseHTTPRequestHandler]:
    class Relay(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's names
            self._relay()

        def do_POST(self) -> None:
            self._relay()

        def log_message(self, format: str, *args: object) -> None:
            pass  # the systems' own logs say what they asked

        def _relay(self) -> None:
            system, started = meter.system, time.time()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
            upstream = http.client.HTTPConnection(meter.upstream_host, meter.upstream_port, timeout=_UPSTREAM_TIMEOUT_S)
            try:
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                if not self._wait_for(upstream):
                    meter.record(FMCall(system, self.path, started, time.time(), 0, 0, 0))
                    return
                response = upstream.getresponse()
                data = response.read()
            finally:
                upstream.close()
            prompt, completion = _usage(data)
            meter.record(FMCall(system, self.path, started, time.time(), response.status, prompt, completion))
            self.send_response(response.status)
            self.send_header("Content-Type", response.getheader("Content-Type") or "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:
                pass  # the client left just now

        def _wait_for(self, upstream: http.client.HTTPConnection) -> bool:
            """Until the answer starts: True; False once the client has hung up (the upstream request is dropped)."""
            assert upstream.sock is not None
            while True:
                ready, _, _ = select.select([upstream.sock, self.connection], [], [], _POLL_S)
                if upstream.sock in ready:
                    return True
                if self.connection in ready and _hung_up(self.connection):
                    return False

    return Relay


def _hung_up(connection: socket.socket) -> bool:
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _usage(data: bytes) -> tuple[int, int]:
    """(prompt, completion) tokens of an OpenAI-style JSON answer; (0, 0) for anything else."""
    try:
        usage = json.loads(data).get("usage") or {}
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return 0, 0
