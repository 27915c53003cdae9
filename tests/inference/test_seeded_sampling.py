"""Seeded sampling: `Sampling.seed` is checked, travels to every backend that has a seed (the
worker, Ollama's options.seed, the OpenAI `seed`), and the real worker repeats its samples for
the same seed on the bundled model while other seeds, and no seed, sample afresh."""

from __future__ import annotations

import pytest
from inference_fakes import FakeOllama, FakeOpenAI

from dragonfarm_core.conversation.generation import generate
from dragonfarm_core.inference import (
    Sampling,
    backend_local,
    backend_ollama,
    backend_server,
    worker_stop,
)
from dragonfarm_core.inference.protocol import MAX_SEED
from dragonfarm_core.inference.worker import seeded

BUNDLED = "dragonfarm/tiny-support"
# Each prompt twice, as synthesize_pairs asks for several samples of one prompt in one call.
PROMPTS = [
    "Thermostat offline\nMy thermostat keeps dropping off Wi-Fi.",
    "Refund\nI was charged twice for my order.",
] * 2
MESSAGES = [{"role": "user", "content": "Hi"}]


def test_the_seed_is_checked_and_sent_as_part_of_the_settings():
    assert Sampling().seed is None and Sampling().as_dict()["seed"] is None
    assert Sampling(seed=MAX_SEED).as_dict()["seed"] == MAX_SEED
    for bad in (-1, MAX_SEED + 1, 1.5, True, "42"):
        with pytest.raises(ValueError, match="seed must be a whole number"):
            Sampling(seed=bad)  # type: ignore[arg-type]


def test_nth_gives_each_conversation_its_own_seed_and_wraps():
    assert Sampling().nth(3).seed is None
    assert [Sampling(seed=7).nth(i).seed for i in range(3)] == [7, 8, 9]
    assert Sampling(seed=MAX_SEED).nth(1).seed == 0


def test_the_worker_seed_context_repeats_draws_and_restores_the_state():
    import torch

    before = torch.get_rng_state()
    with seeded(5, "cpu"):
        first = torch.rand(4)
    with seeded(5, "cpu"):
        again = torch.rand(4)
    assert torch.equal(first, again)
    assert torch.equal(torch.get_rng_state(), before)  # unseeded sampling goes on as before
    with seeded(None, "cpu"):
        torch.rand(1)
    assert not torch.equal(torch.get_rng_state(), before)


def test_ollama_gets_options_seed_one_per_conversation():
    with FakeOllama("m") as server:
        b = backend_ollama("m", url=server.url)
        b.chat(None, MESSAGES, Sampling())
        assert "seed" not in server.requests[-1]["body"]["options"]
        b.generate(None, [MESSAGES] * 3, Sampling(seed=11))
        seeds = [r["body"]["options"]["seed"] for r in server.requests[-3:]]
    assert seeds == [11, 12, 13]


def test_an_openai_compatible_server_gets_seed_one_per_conversation():
    with FakeOpenAI("m") as server:
        b = backend_server(server.url, "m")
        b.chat(None, MESSAGES, Sampling())
        assert "seed" not in server.requests[-1]["body"]
        b.generate(None, [MESSAGES] * 3, Sampling(seed=11))
        seeds = sorted(r["body"]["seed"] for r in server.requests[-3:])  # sent in parallel
    assert seeds == [11, 12, 13]


@pytest.fixture(scope="module")
def local():
    worker_stop()
    yield backend_local()
    worker_stop()


def sample(local, seed):
    return generate(BUNDLED, PROMPTS, max_new_tokens=24, temperature=1.0, seed=seed, backend=local)


@pytest.mark.slow
def test_the_real_worker_repeats_samples_for_a_seed_and_not_across_seeds(local):
    first = sample(local, 7)
    assert sample(local, 7) == first
    assert sample(local, 8) != first
    # The two samples of one prompt in one call still differ: one seed is not one reply.
    assert first[0] != first[2] or first[1] != first[3]
    # No seed samples afresh, seeded requests in between or not.
    assert sample(local, None) != sample(local, None)


def test_the_apps_openai_server_reads_the_requests_seed():
    from dragonfarm_core.serve.openai_wire import read_request

    body = {"model": "m", "messages": MESSAGES, "seed": 9}
    assert read_request(body, "m").sampling.seed == 9
    assert read_request({**body, "seed": None}, "m").sampling.seed is None
    refused = read_request({**body, "seed": -3}, "m")
    assert refused.status_code == 400 and b"seed must be a whole number" in refused.body
