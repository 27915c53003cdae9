"""`python -m dragonfarm_core.serve RUN` over the real worker, through two clients (slow)."""

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from inference_fakes import free_port
from openai import OpenAI

from dragonfarm_core.conversation.generation import generate
from dragonfarm_core.inference import backend_local, backend_server, worker_stop

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def wait_until_up(url, proc, log):
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "dragonfarm serve did not come up"
        time.sleep(0.2)


@pytest.fixture
def served_run(tiny_run, tmp_path):
    port, log = free_port(), tmp_path / "serve.log"
    argv = [
        sys.executable,
        "-m",
        "dragonfarm_core.serve.server",
        str(tiny_run),
        "--port",
        str(port),
    ]
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_up(url, proc, log)
        yield url
    finally:
        proc.terminate()  # uvicorn shuts down cleanly, and its worker with it
        proc.wait(30)


def test_serve_answers_openai_clients_and_the_server_backend(served_run, tiny_run):
    client = OpenAI(base_url=served_run, api_key="none")
    assert [m.id for m in client.models.list()] == [tiny_run.name]
    messages = [{"role": "user", "content": "My thermostat keeps dropping off Wi-Fi."}]
    plain = client.chat.completions.create(
        model=tiny_run.name, messages=messages, max_tokens=12, temperature=0
    )
    streamed = client.chat.completions.create(
        model=tiny_run.name, messages=messages, max_tokens=12, temperature=0, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed)
    assert text.strip() == plain.choices[0].message.content

    remote = backend_server(served_run, tiny_run.name)
    served = generate(
        tiny_run, messages[0]["content"], max_new_tokens=12, temperature=0, backend=remote
    )
    try:
        here = generate(
            tiny_run,
            messages[0]["content"],
            max_new_tokens=12,
            temperature=0,
            backend=backend_local(),
        )
    finally:
        worker_stop()
    assert served == here == plain.choices[0].message.content
