"""The FM gateway with the real local model: agents in real sandboxes call the FM over a Unix socket.

Every call goes through a real LLMClient to SmolLM2-135M and lands in a real
SQLite archive; the agents run in the local sandbox (and in Docker where an
engine and the sandbox image are present).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import tempfile
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlmodel import Session, select

from cambrian.archive.models import LLMCall
from cambrian.archive.store import Archive
from cambrian.evaluators.harness.llm_client import LLM_CLIENT_FILE, llm_client_text
from cambrian.meta_agent.llm import ArchiveLedger, Endpoint, LLMClient, derive_seed
from cambrian.meta_agent.llm.gateway import (
    MAX_BODY_BYTES,
    SOCKET_ENV,
    TOKEN_ENV,
    AgentChannel,
    FMGateway,
    GatewayError,
    prompt_token_bound,
)
from cambrian.meta_agent.llm.serve import LocalServer, free_port
from cambrian.sandbox.base import RunResult, RunSpec
from cambrian.sandbox.local import LocalSandbox

RUN_SEED = 4242
ITERATION = 3
CANARY = "canary-7f3e9b1c-do-not-leak"
T = TypeVar("T")


@dataclass
class Setup:
    archive: Archive
    run_id: int
    socket_dir: Path

    def client(self, endpoint: Endpoint, **kwargs: Any) -> LLMClient:
        return LLMClient(endpoint, ledger=ArchiveLedger(self.archive, self.run_id), **kwargs)

    def calls(self) -> list[LLMCall]:
        with Session(self.archive.engine) as session:
            return list(session.exec(select(LLMCall).where(LLMCall.run_id == self.run_id).order_by(LLMCall.id)))


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    archive = Archive.at(tmp_path / "archive.db")
    run = archive.create_run(name="gateway-test", benchmark="none", seed=RUN_SEED, config_json="{}")
    assert run.id is not None
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
    socket_dir = Path(tempfile.mkdtemp(prefix="cgw-", dir="/tmp"))
    socket_dir.chmod(0o711)  # as the runs make it: sandbox uids pass through to their socket, cannot list
    yield Setup(archive=archive, run_id=run.id, socket_dir=socket_dir)
    shutil.rmtree(socket_dir, ignore_errors=True)
    archive.close()


def run_with_gateway(setup: Setup, client: LLMClient, scenario: Callable[[FMGateway], Awaitable[T]], **kw: Any) -> T:
    """Run `scenario` on a fresh event loop with a gateway serving on it; the gateway is closed after."""

    async def main() -> T:
        async with FMGateway(client, socket_dir=setup.socket_dir, **kw) as gateway:
            return await scenario(gateway)

    return asyncio.run(main())


_OWN = object()  # http(): the channel's own token


async def http(channel: AgentChannel, raw: bytes, *, token: Any = _OWN) -> tuple[int, dict[str, Any], bytes]:
    """Send raw request bytes to the agent's socket, with the agent's token (or `token`: another string, or None
    for none) added after the request line; (status, JSON body, the whole raw response)."""
    token = channel.token if token is _OWN else token
    if token is not None and b"\r\n" in raw:
        line, rest = raw.split(b"\r\n", 1)
        raw = line + f"\r\nAuthorization: Bearer {token}".encode() + b"\r\n" + rest
    reader, writer = await asyncio.open_unix_connection(str(channel.socket_path))
    writer.write(raw)
    await writer.drain()
    response = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body), response


def post(path: str, body: bytes) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


async def chat(channel: AgentChannel, *, token: Any = _OWN, **body: Any) -> tuple[int, dict[str, Any], bytes]:
    body.setdefault("messages", [{"role": "user", "content": "Say hi"}])
    body.setdefault("max_tokens", 8)
    return await http(channel, post("/v1/chat/completions", json.dumps(body).encode()), token=token)


def agent_spec(channel: AgentChannel, program: str, *, sandbox_socket: str | None = None) -> RunSpec:
    """A tiny agent program plus the in-sandbox client, wired to the channel's socket."""
    socket_path = sandbox_socket or str(channel.socket_path)
    return RunSpec(
        files={LLM_CLIENT_FILE: llm_client_text(), "agent.py": textwrap.dedent(program)},
        command=("{python}", "agent.py"),
        env=channel.env(socket_path),
        mounts=(channel.mount(socket_path),),
        timeout_s=240.0,
    )


