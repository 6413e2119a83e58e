"""The FM gateway for agents on other machines: a TCP listener on the driver, a socket relay on each node.

An agent in a sandbox has no network and no key. On a remote node, trusted Cambrian code (the node's
Ray actor) serves the agent's Unix socket exactly where a local gateway would (`SocketRelay`), and
relays each connection over TCP to the driver's `GatewayListener`, opening it with one line that names
the grant's holder (the agent id; for a parent agent writing its child, which is no archive agent yet,
`parent-<iteration>-<random>`) and carries the token of its evaluation (or run):

    CAMBRIAN-AGENT <holder> <token>\\r\\n        then the agent's HTTP request, byte for byte

The token is `secrets.token_urlsafe(32)`, made when the evaluation opens its channel and dropped when it
closes: it never enters the sandbox (the relay adds it outside), the provider key never leaves the
driver, and a token names exactly one channel, so it is refused (401) for any other holder and
after its evaluation ends. The listener then hands the connection to that agent's `AgentChannel`, so
budgets, limits and the ledger are the driver's, the same as for a local agent.

The link is TLS (`tls=True`, the default; `evaluation.gateway_tls`): the listener makes a fresh
self-signed certificate when it starts (its key never leaves the driver's memory but for a moment in a
0700 folder while `ssl` loads it), and each grant carries the certificate's SHA-256 fingerprint, which
the relay pins: it completes the handshake, compares the fingerprint, and only then sends the token, so
the token and the agent's prompts and replies never cross the network in the clear, and a machine that
takes over the driver's address gets no token. With `tls=False` the link is plain TCP: keep it on the
cluster's private network, as Ray's own traffic is.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import ssl
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cambrian.meta_agent.llm._http import MAX_LINE_BYTES
from cambrian.meta_agent.llm.gateway import AgentChannel, FMGateway, GatewayError

__all__ = [
    "certificate_fingerprint",
    "GatewayListener",
    "MAX_PENDING_CONNECTIONS",
    "PREAMBLE",
    "RelayGrant",
    "RemoteAgent",
    "SocketRelay",
]

PREAMBLE = b"CAMBRIAN-AGENT"
MAX_PENDING_CONNECTIONS = 1024  # connections the listener holds open at once, authenticated or not
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class RelayGrant:
    """What a node needs to relay one agent's FM calls: the driver's listener and the agent's token.

    Held by trusted code only (the node actor); never placed in a sandbox.
    """

    host: str
    port: int
    holder: str  # whom the grant serves: the agent id; `parent-<iteration>-<random>` for a parent run
    token: str
    fingerprint: str = ""  # SHA-256 (hex) of the listener's certificate, pinned by the relay; "": plain TCP
    agent_token: str = ""  # the agent's own token (TOKEN_ENV in its sandbox): every request it relays carries it

    def __repr__(self) -> str:  # a token in a log line or traceback would outlive its evaluation
        return (
            f"RelayGrant(host={self.host!r}, port={self.port}, holder={self.holder!r}, token=<hidden>, "
            f"fingerprint={self.fingerprint[:16]!r})"
        )


def certificate_fingerprint(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def _self_signed_tls() -> tuple[ssl.SSLContext, str]:
    """A server context with a fresh self-signed certificate (EC P-256), and the certificate's fingerprint."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cambrian-fm-gateway")])
    now = datetime.now(timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=400))
        .sign(key, hashes.SHA256())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="cambrian-tls-") as folder:  # 0700; ssl loads only from files
        cert_path, key_path = Path(folder, "cert.pem"), Path(folder, "key.pem")
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key_path.touch(mode=0o600)
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        context.load_cert_chain(cert_path, key_path)
    return context, certificate_fingerprint(certificate.public_bytes(serialization.Encoding.DER))


