"""Uploads are capped per request and per browser session, and each app keeps them in a
Gradio cache of its own, so one app never serves another app's upload.

The in-process app's profile takes 1 MB a request and 2 MB a session (served_apps.SMALL_CAPS);
every file here is under Gradio's own per-file cap (1 MB), so only the new caps refuse them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import served_apps

from ui import layout

MB = 1024 * 1024


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    yield from served_apps.app_server(tmp_path_factory)


@pytest.fixture(scope="module")
def second_app(tmp_path_factory):
    yield from served_apps.second_app(tmp_path_factory)


def files(*sizes_mb: float) -> list:
    return [("files", (f"part{i}.csv", b"x" * int(s * MB))) for i, s in enumerate(sizes_mb)]


@contextmanager
def session(url: str) -> Iterator[httpx.Client]:
    """A browser-like client: it loads the page (and so gets its session cookie) first."""
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.get("/").status_code == 200
        yield client


def cache_files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def test_one_request_over_the_cap_is_refused_though_each_file_fits(app_server):
    with session(app_server.url) as client:
        assert client.post("/gradio_api/upload", files=files(0.6)).status_code == 200
        r = client.post("/gradio_api/upload", files=files(0.6, 0.6))  # 2 x 600 MB, scaled
        assert r.status_code == 413
        assert "at most 1 MB in one request" in r.text and "max_upload_mb=1" in r.text


def test_a_body_without_content_length_is_counted_as_it_streams(app_server):
    cache = layout.gradio_temp_dir()
    before = cache_files(cache)
    boundary = "dragonfarmboundary"

    def chunked():  # no Content-Length: httpx sends Transfer-Encoding: chunked
        for i in range(2):  # two files of 0.75 MB, in 64 KB pieces
            yield (
                f'--{boundary}\r\nContent-Disposition: form-data; name="files"; '
                f'filename="big{i}.csv"\r\nContent-Type: text/csv\r\n\r\n'
            ).encode()
            for _ in range(12):
                yield b"x" * (64 * 1024)
            yield b"\r\n"
        yield f"--{boundary}--\r\n".encode()

    with session(app_server.url) as client:
        r = client.post(
            "/gradio_api/upload",
            content=chunked(),
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
    assert r.status_code == 413 and "in one request" in r.text
    assert cache_files(cache) == before  # Gradio's half-written temp file was removed


def test_a_session_over_its_total_is_refused_and_a_new_session_is_not(app_server):
    with session(app_server.url) as client:
        for _ in range(2):
            assert client.post("/gradio_api/upload", files=files(0.9)).status_code == 200
        r = client.post("/gradio_api/upload", files=files(0.9))
        assert r.status_code == 413
        assert "This browser session has sent" in r.text and "the 2 MB one session" in r.text
    with session(app_server.url) as other:
        assert other.post("/gradio_api/upload", files=files(0.9)).status_code == 200


def test_a_script_without_the_cookie_is_counted_by_its_address(app_server):
    # Each call is a fresh client with no cookie: dropping it must not reset the count.
    statuses = [
        httpx.post(f"{app_server.url}/gradio_api/upload", files=files(0.9), timeout=60).status_code
        for _ in range(3)
    ]
    assert statuses == [200, 200, 413]


def test_the_app_keeps_uploads_in_its_own_cache(app_server):
    cache = layout.gradio_temp_dir()
    assert os.environ["GRADIO_TEMP_DIR"] == str(cache)
    assert cache.name.startswith(layout.TEMP_PREFIX) and (cache.stat().st_mode & 0o077) == 0
    assert cache != Path(tempfile.gettempdir()) / "gradio"
    assert Path(app_server.app.server_app.uploaded_file_dir).resolve() == cache
    with session(app_server.url) as client:
        [path] = client.post("/gradio_api/upload", files=files(0.01)).json()
    assert Path(path).resolve().is_relative_to(cache)


@pytest.mark.slow
def test_an_app_does_not_serve_another_apps_upload(app_server, second_app):
    with session(second_app.url) as client:
        [theirs] = client.post("/gradio_api/upload", files=files(0.01)).json()
        assert client.get(f"/gradio_api/file={theirs}").status_code == 200
    with session(app_server.url) as client:
        assert client.get(f"/gradio_api/file={theirs}").status_code in (403, 404)
    assert not Path(theirs).resolve().is_relative_to(layout.gradio_temp_dir())
