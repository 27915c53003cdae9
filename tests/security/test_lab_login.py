"""The lab profile's login guards every route of the real app, served on 127.0.0.1.

Logged out, `/` is a bare login form (not Gradio's login page, which carries the whole API
description) and every other page, API, queue, upload and file route is a 401, including those
Gradio's own auth leaves open (FastAPI's /openapi.json, /monitoring/{key}, static files).
Logged in (the form's multipart post, or the urlencoded one Gradio's client sends), the app
answers. Wrong passwords lock the name (even the right password is then refused), sessions end
after their hours and when the user is removed, a foreign page cannot log anyone in (or out),
logging out is a POST, many wrong passwords at once get no more checks than one after another,
X-Forwarded-For counts only from a proxy the admin names, and with a reverse proxy's user
header nothing answers without it. Binding every interface needs login.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import served_apps

from dragonfarm_core.auth import profiles, users
from dragonfarm_core.auth.login_throttle import FIRST_LOCK_S, FREE_PER_ADDRESS, FREE_PER_NAME
from dragonfarm_core.auth.profiles import Profile, get_profile

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


def serve(profile: Profile, **launch: str) -> Iterator[served_apps.Served]:
    from ui.layout import build_app

    port = served_apps.free_port()
    app = build_app(profile.lab_root or "", profile)
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
               **launch)  # fmt: skip
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


@pytest.mark.slow
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
        # /logout is a POST: a GET (a link or an image on any page) leaves the session alone.
        get = bob.get("/logout", follow_redirects=False)
        assert get.status_code == 405 and get.json()["error"]["code"] == "logout_needs_post"
        assert get.headers["allow"] == "POST" and bob.get("/config").status_code == 200
        assert bob.post("/logout", follow_redirects=False).status_code == 302
        assert refused(bob.get("/config"))  # logged out again


def test_a_foreign_page_cannot_log_a_user_out(lab):
    with closing(login(lab.url, "bob")) as bob:
        foreign = bob.post("/logout", headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403 and bob.get("/config").status_code == 200
        own = bob.post("/logout", headers={"Origin": lab.url}, follow_redirects=False)
        assert own.status_code == 302 and refused(bob.get("/config"))


def test_session_cookies_last_as_long_as_the_session(lab, lab_profile):
    with httpx.Client(base_url=lab.url, timeout=30) as client:
        r = client.post("/login", data={"username": "bob", "password": PASSWORD["bob"]})
        cookies = [v for k, v in r.headers.multi_items()
                   if k == "set-cookie" and v.startswith("access-token")]  # fmt: skip
        assert len(cookies) == 2  # Gradio's secure and plain-http session cookies
        age = int((lab_profile.session_hours or 0) * 3600)
        assert all(f"Max-Age={age}" in c for c in cookies), cookies


def test_gradio_client_logs_in_and_calls_through_the_queue(lab):
    from gradio_client import Client
    from gradio_client.exceptions import AuthenticationError

    client = Client(lab.url, auth=("bob", PASSWORD["bob"]), verbose=False)
    assert "Active dataset" in client.predict(api_name="/active_markdown")
    with pytest.raises(AuthenticationError, match="credentials were not provided"):
        Client(lab.url, verbose=False)


@pytest.mark.slow
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


@pytest.fixture
def guessed(lab_profile: Profile) -> Iterator[served_apps.Served]:
    """An app of its own, so its throttle's counts (per name and per 127.0.0.1) start at 0."""
    yield from serve(lab_profile)


@pytest.fixture
def proxied_by_loopback(lab_profile: Profile) -> Iterator[served_apps.Served]:
    """The same, started as an admin with a proxy on this machine would start it."""
    yield from serve(lab_profile, forwarded_allow_ips="127.0.0.1")


