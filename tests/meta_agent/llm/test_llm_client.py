"""The FM client: real calls to a local SmolLM2 server, and scripted HTTP stubs for failure modes.

The `_fake_fm` tests talk to a tiny OpenAI-shaped HTTP server in a thread, so
the real litellm/openai stack runs and exact status codes can be scripted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cambrian.archive.store import Archive
from cambrian.meta_agent.llm import (
    ArchiveLedger,
    Completion,
    Endpoint,
    FMAuthError,
    FMBadRequest,
    FMUnavailable,
    LLMClient,
    MemoryLedger,
    Request,
    derive_seed,
)
from cambrian.meta_agent.llm._request import answer_key, request_hash
from cambrian.meta_agent.llm.serve import LocalServer, free_port

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Name one prime number."},
]


# ----- real model -------------------------------------------------------------------------------


def test_completion_has_text_tokens_and_zero_cost(local_fm: LocalServer) -> None:
    ledger = MemoryLedger()
    client = LLMClient(local_fm.endpoint(), ledger=ledger, max_tokens=24)

    completion = client.complete_sync(Request(MESSAGES, seed=derive_seed(7, 1, 0), purpose="judge", agent_id=3))

    assert completion.text.strip()
    assert completion.prompt_tokens > 0 and completion.completion_tokens > 0
    assert completion.cost_usd == 0.0 and not completion.cache_hit
    assert completion.model == "smollm2-135m"
    [entry] = ledger.entries
    assert entry.error is None and entry.purpose == "judge" and entry.agent_id == 3
    assert entry.cost_usd == 0.0 and entry.completion_tokens == completion.completion_tokens
    assert ledger.cached(completion.request_hash) == completion


def test_the_archive_keeps_what_every_call_sent_once_per_request(local_fm: LocalServer, tmp_path: Path) -> None:
    with Archive.at(tmp_path / "archive.db") as archive:
        run = archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
        client = LLMClient(local_fm.endpoint(), ledger=ArchiveLedger(archive, int(run.id)), max_tokens=8)
        first = client.complete_sync(Request(MESSAGES, seed=3, purpose="mutate", agent_id=2))
        client.complete_sync(Request(MESSAGES, seed=3, purpose="mutate", agent_id=2))  # a cache hit: same request

        calls = archive.agent_llm_calls(2)
        requests, responses = archive.llm_exchanges(call.request_hash for call in calls)
    assert [call.cache_hit for call in calls] == [False, True]
    assert set(requests) == set(responses) == {first.request_hash}
    request = requests[first.request_hash]
    assert json.loads(request.messages) == MESSAGES and request.model == "smollm2-135m"
    assert json.loads(request.params)["seed"] == 3 and responses[first.request_hash].text == first.text


def test_same_seed_twice_is_a_cache_hit_with_no_new_spend(local_fm: LocalServer) -> None:
    ledger = MemoryLedger()
    client = LLMClient(local_fm.endpoint(), ledger=ledger, max_tokens=24)

    first = client.complete_sync(Request(MESSAGES, seed=11))
    second = client.complete_sync(Request(MESSAGES, seed=11))

    assert second.cache_hit and not first.cache_hit
    assert second.text == first.text and second.request_hash == first.request_hash
    assert second.cost_usd == 0.0
    assert [e.cache_hit for e in ledger.entries] == [False, True]
    assert len(ledger.responses) == 1  # nothing new stored


def test_fixed_seed_replays_exactly_without_the_cache(local_fm: LocalServer) -> None:
    # A replayed run on a fresh archive must get the same answers: cache_prompt=False makes that hold.
    client_a = LLMClient(local_fm.endpoint(), ledger=MemoryLedger(), max_tokens=24)
    client_b = LLMClient(local_fm.endpoint(), ledger=MemoryLedger(), max_tokens=24)

    a = client_a.complete_sync(Request(MESSAGES, seed=12345))
    b = client_b.complete_sync(Request(MESSAGES, seed=12345))

    assert not b.cache_hit and b.text == a.text


def test_different_seed_gives_a_different_request_hash(local_fm: LocalServer) -> None:
    ledger = MemoryLedger()
    client = LLMClient(local_fm.endpoint(), ledger=ledger, max_tokens=16)

    a = client.complete_sync(Request(MESSAGES, seed=derive_seed(1, 5, 0)))
    b = client.complete_sync(Request(MESSAGES, seed=derive_seed(1, 5, 1)))

    assert a.request_hash != b.request_hash
    assert not a.cache_hit and not b.cache_hit
    assert len(ledger.responses) == 2


def test_a_greedy_request_is_one_answer_whatever_its_seed(local_fm: LocalServer) -> None:
    """Two agents (or a parent and its child) asking the same question at temperature 0 get one answer: the
    second from the cache, so their scores differ only where their code does."""
    ledger = MemoryLedger()
    client = LLMClient(local_fm.endpoint(), ledger=ledger, max_tokens=16)

    first = client.complete_sync(Request(MESSAGES, seed=derive_seed(1, 5, 0), temperature=0.0, purpose="agent"))
    second = client.complete_sync(Request(MESSAGES, seed=derive_seed(1, 6, 0), temperature=0.0, purpose="agent"))

    assert second.cache_hit and second.text == first.text and second.request_hash == first.request_hash
    assert [e.seed for e in ledger.entries] == [derive_seed(1, 5, 0), derive_seed(1, 6, 0)]  # each call's own


def test_a_greedy_reply_that_stopped_answers_the_same_question_with_another_limit(
    local_fm: LocalServer, tmp_path: Path
) -> None:
    """A child that only changes its MAX_TOKENS asks nothing new: a greedy reply that ended by itself is
    the answer to any limit it fits in (from the archive, under the new request's own hash); a limit it does
    not fit in, or a reply its own limit cut, is asked afresh."""
    with Archive.at(tmp_path / "archive.db") as archive:
        run = archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
        client = LLMClient(local_fm.endpoint(), ledger=ArchiveLedger(archive, int(run.id)))

        def ask(question: list[dict[str, str]], max_tokens: int) -> Completion:
            return client.complete_sync(
                Request(question, seed=1, temperature=0.0, max_tokens=max_tokens, purpose="agent")
            )

        first = ask(MESSAGES, 200)
        assert 0 < first.completion_tokens < 200, "the reply should end by itself"
        longer, exact = ask(MESSAGES, 400), ask(MESSAGES, first.completion_tokens)
        shorter = ask(MESSAGES, first.completion_tokens - 1)

        question = [{"role": "user", "content": "Count from one to fifty in words."}]
        cut = ask(question, 3)
        after_cut = ask(question, 8)

        calls = archive.llm_calls(int(run.id))
        _, responses = archive.llm_exchanges(call.request_hash for call in calls)
    assert longer.cache_hit and exact.cache_hit and longer.text == exact.text == first.text
    assert len({first.request_hash, longer.request_hash, exact.request_hash}) == 3  # each request its own
    assert responses[longer.request_hash].text == first.text and responses[longer.request_hash].cost_usd == 0.0
    assert not shorter.cache_hit  # a limit the answer does not fit in: the server answers
    assert cut.completion_tokens == 3 and not after_cut.cache_hit  # a cut reply answers no other limit
    assert [call.cache_hit for call in calls] == [False, True, True, False, False, False]


def test_the_memory_ledger_keeps_the_first_greedy_answer_within_its_limit() -> None:
    ledger = MemoryLedger()
    answer = Completion("ok", "m", 5, 7, 0.0, 0.1, cache_hit=False, request_hash="h1", seed=None)
    ledger.store(answer, answer_key="k")
    ledger.store(dataclasses.replace(answer, text="other", request_hash="h2"), answer_key="k")

    assert ledger.cached_greedy("k", 7) == answer and ledger.cached_greedy("k", None) == answer
    assert ledger.cached_greedy("k", 6) is None and ledger.cached_greedy("other", 100) is None


# ----- pure functions ---------------------------------------------------------------------------


def test_the_request_hash_leaves_out_the_seed_only_of_a_greedy_request() -> None:
    greedy = {"temperature": 0, "max_tokens": 8, "extra_body": {}}
    sampled = {**greedy, "temperature": 0.8}
    assert request_hash("m", MESSAGES, {**greedy, "seed": 1}) == request_hash("m", MESSAGES, {**greedy, "seed": 2})
    assert request_hash("m", MESSAGES, {**sampled, "seed": 1}) != request_hash("m", MESSAGES, {**sampled, "seed": 2})
    longer = {**greedy, "max_tokens": 9, "seed": 1}
    assert request_hash("m", MESSAGES, {**greedy, "seed": 1}) != request_hash("m", MESSAGES, longer)


def test_the_answer_key_of_a_greedy_request_leaves_out_its_seed_and_limit() -> None:
    greedy = {"temperature": 0, "max_tokens": 8, "seed": 1, "extra_body": {}}
    key = answer_key("m", MESSAGES, greedy)
    assert key is not None and key != request_hash("m", MESSAGES, greedy)
    assert answer_key("m", MESSAGES, {**greedy, "max_tokens": 900, "seed": 2}) == key
    assert answer_key("m", MESSAGES, {**greedy, "temperature": 0.8}) is None  # a sampled request has none
    assert answer_key("m", MESSAGES, {**greedy, "extra_body": {"grammar": "root ::= x"}}) != key
    assert answer_key("m", MESSAGES[:1], greedy) != key and answer_key("other", MESSAGES, greedy) != key


def test_derive_seed_is_stable_in_range_and_distinct() -> None:
    seeds = {derive_seed(run, it, att) for run in range(3) for it in range(20) for att in range(3)}
    assert len(seeds) == 3 * 20 * 3
    assert all(0 <= s < 2**31 for s in seeds)
    assert derive_seed(42, 3, 1) == derive_seed(42, 3, 1)


def test_request_hash_covers_what_shapes_the_answer() -> None:
    params = {"temperature": 0.8, "max_tokens": 100, "seed": 1, "extra_body": {"cache_prompt": False}}
    base = request_hash("openai/m", MESSAGES, params)

    assert request_hash("openai/m", MESSAGES, dict(reversed(list(params.items())))) == base
    assert request_hash("openai/other", MESSAGES, params) != base
    assert request_hash("openai/m", MESSAGES[1:], params) != base
    for key, value in [("temperature", 0.2), ("max_tokens", 50), ("seed", 2), ("top_p", 0.9)]:
        assert request_hash("openai/m", MESSAGES, {**params, key: value}) != base, key


# ----- scripted HTTP stub -----------------------------------------------------------------------


@dataclass
class StubFM:
    """An OpenAI-shaped chat endpoint answering with scripted HTTP statuses (then 200s)."""

    statuses: list[int] = field(default_factory=list)
    delay_s: float = 0.0
    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    bodies: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    api_base: str = ""

    def endpoint(self) -> Endpoint:
        return Endpoint(model="openai/stub-model", api_base=self.api_base, label="stub")


def _handler_for(stub: StubFM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            with stub.lock:
                stub.requests += 1
                stub.in_flight += 1
                stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                stub.bodies.append(body)
                status = stub.statuses.pop(0) if stub.statuses else 200
            try:
                time.sleep(stub.delay_s)
                if status == 200:
                    payload = {
                        "id": "chatcmpl-stub",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "stub-model",
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "2"}}
                        ],
                        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
                    }
                else:
                    payload = {"error": {"message": f"scripted {status}", "type": "stub", "code": status}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            finally:
                with stub.lock:
                    stub.in_flight -= 1

    return Handler


@pytest.fixture
def stub_fm() -> Iterator[StubFM]:
    stub = StubFM()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(stub))
    stub.api_base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()


def test_retries_503_then_succeeds_fake_fm(stub_fm: StubFM) -> None:
    stub_fm.statuses = [503, 503]
    ledger = MemoryLedger()
    client = LLMClient(stub_fm.endpoint(), ledger=ledger, retries=3, backoff_s=0.01)

    completion = client.complete_sync(Request(MESSAGES, seed=5, iteration=2))

    assert completion.text == "2" and completion.prompt_tokens == 9
    assert stub_fm.requests == 3  # no hidden SDK retries on top of ours
    errors = [e.error for e in ledger.entries]
    assert errors[2] is None and all(e and "503" in e for e in errors[:2])
    assert all(e.iteration == 2 and e.seed == 5 and e.model == "stub" for e in ledger.entries)
    assert all(e.latency_s > 0 for e in ledger.entries)  # a failed attempt's time is recorded too
    # The request carries the seed and the endpoint's extra body.
    assert stub_fm.bodies[-1]["seed"] == 5


def test_extra_body_reaches_the_server_fake_fm(stub_fm: StubFM) -> None:
    endpoint = Endpoint(model="openai/stub-model", api_base=stub_fm.api_base, extra_body={"cache_prompt": False})
    LLMClient(endpoint, ledger=MemoryLedger()).complete_sync(Request(MESSAGES, seed=1))
    assert stub_fm.bodies[0]["cache_prompt"] is False


def test_no_retry_on_401_fake_fm(stub_fm: StubFM) -> None:
    stub_fm.statuses = [401]
    ledger = MemoryLedger()
    client = LLMClient(stub_fm.endpoint(), ledger=ledger, retries=3, backoff_s=0.01)

    with pytest.raises(FMAuthError) as info:
        client.complete_sync(Request(MESSAGES, seed=5))

    assert stub_fm.requests == 1
    assert "refused the credentials" in str(info.value) and "api_key_env" in info.value.fix
    [entry] = ledger.entries
    assert entry.error and "401" in entry.error


def test_no_retry_on_400_fake_fm(stub_fm: StubFM) -> None:
    stub_fm.statuses = [400]
    client = LLMClient(stub_fm.endpoint(), ledger=MemoryLedger(), retries=3, backoff_s=0.01)

    with pytest.raises(FMBadRequest) as info:
        client.complete_sync(Request(MESSAGES, seed=5))

    assert stub_fm.requests == 1
    assert "openai/stub-model" in info.value.fix


def test_gives_up_after_retries_on_persistent_429_fake_fm(stub_fm: StubFM) -> None:
    stub_fm.statuses = [429, 429, 429]
    ledger = MemoryLedger()
    client = LLMClient(stub_fm.endpoint(), ledger=ledger, retries=2, backoff_s=0.01)

    with pytest.raises(FMUnavailable):
        client.complete_sync(Request(MESSAGES, seed=5))

    assert stub_fm.requests == 3 and len(ledger.entries) == 3


def test_unreachable_server_raises_fm_unavailable_with_fix_fake_fm() -> None:
    api_base = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    ledger = MemoryLedger()
    endpoint = Endpoint(model="openai/none", api_base=api_base)
    client = LLMClient(endpoint, ledger=ledger, retries=1, backoff_s=0.01)

    with pytest.raises(FMUnavailable) as info:
        client.complete_sync(Request(MESSAGES, seed=5))

    assert "after 2 attempts" in str(info.value)
    assert api_base in info.value.fix and "cambrian serve" in info.value.fix
    assert len(ledger.entries) == 2 and all(e.error for e in ledger.entries)


def test_missing_api_key_variable_names_it_fake_fm(stub_fm: StubFM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAMBRIAN_TEST_UNSET_KEY", raising=False)
    endpoint = Endpoint(model="openai/stub-model", api_base=stub_fm.api_base, api_key_env="CAMBRIAN_TEST_UNSET_KEY")

    with pytest.raises(FMAuthError) as info:
        LLMClient(endpoint, ledger=MemoryLedger()).complete_sync(Request(MESSAGES, seed=1))

    assert "CAMBRIAN_TEST_UNSET_KEY" in str(info.value) and "export CAMBRIAN_TEST_UNSET_KEY" in info.value.fix
    assert stub_fm.requests == 0


def test_concurrency_limit_honoured_fake_fm(stub_fm: StubFM) -> None:
    stub_fm.delay_s = 0.3
    client = LLMClient(stub_fm.endpoint(), ledger=MemoryLedger(), concurrency=2)

    async def many() -> list[str]:
        done = await asyncio.gather(*(client.complete(Request(MESSAGES, seed=s)) for s in range(6)))
        return [c.text for c in done]

    assert asyncio.run(many()) == ["2"] * 6
    assert stub_fm.requests == 6
    assert stub_fm.max_in_flight == 2


def test_a_refused_request_is_recorded_with_its_reason_and_sends_nothing() -> None:
    # Nothing listens at port 9: a refusal must not try to send.
    ledger = MemoryLedger()
    client = LLMClient(Endpoint("openai/m", api_base="http://127.0.0.1:9/v1", label="m"), ledger=ledger)
    request = Request(MESSAGES, seed=4, purpose="agent", agent_id=7, iteration=3, max_tokens=0)
    client.refuse(request, "budget_exceeded: agent 7 has used all 2 FM calls of its budget")
    (entry,) = ledger.entries
    assert entry.error == "budget_exceeded: agent 7 has used all 2 FM calls of its budget"
    assert (entry.agent_id, entry.iteration, entry.seed, entry.model) == (7, 3, 4, "m")
    assert entry.request_hash == client.asked(request).key  # the hash of what was asked, prompt included
    assert not ledger.responses and entry.prompt_tokens == entry.completion_tokens == 0
