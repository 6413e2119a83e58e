"""The gateway's TCP side for agents on other machines: one token per evaluation, refused for any other agent
and after its evaluation ends; the node's socket relay adds it outside the sandbox.

The FM behind the gateway is scripted (`ScriptedFM`): these tests are about who may call, not what the
model says; the real model's path through the gateway is tested in test_gateway.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from cambrian.meta_agent.llm import Endpoint, LLMClient, MemoryLedger
from cambrian.meta_agent.llm.gateway import FMGateway
from cambrian.meta_agent.llm.remote import GatewayListener, SocketRelay
from cambrian.meta_agent.testing import ScriptedFM

CHAT = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode()


def scripted_gateway(folder: Path) -> tuple[FMGateway, ScriptedFM]:
    fm = ScriptedFM(["hello"])
    client = LLMClient(Endpoint(model="openai/scripted", label="scripted"), ledger=MemoryLedger(), max_tokens=8)
    client.complete = fm.complete  # type: ignore[method-assign,assignment]  # the scripted FM answers for the real client
    return FMGateway(client, socket_dir=folder), fm


def with_gateway(scenario: Callable[[Path, FMGateway, ScriptedFM], Awaitable[None]]) -> None:
    """Run `scenario(folder, gateway, fm)` on a scripted gateway whose sockets live in a fresh short folder."""
    folder = Path(tempfile.mkdtemp(prefix="cfm-", dir="/tmp"))

    async def run() -> None:
        gateway, fm = scripted_gateway(folder)
        try:
            await scenario(folder, gateway, fm)
        finally:
            await gateway.close()

    try:
        asyncio.run(run())
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def http(method: str, path: str, body: bytes = b"", *, token: str = "") -> bytes:
    """A request as an agent sends it: with its own token (TOKEN_ENV) when given."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {len(body)}\r\n\r\n".encode() + body


