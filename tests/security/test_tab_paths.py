"""Every tab handler that takes a run from the page refuses one outside the app's runs dir.

The pickers accept custom values (their choices follow the runs folder), so a page, or a script
posting to the app, can send any text where a run is expected: an absolute path elsewhere,
`../`, percent-encoded forms, a symlink in the runs dir that points out. Each handler must show
a clear refusal (never raise), leave the run it names byte for byte as it was, start no
trainer, watch no folder outside, and never put a call for that path in the code panel.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import gradio as gr
import psutil
import pytest
from run_refs_scene import make_scene

import dragonfarm_core as dragon
from dragonfarm_core.models import ResolvedModel
from dragonfarm_core.rundir import files, launch, location
from dragonfarm_core.training.reinforcement import ReinforceArgs
from ui import watch
from ui.settings_form import settings_fields
from ui.tabs import chat, evaluate, monitor, runs, train

SKIP = gr.skip()
ATTACKS = ["absolute", "dotdot", "nested-dotdot", "encoded", "double-encoded", "symlink-id",
           "symlink-path"]  # fmt: skip
REFUSED = "outside the runs directory"


@pytest.fixture
def scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    monkeypatch.chdir(tmp_path)
    return make_scene(tmp_path)


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every trainer launch asked for; none may happen."""
    calls: list = []
    monkeypatch.setattr(launch, "start_run", lambda run_dir, **fields: calls.append(run_dir) or 0)
    return calls


def watched_outside(scene, before: set) -> list[Path]:
    """Folders outside the runs dir that ui.watch began watching since `before`."""
    return [p for p in set(watch._watched) - before if not p.is_relative_to(scene.root)]


@pytest.mark.parametrize("how", ATTACKS)
def test_runs_tab_refuses_delete_archive_unarchive_and_open(scene, how):
    before = scene.untouched()
    ref = scene.refs(scene.failed)[how]
    with pytest.warns(UserWarning, match=REFUSED):  # the toast says it too
        outs = [
            runs.delete(ref, True, False, scene.root),
            runs.delete(ref, True, True, scene.root),
            runs.archive(ref, True, scene.root),
            runs.unarchive(scene.refs(scene.archived)[how], scene.root),
        ]
    for out in outs:
        message, force, _confirm, code = out
        assert REFUSED in message and 'class="df-error"' in message
        assert code == SKIP  # the panel keeps what it showed: no call for a refused path
        assert force["visible"] is False  # never an offer to force it
    selected, message = runs.open_in_monitor(ref, scene.root)
    assert selected == SKIP and REFUSED in message
    assert scene.untouched() == before
    assert not (scene.root / files.ARCHIVED_DIR).exists()


@pytest.mark.parametrize("how", ATTACKS)
def test_monitor_refuses_to_show_resume_cancel_or_pick(scene, how, starts):
    before, watched = scene.untouched(), set(watch._watched)
    ref = scene.refs(scene.failed)[how]
    names = ["header", "bar", "chart", "log", "samples", "code", "cancel", "resume", "error"]
    with pytest.warns(UserWarning, match=REFUSED):  # Resume's toast
        outs = [
            monitor.show(ref, runs_dir=scene.root),
            monitor.tick(ref, None, runs_dir=scene.root),
            monitor.resume(ref, runs_dir=scene.root),
            monitor.cancel(ref, runs_dir=scene.root),
        ]
    for out in outs:
        shown = dict(zip(names, out, strict=False))
        assert REFUSED in shown["error"]
        assert shown["code"] == "" and shown["log"] == ""
        assert shown["resume"]["interactive"] is False and shown["cancel"]["interactive"] is False
    assert monitor.pick(ref, runs_dir=scene.root) == SKIP
    assert starts == []
    assert watched_outside(scene, watched) == []  # no inotify watch on a folder the page named
    assert scene.untouched() == before


