"""`dragonfarm serve` lets no foreign page in and no request run away.

A rebinding Host and a foreign Origin are refused; a text/plain body (which a page may send
without a CORS preflight) is refused unread; max_tokens past the model's context length, or not
a whole number, is refused with the limit; the official openai client, loopback names and the
names added by --allowed-hosts / DRAGONFARM_ALLOWED_HOSTS still work. The server runs in a
thread with the scripted backend of tests/serve/test_serve.py.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai import OpenAI

from dragonfarm_core.auth import http_guard
from dragonfarm_core.serve.server import build_api, main
from tests.serve.test_serve import Scripted, serve_in_thread

CONTEXT = 2048
HI = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("served") / "tiny"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": CONTEXT}))
    return path


@pytest.fixture(scope="module")
def served(model_dir):
    """(base url without /v1, port, backend) of `serve` with --allowed-hosts api.example."""
    backend = Scripted()
    hosts = http_guard.allowed_hosts("127.0.0.1", "api.example")
    server, thread, url = serve_in_thread(
        build_api(str(model_dir), backend=backend, name="tiny", allowed_hosts=hosts)
    )
    yield url.removesuffix("/v1"), server.servers[0].sockets[0].getsockname()[1], backend
    server.should_exit = True
    thread.join(10)


def post(url: str, body: object = HI, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def test_a_rebinding_host_is_refused(served):
    url, port, backend = served
    calls = len(backend.calls)
    r = httpx.get(f"{url}/v1/models", headers={"Host": f"evil.example:{port}"})
    assert r.status_code == 400
    assert "--allowed-hosts evil.example" in r.json()["error"]["message"]
    assert post(url, Host=f"evil.example:{port}").status_code == 400
    assert len(backend.calls) == calls


def test_a_foreign_origin_cannot_post(served):
    url, _, backend = served
    calls = len(backend.calls)
    r = post(url, Origin="http://evil.example")
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    assert len(backend.calls) == calls


def test_loopback_same_origin_and_added_names_work(served):
    url, port, _ = served
    assert post(url, Origin=url).status_code == 200
    for name in ("localhost", "api.example"):
        host = f"{name}:{port}"
        assert post(url, Host=host, Origin=f"https://{name}").status_code == 200
        assert httpx.get(f"{url}/v1/models", headers={"Host": host}).status_code == 200


def test_a_name_from_the_environment_is_answered_to(model_dir, monkeypatch):
    monkeypatch.setenv(http_guard.ALLOWED_HOSTS_ENV, "env.example")
    server, thread, url = serve_in_thread(build_api(str(model_dir), backend=Scripted()))
    try:
        r = httpx.get(f"{url}/models", headers={"Host": "env.example"})
        assert r.status_code == 200
        assert httpx.get(f"{url}/models", headers={"Host": "api.example"}).status_code == 400
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_text_plain_body_is_refused_unread(served):
    url, _, backend = served
    calls = len(backend.calls)
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        r = httpx.post(
            f"{url}/v1/chat/completions", content=json.dumps(HI), headers=headers, timeout=30
        )
        assert r.status_code == 415, content_type
        assert "Content-Type: application/json" in r.json()["error"]["message"]
    assert len(backend.calls) == calls
    headers = {"Content-Type": "application/json; charset=utf-8"}
    r = httpx.post(f"{url}/v1/chat/completions", content=json.dumps(HI), headers=headers)
    assert r.status_code == 200


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_is_capped_at_the_models_context(served, key):
    url, _, backend = served
    calls = len(backend.calls)
    r = post(url, {**HI, key: 10**9})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert f"{key} = 1000000000 is too large" in message and f"is {CONTEXT} tokens" in message
    for bad in (CONTEXT + 1, 0, -5, 12.5, 1e9, "12", True):
        assert post(url, {**HI, key: bad}).status_code == 400, bad
    assert len(backend.calls) == calls
    assert post(url, {**HI, key: CONTEXT}).status_code == 200
    assert backend.calls[-1][2].max_new_tokens == CONTEXT


def test_unknown_context_falls_back_to_a_fixed_cap(tmp_path):
    from dragonfarm_core.serve.server import FALLBACK_CONTEXT

    (tmp_path / "config.json").write_text("{}")
    server, thread, url = serve_in_thread(build_api(str(tmp_path), backend=Scripted(), name="m"))
    try:
        body = {**HI, "model": "m", "max_tokens": FALLBACK_CONTEXT + 1}
        r = post(url.removesuffix("/v1"), body)
        assert r.status_code == 400 and "not known here" in r.json()["error"]["message"]
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_openai_client_still_works_and_reads_the_refusal(served):
    url, _, _ = served
    client = OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    reply = client.chat.completions.create(model="tiny", max_tokens=17, messages=HI["messages"])
    assert reply.choices[0].message.content == "Hello from the model."
    chunks = list(
        client.chat.completions.create(model="tiny", stream=True, messages=HI["messages"])
    )
    assert chunks[-1].choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError, match=f"context length is {CONTEXT}"):
        client.chat.completions.create(model="tiny", max_tokens=10**6, messages=HI["messages"])


def test_main_refuses_a_malformed_allowed_host(model_dir, capsys):
    assert main([str(model_dir), "--allowed-hosts", "http://lab.example:8080"]) == 2
    assert "without scheme or port" in capsys.readouterr().err
