"""The run's behaviour space (`BehaviourSpace`): code embeddings from an endpoint are computed off the event
loop, so a slow embedding server never stalls the proposals and evaluations running beside it."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from cambrian.archive.novelty import EndpointEmbedder
from cambrian.evaluators.programs import Knapsack
from cambrian.meta_agent.config import NoveltyConfig
from cambrian.meta_agent.search._behaviour import BehaviourSpace

DIM = 16


def test_an_endpoint_embeds_off_the_event_loop_the_ngrams_in_line() -> None:
    started, release = threading.Event(), threading.Event()
    threads: list[str] = []

    def embed(texts: list[str]) -> list[list[float]]:  # a server that answers once the loop has moved on
        threads.append(threading.current_thread().name)
        started.set()
        assert release.wait(60), "the loop never ran while the embedding was in flight"
        return [[1.0] * DIM for _ in texts]

    endpoint = BehaviourSpace(
        Knapsack(),
        NoveltyConfig(space="code", embedding_dim=DIM),
        code_embedder=EndpointEmbedder(embed_fn=embed, dim=DIM),
    )

    async def main() -> np.ndarray:
        embedding = asyncio.create_task(endpoint.code_embedding_async({"p.py": "x = 1\n"}))
        await asyncio.to_thread(started.wait)  # the call is in flight...
        release.set()  # ...and this line of the loop runs meanwhile: on the loop, the call would block it
        return await embedding

    vector = asyncio.run(main())
    assert vector.shape == (DIM,) and threads and threads[0] != threading.main_thread().name
    ngrams = BehaviourSpace(Knapsack(), NoveltyConfig(space="code"))
    files = {"p.py": "x = 1\n"}
    assert np.array_equal(asyncio.run(ngrams.code_embedding_async(files)), ngrams.code_embedding(files))
