"""The real worker: a tiny random Llama with a LoRA run, loaded once and kept warm (slow)."""

import os
import shutil
import signal

import pytest

from dragonfarm_core.conversation.generation import generate
from dragonfarm_core.inference import Sampling, backend_local, worker_stop
from dragonfarm_core.inference.target import resolve_target

pytestmark = pytest.mark.slow
PROMPTS = [
    "Hi",
    "My thermostat keeps dropping off Wi-Fi.",
    "What is 12 plus 30?",
    "How do I cancel my subscription before it renews? It renews tomorrow.",
]


@pytest.fixture(scope="module")
def local():
    worker_stop()
    yield backend_local()
    worker_stop()


def greedy(x, prompt, local, **kw):
    return generate(x, prompt, max_new_tokens=12, temperature=0, backend=local, **kw)


def test_str_gives_str_and_list_gives_list(tiny_run, local):
    assert isinstance(greedy(tiny_run, "Hello", local), str)
    replies = generate(tiny_run, PROMPTS, max_new_tokens=8, backend=local)
    assert isinstance(replies, list) and len(replies) == len(PROMPTS)
    assert generate(tiny_run, [], backend=local) == []


def test_batched_greedy_matches_one_at_a_time(tiny_run, local):
    """Left padding and the attention mask leave each reply as if it were alone."""
    assert greedy(tiny_run, PROMPTS, local) == [greedy(tiny_run, p, local) for p in PROMPTS]


def test_greedy_is_repeatable_and_the_system_prompt_matters(tiny_run, local):
    first = greedy(tiny_run, "Hello", local, system="Be brief.")
    assert greedy(tiny_run, "Hello", local, system="Be brief.") == first
    assert greedy(tiny_run, PROMPTS, local, system="Be brief.") != greedy(tiny_run, PROMPTS, local)


def test_switching_between_a_run_and_its_base_costs_no_reload(tiny_run, local):
    """Under "auto" on an AVX CPU the run is merged at load and its base held as an entry of
    its own (worker.Models.merges_at_load); elsewhere the adapter is switched off in place
    (test_worker_dtype). Either way, once both have answered, switching loads nothing."""
    tuned = greedy(tiny_run, PROMPTS, local)
    base = greedy(tiny_run, PROMPTS, local, base=True)
    assert base != tuned
    loads = local.status()["loads"]
    for _ in range(2):
        assert greedy(tiny_run, PROMPTS, local) == tuned
        assert greedy(tiny_run, PROMPTS, local, base=True) == base
    assert local.status()["loads"] == loads


def test_two_models_stay_loaded_and_a_third_evicts_the_oldest(
    tiny_run, tiny_model, local, tmp_path
):
    greedy(tiny_run, "a", local)
    greedy(tiny_model, "a", local)
    loads = local.status()["loads"]
    for _ in range(2):  # switching between the two held models costs no load
        greedy(tiny_run, "b", local)
        greedy(tiny_model, "b", local)
    assert local.status()["loads"] == loads
    copy = shutil.copytree(tiny_model, tmp_path / "copy")
    greedy(copy, "c", local)
    status = local.status()
    assert status["loads"] == loads + 1 and len(status["loaded"]) == 2
    assert str(copy) in [entry["base"] for entry in status["loaded"]]


def test_streamed_pieces_make_the_reply(tiny_run, local):
    pieces = []
    spec = resolve_target(tiny_run).spec
    messages = [{"role": "user", "content": "Tell me about the router."}]
    reply = local.chat(spec, messages, Sampling(30, 0.0, 1.0), pieces.append)
    assert pieces and "".join(pieces).strip() == reply
    same = generate(
        tiny_run,
        "Tell me about the router.",
        max_new_tokens=30,
        temperature=0,
        top_p=1.0,
        backend=local,
    )
    assert reply == same  # streaming changes how the reply arrives, not what it is


def test_killing_the_worker_mid_request_restarts_it(tiny_run, local):
    spec = resolve_target(tiny_run).spec
    pid = local.status()["pid"]
    killed = []

    def on_token(piece):
        if not killed:
            killed.append(piece)
            os.kill(pid, signal.SIGKILL)

    messages = [{"role": "user", "content": "Hello"}]
    reply = local.chat(spec, messages, Sampling(40, 0.0, 1.0), on_token)
    assert killed and reply == local.chat(spec, messages, Sampling(40, 0.0, 1.0))
    assert local.status()["pid"] != pid


def test_chat_with_the_local_worker(tiny_run, local, tmp_path):
    from dragonfarm_core.conversation.chat import chat
    from dragonfarm_core.conversation.feedback_store import read_events

    c = chat(
        tiny_run,
        system="Be brief.",
        backend=local,
        max_new_tokens=12,
        temperature=0,
        runs_dir=tmp_path,
        context_window=200,
    )
    pieces = []
    first = c.say("My thermostat keeps dropping off Wi-Fi.", on_token=pieces.append)
    assert "".join(pieces).strip() == first
    c.say("I tried that. What else?")
    usage = c.context_usage()
    assert usage.tokens > 20 and usage.window == 200  # counted with the model's own tokenizer
    c.rate("down")
    event = read_events(tmp_path)[-1]
    assert event["run"] == str(tiny_run.resolve()) and event["backend"] == "local"
    assert event["model"] == tiny_run.name
    assert c.regenerate() == c.history()[-1]["content"]


def test_worker_stop_ends_the_process(tiny_run, local):
    greedy(tiny_run, "Hello", local)
    pid = local.status()["pid"]
    assert worker_stop() is True
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
