"""The gateway's TCP side for agents on other machines: one token per evaluation, refused for any other agent
and after its evaluation ends; the node's socket relay adds it outside the sandbox.

The FM behind the gateway is scripted (`ScriptedFM`): these tests are about who may call, not what the
model says; the real model's path through the gateway is tested in test_gateway.py.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

from meta_agent.llm import Endpoint, FMGateway, GatewayListener, LLMClient, MemoryLedger, SocketRelay
from meta_agent.testing import ScriptedFM

CHAT = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode()


def scripted_gateway(folder: Path) -> tuple[FMGateway, ScriptedFM]:
    fm = ScriptedFM(["hello"])
    client = LLMClient(Endpoint(model="openai/scripted", label="scripted"), ledger=MemoryLedger(), max_tokens=8)
    client.complete = fm.complete  # type: ignore[method-assign,assignment]  # the scripted FM answers for the real client
    return FMGateway(client, socket_dir=folder), fm


def http(method: str, path: str, body: bytes = b"") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


async def over_tcp(address: tuple[str, int], preamble: bytes, request: bytes) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection(*address)
    writer.write(preamble + request)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    return parse(raw)


async def over_unix(path: Path, request: bytes) -> tuple[int, dict]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(request)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    return parse(raw)


def parse(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_token_serves_only_its_own_agent_and_only_until_its_evaluation_ends_fake_fm() -> None:
    folder = Path(tempfile.mkdtemp(prefix="cfm-", dir="/tmp"))

    async def scenario() -> None:
        gateway, fm = scripted_gateway(folder)
        listener = GatewayListener(gateway, host="127.0.0.1")
        address = await listener.start()
        first = await listener.open_agent(7, max_calls=1, max_tokens=1000, run_seed=0, iteration=1)
        second = await listener.open_agent(8, max_calls=5, max_tokens=1000, run_seed=0, iteration=2)
        token = first.grant.token.encode()
        try:
            status, body = await over_tcp(address, b"CAMBRIAN-AGENT 7 " + token + b"\r\n", http("GET", "/health"))
            assert (status, body["calls_left"]) == (200, 1)
            # Agent 8 replaying agent 7's token: refused, and agent 7's budget is untouched.
            status, body = await over_tcp(address, b"CAMBRIAN-AGENT 8 " + token + b"\r\n", http("GET", "/health"))
            assert status == 401 and body["error"]["type"] == "unauthorized"
            for bad in (b"CAMBRIAN-AGENT 7 wrong\r\n", b"CAMBRIAN-AGENT 7\r\n", b"GET /health HTTP/1.1\r\n", b"\r\n"):
                assert (await over_tcp(address, bad, http("GET", "/health")))[0] == 401
            status, body = await over_tcp(
                address, b"CAMBRIAN-AGENT 7 " + token + b"\r\n", http("POST", "/v1/chat/completions", CHAT)
            )
            assert status == 200 and body["choices"][0]["message"]["content"] == "hello"
            # The budget is the driver's: agent 7's second call is refused however it arrives.
            status, body = await over_tcp(
                address, b"CAMBRIAN-AGENT 7 " + token + b"\r\n", http("POST", "/v1/chat/completions", CHAT)
            )
            assert status == 429 and body["error"]["type"] == "budget_exceeded"
            await first.close()  # the evaluation ends
            status, _ = await over_tcp(address, b"CAMBRIAN-AGENT 7 " + token + b"\r\n", http("GET", "/health"))
            assert status == 401
            # Agent 8's own token still works; agent 7's, once its agent id is reused by a new evaluation, not.
            again = await listener.open_agent(7, max_calls=1, max_tokens=1000, run_seed=0, iteration=3)
            assert again.grant.token != first.grant.token
            status, _ = await over_tcp(address, b"CAMBRIAN-AGENT 7 " + token + b"\r\n", http("GET", "/health"))
            assert status == 401
            await again.close()
            status, _ = await over_tcp(
                address, b"CAMBRIAN-AGENT 8 " + second.grant.token.encode() + b"\r\n", http("GET", "/health")
            )
            assert status == 200
            assert fm.calls == 1 and listener.refused == 7
            assert first.grant.token not in repr(first.grant)
        finally:
            await second.close()
            await listener.close()
            await gateway.close()

    try:
        asyncio.run(scenario())
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_node_relay_adds_the_token_outside_the_socket_and_stops_with_the_evaluation_fake_fm() -> None:
    folder = Path(tempfile.mkdtemp(prefix="cfm-", dir="/tmp"))

    async def scenario() -> None:
        gateway, fm = scripted_gateway(folder)
        listener = GatewayListener(gateway, host="127.0.0.1")
        await listener.start()
        remote = await listener.open_agent(3, max_calls=2, max_tokens=1000, run_seed=0, iteration=1)
        relay = SocketRelay(folder / "agent.sock", remote.grant)
        await relay.start()
        try:
            # What an agent sends is plain HTTP: no token, no key.
            status, body = await over_unix(relay.path, http("POST", "/v1/chat/completions", CHAT))
            assert status == 200 and body["choices"][0]["message"]["content"] == "hello"
            # An agent adding a preamble of its own gains nothing: it is just a malformed request line.
            forged = b"CAMBRIAN-AGENT 3 " + remote.grant.token.encode() + b"\r\n" + http("GET", "/health")
            assert (await over_unix(relay.path, forged))[0] == 400
            await remote.close()
            status, _ = await over_unix(relay.path, http("GET", "/health"))
            assert status == 401
            assert fm.calls == 1
        finally:
            await relay.close()
            await listener.close()
            await gateway.close()
        assert not relay.path.exists()

    try:
        asyncio.run(scenario())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
