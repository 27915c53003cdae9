"""The disk uploads take, as a whole: a new cookie does not reset it, Gradio's cache is cleared
of old files, and copies no run refers to are removed (upload_disk.py).

Through the real app served on 127.0.0.1 (as tests/security/test_uploads.py), with caps of a
few MB so the uploads are small.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from served_apps import free_port

from dragonfarm_core.auth import upload_disk
from dragonfarm_core.auth.profiles import get_profile
from ui import layout

MB = 1024 * 1024


def files(*sizes_mb: float) -> list[tuple[str, tuple[str, bytes, str]]]:
    """Files of these sizes, each with new content (Gradio keeps one copy of equal files)."""
    return [("files", (f"f{i}.csv", os.urandom(16) + b"x" * int(s * MB), "text/csv"))
            for i, s in enumerate(sizes_mb)]  # fmt: skip


@contextmanager
def served(runs: Path, **caps: int) -> Iterator[tuple[str, layout.DragonfarmApp]]:
    profile = replace(get_profile("local"), **caps)
    app = layout.build_app(runs, profile)
    port = free_port()
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        app.close()


def fresh_session_upload(url: str, size_mb: float) -> httpx.Response:
    """A browser that never came before: it loads the page (a new cookie), then uploads."""
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.get("/").status_code == 200
        return client.post("/gradio_api/upload", files=files(size_mb))


@pytest.mark.slow
def test_fresh_cookies_do_not_reset_the_total_uploads_may_take(tmp_path):
    runs = tmp_path / "runs"
    (runs / "uploads").mkdir(parents=True)
    (runs / "uploads" / "earlier.csv").write_bytes(b"y" * MB)  # copies count too
    probe = layout.build_app(runs, get_profile("local"))
    total_mb = -(-probe.uploads_in_use() // MB) + 3  # what is there now, and 3 MB more
    caps = {"max_upload_mb": 1, "max_session_upload_mb": 2, "max_total_upload_mb": total_mb}
    with served(runs, **caps) as (url, _):
        answers = [fresh_session_upload(url, 0.9) for _ in range(6)]
    codes = [r.status_code for r in answers]
    assert codes[:2] == [200, 200] and 413 in codes, codes
    refused = next(r for r in answers if r.status_code == 413)
    assert f"more than the {total_mb} MB it keeps for all uploads together" in refused.text
    assert f"max_total_upload_mb={total_mb}" in refused.text
    assert all(r.status_code == 413 for r in answers[codes.index(413) :])


@pytest.mark.slow
def test_gradio_cache_is_cleared_of_old_uploads(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "CACHE_CLEANING", (1, 1))  # every second, files over 1 s old
    with served(tmp_path / "runs") as (url, _):
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.get("/").status_code == 200
            [path] = client.post("/gradio_api/upload", files=files(0.01)).json()
        assert Path(path).is_file()
        deadline = time.monotonic() + 30
        while Path(path).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(path).exists(), "Gradio's cache kept an upload past its age"


def _old(path: Path, text: str = "q,a\n1,2\n") -> Path:
    path.write_text(text)
    two_days_ago = time.time() - 2 * 86400
    os.utime(path, (two_days_ago, two_days_ago))
    return path


def test_only_copies_no_run_refers_to_and_a_day_old_are_swept(tmp_path):
    runs = tmp_path / "runs"
    uploads = runs / "uploads"
    uploads.mkdir(parents=True)
    used, archived = _old(uploads / "used.csv"), _old(uploads / "arch.csv")
    piped = _old(uploads / "piped.csv")
    stale, recent = _old(uploads / "stale.csv"), uploads / "recent.csv"
    recent.write_text("q,a\n")
    for folder, source in ((runs / "run-1", used), (runs / "archived" / "run-0", archived)):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"dataset": {"source": str(source)}}))
    (runs / "pipelines").mkdir()
    (runs / "pipelines" / "p.json").write_text(json.dumps({"steps": [{"data": str(piped)}]}))
    (runs / "run-2").mkdir()
    (runs / "run-2" / "config.json").write_text('{"dataset": {"sou')  # torn: names nothing
    assert upload_disk.sweep(runs) == [stale]
    assert {p.name for p in uploads.iterdir()} == {"used.csv", "arch.csv", "piped.csv",
                                                   "recent.csv"}  # fmt: skip
    in_use = upload_disk.disk_in_use(upload_disk.upload_folders(runs))
    assert in_use == sum(p.stat().st_size for p in uploads.iterdir())