def assert_ran(result: RunResult) -> None:
    assert result.ok, f"agent failed: {result.failure_reason()}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


# ----- through a real sandbox ---------------------------------------------------------------------


def test_agent_in_local_sandbox_calls_the_fm_and_the_call_is_recorded(local_fm: LocalServer, setup: Setup) -> None:
    client = setup.client(local_fm.endpoint(), max_tokens=32)
    program = """
        import json
        from _cambrian_llm import llm
        print("REPLY:", json.dumps(llm("Say hi", max_tokens=8)))
    """

    async def scenario(gateway: FMGateway) -> tuple[RunResult, AgentChannel]:
        channel = await gateway.open_agent(7, max_calls=5, max_tokens=2000, run_seed=RUN_SEED, iteration=ITERATION)
        result = await asyncio.to_thread(LocalSandbox().run, agent_spec(channel, program))
        return result, channel

    result, channel = run_with_gateway(setup, client, scenario)

    assert_ran(result)
    assert json.loads(result.stdout.split("REPLY:", 1)[1]).strip()
    [call] = setup.calls()
    assert call.purpose == "agent" and call.agent_id == 7 and call.iteration == ITERATION
    assert call.error is None and call.model == "smollm2-135m"
    assert call.prompt_tokens > 0 and 0 < call.completion_tokens <= 8
    assert call.seed == derive_seed(RUN_SEED, ITERATION, 1000)  # the first agent call's replayable seed
    assert channel.calls_used == 1 and channel.tokens_used == call.prompt_tokens + call.completion_tokens
    assert not channel.socket_path.exists()  # closing the gateway removed the socket


def test_budget_of_calls_refuses_the_third_call_and_records_the_refusal(local_fm: LocalServer, setup: Setup) -> None:
    client = setup.client(local_fm.endpoint(), max_tokens=32)
    program = """
        from _cambrian_llm import llm, LLMBudgetExceeded
        for i in range(3):
            try:
                print("OK", i, repr(llm("Count to three.", max_tokens=6)))
            except LLMBudgetExceeded as exc:
                print("REFUSED", i, exc)
    """

    async def scenario(gateway: FMGateway) -> tuple[RunResult, AgentChannel]:
        channel = await gateway.open_agent(11, max_calls=2, max_tokens=5000, run_seed=RUN_SEED, iteration=ITERATION)
        result = await asyncio.to_thread(LocalSandbox().run, agent_spec(channel, program))
        return result, channel

    result, channel = run_with_gateway(setup, client, scenario)

    assert_ran(result)
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["OK", "OK", "REFUSED"]
    assert "FM calls" in lines[2]
    calls = setup.calls()
    assert [c.error is None for c in calls] == [True, True, False]
    refused = calls[2]
    assert refused.error is not None and refused.error.startswith("budget_exceeded")
    assert refused.agent_id == 11 and refused.purpose == "agent" and refused.model == "smollm2-135m"
    assert refused.prompt_tokens == 0 and refused.request_hash
    assert channel.calls_used == 2 and channel.refusals == 1
    # Each call without a seed gets the next replayable one.
    assert [c.seed for c in calls[:2]] == [derive_seed(RUN_SEED, ITERATION, 1000 + k) for k in range(2)]


