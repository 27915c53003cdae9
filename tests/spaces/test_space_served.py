"""The app as a Hugging Face Space serves it: `python app.py --host 0.0.0.0 --port P` (the
Dockerfile's CMD) under the spaces profile, with a folder standing in for the Space's /data.

Runs made while it is up are there after a restart; each visitor (a browser, by its cookie)
sees and changes only their own runs; the app answers the Space's proxy name and no other;
HF_TOKEN from the Space's secrets reaches no page, config or API description.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from gradio_client import Client

from dragonfarm_core.auth import visitors
from dragonfarm_core.auth.visitors import COOKIE
from dragonfarm_core.rundir import files, launch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
from run_refs_scene import snapshot, write_run  # noqa: E402
from served_apps import wait_answering  # noqa: E402  (the security tests' app starter)

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
CANARY = "hf_canarySpaceSecret0123456789"
SPACE_HOST = "someone-dragonfarm.hf.space"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _space_env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAGONFARM_RUNS_DIR")}
    paths = [str(ROOT), str(TESTS), env.get("PYTHONPATH", "")]
    env.update(
        DRAGONFARM_PROFILE="spaces",
        DRAGONFARM_SPACES_DATA=str(data),
        SPACE_HOST=SPACE_HOST,
        HF_TOKEN=CANARY,
        HF_HUB_OFFLINE="1",
        GRADIO_ANALYTICS_ENABLED="False",
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
        DRAGONFARM_TRAINER_MODULE="fake_trainer",
    )
    return env


@contextmanager
def _space(data: Path, log: Path) -> Iterator[str]:
    """The Space's command, until the block ends; yields the loopback URL."""
    port = _free_port()
    argv = [sys.executable, "app.py", "--host", "0.0.0.0", "--port", str(port)]
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=_space_env(data), stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(url, proc, log)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _visitor(url: str) -> str:
    """A new visitor's id, as a browser's first page load gets it (the Space's cookie)."""
    with httpx.Client(base_url=url, timeout=60) as browser:
        assert browser.get("/").status_code == 200
        visitor = visitors.visitor_of(f"{COOKIE}-unsecure={browser.cookies[f'{COOKIE}-unsecure']}")
    assert visitor is not None
    return visitor


def _client(url: str, visitor: str) -> Client:
    """The app's API as that visitor's browser reaches it (its cookie on every request)."""
    return Client(
        url, verbose=False, headers={"Cookie": f"{COOKIE}={visitor}"}, httpx_kwargs={"timeout": 60}
    )  # a busy machine renders the config slowly


def _fn_index(url: str, elem_id: str, event: str) -> int:
    """The event wired to `event` on the component with `elem_id`, or whose outputs hold it
    when `event` is "tick" (the page's timer)."""
    config = httpx.get(f"{url}/config", timeout=10).json()
    ids = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
    (component,) = [i for i, elem in ids.items() if elem == elem_id]
    for d in config["dependencies"]:
        fires = any(t[1] == event and (event == "tick" or t[0] == component)
                    for t in d["targets"])  # fmt: skip
        if fires and (event != "tick" or component in d["outputs"]):
            return int(d["id"])
    raise AssertionError(f"no {event} event for {elem_id}")


def _listed_run_ids(url: str, visitor: str) -> list[str]:
    """The Runs tab's table as `visitor` sees it, asked for as the page's timer asks for it."""
    result = _client(url, visitor).predict(None, None, None,
                                           fn_index=_fn_index(url, "runs-table", "tick"))  # fmt: skip
    table = result[0]
    if isinstance(table, dict) and "value" in table:  # an update: the table with its widths
        table = table["value"]
    rows = table["data"] if isinstance(table, dict) else table
    return [str(row[0]) for row in rows]


def _train_a_run(runs: Path, data: Path) -> str:
    """A run trained by the command line into `runs` (a visitor's folder), as the app would."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dragonfarm_core.cli.commands",
            "train",
            str(ROOT / "assets" / "example_tickets.csv"),
            "--model",
            "dragonfarm/tiny-support",
            "--runs-dir",
            str(runs),
            "--prompt",
            "{subject}\\n\\n{body}",
            "--response",
            "reply",
            "--wait",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        env=_space_env(data),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = [p for p in runs.iterdir() if files.is_run_dir(p)]
    assert launch.live_status(run).get("state") == "succeeded"
    return run.name


@pytest.mark.slow
def test_a_space_keeps_its_runs_on_data_across_a_restart(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    runs = data / "dragonfarm_runs"
    with _space(data, tmp_path / "first.log") as url:
        page = httpx.get(url, timeout=10).text
        config = httpx.get(f"{url}/config", timeout=10).text
        assert str(runs) in config and "vanish" not in config
        assert "off: command and custom rewards" in config
        visitor = _visitor(url)
        assert _listed_run_ids(url, visitor) == []
        run_id = _train_a_run(runs / visitors.VISITORS_DIR / visitor, data)
        assert _listed_run_ids(url, visitor) == [run_id]
    with _space(data, tmp_path / "second.log") as url:
        assert _listed_run_ids(url, visitor) == [run_id]  # the same browser, after a restart
        # The Space's proxy reaches the app by its SPACE_HOST name; another name is refused.
        assert httpx.get(url, headers={"Host": SPACE_HOST}, timeout=10).status_code == 200
        assert httpx.get(url, headers={"Host": "evil.example"}, timeout=10).status_code == 400
        seen = [page, config, httpx.get(f"{url}/config", timeout=10).text,
                json.dumps(Client(url, verbose=False).view_api(print_info=False,
                                                               return_format="dict"))]  # fmt: skip
    for text in seen:
        assert CANARY not in text
    for log in ("first.log", "second.log"):
        assert CANARY not in (tmp_path / log).read_text()
    for path in data.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_a_visitor_sees_and_changes_only_their_own_runs(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    folders = data / "dragonfarm_runs" / visitors.VISITORS_DIR
    model = tmp_path / "Tiny-Model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    with _space(data, tmp_path / "space.log") as url:
        alice, bob = _visitor(url), _visitor(url)
        assert alice != bob
        run = write_run(folders / alice, "20260101-000000-alices-run", model, "succeeded")
        assert _listed_run_ids(url, alice) == [run.name]  # a reload: the cookie stays
        before = snapshot(folders / alice)
        assert _listed_run_ids(url, bob) == []  # another browser does not see it
        as_bob = _client(url, bob)
        for ref in (run.name, str(run)):
            deleted = as_bob.predict(
                ref, True, True, fn_index=_fn_index(url, "runs-delete", "click")
            )
            archived = as_bob.predict(ref, True, fn_index=_fn_index(url, "runs-archive", "click"))
            for message in (deleted[0], archived[0]):
                assert "Deleted" not in message and "Archived" not in message, message
                assert "df-error" in message, message  # said so
            used = as_bob.predict(ref, "", fn_index=_fn_index(url, "model-use", "click"))
            assert "Keeping dragonfarm/tiny-support" in used[-1], used  # not taken as a model
            if ref == str(run):  # by path: refused as another's folder, not merely unknown
                assert "Refused" in used[-1] and "outside your own runs directory" in used[-1]
        assert snapshot(folders / alice) == before
        assert _listed_run_ids(url, alice) == [run.name]
        # A made-up cookie is no visitor: a fresh id is handed out, and its folder is empty.
        assert _listed_run_ids(url, "../" + alice) == []
