"""The running app's HTTP API refuses every run outside its runs dir, as a script would send it.

A real server (`build_app(runs_dir).launch()` on a free port) and plain POSTs to Gradio's
`/gradio_api/call/<api_name>`, the endpoint any page or script can reach: the run pickers accept
custom values, so the body can name any folder. Endpoints are found by the elem_id of the button
or picker that triggers them, so the test follows the wiring, whatever the endpoint is named.
Gradio's JSON body is not URL-decoded on the way, so `..%2F` reaches the handler as typed; it is
refused there all the same.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from run_refs_scene import Scene, make_scene

from dragonfarm_core.rundir import files, launch, location
from ui import watch
from ui.layout import build_app

ATTACKS = ["absolute", "dotdot", "nested-dotdot", "encoded", "double-encoded", "symlink-id",
           "symlink-path"]  # fmt: skip
REFUSED = "outside the runs directory"


class App:
    """The launched app: its base URL, and its endpoints by what triggers them."""

    def __init__(self, blocks: Any, base: str) -> None:
        self.base, self.config = base, blocks.get_config_file()
        self.ids = {c.get("props", {}).get("elem_id"): c["id"] for c in self.config["components"]}
        self.types = {c["id"]: c["type"] for c in self.config["components"]}

    def endpoint(self, elem_id: str, event: str, then: int = 0) -> str:
        """The api_name of what `event` on `elem_id` runs (`then`: that many .then() steps on)."""
        deps = self.config["dependencies"]
        dep = next(d for d in deps if [self.ids[elem_id], event] in map(list, d["targets"]))
        for _ in range(then):
            dep = next(d for d in deps if d.get("trigger_after") == dep["id"])
        return dep["api_name"]

    def labels(self, api_name: str) -> list[str]:
        """The labels of what `api_name` takes, in the order its data goes (states left out)."""
        dep = next(d for d in self.config["dependencies"] if d["api_name"] == api_name)
        by_id = {c["id"]: c for c in self.config["components"]}
        return [by_id[i]["props"].get("label") for i in dep["inputs"] if self.types[i] != "state"]

    def call(self, api_name: str, *data: Any) -> tuple[str, str]:
        """POST the inputs (session states excluded), then read the result -> (event, data)."""
        posted = httpx.post(f"{self.base}/gradio_api/call/{api_name}", json={"data": list(data)},
                            timeout=30)  # fmt: skip
        assert posted.status_code == 200, posted.text
        event_id = posted.json()["event_id"]
        stream = httpx.get(f"{self.base}/gradio_api/call/{api_name}/{event_id}", timeout=60)
        events = [line.removeprefix("event: ") for line in stream.text.splitlines()
                  if line.startswith("event: ")]  # fmt: skip
        datas = [line.removeprefix("data: ") for line in stream.text.splitlines()
                 if line.startswith("data: ")]  # fmt: skip
        return events[-1], json.dumps(json.loads(datas[-1]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[App, Scene, list]]:
    """(the app on a free port, its runs dir and the runs outside it, trainer launches asked)."""
    base = tmp_path_factory.mktemp("app-paths")
    starts: list = []
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(location.ENV_VAR, raising=False)
        mp.setattr(location, "_configured", None)
        mp.setattr(launch, "start_run", lambda run_dir, **fields: starts.append(run_dir) or 0)
        mp.chdir(base)
        scene = make_scene(base)
        blocks = build_app(scene.root)
        port = _free_port()
        blocks.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True,
                      quiet=True)  # fmt: skip
        try:
            yield App(blocks, f"http://127.0.0.1:{port}"), scene, starts
        finally:
            blocks.close()


@pytest.mark.parametrize("how", ATTACKS)
def test_runs_endpoints_refuse_and_leave_the_folder_outside_as_it_was(served, how):
    app, scene, starts = served
    before = scene.untouched()
    ref, archived_ref = scene.refs(scene.failed)[how], scene.refs(scene.archived)[how]
    for api_name, data in [
        (app.endpoint("runs-delete", "click"), [ref, True, True]),
        (app.endpoint("runs-delete", "click"), [ref, True, False]),
        (app.endpoint("runs-archive", "click"), [ref, True]),
        (app.endpoint("runs-unarchive", "click"), [archived_ref]),
        (app.endpoint("runs-open", "click"), [ref]),
    ]:
        event, output = app.call(api_name, *data)
        assert event == "complete", output  # a refusal shown on the page, not a crash
        assert REFUSED in output
        assert "delete_run(" not in output and "archive_run(" not in output  # no code shown
    assert scene.untouched() == before
    assert not (scene.root / files.ARCHIVED_DIR).exists()


@pytest.mark.parametrize("how", ATTACKS)
def test_monitor_endpoints_start_no_trainer_and_watch_nothing_outside(served, how):
    app, scene, starts = served
    before, watched = scene.untouched(), set(watch._watched)
    ref = scene.refs(scene.failed)[how]
    for api_name in (
        app.endpoint("monitor-resume", "click"),
        app.endpoint("monitor-cancel", "click", then=1),
        app.endpoint("monitor-run", "change"),
    ):
        event, output = app.call(api_name, ref)
        assert event == "complete", output
        assert REFUSED in output and "dragon.train(" not in output
    assert starts == []
    began = set(watch._watched) - watched  # no inotify watch on a folder the page named
    assert [p for p in began if not Path(p).is_relative_to(scene.root)] == []
    assert scene.untouched() == before


@pytest.mark.parametrize("how", ATTACKS)
def test_evaluate_and_chat_endpoints_refuse_a_run_outside(served, how):
    app, scene, starts = served
    before = scene.untouched()
    ref = scene.refs(scene.done)[how]
    event, output = app.call(app.endpoint("evaluate-go", "click"), ref, ["exact"], "", 1, False)
    assert event == "complete" and REFUSED in output
    # Send reads its widgets by name, so its data goes in the order of its inputs' labels.
    setup = {"Message": "hello", "Talk to": ref, "Answer with": "run", "Backend": "server",
             "Server URL": "http://127.0.0.1:9/v1", "Model": "m", "API key (kept in memory only)": "",
             "Ollama model": "", "Ollama URL": "", "System prompt": "", "Max new tokens": 64,
             "Temperature (0: greedy)": 0.7, "Top-p": 0.9, "Context window (tokens; 0: none)": 0}  # fmt: skip
    send = app.endpoint("chat-send", "click")
    assert sorted(app.labels(send)) == sorted(setup)
    event, output = app.call(send, *(setup[label] for label in app.labels(send)))
    assert event == "complete" and REFUSED in output
    assert scene.untouched() == before


def test_an_upload_naming_a_file_outside_is_refused_by_gradio(served):
    """Guard: only files Gradio's upload route wrote reach the Data tab (Gradio checks this
    in preprocess); a body naming another file copies nothing into the runs dir."""
    app, scene, _ = served
    secret = scene.failed / files.LOG
    for path in (str(secret), f"../elsewhere/{scene.failed.name}/{files.LOG}"):
        payload = {"path": path, "meta": {"_type": "gradio.FileData"}}
        event, _ = app.call(app.endpoint("data-upload", "upload"), payload)
        assert event == "error"
    assert list((scene.root / files.UPLOADS_DIR).iterdir()) == []