def test_monitor_cancel_leaves_a_running_run_outside_alone(scene, monkeypatch):
    monkeypatch.setattr(monitor, "CANCEL_TIMEOUT_S", 0.5)
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        files.update_status(scene.failed, state="running", pid=sleeper.pid,
                            pid_create_time=psutil.Process(sleeper.pid).create_time())  # fmt: skip
        before = scene.untouched()
        for ref in scene.refs(scene.failed).values():
            out = monitor.cancel(ref, runs_dir=scene.root)
            assert REFUSED in out[8]
        assert sleeper.poll() is None  # its trainer was not signalled
        assert scene.untouched() == before
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("how", ATTACKS)
def test_evaluate_refuses_a_run_outside(scene, how):
    before = scene.untouched()
    ref = scene.refs(scene.done)[how]
    with pytest.warns(UserWarning):  # the toast
        out = evaluate.run_evaluation(ref, ["exact"], "", 1, False, runs_dir=scene.root)
    assert out[:5] == (SKIP,) * 5 and REFUSED in out[5]
    assert scene.untouched() == before


@functools.cache
def _settings() -> dict:
    """The Train tab's settings widgets' values, by group and field name."""
    with gr.Blocks():
        groups = {cls.__name__: settings_fields(cls) for cls in (*train.SETTINGS, ReinforceArgs)}
    return {group: {name: w.value for name, w in ws.items()} for group, ws in groups.items()}


@pytest.fixture
def tickets(tmp_path: Path) -> dragon.Dataset:
    csv = tmp_path / "tickets.csv"
    csv.write_text("question,answer\n" + "".join(f"Q{i}?,A{i}.\n" for i in range(12)))
    return dragon.dataset(csv)


class Recorder:
    """A backend that records what it was asked to generate (nothing may be)."""

    name, model = "recorder", "recorder-model"

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def generate(self, model, conversations, sampling) -> list[str]:
        self.calls.append(model)
        return ["" for _ in conversations]


@pytest.mark.parametrize("how", ATTACKS)
def test_train_refuses_to_continue_from_or_dry_run_with_a_run_outside(scene, how, tickets, starts):
    before = scene.untouched()
    model = ResolvedModel(str(scene.model), str(scene.model), None)
    ref = scene.refs(scene.done)[how]
    mapped = tickets.map(prompt="question", response="answer")
    values = _settings()
    with pytest.warns(UserWarning):
        selected, started, code, error = train.start(
            mapped, model, "sft", ref, "", 0.1, [], values, runs_dir=scene.root
        )
    assert (selected, started, code) == (SKIP, SKIP, SKIP) and REFUSED in error
    code, error = train.preview_code(
        mapped, model, "sft", ref, "", 0.1, [], values, runs_dir=scene.root
    )
    assert REFUSED in error and "open_run" not in code and str(scene.done) not in code
    prompts = tickets.map_prompts(prompt="question", reference="answer")
    used: list = []
    backend = Recorder(used)
    table, summary, code, message = train.dry_run(
        prompts, model, ref, [dragon.reward("exact")], values["ReinforceArgs"],
        backend=backend, runs_dir=scene.root,
    )  # fmt: skip
    assert (table, summary, code) == (SKIP, SKIP, SKIP) and REFUSED in message
    assert used == [] and starts == []
    assert [p for p in scene.root.iterdir() if not p.is_symlink()] == []  # no run was made
    assert scene.untouched() == before


@pytest.mark.parametrize("how", ATTACKS)
def test_chat_refuses_to_talk_to_a_run_outside(scene, how, monkeypatch):
    opened: list = []
    monkeypatch.setattr(dragon, "chat", lambda *a, **k: opened.append(a))
    before = scene.untouched()
    ref = scene.refs(scene.done)[how]
    model = ResolvedModel(str(scene.model), str(scene.model), None)
    setup = [ref, "run", "local", "", "", "", "", chat.OLLAMA_URL, "", 64, 0.7, 0.9, 0]
    steps = list(chat.send(None, "hello", model, *setup, runs_dir=scene.root))
    names = ["bot0", "bot1", "session", "message", "notice", "usage", "code", "error"]
    shown = dict(zip(names, steps[-1], strict=True))
    assert REFUSED in shown["error"] and shown["session"] is None
    assert shown["code"] == chat.CODE_HINT and shown["message"] == SKIP  # the text stays
    assert opened == []
    assert scene.untouched() == before