def tls_client() -> ssl.SSLContext:
    """A client that takes any certificate (these tests are about tokens; the relay's pinning is tested below)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def over_tcp(address: tuple[str, int], preamble: bytes, request: bytes, *, tls: bool = True) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection(*address, ssl=tls_client() if tls else None)
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
    async def scenario(folder: Path, gateway: FMGateway, fm: ScriptedFM) -> None:
        listener = GatewayListener(gateway, host="127.0.0.1")
        address = await listener.start()
        first = await listener.open_agent(7, max_calls=1, max_tokens=1000, run_seed=0, iteration=1)
        second = await listener.open_agent(8, max_calls=5, max_tokens=1000, run_seed=0, iteration=2)
        token = first.grant.token.encode()
        own7, own8 = first.grant.agent_token, second.grant.agent_token
        try:
            status, body = await over_tcp(
                address, b"CAMBRIAN-AGENT 7 " + token + b"\r\n", http("GET", "/health", token=own7)
            )
            assert (status, body["calls_left"]) == (200, 1)
            # Agent 8 replaying agent 7's token: refused, and agent 7's budget is untouched.
            status, body = await over_tcp(
                address, b"CAMBRIAN-AGENT 8 " + token + b"\r\n", http("GET", "/health", token=own7)
            )
            assert status == 401 and body["error"]["type"] == "unauthorized"
            for bad in (b"CAMBRIAN-AGENT 7 wrong\r\n", b"CAMBRIAN-AGENT 7\r\n", b"GET /health HTTP/1.1\r\n", b"\r\n"):
                assert (await over_tcp(address, bad, http("GET", "/health", token=own7)))[0] == 401
            status, body = await over_tcp(
                address, b"CAMBRIAN-AGENT 7 " + token + b"\r\n", http("POST", "/v1/chat/completions", CHAT, token=own7)
            )
            assert status == 200 and body["choices"][0]["message"]["content"] == "hello"
            # The budget is the driver's: agent 7's second call is refused however it arrives.
            status, body = await over_tcp(
                address, b"CAMBRIAN-AGENT 7 " + token + b"\r\n", http("POST", "/v1/chat/completions", CHAT, token=own7)
            )
            assert status == 429 and body["error"]["type"] == "budget_exceeded"
            await first.close()  # the evaluation ends
            status, _ = await over_tcp(
                address, b"CAMBRIAN-AGENT 7 " + token + b"\r\n", http("GET", "/health", token=own7)
            )
            assert status == 401
            # Agent 8's own token still works; agent 7's, once its agent id is reused by a new evaluation, not.
            again = await listener.open_agent(7, max_calls=1, max_tokens=1000, run_seed=0, iteration=3)
            assert again.grant.token != first.grant.token
            status, _ = await over_tcp(
                address, b"CAMBRIAN-AGENT 7 " + token + b"\r\n", http("GET", "/health", token=own7)
            )
            assert status == 401
            await again.close()
            status, _ = await over_tcp(
                address,
                b"CAMBRIAN-AGENT 8 " + second.grant.token.encode() + b"\r\n",
                http("GET", "/health", token=own8),
            )
            assert status == 200
            assert fm.calls == 1 and listener.refused == 7
            assert first.grant.token not in repr(first.grant)
        finally:
            await second.close()
            await listener.close()

    with_gateway(scenario)


def test_a_parent_writing_its_child_on_a_node_has_a_grant_of_its_own_recorded_as_self_modify_fake_fm() -> None:
    """A parent agent writing its child is no archive agent yet: its grant names a holder of its own, which the
    agent of the same iteration cannot borrow, and its calls are the ledger's self_modify calls of its
    iteration (the loop links them to the child)."""

    async def scenario(folder: Path, gateway: FMGateway, fm: ScriptedFM) -> None:
        listener = GatewayListener(gateway, host="127.0.0.1")
        address = await listener.start()
        parent = await listener.open_agent(
            None, max_calls=1, max_tokens=1000, run_seed=0, iteration=4, purpose="self_modify"
        )
        agent = await listener.open_agent(4, max_calls=1, max_tokens=1000, run_seed=0, iteration=4)
        relay = SocketRelay(folder / "parent.sock", parent.grant)
        own = parent.grant.agent_token
        await relay.start()
        try:
            assert parent.grant.holder.startswith("parent-4-") and agent.grant.holder == "4"
            status, body = await over_unix(relay.path, http("POST", "/v1/chat/completions", CHAT, token=own))
            assert status == 200 and body["choices"][0]["message"]["content"] == "hello"
            assert fm.log == [("self_modify", 4)] and parent.channel.calls_used == 1
            # Neither token opens the other's channel.
            for preamble in (
                b"CAMBRIAN-AGENT 4 " + parent.grant.token.encode(),
                f"CAMBRIAN-AGENT {parent.grant.holder} ".encode() + agent.grant.token.encode(),
            ):
                assert (await over_tcp(address, preamble + b"\r\n", http("GET", "/health")))[0] == 401
            await parent.close()
            assert (await over_unix(relay.path, http("GET", "/health", token=own)))[0] == 401
            assert agent.channel.calls_used == 0 and fm.calls == 1
        finally:
            await relay.close()
            await agent.close()
            await listener.close()

    with_gateway(scenario)


def test_the_node_relay_adds_the_token_outside_the_socket_and_stops_with_the_evaluation_fake_fm() -> None:
    async def scenario(folder: Path, gateway: FMGateway, fm: ScriptedFM) -> None:
        listener = GatewayListener(gateway, host="127.0.0.1")
        await listener.start()
        remote = await listener.open_agent(3, max_calls=2, max_tokens=1000, run_seed=0, iteration=1)
        relay = SocketRelay(folder / "agent.sock", remote.grant)
        await relay.start()
        try:
            # What an agent sends is plain HTTP with its own token: no relay token, no key.
            own = remote.grant.agent_token
            status, body = await over_unix(relay.path, http("POST", "/v1/chat/completions", CHAT, token=own))
            assert status == 200 and body["choices"][0]["message"]["content"] == "hello"
            # Another program on the node that finds the relay's socket: without the agent's token, 401, nothing
            # spent of its budget.
            for stolen in ("", "guessed"):
                status, _ = await over_unix(relay.path, http("POST", "/v1/chat/completions", CHAT, token=stolen))
                assert status == 401
            assert remote.channel.calls_used == 1
            # An agent adding a preamble of its own gains nothing: it is just a malformed request line.
            forged = b"CAMBRIAN-AGENT 3 " + remote.grant.token.encode() + b"\r\n" + http("GET", "/health")
            assert (await over_unix(relay.path, forged))[0] == 400
            await remote.close()
            status, _ = await over_unix(relay.path, http("GET", "/health", token=own))
            assert status == 401
            assert fm.calls == 1
        finally:
            await relay.close()
            await listener.close()
        assert not relay.path.exists()

    with_gateway(scenario)


def test_the_link_is_tls_and_the_relay_sends_its_token_only_to_the_pinned_certificate_fake_fm() -> None:
    async def scenario(folder: Path, gateway: FMGateway, fm: ScriptedFM) -> None:
        listener = GatewayListener(gateway, host="127.0.0.1")
        address = await listener.start()
        remote = await listener.open_agent(4, max_calls=3, max_tokens=1000, run_seed=0, iteration=1)
        preamble = b"CAMBRIAN-AGENT 4 " + remote.grant.token.encode() + b"\r\n"
        # Someone else listening at an address the relay is sent to, with a certificate of its own.
        heard = bytearray()

        async def impostor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            heard.extend(await reader.read(4096))
            writer.close()

        other = GatewayListener(gateway, host="127.0.0.1")
        await other.start()  # only to make a second certificate, whose context the impostor borrows
        assert other.fingerprint != listener.fingerprint and len(listener.fingerprint) == 64
        fake = await asyncio.start_server(impostor, "127.0.0.1", 0, ssl=other._server._ssl_context)  # type: ignore[union-attr]
        fake_port = fake.sockets[0].getsockname()[1]
        relay = SocketRelay(folder / "agent.sock", remote.grant)
        misled = SocketRelay(folder / "misled.sock", dataclasses.replace(remote.grant, port=fake_port))
        await relay.start()
        await misled.start()
        try:
            # Through the relay, over TLS, pinned: served.
            own = remote.grant.agent_token
            status, body = await over_unix(relay.path, http("POST", "/v1/chat/completions", CHAT, token=own))
            assert status == 200 and body["choices"][0]["message"]["content"] == "hello"
            # To a certificate the grant does not name: no token, no request leaves the node.
            status, body = await over_unix(misled.path, http("GET", "/health"))
            assert status == 502 and body["error"]["type"] == "gateway_impostor"
            assert bytes(heard) == b""
            # Plain TCP to the TLS listener: the handshake fails; nothing is served, nothing is counted.
            reader, writer = await asyncio.open_connection(*address)
            writer.write(preamble + http("GET", "/health"))
            await writer.drain()
            assert b"HTTP/1.1 200" not in await reader.read()
            writer.close()
            assert fm.calls == 1 and listener.refused == 0
        finally:
            await relay.close()
            await misled.close()
            fake.close()
            await remote.close()
            await other.close()
            await listener.close()

    with_gateway(scenario)


def test_with_tls_off_the_link_is_plain_tcp_and_still_needs_the_token_fake_fm() -> None:
    async def scenario(folder: Path, gateway: FMGateway, fm: ScriptedFM) -> None:
        listener = GatewayListener(gateway, host="127.0.0.1", tls=False)
        address = await listener.start()
        remote = await listener.open_agent(5, max_calls=2, max_tokens=1000, run_seed=0, iteration=1)
        assert remote.grant.fingerprint == ""
        relay = SocketRelay(folder / "agent.sock", remote.grant)
        await relay.start()
        try:
            own = remote.grant.agent_token
            status, body = await over_unix(relay.path, http("POST", "/v1/chat/completions", CHAT, token=own))
            assert status == 200 and body["choices"][0]["message"]["content"] == "hello"
            status, _ = await over_tcp(address, b"CAMBRIAN-AGENT 5 wrong\r\n", http("GET", "/health"), tls=False)
            assert status == 401 and fm.calls == 1
        finally:
            await relay.close()
            await remote.close()
            await listener.close()

    with_gateway(scenario)