def test_canary_and_keys_never_reach_the_sandbox_or_any_response(
    local_fm: LocalServer, setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAMBRIAN_CANARY", CANARY)
    monkeypatch.setenv("OPENAI_API_KEY", f"sk-{CANARY}")
    client = setup.client(local_fm.endpoint(), max_tokens=16)
    program = """
        import json, os
        import _cambrian_llm as fm
        print("ENV", json.dumps(dict(os.environ)))
        print("REPLY", json.dumps(fm.chat_completion("Say hi", max_tokens=6)))
        print("MODELS", json.dumps(fm.request("GET", "/v1/models")))
        print("BUDGET", json.dumps(fm.budget_left()))
        try:
            fm.request("POST", "/v1/chat/completions", {"messages": "not a list"})
        except fm.LLMError as exc:
            print("BAD", exc.status, exc)
    """

    channel_token: list[str] = []

    async def scenario(gateway: FMGateway) -> tuple[RunResult, list[bytes]]:
        channel = await gateway.open_agent(3, max_calls=5, max_tokens=2000, run_seed=RUN_SEED, iteration=ITERATION)
        channel_token.append(str(channel.token))
        result = await asyncio.to_thread(LocalSandbox().run, agent_spec(channel, program))
        raws = [
            (await chat(channel))[2],
            (await http(channel, b"GET /health HTTP/1.1\r\n\r\n"))[2],
            (await http(channel, b"GET /v1/models HTTP/1.1\r\n\r\n"))[2],
            (await http(channel, post("/v1/chat/completions", b"{")))[2],
            (await http(channel, b"GET /nope HTTP/1.1\r\n\r\n"))[2],
        ]
        return result, raws

    result, raws = run_with_gateway(setup, client, scenario)

    assert_ran(result)
    assert CANARY not in result.stdout and CANARY not in result.stderr
    env = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("ENV "))[4:])
    assert env[SOCKET_ENV]
    assert env[TOKEN_ENV] == channel_token[0]  # its own capability to its own budget, and nothing else secret
    named = [name for name in env if any(word in name.upper() for word in ("KEY", "TOKEN", "SECRET", "CANARY"))]
    assert named == [TOKEN_ENV]
    reply = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("REPLY "))[6:])
    assert reply["object"] == "chat.completion" and reply["model"] == "smollm2-135m"
    assert reply["choices"][0]["message"]["role"] == "assistant"
    assert reply["usage"]["total_tokens"] == reply["usage"]["prompt_tokens"] + reply["usage"]["completion_tokens"]
    assert '"id": "smollm2-135m"' in result.stdout  # /v1/models names the run's one model
    assert "BAD 400" in result.stdout
    for raw in raws:
        assert CANARY.encode() not in raw
        assert local_fm.base_url.encode() not in raw


