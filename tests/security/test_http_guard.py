"""A foreign page cannot drive the Gradio app: DNS rebinding (a foreign Host) and a foreign
Origin's POST are refused with a message that says how to allow a name on purpose, while the
app's own page, loopback names and the names added by flag or variable still work.

The app is the real server on 127.0.0.1 (tests/security/conftest.py); the rules themselves
(dragonfarm_core.auth.http_guard) are checked directly at the end.
"""

from __future__ import annotations

import httpx
import pytest
import served_apps
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from dragonfarm_core.auth import http_guard


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    yield from served_apps.app_server(tmp_path_factory)


@pytest.fixture(scope="module")
def second_app(tmp_path_factory):
    yield from served_apps.second_app(tmp_path_factory)


def upload(url: str, **headers: str) -> httpx.Response:
    """A state-changing call every Gradio app has: it writes the file into the app's cache."""
    files = [("files", ("note.txt", b"hello"))]
    return httpx.post(f"{url}/gradio_api/upload", files=files, headers=headers, timeout=30)


def test_a_rebinding_host_is_refused_and_told_how_to_allow_it(app_server):
    for path in ("/", "/gradio_api/info", "/config"):
        r = httpx.get(app_server.url + path, headers={"Host": f"evil.example:{app_server.port}"})
        assert r.status_code == 400, (path, r.status_code)
        message = r.json()["error"]["message"]
        assert "evil.example" in message and "--allowed-hosts evil.example" in message
        assert "DRAGONFARM_ALLOWED_HOSTS" in message
    assert upload(app_server.url, Host="evil.example:7860").status_code == 400


def test_a_foreign_origin_cannot_post(app_server):
    for origin in ("http://evil.example", "http://evil.example:7860", "null",
                   "http://127.0.0.1.evil.example", "file://"):  # fmt: skip
        r = upload(app_server.url, Origin=origin)
        assert r.status_code == 403, (origin, r.status_code)
        assert r.json()["error"]["code"] == "origin_not_allowed"
    assert (
        'the page at "http://evil.example"'
        in upload(app_server.url, Origin="http://evil.example").json()["error"]["message"]
    )


def test_the_apps_own_page_and_loopback_names_still_work(app_server):
    assert httpx.get(app_server.url).status_code == 200
    assert upload(app_server.url, Origin=app_server.url).status_code == 200
    for name in ("localhost", "127.0.0.1"):
        host = f"{name}:{app_server.port}"
        assert httpx.get(app_server.url, headers={"Host": host}).status_code == 200
        assert upload(app_server.url, Host=host, Origin=f"http://{host}").status_code == 200
    assert upload(app_server.url).status_code == 200  # no Origin: a script, not a page


def test_a_name_from_the_environment_is_answered_to(app_server):
    host = f"env.example:{app_server.port}"
    assert httpx.get(app_server.url, headers={"Host": host}).status_code == 200
    assert upload(app_server.url, Host=host, Origin="https://env.example").status_code == 200


@pytest.mark.slow
def test_a_name_from_the_flag_is_answered_to(second_app):
    host = f"flag.example:{second_app.port}"
    assert httpx.get(second_app.url, headers={"Host": host}).status_code == 200
    assert upload(second_app.url, Host=host, Origin=f"http://{host}").status_code == 200
    assert upload(second_app.url, Origin="http://evil.example").status_code == 403
    r = httpx.get(second_app.url, headers={"Host": "other.example"})
    assert r.status_code == 400 and "flag.example" in r.json()["error"]["message"]


# The rules, directly.


def test_allowed_hosts_are_loopback_the_bound_host_and_the_added_names(monkeypatch):
    monkeypatch.delenv(http_guard.ALLOWED_HOSTS_ENV, raising=False)
    assert http_guard.allowed_hosts() == ["127.0.0.1", "localhost", "[::1]"]
    assert http_guard.allowed_hosts("0.0.0.0") == http_guard.allowed_hosts("::")
    assert http_guard.allowed_hosts("0.0.0.0") == ["127.0.0.1", "localhost", "[::1]"]
    assert http_guard.allowed_hosts("192.168.1.5")[-1] == "192.168.1.5"
    monkeypatch.setenv(http_guard.ALLOWED_HOSTS_ENV, " Lab.Example.com , *.corp.example")
    assert http_guard.allowed_hosts("::1", "fe80::1, box") == [
        "127.0.0.1", "localhost", "[::1]", "[fe80::1]", "box", "lab.example.com",
        "*.corp.example",
    ]  # fmt: skip


@pytest.mark.parametrize("bad", ["http://lab.example", "lab.example:8080", "*lab", "a/b", "x y"])
def test_a_malformed_allowed_host_is_refused_with_what_to_give(bad):
    with pytest.raises(ValueError, match="without scheme or port"):
        http_guard.allowed_hosts(None, bad)


def test_origin_rules():
    hosts = http_guard.allowed_hosts(None, "*.corp.example")
    assert http_guard.origin_allowed("http://[::1]:7860", hosts)
    assert http_guard.origin_allowed("https://localhost", hosts)
    assert http_guard.origin_allowed("http://a.corp.example:1", hosts)
    for origin in ("null", "ftp://localhost", "http://corp.example", "http://localhost.evil",
                   "http://a.corp.example.evil", "", "http://[::1"):  # fmt: skip
        assert not http_guard.origin_allowed(origin, hosts), origin


def test_a_foreign_websocket_is_closed_before_it_opens():
    async def echo(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text("open")
        await ws.close()

    app = Starlette(
        routes=[Route("/", lambda r: PlainTextResponse("ok")), WebSocketRoute("/ws", echo)],
        middleware=http_guard.guard_middleware(["testserver"]),
    )
    client = TestClient(app)
    with client.websocket_connect("/ws", headers={"Origin": "http://testserver"}) as ws:
        assert ws.receive_text() == "open"
    with (
        pytest.raises(WebSocketDisconnect),
        client.websocket_connect("/ws", headers={"Origin": "http://evil.example"}),
    ):
        pass
    assert client.get("/", headers={"Host": "evil.example"}).status_code == 400


def test_app_py_and_dragonfarm_app_take_allowed_hosts(monkeypatch):
    import app as app_py
    from dragonfarm_core.cli import commands as cli
    from ui import layout

    seen = []
    monkeypatch.setattr(layout, "launch", lambda **kw: seen.append(kw["allowed_hosts"]))
    monkeypatch.setattr(app_py, "launch", layout.launch)
    assert cli.main(["app", "--allowed-hosts", "lab.example,box"]) == 0
    monkeypatch.setattr("sys.argv", ["app.py", "--allowed-hosts", "lab.example"])
    app_py.main()
    assert seen == ["lab.example,box", "lab.example"]
