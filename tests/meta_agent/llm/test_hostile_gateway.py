"""Agents that attack the FM gateway's budget and the host process's descriptors (scripted fake FM: the
tests need calls that stay in flight for as long as they say, and count what reaches the FM).

Before: ten concurrent calls with max_tokens=1 and 900 kB prompts were all forwarded (~2.2 M prompt tokens
against a 50,000-token budget: only the completion cap was reserved), and 20,000 idle connections exhausted
the host process's descriptors.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cambrian.archive.store import Archive
from cambrian.meta_agent.llm import ArchiveLedger, Endpoint, LLMClient
from cambrian.meta_agent.llm.gateway import AgentChannel, FMGateway, RepeatFilter, prompt_token_bound
from cambrian.meta_agent.testing import ScriptedFM


@pytest.fixture
def gateway_parts(tmp_path: Path) -> Iterator[tuple[LLMClient, Path, ScriptedFM]]:
    archive = Archive.at(tmp_path / "archive.db")
    run = archive.create_run(name="hostile-gateway", benchmark="none", seed=1, config_json="{}")
    assert run.id is not None
    client = LLMClient(
        Endpoint(model="openai/unused", api_base="http://127.0.0.1:9/v1"),
        ledger=ArchiveLedger(archive, run.id),
        retries=0,
    )
    fake = ScriptedFM(["ok"], delay_s=0.3, prompt_tokens=None, completion_tokens=1)
    client.complete = fake.complete  # type: ignore[method-assign]
    socket_dir = Path(tempfile.mkdtemp(prefix="cgh-", dir="/tmp"))
    yield client, socket_dir, fake
    shutil.rmtree(socket_dir, ignore_errors=True)
    archive.close()


async def request(channel: AgentChannel, raw: bytes) -> tuple[int, dict[str, Any]]:
    """Send `raw` as the agent would: with its token (test_gateway tests the socket refusing other programs)."""
    if channel.token is not None and b"\r\n" in raw:
        line, rest = raw.split(b"\r\n", 1)
        raw = line + f"\r\nAuthorization: Bearer {channel.token}\r\n".encode() + rest
    reader, writer = await asyncio.open_unix_connection(str(channel.socket_path))
    writer.write(raw)
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def chat_request(content: str, max_tokens: int = 1) -> bytes:
    body = json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}).encode()
    return f"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def test_huge_prompts_with_tiny_max_tokens_are_refused_before_the_fm(gateway_parts) -> None:  # type: ignore[no-untyped-def]
    client, socket_dir, fake = gateway_parts

    async def scenario() -> list[int]:
        async with FMGateway(client, socket_dir=socket_dir) as gateway:
            channel = await gateway.open_agent(1, max_calls=100, max_tokens=50_000, run_seed=1, iteration=0)
            big = "x" * 900_000
            answers = await asyncio.gather(*(request(channel, chat_request(big)) for _ in range(10)))
            return [status for status, _ in answers]

    assert asyncio.run(scenario()) == [429] * 10
    assert fake.calls == 0


def test_concurrent_calls_reserve_their_prompts_and_cannot_overspend(gateway_parts) -> None:  # type: ignore[no-untyped-def]
    client, socket_dir, fake = gateway_parts
    content = "y" * 12_000  # bound ~12,100 tokens: four fit in 50,000 at once, the fifth does not

    async def scenario() -> tuple[list[int], int]:
        async with FMGateway(client, socket_dir=socket_dir, max_in_flight=8) as gateway:
            channel = await gateway.open_agent(1, max_calls=100, max_tokens=50_000, run_seed=1, iteration=0)
            answers = await asyncio.gather(*(request(channel, chat_request(content)) for _ in range(10)))
            return sorted(status for status, _ in answers), channel.tokens_used

    statuses, used = asyncio.run(scenario())
    bound = prompt_token_bound([{"role": "user", "content": content}]) + 1
    assert statuses.count(200) == 50_000 // bound == 4
    assert fake.prompt_bytes <= 50_000  # bytes bound tokens from above: never past the budget


def test_calls_in_flight_are_capped_per_agent(gateway_parts) -> None:  # type: ignore[no-untyped-def]
    client, socket_dir, fake = gateway_parts

    async def scenario() -> list[int]:
        async with FMGateway(client, socket_dir=socket_dir, max_in_flight=2) as gateway:
            channel = await gateway.open_agent(1, max_calls=100, max_tokens=1_000_000, run_seed=1, iteration=0)
            answers = await asyncio.gather(*(request(channel, chat_request("hi")) for _ in range(6)))
            return sorted(status for status, _ in answers)

    statuses = asyncio.run(scenario())
    assert fake.most_in_flight == 2 and statuses.count(200) == 2 and statuses.count(429) == 4


def test_a_connection_flood_is_turned_away_and_the_host_keeps_its_descriptors(gateway_parts) -> None:  # type: ignore[no-untyped-def]
    client, socket_dir, _fake = gateway_parts
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    flood = min(600, soft // 2 - 50)

    async def scenario() -> tuple[int, int, int, int]:
        async with FMGateway(client, socket_dir=socket_dir, max_connections=16, read_timeout_s=30) as gateway:
            channel = await gateway.open_agent(1, max_calls=10, max_tokens=10_000, run_seed=1, iteration=0)
            idle = [await asyncio.open_unix_connection(str(channel.socket_path)) for _ in range(flood)]
            await asyncio.sleep(0.3)
            held = len(channel._connections)
            # While the flood holds its connections, a new one is answered 503 at once (or reset, when the
            # gateway closes it before reading what was sent): it never waits or holds a descriptor.
            try:
                status, _ = await request(channel, b"GET /health HTTP/1.1\r\n\r\n")
            except ConnectionResetError:
                status = 503
            for _reader, writer in idle:
                writer.close()
            await asyncio.sleep(0.2)
            status_after, _ = await request(channel, b"GET /health HTTP/1.1\r\n\r\n")
            return held, status, status_after, channel.connections_refused

    held, during, after, refused = asyncio.run(scenario())
    assert held <= 16
    assert during == 503 and after == 200
    assert refused >= flood - 16


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /health HTTP/1.1\r\n" + b"X-Same: 1\r\n" * 500 + b"\r\n", 431),
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 200000\r\n\r\n" + b"[" * 200_000, 400),
    ],
)
def test_repeated_header_names_and_deep_json_are_client_errors(gateway_parts, raw: bytes, status: int) -> None:  # type: ignore[no-untyped-def]
    client, socket_dir, fake = gateway_parts

    async def scenario() -> int:
        async with FMGateway(client, socket_dir=socket_dir) as gateway:
            channel = await gateway.open_agent(1, max_calls=10, max_tokens=10_000, run_seed=1, iteration=0)
            return (await request(channel, raw))[0]

    assert asyncio.run(scenario()) == status
    assert fake.calls == 0


def test_repeated_log_lines_are_held_back_and_counted() -> None:
    logger = logging.getLogger("cambrian-test-repeats")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger.addHandler(Keep())
    logger.propagate = False
    repeat = RepeatFilter(window_s=0.2)
    logger.addFilter(repeat)
    for _ in range(10_000):
        logger.error("socket.accept() out of system resource")
    time.sleep(0.25)
    logger.error("socket.accept() out of system resource")
    assert len(seen) == 2
    assert "9999 more like this" in seen[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user a local program has the user's rights on the folder")
def test_a_local_program_cannot_find_or_guess_another_agents_socket(gateway_parts) -> None:  # type: ignore[no-untyped-def]
    from cambrian.sandbox.base import RunSpec
    from cambrian.sandbox.local import LocalSandbox

    client, socket_dir, fake = gateway_parts
    code = f"""
