"""No foreign page can use a GGUF that dragonfarm serves through llama.cpp.

llama-server answers every Origin (CORS `*`) and every Host, so a page the user visits could
scan 127.0.0.1 for its port and talk to the model. Each LlamaServer gets a fresh random API key
in its environment (not on its command line, which every local user can read) with the rest of
its environment allow-listed; requests without the key get 401, whatever their Origin. The API
in front of it (`dragonfarm serve x.gguf`) refuses a rebinding Host and a foreign Origin, and the
official openai client still gets replies through it.

Slow: the bundled model is converted to a real f16 GGUF and served by the real llama-server
(built by scripts/build_llama_cpp.py; these tests fail, never skip, without it).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil
import pytest
from openai import OpenAI

from dragonfarm_core.auth import http_guard
from dragonfarm_core.llamacpp import location as llama_cpp
from dragonfarm_core.llamacpp.server import LlamaServer
from dragonfarm_core.serve import server as serve
from tests.serve.test_serve import serve_in_thread

pytestmark = [pytest.mark.slow, pytest.mark.gguf]  # gguf: needs the llama.cpp build

CANARY = "hf_canary_llama_server_0123456789"


@pytest.fixture(scope="module")
def gguf(bundled_gguf: Path) -> Path:
    return bundled_gguf  # tests/conftest.py: made once a session


@pytest.fixture(scope="module")
def llama(gguf):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TOKEN", CANARY)
        server = LlamaServer.start(llama_cpp.find_llama_cpp(), gguf, threads=1, ctx=512)
    yield server
    server.stop()


def test_llama_server_refuses_a_page_that_does_not_know_its_key(llama):
    body = {"prompt": "Hi", "n_predict": 4}
    for headers in ({}, {"Origin": "http://evil.example"}, {"Authorization": "Bearer guess"}):
        r = httpx.post(f"{llama.url}/completion", json=body, headers=headers, timeout=30)
        assert r.status_code == 401, headers
        r = httpx.post(f"{llama.url}/v1/chat/completions", headers=headers, timeout=30,
                       json={"messages": [{"role": "user", "content": "Hi"}]})  # fmt: skip
        assert r.status_code == 401, headers
    assert httpx.get(f"{llama.url}/props", timeout=30).status_code == 401
    # dragonfarm's own requests carry the key
    assert llama.props()["chat_template"]
    assert llama.tokenize("Hi")


def test_the_key_is_not_on_the_command_line_and_secrets_stay_out(llama):
    process = psutil.Process(llama.process.pid)
    assert llama.api_key and len(llama.api_key) >= 32
    assert not any(llama.api_key in arg for arg in process.cmdline())
    environ = process.environ()
    assert environ["LLAMA_API_KEY"] == llama.api_key
    assert "HF_TOKEN" not in environ and CANARY not in " ".join(environ.values())


def test_serve_a_gguf_refuses_foreign_hosts_and_origins_and_answers_its_client(gguf):
    llama, backend, name = serve.gguf_backend(str(gguf), None, 512)
    try:
        api = serve.build_api(str(gguf), backend=backend, name=name,
                              allowed_hosts=http_guard.allowed_hosts("127.0.0.1"))  # fmt: skip
        server, thread, url = serve_in_thread(api)
        port = server.servers[0].sockets[0].getsockname()[1]
        chat = {"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
        try:
            r = httpx.post(f"{url}/chat/completions", json=chat, timeout=60,
                           headers={"Host": f"evil.example:{port}"})  # fmt: skip
            assert r.status_code == 400
            r = httpx.post(f"{url}/chat/completions", json=chat, timeout=60,
                           headers={"Origin": "http://evil.example"})  # fmt: skip
            assert r.status_code == 403
            client = OpenAI(base_url=url, api_key="none", max_retries=0)
            reply = client.chat.completions.create(model=name, messages=chat["messages"],
                                                   max_tokens=8)  # fmt: skip
            assert reply.choices[0].message.content is not None
        finally:
            server.should_exit = True
            thread.join(10)
    finally:
        llama.stop()