def _pinning_client_context() -> ssl.SSLContext:
    """A client context that takes any certificate in the handshake: the relay then pins its fingerprint."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class RemoteAgent:
    """One remote agent's channel and grant; `close()` ends both (the token is refused from then on)."""

    def __init__(self, listener: GatewayListener, channel: AgentChannel, grant: RelayGrant) -> None:
        self.channel = channel
        self.grant = grant
        self._listener = listener

    async def close(self) -> None:
        self._listener._forget(self.grant.holder, self.grant.token)
        await self.channel.close()


class GatewayListener:
    """The driver's TCP side of `gateway` for agents on other machines (see the module doc).

    host: the address nodes reach the driver at (the node IP Ray reports for the driver, by default in the
    Ray executor); port: 0 takes a free one; tls: TLS with a certificate made at `start()`, pinned by the
    grants' relays (see the module doc). `start()` binds; `address` is then (host, port).
    """

    def __init__(self, gateway: FMGateway, *, host: str, port: int = 0, tls: bool = True) -> None:
        self.gateway = gateway
        self.host = host
        self.port = port
        self.tls = tls
        self.fingerprint = ""  # of the certificate, once started with TLS
        self.refused = 0  # connections answered 401
        self._grants: dict[str, tuple[str, AgentChannel]] = {}  # holder -> (token, channel)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    async def start(self) -> tuple[str, int]:
        context = None
        if self.tls:
            context, self.fingerprint = await asyncio.to_thread(_self_signed_tls)
        try:
            self._server = await asyncio.start_server(
                self._accept,
                host=self.host,
                port=self.port,
                limit=MAX_LINE_BYTES,
                ssl=context,
                ssl_handshake_timeout=self.gateway.read_timeout_s if context else None,
            )
        except OSError as exc:
            raise GatewayError(
                f"cannot listen for remote agents' FM calls on {self.host}:{self.port}: {exc}",
                fix="set evaluation.gateway_host to an address of this machine that the Ray nodes reach "
                "(and evaluation.gateway_port to a free port, or 0)",
            ) from exc
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.address

    async def open_agent(
        self,
        agent_id: int | None,
        *,
        max_calls: int,
        max_tokens: int,
        run_seed: int,
        iteration: int,
        purpose: str = "agent",
        proposal_id: str | None = None,
    ) -> RemoteAgent:
        """A channel with a fresh budget for `agent_id` and its token; close the result when its evaluation ends.

        agent_id None: a parent agent writing its child (purpose "self_modify"), whose calls carry `proposal_id`,
        which links them to the child; its grant's holder is `parent-<iteration>-<random>`.
        """
        if self._server is None:
            raise RuntimeError("start() the listener first")
        holder = str(agent_id) if agent_id is not None else f"parent-{iteration}-{secrets.token_hex(8)}"
        channel = await self.gateway.open_remote_agent(
            agent_id,
            max_calls=max_calls,
            max_tokens=max_tokens,
            run_seed=run_seed,
            iteration=iteration,
            purpose=purpose,
            key=holder,
            proposal_id=proposal_id,
        )
        token = secrets.token_urlsafe(32)
        self._grants[holder] = (token, channel)
        grant = RelayGrant(self.host, self.port, holder, token, self.fingerprint, agent_token=channel.token)
        return RemoteAgent(self, channel, grant)

    async def close(self) -> None:
        """Stop listening and cut every connection; the grants' channels are the gateway's to close."""
        self._grants.clear()
        await _stop_serving(self._server, self._connections)

    def _forget(self, holder: str, token: str) -> None:
        held = self._grants.get(holder)
        if held is not None and hmac.compare_digest(held[0].encode(), token.encode()):
            del self._grants[holder]

    def _channel_for(self, line: bytes) -> AgentChannel | None:
        """The open channel the preamble line names with its own token, or None."""
        parts = line.strip().split(b" ")
        if len(parts) != 3 or parts[0] != PREAMBLE or not parts[1].isascii():
            return None
        held = self._grants.get(parts[1].decode("ascii"))
        if held is None:
            return None
        token, channel = held
        if not hmac.compare_digest(token.encode(), parts[2]) or channel.closed:
            return None
        return channel

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None or len(self._connections) >= MAX_PENDING_CONNECTIONS:
            writer.close()
            return
        self._connections.add(task)
        try:
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), timeout=self.gateway.read_timeout_s)
            except (asyncio.TimeoutError, asyncio.LimitOverrunError, asyncio.IncompleteReadError, ConnectionError):
                line = b""
            channel = self._channel_for(line)
            if channel is None:
                self.refused += 1
                await _answer(writer, 401, "unauthorized", "no open FM channel for this agent and token")
                return
            await channel.serve(reader, writer)
        except asyncio.CancelledError:
            pass  # the listener closed: this connection ends here
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()
            self._connections.discard(task)


