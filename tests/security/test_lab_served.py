"""Through the real server, a logged-in request reaches the handlers as its own user.

The lab app is launched on 127.0.0.1 (login as the users file says, or a reverse proxy's user
header), and Gradio's HTTP API is called as a script would: the Monitor's run view, asked as
alice, shows alice's run and refuses bob's (by id and by absolute path), as the same call asked
as bob shows his. So the user the handlers see is the one Gradio logged in (or the proxy named),
per request, not one folder for the whole app.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import served_apps
from run_refs_scene import write_run

from dragonfarm_core.auth import profiles, users
from dragonfarm_core.auth.profiles import Profile, get_profile
from ui import per_user

PASSWORD = {name: f"{name}-password-123" for name in ("alice", "bob")}
HEADER = "X-Forwarded-User"
REFUSED = "outside the runs directory"


@pytest.fixture(scope="module")
def lab_profile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Profile]:
    root = tmp_path_factory.mktemp("lab")
    with pytest.MonkeyPatch.context() as mp:
        for name in (profiles.LAB_ROOT_ENV, profiles.USER_HEADER_ENV, "DRAGONFARM_ALLOWED_HOSTS"):
            mp.delenv(name, raising=False)
        profile = get_profile("lab", root)
    model = root.parent / "Tiny-Model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    for name, password in PASSWORD.items():
        users.add_user(profile.users_file or "", name, password)
        write_run(per_user.user_dir(profile, name), f"20260101-000000-{name}s-run", model,
                  "succeeded")  # fmt: skip
    yield profile


@contextlib.contextmanager
def serve(profile: Profile) -> Iterator[tuple[str, dict]]:
    from ui.layout import build_app

    port = served_apps.free_port()
    app = build_app(profile.lab_root or "", profile)
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}", app.get_config_file()
    finally:
        app.close()


def show_endpoint(config: dict) -> str:
    """The api_name of what a change of the Monitor's run picker runs (its run view)."""
    ids = {c.get("props", {}).get("elem_id"): c["id"] for c in config["components"]}
    deps = config["dependencies"]
    return next(d for d in deps if [ids["monitor-run"], "change"] in map(list, d["targets"]))[
        "api_name"
    ]


def call(client: httpx.Client, api_name: str, *data: str) -> str:
    posted = client.post(f"/gradio_api/call/{api_name}", json={"data": list(data)})
    assert posted.status_code == 200, posted.text
    stream = client.get(f"/gradio_api/call/{api_name}/{posted.json()['event_id']}")
    datas = [line.removeprefix("data: ") for line in stream.text.splitlines()
             if line.startswith("data: ")]  # fmt: skip
    return json.dumps(json.loads(datas[-1]))


def run_of(profile: Profile, name: str) -> Path:
    return per_user.user_dir(profile, name) / f"20260101-000000-{name}s-run"


def check_each_sees_their_own(
    client_for: Callable[[str], httpx.Client], profile: Profile, api_name: str
) -> None:
    for me, other in (("alice", "bob"), ("bob", "alice")):
        with contextlib.closing(client_for(me)) as client:
            mine = call(client, api_name, run_of(profile, me).name)
            assert run_of(profile, me).name in mine and REFUSED not in mine
            for ref in (run_of(profile, other).name, str(run_of(profile, other))):
                theirs = call(client, api_name, ref)
                assert f"{other}s-run" not in theirs.replace(ref, ""), theirs[:400]
                assert REFUSED in theirs or "is gone" in theirs  # by path, by id


@pytest.mark.slow
def test_the_logged_in_user_is_who_the_handlers_serve(lab_profile):
    with serve(lab_profile) as (url, config):

        def client_for(name: str) -> httpx.Client:
            client = httpx.Client(base_url=url, timeout=30)
            r = client.post("/login", data={"username": name, "password": PASSWORD[name]})
            assert r.status_code == 200, r.text
            return client

        check_each_sees_their_own(client_for, lab_profile, show_endpoint(config))


def test_behind_a_proxy_the_header_names_whose_runs_are_served(lab_profile):
    proxied = replace(lab_profile, user_header=HEADER)
    with serve(proxied) as (url, config):

        def client_for(name: str) -> httpx.Client:
            return httpx.Client(base_url=url, timeout=30, headers={HEADER: name})

        check_each_sees_their_own(client_for, proxied, show_endpoint(config))