def test_many_wrong_passwords_at_once_get_no_more_checks_than_one_after_another(guessed):
    async def guess_all() -> list[int]:
        async with httpx.AsyncClient(base_url=guessed.url, timeout=120) as client:
            sent = [client.post("/login", data={"username": "carol", "password": f"guess{i}!"})
                    for i in range(60)]  # fmt: skip
            return [r.status_code for r in await asyncio.gather(*sent)]

    answers = asyncio.run(guess_all())
    checked = answers.count(400)  # Gradio's "Incorrect credentials": a password was tried
    assert set(answers) <= {400, 429} and checked == FREE_PER_NAME + 1, answers


def _wrong_from(url: str, address: str, name: str) -> int:
    r = httpx.post(url + "/login", data={"username": name, "password": "not-it-123"},
                   headers={"X-Forwarded-For": address}, timeout=60)  # fmt: skip
    return r.status_code


@pytest.mark.slow
def test_a_made_up_forwarded_address_does_not_walk_around_the_address_lock(guessed):
    answers = [_wrong_from(guessed.url, f"203.0.113.{i}", f"name{i}")
               for i in range(FREE_PER_ADDRESS + 2)]  # fmt: skip
    assert answers == [400] * (FREE_PER_ADDRESS + 1) + [429]


@pytest.mark.slow
def test_behind_a_named_proxy_each_forwarded_address_counts_for_itself(proxied_by_loopback):
    answers = [_wrong_from(proxied_by_loopback.url, f"203.0.113.{i}", f"name{i}")
               for i in range(FREE_PER_ADDRESS + 2)]  # fmt: skip
    assert answers == [400] * (FREE_PER_ADDRESS + 2)


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


def _fn_index(client: httpx.Client, elem_id: str, event: str) -> int:
    """The event wired to `event` on the component with `elem_id` (from the page's config)."""
    config = client.get("/config").json()
    (component,) = [c["id"] for c in config["components"]
                    if c.get("props", {}).get("elem_id") == elem_id]  # fmt: skip
    return next(int(d["id"]) for d in config["dependencies"]
                if [component, event] in [list(t) for t in d["targets"]])  # fmt: skip


@pytest.mark.slow
def test_a_session_and_its_uploads_belong_to_the_login_that_made_them(lab, tmp_path):
    from concurrent.futures import CancelledError

    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    mark = "BOBS-DATA-51C2"
    csv = tmp_path / f"{mark}.csv"
    csv.write_text("question,answer\n" + "".join(f"Q{i} {mark}?,A{i}.\n" for i in range(6)))
    slow = {"timeout": 120}  # a password check takes a while (scrypt) on a busy machine
    bob = Client(lab.url, auth=("bob", PASSWORD["bob"]), verbose=False, httpx_kwargs=slow)
    with closing(login(lab.url, "bob")) as bob_http, closing(login(lab.url, "alice")) as alice:
        bob.predict(handle_file(str(csv)), fn_index=_fn_index(bob_http, "data-upload", "upload"))
        assert mark in bob.predict(api_name="/active_markdown")  # bob's page state
        # Alice with bob's session hash: neither his page's state nor its event stream.
        thief = Client(lab.url, auth=("alice", PASSWORD["alice"]), verbose=False,
                       httpx_kwargs=slow)  # fmt: skip
        thief.session_hash = bob.session_hash
        try:
            stolen = str(thief.predict(api_name="/active_markdown"))
        except (AppError, CancelledError) as refused:  # its event stream is refused (403)
            stolen = repr(refused)
        assert mark not in stolen
        stream = alice.get("/gradio_api/queue/data", params={"session_hash": bob.session_hash})
        assert stream.status_code == 403 and stream.json()["error"]["code"] == "session_not_yours"
        # Bob's upload, by its cache path: his to fetch, not hers.
        sent = bob_http.post("/gradio_api/upload", files=[("files", (csv.name, csv.read_bytes()))])
        file_url = f"/gradio_api/file={sent.json()[0]}"
        assert bob_http.get(file_url).content == csv.read_bytes()
        assert alice.get(file_url).status_code == 404
        assert alice.get(file_url.replace("/gradio_api", "")).status_code == 404
        assert mark not in alice.get(file_url).text
