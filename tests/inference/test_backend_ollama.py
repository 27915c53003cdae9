"""The Ollama backend against a fake server speaking Ollama's /api/chat (JSON and NDJSON)."""

import pytest
from inference_fakes import REPLY, REPLY_PIECES, FakeOllama, free_port

from dragonfarm_core.inference import InferenceError, InferenceTimeout, Sampling, backend_ollama

MESSAGES = [{"role": "user", "content": "Hi"}]


def test_reply_and_options_sent():
    with FakeOllama("support:latest") as server:
        reply = backend_ollama("support:latest", url=server.url).chat(
            None, MESSAGES, Sampling(33, 0.0, 0.5)
        )
        body = server.requests[-1]["body"]
    assert reply == REPLY
    assert server.requests[-1]["path"] == "/api/chat" and body["messages"] == MESSAGES
    assert body["options"] == {"num_predict": 33, "temperature": 0.0, "top_p": 0.5}
    assert body["stream"] is False


def test_streaming_reads_ndjson_pieces():
    pieces = []
    with FakeOllama("m") as server:
        reply = backend_ollama("m", url=server.url).chat(None, MESSAGES, Sampling(), pieces.append)
        assert server.requests[-1]["body"]["stream"] is True
    assert pieces == REPLY_PIECES and reply == REPLY


def test_generate_keeps_the_order():
    with FakeOllama("m") as server:
        assert (
            backend_ollama("m", url=server.url).generate(None, [MESSAGES] * 3, Sampling())
            == [REPLY] * 3
        )


def test_not_running_is_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(InferenceError, match=f"Ollama is not running at {url}"):
        backend_ollama("m", url=url).chat(None, MESSAGES, Sampling())
    with pytest.raises(InferenceError, match="Ollama is not running"):
        backend_ollama("m", url=url).chat(None, MESSAGES, Sampling(), on_token=print)


@pytest.mark.parametrize("stream", [False, True])
def test_missing_model_is_a_clear_error(stream):
    with (
        FakeOllama("other") as server,
        pytest.raises(
            InferenceError, match="has no model 'support-0.5b'.*ollama pull support-0.5b"
        ),
    ):
        backend_ollama("support-0.5b", url=server.url).chat(
            None, MESSAGES, Sampling(), on_token=(lambda t: None) if stream else None
        )


def test_server_error_quotes_ollama():
    with (
        FakeOllama("m", mode="500") as server,
        pytest.raises(InferenceError, match="HTTP 500: llama runner process has terminated"),
    ):
        backend_ollama("m", url=server.url).chat(None, MESSAGES, Sampling())


def test_a_hanging_ollama_times_out():
    with FakeOllama("m", mode="hang") as server, pytest.raises(InferenceTimeout):
        backend_ollama("m", url=server.url, timeout=0.5).chat(None, MESSAGES, Sampling())


def test_repr_and_checks():
    assert repr(backend_ollama("m")) == "backend_ollama(model='m', url='http://localhost:11434')"
    with pytest.raises(ValueError, match="Ollama model"):
        backend_ollama("")
