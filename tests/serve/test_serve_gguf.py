"""`dragonfarm serve model.gguf` against the OpenAI protocol (slow; needs llama.cpp: gguf).

A real `python -m dragonfarm_core.serve.server` process serves the bundled model's f16 GGUF
through llama.cpp's llama-server; the official `openai` client talks to it. Covered (issue 40
items 5 and 9 for a GGUF): a prompt past `--ctx` is a 400 context_length_exceeded, counted by
llama-server's own template and tokenizer before the request takes its turn (it was a 500 from
llama-server), a reply is fitted in what the context leaves, and SIGTERM ends serve with its
llama-server and removes the server's log. These fail, never skip, without llama.cpp.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import psutil
import pytest
from openai import OpenAI

from dragonfarm_core.llamacpp.server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.gguf]
ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny-support"
CTX = 256
QUESTION = [{"role": "user", "content": "My thermostat keeps dropping off Wi-Fi."}]


@pytest.fixture(scope="module")
def gguf(bundled_gguf: Path) -> Path:
    return bundled_gguf  # tests/conftest.py: made once a session


@contextmanager
def serving(gguf: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`dragonfarm serve` on the GGUF with a context of CTX tokens: (the process, its /v1 URL)."""
    port, log = free_port(), tmp_path / "serve.log"
    argv = [sys.executable, "-m", "dragonfarm_core.serve.server", str(gguf), "--name", NAME,
            "--port", str(port), "--ctx", str(CTX)]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"serve did not come up:\n{log.read_text()}"
            time.sleep(0.2)
        yield proc, url
    finally:
        proc.terminate()
        proc.wait(60)


def test_a_prompt_past_a_ggufs_context_is_a_400_and_a_reply_fits_what_is_left(gguf, tmp_path):
    with serving(gguf, tmp_path) as (proc, url):
        client = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
        huge = [{"role": "user", "content": "word " * 5000}]
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=NAME, messages=huge)
        assert caught.value.code == "context_length_exceeded"
        assert f"maximum context length is {CTX} tokens" in caught.value.message
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=NAME, messages=huge, stream=True)
        assert caught.value.code == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=NAME, messages=QUESTION, max_tokens=CTX)
        assert caught.value.code == "context_length_exceeded"
        # The server goes on: a request that fits is answered, counted as it was checked.
        reply = client.chat.completions.create(
            model=NAME, messages=QUESTION, max_tokens=8, temperature=0
        )
        assert reply.choices[0].message.content
        assert 0 < reply.usage.prompt_tokens < CTX and reply.usage.completion_tokens <= 8
        fits = [{"role": "user", "content": "Wi-Fi " * 60}]
        near = client.chat.completions.create(model=NAME, messages=fits, temperature=0)
        assert near.usage.prompt_tokens + near.usage.completion_tokens <= CTX


def test_sigterm_stops_serve_and_its_llama_server_and_removes_the_log(gguf, tmp_path):
    log = gguf.parent / f".{gguf.name}.serve.log"
    with serving(gguf, tmp_path) as (proc, url):
        OpenAI(base_url=url, api_key="none", max_retries=0).chat.completions.create(
            model=NAME, messages=QUESTION, max_tokens=2
        )
        servers = psutil.Process(proc.pid).children(recursive=True)
        assert any("llama-server" in " ".join(p.cmdline()) for p in servers)
        assert log.exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        gone, alive = psutil.wait_procs(servers, timeout=10)
        assert alive == [], [p.cmdline() for p in alive]
        assert not log.exists()
