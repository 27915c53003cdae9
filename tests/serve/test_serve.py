"""`dragonfarm serve`: the OpenAI-compatible API, driven by the official openai client.

The server runs in a thread on 127.0.0.1 with a scripted backend in place of the worker; the
same API over the real worker is tested in tests/inference/test_serve_local.py (slow).
"""

import threading
import time

import openai
import pytest
import uvicorn
from openai import OpenAI

from dragonfarm_core.inference import InferenceError
from dragonfarm_core.inference.protocol import Completion
from dragonfarm_core.serve.server import build_api, main

PIECES = ["Hello", " from", " the", " model."]


class Scripted:
    """Streams PIECES; remembers what it was asked."""

    name = "local"
    model = None

    def __init__(self):
        self.calls = []

    def chat(self, model, messages, sampling, on_token=None):
        return self.complete(model, messages, sampling, on_token).text

    def complete(self, model, messages, sampling, on_token=None):
        self.calls.append((model, messages, sampling))
        if messages[-1]["content"] == "fail":
            raise InferenceError("The local worker could not answer: boom")
        for piece in PIECES:
            if on_token:
                on_token(piece)
        return Completion("".join(PIECES), "stop", len(messages), len(PIECES))

    def generate(self, model, conversations, sampling):
        return [self.chat(model, c, sampling) for c in conversations]


def serve_in_thread(app):
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("served") / "tiny"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    backend = Scripted()
    server, thread, url = serve_in_thread(
        build_api(str(model_dir), backend=backend, name="tiny-support")
    )
    yield OpenAI(base_url=url, api_key="none", max_retries=0), backend
    server.should_exit = True
    thread.join(10)


def test_models_lists_the_served_model(served):
    client, _ = served
    assert [m.id for m in client.models.list()] == ["tiny-support"]
    assert client.models.retrieve("tiny-support").owned_by == "dragonfarm"


def test_chat_completion(served):
    client, backend = served
    response = client.chat.completions.create(
        model="tiny-support",
        max_tokens=17,
        temperature=0,
        top_p=0.5,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    )
    assert response.choices[0].message.content == "Hello from the model."
    assert response.choices[0].finish_reason == "stop" and response.model == "tiny-support"
    spec, messages, sampling = backend.calls[-1]
    assert spec.base.endswith("tiny") and messages[0]["role"] == "system"
    assert (sampling.max_new_tokens, sampling.temperature, sampling.top_p) == (17, 0.0, 0.5)


def test_streamed_chat_completion(served):
    client, _ = served
    stream = client.chat.completions.create(
        model="tiny-support", stream=True, messages=[{"role": "user", "content": "Hi"}]
    )
    chunks = list(stream)
    assert [c.choices[0].delta.content for c in chunks[1:-1]] == PIECES
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_content_parts_and_developer_role_are_understood(served):
    client, backend = served
    client.chat.completions.create(
        model="tiny-support",
        messages=[
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}],
            },
        ],
    )
    assert backend.calls[-1][1] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
    ]


def test_unknown_model_is_404(served):
    client, _ = served
    with pytest.raises(openai.NotFoundError, match="has 'tiny-support'"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])


def test_bad_messages_are_400(served):
    client, _ = served
    with pytest.raises(openai.BadRequestError, match="must end with a user turn"):
        client.chat.completions.create(
            model="tiny-support", messages=[{"role": "assistant", "content": "Hi"}]
        )
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        client.chat.completions.create(
            model="tiny-support", n=2, messages=[{"role": "user", "content": "Hi"}]
        )


def test_backend_failure_is_500_with_the_reason(served):
    client, _ = served
    with pytest.raises(openai.InternalServerError, match="boom"):
        client.chat.completions.create(
            model="tiny-support", messages=[{"role": "user", "content": "fail"}]
        )


def test_backend_failure_while_streaming_reaches_the_client(served):
    client, _ = served
    with pytest.raises(openai.APIError, match="boom"):
        list(
            client.chat.completions.create(
                model="tiny-support", stream=True, messages=[{"role": "user", "content": "fail"}]
            )
        )


def test_main_refuses_what_it_cannot_serve(tmp_path, capsys):
    assert main([str(tmp_path / "missing-run")]) == 2
    assert "neither a local folder" in capsys.readouterr().err
