"""The real Gradio app served on 127.0.0.1 for the attack tests, in this process and as
`python app.py` in a subprocess (a second app, with its own Gradio cache). Each test module
wraps these generators in its own module-scoped fixtures.

The in-process app is what `dragon.app(...).launch()` serves in a notebook; its profile has
small upload caps (1 MB a request, 2 MB a session) so the upload tests send a few MB, not GB.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest

from dragonfarm_core.auth.profiles import get_profile

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90
SMALL_CAPS = replace(get_profile("local"), max_upload_mb=1, max_session_upload_mb=2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    url: str
    port: int
    runs: Path
    app: object = None


def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The app launched as a notebook would, with DRAGONFARM_ALLOWED_HOSTS=env.example."""
    from ui.layout import build_app

    runs = tmp_path_factory.mktemp("runs")
    port = free_port()
    app = build_app(runs, SMALL_CAPS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRAGONFARM_ALLOWED_HOSTS", "env.example")
        app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield Served(f"http://127.0.0.1:{port}", port, runs, app)
    finally:
        app.close()


def wait_answering(url: str, proc: subprocess.Popen, log: Path) -> None:
    """Until the app at `url` answers 200; fails with its log's tail if it exits or is slow."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.3)


def second_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`python app.py --allowed-hosts flag.example` in a subprocess, as a person starts it.

    It inherits this process's environment, GRADIO_TEMP_DIR included (a parent app's cache)."""
    runs = tmp_path_factory.mktemp("runs-second")
    log = runs.parent / "second-app.log"
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    env.pop("DRAGONFARM_ALLOWED_HOSTS", None)
    argv = [sys.executable, "app.py", "--runs-dir", str(runs), "--port", str(port),
            "--allowed-hosts", "flag.example"]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(url, proc, log)
        yield Served(url, port, runs)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
