"""The OpenAI-compatible server backend against a fake server speaking the same wire format."""

import time

import pytest
from inference_fakes import REPLY, REPLY_PIECES, FakeOpenAI, free_port

from dragonfarm_core.inference import InferenceError, InferenceTimeout, Sampling, backend_server

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
SECRET = "sk-test-very-secret-123"


def test_reply_and_the_request_it_sent():
    with FakeOpenAI("support-0.5b") as server:
        b = backend_server(server.url, "support-0.5b")
        assert b.chat(None, MESSAGES, Sampling(40, 0.2, 0.8)) == REPLY
        body = server.requests[-1]["body"]
    assert body["model"] == "support-0.5b" and body["messages"] == MESSAGES
    assert (body["max_tokens"], body["temperature"], body["top_p"]) == (40, 0.2, 0.8)
    assert not body.get("stream")


def test_streaming_sends_each_piece():
    pieces = []
    with FakeOpenAI("m") as server:
        reply = backend_server(server.url, "m").chat(None, MESSAGES, Sampling(), pieces.append)
        assert server.requests[-1]["body"]["stream"] is True
    assert pieces == REPLY_PIECES and reply == REPLY


def test_generate_answers_every_conversation_in_order():
    with FakeOpenAI("m") as server:
        replies = backend_server(server.url, "m").generate(None, [MESSAGES] * 5, Sampling())
        assert len(server.requests) == 5
    assert replies == [REPLY] * 5


def test_api_key_and_headers_are_sent_but_never_shown():
    with FakeOpenAI("m", api_key=SECRET) as server:
        b = backend_server(server.url, "m", api_key=SECRET, headers={"X-Team": "team-token"})
        assert b.chat(None, MESSAGES, Sampling()) == REPLY
        headers = server.requests[-1]["headers"]
    assert headers["authorization"] == f"Bearer {SECRET}" and headers["x-team"] == "team-token"
    shown = repr(b)
    assert SECRET not in shown and "team-token" not in shown and "'***'" in shown


def test_401_is_clear_and_hides_the_key():
    with FakeOpenAI("m", api_key="the-right-key") as server:
        b = backend_server(server.url, "m", api_key=SECRET)
        with pytest.raises(InferenceError) as caught:
            b.chat(None, MESSAGES, Sampling())
    message = str(caught.value)
    assert "401" in message and "api_key" in message
    assert SECRET not in message and "***" in message  # the server echoed it; we scrubbed it


def test_404_names_the_model():
    with FakeOpenAI("real-model") as server, pytest.raises(InferenceError, match="no model 'nope'"):
        backend_server(server.url, "nope").chat(None, MESSAGES, Sampling())


def test_500_says_the_server_failed():
    with FakeOpenAI("m", mode="500") as server, pytest.raises(InferenceError, match="HTTP 500"):
        backend_server(server.url, "m").chat(None, MESSAGES, Sampling())


def test_a_hanging_server_times_out():
    with FakeOpenAI("m", mode="hang") as server:
        started = time.monotonic()
        with pytest.raises(InferenceTimeout, match="did not answer within 0.5 s"):
            backend_server(server.url, "m", timeout=0.5).chat(None, MESSAGES, Sampling())
        assert time.monotonic() - started < 4


def test_nothing_listening_is_a_connection_error():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(InferenceError, match="Could not connect"):
        backend_server(url, "m").chat(None, MESSAGES, Sampling())


@pytest.mark.parametrize("url", ["localhost:8000/v1", "http://localhost:8000", ""])
def test_url_must_be_http_and_end_in_v1(url):
    with pytest.raises(ValueError, match="ending in /v1"):
        backend_server(url, "m")