import os, socket
try:
    print(os.listdir({str(socket_dir)!r}))
except OSError as exc:
    print("list refused", type(exc).__name__)
client = socket.socket(socket.AF_UNIX)
try:
    client.connect({str(socket_dir / "agent-2.sock")!r})
    print("connected")
except OSError as exc:
    print("connect refused", type(exc).__name__)
"""

    async def scenario() -> str:
        async with FMGateway(client, socket_dir=socket_dir) as gateway:
            await gateway.open_agent(1, max_calls=1, max_tokens=1000, run_seed=1, iteration=0)
            other = await gateway.open_agent(2, max_calls=1, max_tokens=1000, run_seed=1, iteration=0)
            assert other.socket_path.name.startswith("agent-2-") and len(other.socket_path.name) > len("agent-2-.sock")
            box = LocalSandbox()
            try:
                spec = RunSpec(files={"p.py": code}, command=("{python}", "p.py"))
                return (await asyncio.to_thread(box.run, spec)).stdout
            finally:
                box.close()

    out = asyncio.run(scenario())
    # Without namespaces the socket folder cannot be listed; in them it is not even there.
    assert "list refused PermissionError" in out or "list refused FileNotFoundError" in out, out
    assert "connect refused FileNotFoundError" in out, out
    assert fake.calls == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="runs a program as another host user (nobody): needs root, as in CI")
def test_a_private_socket_folder_keeps_every_other_host_user_out(gateway_parts) -> None:  # type: ignore[no-untyped-def]
    """A socket's path is listed in /proc/net/unix for every host user: where the sandbox binds the socket
    (Docker, bubblewrap) its folder is 0700 and nobody else reaches it; 0711 (the local sandbox as root without
    namespaces, whose run uids pass through it) lets a connection in, which the token then refuses."""
    import subprocess
    import sys

    from cambrian.sandbox.base import socket_folder_mode
    from cambrian.sandbox.local import LocalSandbox

    client, socket_dir, fake = gateway_parts
    os.chmod(socket_dir, 0o711)
    code = (
        "import socket, sys\nc = socket.socket(socket.AF_UNIX)\n"
        "try:\n    c.connect(sys.argv[1])\n    print('connected')\n"
        "except OSError as exc:\n    print('refused', type(exc).__name__)\n"
    )

    async def outsider(mode: int) -> str:
        async with FMGateway(client, socket_dir=socket_dir / f"m{mode:o}", folder_mode=mode) as gateway:
            channel = await gateway.open_agent(1, max_calls=1, max_tokens=1000, run_seed=1, iteration=0)
            argv = [
                shutil.which("python3", path="/usr/bin:/bin") or sys.executable,
                "-c",
                code,
                str(channel.socket_path),
            ]
            done = await asyncio.to_thread(subprocess.run, argv, user=65534, capture_output=True, text=True, timeout=60)
            return done.stdout.strip() + done.stderr.strip()[-300:]

    assert asyncio.run(outsider(0o700)) == "refused PermissionError"
    assert asyncio.run(outsider(0o711)) == "connected"
    assert fake.calls == 0
    assert socket_folder_mode(LocalSandbox(namespaces=False)) == 0o711  # run uids pass by the host path
    assert socket_folder_mode(None) == 0o700
    if LocalSandbox().namespaces:
        assert socket_folder_mode(LocalSandbox()) == 0o700  # bwrap binds the socket itself
