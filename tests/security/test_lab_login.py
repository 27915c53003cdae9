"""The lab profile's login guards every route of the real app, served on 127.0.0.1.

Logged out, `/` is a bare login form (not Gradio's login page, which carries the whole API
description) and every other page, API, queue, upload and file route is a 401, including those
Gradio's own auth leaves open (FastAPI's /openapi.json, /monitoring/{key}, static files).
Logged in (the form's multipart post, or the urlencoded one Gradio's client sends), the app
answers. Wrong passwords lock the name (even the right password is then refused), sessions end
after their hours and when the user is removed, a foreign page cannot log anyone in, and with a
reverse proxy's user header nothing answers without it. Binding every interface needs login.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import served_apps

from dragonfarm_core import profiles, users
from dragonfarm_core.login_throttle import FIRST_LOCK_S, FREE_PER_NAME
from dragonfarm_core.profiles import Profile, get_profile

PASSWORD = {name: f"{name}-password-123" for name in ("alice", "bob", "carol", "dave")}
HEADER = "X-Forwarded-User"
# Logged out, each of these must be refused: pages, config, API description, queue, files.
GET_ROUTES = [
    "/config", "/gradio_api/info", "/gradio_api/openapi.json", "/openapi.json", "/theme.css",
    "/gradio_api/queue/data?session_hash=x", "/gradio_api/heartbeat/x", "/monitoring/x",
    "/gradio_api/upload_progress?upload_id=x", "/gradio_api/file=/etc/hostname",
    "/file=/etc/hostname", "/gradio_api/call/active_markdown/x", "/assets/index.js",
    "/static/img/logo.svg", "/manifest.json", "/gradio_api/deep_link", "/user", "/gradio_api/runs",
]  # fmt: skip
POST_ROUTES = [
    "/gradio_api/queue/join", "/gradio_api/call/active_markdown", "/gradio_api/run/predict",
    "/gradio_api/api/active_markdown", "/gradio_api/process_recording", "/gradio_api/cancel",
]  # fmt: skip


@pytest.fixture(scope="module")
def lab_profile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Profile]:
    root = tmp_path_factory.mktemp("lab")
    with pytest.MonkeyPatch.context() as mp:
        for name in (profiles.LAB_ROOT_ENV, profiles.USER_HEADER_ENV, "DRAGONFARM_ALLOWED_HOSTS"):
            mp.delenv(name, raising=False)
        profile = get_profile("lab", root)
    for name, password in PASSWORD.items():
        users.add_user(profile.users_file or "", name, password, admin=name == "alice")
    yield profile


def serve(profile: Profile) -> Iterator[served_apps.Served]:
    from ui.layout import build_app

    port = served_apps.free_port()
    app = build_app(profile.lab_root or "", profile)
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield served_apps.Served(
            f"http://127.0.0.1:{port}", port, Path(profile.lab_root or ""), app
        )
    finally:
        app.close()


@pytest.fixture(scope="module")
def lab(lab_profile: Profile) -> Iterator[served_apps.Served]:
    yield from serve(lab_profile)


@pytest.fixture(scope="module")
def proxied(lab_profile: Profile) -> Iterator[served_apps.Served]:
    yield from serve(replace(lab_profile, user_header=HEADER))


def login(url: str, name: str, password: str | None = None, form: bool = True) -> httpx.Client:
    """A client logged in as `name`, as the login page (multipart) or a script (urlencoded)."""
    client = httpx.Client(base_url=url, timeout=30)
    fields = {"username": name, "password": password or PASSWORD[name]}
    if form:
        r = client.post("/login", files={k: (None, v) for k, v in fields.items()})
    else:
        r = client.post("/login", data=fields)
    assert r.status_code == 200 and r.json() == {"success": True}, r.text
    return client


def refused(r: httpx.Response) -> bool:
    return r.status_code == 401 and r.json()["error"]["code"] == "not_logged_in"


def upload(client: httpx.Client) -> httpx.Response:
    return client.post("/gradio_api/upload", files=[("files", ("note.txt", b"hello lab"))])


def test_logged_out_gets_the_login_form_and_401_everywhere_else(lab):
    page = httpx.get(lab.url + "/")
    assert page.status_code == 200 and '<form id="login">' in page.text
    assert "named_endpoints" not in page.text and "gradio_api_info" not in page.text
    assert "active_markdown" not in page.text and str(lab.runs) not in page.text
    with httpx.Client(base_url=lab.url, timeout=30) as anonymous:
        for path in GET_ROUTES:
            assert refused(anonymous.get(path)), path
        for path in POST_ROUTES:
            assert refused(anonymous.post(path, json={"data": [], "fn_index": 0})), path
        assert refused(upload(anonymous))
        # A cookie Gradio never issued is no session.
        anonymous.cookies.set(f"access-token-{lab.app.server_app.cookie_id}", "made-up")  # type: ignore[attr-defined]
        assert refused(anonymous.get("/config"))


def test_a_logged_in_user_reaches_pages_api_uploads_and_files(lab):
    with (
        closing(login(lab.url, "bob")) as bob,
        closing(login(lab.url, "alice", form=False)) as alice,
    ):
        for client, name in ((bob, "bob"), (alice, "alice")):
            config = client.get("/config")
            assert config.status_code == 200 and config.json()["username"] == name
            assert client.get("/gradio_api/info").status_code == 200
            assert "named_endpoints" in client.get("/").text  # the app itself, not the form
        sent = upload(bob)
        assert sent.status_code == 200, sent.text
        file_url = f"/gradio_api/file={sent.json()[0]}"
        assert bob.get(file_url).content == b"hello lab"
        assert refused(httpx.get(lab.url + file_url))  # the same file, logged out
        assert bob.get("/logout", follow_redirects=False).status_code == 302
        assert refused(bob.get("/config"))  # logged out again


def test_gradio_client_logs_in_and_calls_through_the_queue(lab):
    from gradio_client import Client
    from gradio_client.exceptions import AuthenticationError

    client = Client(lab.url, auth=("bob", PASSWORD["bob"]), verbose=False)
    assert "Active dataset" in client.predict(api_name="/active_markdown")
    with pytest.raises(AuthenticationError, match="credentials were not provided"):
        Client(lab.url, verbose=False)


def test_wrong_passwords_lock_the_name_then_even_the_right_one_is_refused(lab):
    with httpx.Client(base_url=lab.url, timeout=30) as guesser:
        for _ in range(FREE_PER_NAME + 1):
            wrong = guesser.post("/login", data={"username": "carol", "password": "guess123"})
            assert wrong.status_code == 400
        right = guesser.post("/login", data={"username": "carol", "password": PASSWORD["carol"]})
        assert right.status_code == 429 and right.json()["error"]["code"] == "login_throttled"
        assert "try again in" in right.json()["error"]["message"]
        assert 0 < int(right.headers["retry-after"]) <= FIRST_LOCK_S
        assert "access-token" not in right.headers.get("set-cookie", "")
    login(lab.url, "dave").close()  # another name, from the same address, still logs in


def test_a_session_ends_after_its_hours_and_when_the_user_is_removed(lab, lab_profile):
    with closing(login(lab.url, "bob")) as bob:
        assert bob.get("/config").status_code == 200
        tokens = lab.app.server_app.tokens  # type: ignore[attr-defined]
        for token in tokens.issued:  # as if bob had logged in a session's length ago
            tokens.issued[token] -= (lab_profile.session_hours or 0) * 3600 + 1
        assert refused(bob.get("/config"))
        assert '<form id="login">' in bob.get("/").text
    with closing(login(lab.url, "dave")) as dave:
        assert dave.get("/config").status_code == 200
        users.remove_user(lab_profile.users_file or "", "dave")
        assert refused(dave.get("/config"))


def test_a_login_that_is_no_small_form_is_refused_before_any_password_check(lab):
    garbled = httpx.post(lab.url + "/login", content=b"--x\r\nnot a part",
                         headers={"Content-Type": "multipart/form-data; boundary=x"})  # fmt: skip
    assert garbled.status_code == 400 and garbled.json()["error"]["code"] == "login_not_a_form"
    huge = httpx.post(lab.url + "/login", data={"username": "bob", "password": "x" * 20_000})
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "login_too_large"


def test_a_foreign_page_cannot_log_a_browser_in(lab):
    r = httpx.post(lab.url + "/login", data={"username": "bob", "password": PASSWORD["bob"]},
                   headers={"Origin": "http://evil.example"})  # fmt: skip
    assert r.status_code == 403 and "access-token" not in r.headers.get("set-cookie", "")


def test_behind_a_proxy_the_user_comes_from_its_header_and_nothing_answers_without(proxied):
    with httpx.Client(base_url=proxied.url, timeout=30) as direct:
        for path in ["/", "/config", "/gradio_api/info", "/openapi.json"]:
            assert refused(direct.get(path)), path
        assert refused(upload(direct))
        assert refused(direct.get("/config", headers={HEADER: "../etc"}))
        assert refused(direct.post("/login", data={"username": "bob", "password": PASSWORD["bob"]}))
        config = direct.get("/config", headers={HEADER: "bob"})
        assert config.status_code == 200 and config.json()["username"] == "bob"
        assert upload(direct).status_code == 401
        direct.headers[HEADER] = "alice"
        assert upload(direct).status_code == 200


def test_every_interface_only_with_login_and_without_a_trusted_header(lab_profile, tmp_path):
    from ui.layout import build_app

    assert lab_profile.bind_refusal("0.0.0.0") is None  # login on: allowed
    # local has no login: it never binds every interface; a Space does, behind its proxy.
    assert "under the local profile" in (get_profile("local").bind_refusal("0.0.0.0") or "")
    assert get_profile("spaces").bind_refusal("0.0.0.0") is None
    cases = {
        "login off": replace(lab_profile, login=False),
        "DRAGONFARM_USER_HEADER": replace(lab_profile, user_header=HEADER),
    }
    for said, profile in cases.items():
        app = build_app(lab_profile.lab_root or "", profile)
        for host in ("0.0.0.0", "::"):
            with pytest.raises(ValueError, match=f"Refusing to bind .*{said}"):
                app.launch(server_name=host, server_port=served_apps.free_port(),
                           prevent_thread_lock=True, quiet=True)  # fmt: skip
    empty = replace(lab_profile, users_file=str(tmp_path / "users.json"))
    with pytest.raises(ValueError, match="Nobody can log in.*dragonfarm users add NAME --admin"):
        build_app(lab_profile.lab_root or "", empty).launch(
            server_name="127.0.0.1", server_port=served_apps.free_port(),
            prevent_thread_lock=True, quiet=True,
        )  # fmt: skip