async def _stop_serving(server: asyncio.Server | None, connections: set[asyncio.Task[None]]) -> None:
    """Stop accepting, cut the connections being served, and wait until the server has closed."""
    if server is not None:
        server.close()
    for task in list(connections):
        task.cancel()
    await asyncio.gather(*connections, return_exceptions=True)
    if server is not None:
        await server.wait_closed()


async def _answer(writer: asyncio.StreamWriter, status: int, kind: str, message: str) -> None:
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    reason = {401: "Unauthorized", 502: "Bad Gateway", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    with contextlib.suppress(ConnectionError):
        writer.write(head.encode("ascii") + body)
        await writer.drain()


class SocketRelay:
    """On a node: serves one agent's Unix socket at `path` and relays each connection to the driver's
    listener, opening it with the agent's id and token (trusted code; the token stays in this process).

    max_connections: connections relayed at once; more are answered 503 and closed.
    """

    def __init__(self, path: str | os.PathLike[str], grant: RelayGrant, *, max_connections: int = 32) -> None:
        self.path = Path(path)
        self.max_connections = max_connections
        self._grant = grant
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()
        self._server = await asyncio.start_unix_server(self._relay, path=str(self.path))
        os.chmod(self.path, 0o666)  # the sandbox's non-root user connects

    async def close(self) -> None:
        await _stop_serving(self._server, self._connections)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None or len(self._connections) >= self.max_connections:
            await _answer(writer, 503, "too_many_connections", f"more than {self.max_connections} connections open")
            writer.close()
            return
        self._connections.add(task)
        upstream: asyncio.StreamWriter | None = None
        try:
            grant = self._grant
            context = _pinning_client_context() if grant.fingerprint else None
            try:
                up_reader, upstream = await asyncio.open_connection(grant.host, grant.port, ssl=context)
            except (OSError, ssl.SSLError):
                await _answer(writer, 502, "gateway_unreachable", "the FM gateway cannot be reached from this node")
                return
            if context is not None and not _pinned(upstream, grant.fingerprint):
                # Someone else answers at the driver's address: it gets no token and no request.
                await _answer(
                    writer,
                    502,
                    "gateway_impostor",
                    "the FM gateway's certificate is not the one this evaluation was given",
                )
                return
            upstream.write(b"%s %s %s\r\n" % (PREAMBLE, grant.holder.encode("ascii"), grant.token.encode()))
            to_driver = asyncio.ensure_future(_pump(reader, upstream, half_close=True))
            try:
                await _pump(up_reader, writer, half_close=False)  # the gateway answers, then closes
            finally:
                to_driver.cancel()
                await asyncio.gather(to_driver, return_exceptions=True)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            for stream in (writer, upstream):
                if stream is not None:
                    stream.close()
                    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                        await stream.wait_closed()
            if task is not None:
                self._connections.discard(task)


def _pinned(stream: asyncio.StreamWriter, fingerprint: str) -> bool:
    """Whether the TLS peer of `stream` showed the certificate with this fingerprint."""
    ssl_object = stream.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return der is not None and hmac.compare_digest(certificate_fingerprint(der), fingerprint)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, half_close: bool) -> None:
    """Copy bytes until EOF; then half-close the other side (so a request body's end reaches the gateway)."""
    while chunk := await reader.read(_CHUNK):
        writer.write(chunk)
        await writer.drain()
    if half_close and writer.can_write_eof():
        with contextlib.suppress(OSError):
            writer.write_eof()
