"""The lab's folders and files are private to the server's account (item 20 of issue 40).

`python app.py --profile lab` is started in a subprocess over a lab root that an older version
left readable by every local account (0755 folders, 0644 files, as the default umask makes
them): once it answers, nothing under the root keeps a group or other permission, its process
runs under umask 077 (so its children, the trainers and the inference worker, make private
files too), and a user's folder made at their first call is 0700.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from gradio_client import Client
from served_apps import ROOT, free_port, wait_answering

from dragonfarm_core.auth import users

PASSWORD = "alice-password-123"


def _modes(root: Path) -> dict[str, int]:
    paths = [root, *root.rglob("*")]
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in paths}


@pytest.mark.slow
def test_the_lab_root_and_everything_made_in_it_are_private(tmp_path: Path):
    root = tmp_path / "lab"
    old = os.umask(0o022)  # what an older version, or the admin's shell, left behind
    try:
        users.add_user(root / users.USERS_FILE, "alice", PASSWORD)
        run = root / "users" / "bob" / "20260101-000000-bobs-run"
        (run / "adapter").mkdir(parents=True)
        (run / "train.log").write_text("step 1\n")
        (run / "adapter" / "adapter_model.safetensors").write_bytes(b"weights")
    finally:
        os.umask(old)
    assert stat.S_IMODE(run.stat().st_mode) == 0o755  # readable by everyone, before
    port, log = free_port(), tmp_path / "app.log"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "DRAGONFARM_PROFILE": "lab", "DRAGONFARM_LAB_ROOT": str(root)}  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=ROOT,
                                env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_answering(url, proc, log)
        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert "Umask:\t0077" in status  # inherited by every process the app starts
        # A password check takes a while (scrypt at n=2**17) on a busy machine.
        client = Client(url, auth=("alice", PASSWORD), verbose=False,
                        httpx_kwargs={"timeout": 120})  # fmt: skip
        assert "Active dataset" in client.predict(api_name="/active_markdown")
        modes = _modes(root)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "users/alice/uploads" in modes  # made by alice's first call, under the app's umask
    loose = {path: oct(mode) for path, mode in modes.items() if mode & 0o077}
    assert loose == {}