def test_fm_failure_is_a_502_without_the_fm_address_or_host_env(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real client against a port where nothing listens: litellm's connection error, not a fake.
    monkeypatch.setenv("CAMBRIAN_CANARY", CANARY)
    api_base = f"http://127.0.0.1:{free_port()}/v1"
    client = setup.client(Endpoint(model="openai/nothing-here", api_base=api_base), retries=0, timeout_s=5.0)

    async def scenario(gateway: FMGateway) -> tuple[int, dict[str, Any], bytes, AgentChannel]:
        channel = await gateway.open_agent(5, max_calls=3, max_tokens=1000, run_seed=RUN_SEED, iteration=0)
        return (*await chat(channel), channel)

    status, body, raw, channel = run_with_gateway(setup, client, scenario)

    assert status == 502 and body["error"]["type"] == "fm_error"
    assert "foundation model call failed" in body["error"]["message"]
    assert api_base.encode() not in raw and CANARY.encode() not in raw
    assert channel.calls_used == 0 and channel.calls_left == 3  # a failed call spends no budget
    [call] = setup.calls()
    assert call.agent_id == 5 and call.purpose == "agent" and call.error


# ----- HTTP and budget rules, straight on the socket ----------------------------------------------


@pytest.mark.parametrize(
    ("raw", "status", "words"),
    [
        (post("/v1/chat/completions", b"{not json"), 400, "not valid JSON"),
        (post("/v1/chat/completions", b'{"max_tokens": 5}'), 400, "'messages'"),
        (post("/v1/chat/completions", b'{"messages": [{"role": "user", "content": 5}]}'), 400, "content"),
        (post("/v1/chat/completions", b'{"messages": [{"role": "robot", "content": "x"}]}'), 400, "role"),
        (
            post("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}'),
            400,
            "max_tokens",
        ),
        (post("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "seed": -1}'), 400, "seed"),
        (post("/v1/chat/completions", b"[1, 2]"), 400, "JSON object"),
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1), 413, "over"),
        (b"POST /v1/chat/completions HTTP/1.1\r\n\r\n", 411, "Content-Length"),
        (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "chunked"),
        (b"HELLO\r\n\r\n", 400, "request line"),
        (b"GET /v1/chat/completions HTTP/1.1\r\n\r\n", 405, "takes POST"),
        (b"GET /v1/secrets HTTP/1.1\r\n\r\n", 404, "/v1/secrets"),
    ],
)
def test_malformed_requests_get_a_clear_error(setup: Setup, raw: bytes, status: int, words: str) -> None:
    # Refused before any FM call: the endpoint is never reached.
    client = setup.client(Endpoint(model="openai/unused", api_base="http://127.0.0.1:9/v1"), retries=0)

    async def scenario(gateway: FMGateway) -> tuple[int, dict[str, Any], bytes]:
        channel = await gateway.open_agent(1, max_calls=5, max_tokens=1000, run_seed=RUN_SEED, iteration=0)
        return await http(channel, raw)

    got_status, body, _raw = run_with_gateway(setup, client, scenario)

    assert got_status == status
    assert words in body["error"]["message"]
    assert setup.calls() == []  # nothing reached the FM or the ledger


def test_two_agents_have_separate_sockets_and_budgets(local_fm: LocalServer, setup: Setup) -> None:
    client = setup.client(local_fm.endpoint(), max_tokens=16)

    async def scenario(gateway: FMGateway) -> list[int]:
        one = await gateway.open_agent(1, max_calls=1, max_tokens=2000, run_seed=RUN_SEED, iteration=1)
        two = await gateway.open_agent(2, max_calls=1, max_tokens=2000, run_seed=RUN_SEED, iteration=1)
        assert one.socket_path != two.socket_path
        assert stat.S_IMODE(os.stat(one.socket_path).st_mode) == 0o666
        statuses = [(await chat(one))[0], (await chat(one))[0], (await chat(two))[0]]
        assert (await http(two, b"GET /health HTTP/1.1\r\n\r\n"))[1]["calls_left"] == 0
        await one.close()
        assert not one.socket_path.exists() and two.socket_path.exists()
        return statuses

    assert run_with_gateway(setup, client, scenario) == [200, 429, 200]
    calls = setup.calls()
    assert [(c.agent_id, c.error is None) for c in calls] == [(1, True), (1, False), (2, True)]


def test_another_program_on_an_agents_socket_gets_401_and_spends_nothing_of_its_budget(setup: Setup) -> None:
    # A socket's name is listed in /proc/net/unix: another agent, or another user of the machine, can find it.
    # Without the agent's own token (its env, CAMBRIAN_FM_TOKEN) it gets 401, before any FM call is made.
    async def scenario(gateway: FMGateway) -> tuple[list[int], int, int, int]:
        victim = await gateway.open_agent(1, max_calls=3, max_tokens=2000, run_seed=RUN_SEED, iteration=1)
        thief = await gateway.open_agent(2, max_calls=3, max_tokens=2000, run_seed=RUN_SEED, iteration=1)
        statuses = [
            (await chat(victim, token=None))[0],
            (await chat(victim, token="guessed"))[0],
            (await chat(victim, token=thief.token))[0],  # another agent's own token is not this socket's
            (await http(victim, b"GET /health HTTP/1.1\r\n\r\n", token=None))[0],
        ]
        return statuses, victim.calls_used, victim.calls_left, victim.unauthorized

    statuses, used, left, refused = run_with_gateway(setup, setup.client(Endpoint(model="never-called")), scenario)
    assert statuses == [401, 401, 401, 401] and (used, left, refused) == (0, 3, 4)
    assert setup.calls() == []  # nothing reached the FM, nothing was charged


def test_concurrent_calls_of_one_agent_cannot_overspend(local_fm: LocalServer, setup: Setup) -> None:
    client = setup.client(local_fm.endpoint(), max_tokens=16, concurrency=2)

    async def scenario(gateway: FMGateway) -> list[int]:
        channel = await gateway.open_agent(9, max_calls=2, max_tokens=5000, run_seed=RUN_SEED, iteration=0)
        answers = await asyncio.gather(*(chat(channel, max_tokens=4) for _ in range(4)))
        return sorted(status for status, _body, _raw in answers)

    assert run_with_gateway(setup, client, scenario) == [200, 200, 429, 429]


def test_token_budget_caps_max_tokens_then_refuses(local_fm: LocalServer, setup: Setup) -> None:
    client = setup.client(local_fm.endpoint(), max_tokens=64)

    async def scenario(gateway: FMGateway) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        capped = await gateway.open_agent(1, max_calls=10, max_tokens=5000, run_seed=RUN_SEED, iteration=0)
        _, by_gateway, _ = await chat(
            capped, max_tokens=500, messages=[{"role": "user", "content": "Write a long story about a cat."}]
        )
        # What is left after the prompt's upper bound is the completion cap: 3 tokens.
        budget = prompt_token_bound([{"role": "user", "content": "Say hi"}]) + 3
        tight = await gateway.open_agent(2, max_calls=10, max_tokens=budget, run_seed=RUN_SEED, iteration=0)
        _, first, _ = await chat(tight, max_tokens=50, seed=5)
        status, second, _ = await chat(tight, seed=6)
        assert status == 429
        return by_gateway, first, second

    by_gateway, first, second = run_with_gateway(setup, client, scenario, max_tokens_per_call=4)

    assert by_gateway["usage"]["completion_tokens"] <= 4  # the gateway's per-call cap
    assert first["usage"]["completion_tokens"] <= 3  # what was left of the agent's tokens
    assert second["error"]["type"] == "budget_exceeded" and "tokens" in second["error"]["message"]
    refused = setup.calls()[-1]
    assert refused.agent_id == 2 and refused.error is not None and refused.error.startswith("budget_exceeded")
    assert refused.seed == 6


def test_channel_lifecycle_errors(setup: Setup) -> None:
    client = setup.client(Endpoint(model="openai/unused", api_base="http://127.0.0.1:9/v1"), retries=0)

    async def scenario(gateway: FMGateway) -> None:
        channel = await gateway.open_agent(4, max_calls=1, max_tokens=10, run_seed=0, iteration=0)
        with pytest.raises(ValueError, match="already has an open FM channel"):
            await gateway.open_agent(4, max_calls=1, max_tokens=10, run_seed=0, iteration=0)
        await channel.close()
        again = await gateway.open_agent(4, max_calls=1, max_tokens=10, run_seed=0, iteration=0)
        assert gateway.channel(4) is again and again.socket_path.parent == channel.socket_path.parent
        assert again.socket_path != channel.socket_path  # a fresh unguessable name each time

    run_with_gateway(setup, client, scenario)

    async def too_long() -> None:
        deep = setup.socket_dir / ("d" * 120)
        async with FMGateway(client, socket_dir=deep) as gateway:
            await gateway.open_agent(1, max_calls=1, max_tokens=10, run_seed=0, iteration=0)

    with pytest.raises(GatewayError) as info:
        asyncio.run(too_long())
    assert "107 bytes" in str(info.value) and "shorter socket_dir" in info.value.fix


# ----- Docker ------------------------------------------------------------------------------------


def test_agent_in_docker_container_calls_the_fm(local_fm: LocalServer, setup: Setup) -> None:
    from cambrian.sandbox.docker import DockerSandbox
    from tests.conftest import skip_without_docker

    skip_without_docker()
    client = setup.client(local_fm.endpoint(), max_tokens=32)
    program = """
        import json, os
        from _cambrian_llm import llm
        print("UID", os.getuid())
        print("REPLY:", json.dumps(llm("Say hi", max_tokens=8)))
    """

    async def scenario(gateway: FMGateway) -> RunResult:
        channel = await gateway.open_agent(21, max_calls=2, max_tokens=2000, run_seed=RUN_SEED, iteration=1)
        spec = agent_spec(channel, program, sandbox_socket="/run/cambrian/fm.sock")

        def in_container() -> RunResult:
            box = DockerSandbox(pool_size=0)
            try:
                return box.run(spec)
            finally:
                box.close()

        return await asyncio.to_thread(in_container)

    result = run_with_gateway(setup, client, scenario)

    assert_ran(result)
    assert "UID 0" not in result.stdout
    assert json.loads(result.stdout.split("REPLY:", 1)[1]).strip()
    [call] = setup.calls()
    assert call.agent_id == 21 and call.purpose == "agent" and call.completion_tokens > 0
