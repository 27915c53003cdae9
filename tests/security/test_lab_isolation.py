"""In the lab profile one user can neither see nor change another user's runs, through any tab.

The lab app is built in-process for two users, alice and bob, each with their own runs folder
(`<lab root>/users/<name>/`). Bob's folder holds runs (succeeded, failed, archived), feedback and
an upload, each carrying a marker string. Then every event handler the app has (found from the
app's own list of handlers, so a new tab cannot be missed) is called as alice, the way Gradio
calls it for a logged-in request, with each text input naming one of bob's runs (its id, its
absolute path, its archived id) or files: whatever each does, no output may contain bob's marker,
bob's folder must be byte for byte as it was, and no trainer may start. Then, as alice, the
run listings show her runs only; a call without a logged-in user is refused; and the public
API given alice's folder stays in it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import gradio as gr
import pytest
from gradio.state_holder import SessionState
from run_refs_scene import snapshot, write_run

import dragonfarm_core as dragon
from dragonfarm_core.auth import users
from dragonfarm_core.auth.profiles import LAB_ROOT_ENV, Profile, get_profile
from dragonfarm_core.conversation.feedback_store import EVENTS_FILE, feedback_dir
from dragonfarm_core.rundir import files, launch, location
from ui import per_user
from ui.layout import build_app

MARK = "BOBS-SECRET-7F3A"
MAX_STEPS = 40  # a streaming handler's yields read, at most


class Lab:
    def __init__(self, root: Path) -> None:
        self.profile: Profile = get_profile("lab", root)
        for name in ("alice", "bob"):
            users.add_user(self.profile.users_file, name, f"{name}-password-123")
        users.add_user(self.profile.users_file, "boss", "boss-password-123", admin=True)
        self.bob = per_user.user_dir(self.profile, "bob")
        self.alice = per_user.user_dir(self.profile, "alice")
        model = root.parent / "Tiny-Model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
        self.done = write_run(self.bob, f"20260101-000001-{MARK}", model, "succeeded")
        self.failed = write_run(self.bob, f"20260101-000000-{MARK}-f", model, "failed")
        self.archived = write_run(
            self.bob / files.ARCHIVED_DIR, f"20260101-000002-{MARK}-a", model, "succeeded"
        )
        (self.done / files.LOG).write_text(f"step 1 {MARK}\n")
        self.merged = self.done / "merged"  # a full model folder, as Export's merge writes it
        self.merged.mkdir()
        (self.merged / "config.json").write_text(json.dumps({"model_type": "llama"}))
        self.mine = write_run(self.alice, "20260101-000003-alices", model, "succeeded")
        events = feedback_dir(self.bob) / EVENTS_FILE
        events.parent.mkdir(parents=True)
        events.write_text(json.dumps({"kind": "thumb", "prompt": MARK, "reply": MARK}) + "\n")
        self.upload = self.bob / files.UPLOADS_DIR / f"{MARK}.csv"
        self.upload.write_text(f"prompt,response\n{MARK},{MARK}\n")

    def refs(self) -> list[str]:
        """The ways alice's page could name bob's things (ids, absolute paths, his folder)."""
        return [self.done.name, str(self.done), self.archived.name, str(self.upload),
                str(self.failed), str(self.bob)]  # fmt: skip


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("lab")
    starts: list = []
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(LAB_ROOT_ENV, raising=False)
        mp.delenv(location.ENV_VAR, raising=False)
        mp.setattr(location, "_configured", None)
        mp.setattr(launch, "start_run", lambda run_dir, **fields: starts.append(run_dir) or 0)
        mp.chdir(base)
        scene = Lab(base / "lab")
        app = build_app(base / "lab", scene.profile)
        yield app, scene, starts


def _inputs(block_fn: Any, ref: str, states: bool) -> list[Any]:
    """A value per input: text fields (and, with `states`, empty session states) get `ref`."""
    values: list[Any] = []
    for block in block_fn.inputs:
        value = getattr(block, "value", None)
        if isinstance(block, gr.State):
            values.append(ref if states and value is None else value)
        elif isinstance(block, (gr.Textbox, gr.Dropdown, gr.Code)):
            multi = isinstance(block, gr.Dropdown) and block.multiselect
            values.append([ref] if multi else ref)
        else:
            values.append(value)
    return values


async def _drive(app: gr.Blocks, block_fn: Any, inputs: list[Any], user: str | None) -> list:
    """Call the handler as Gradio does for `user`'s request; every output it gives."""
    request, state, outputs, iterator = gr.Request(username=user), SessionState(app), [], None
    for _ in range(MAX_STEPS):
        result = await app.call_function(
            block_fn, list(inputs), iterator=iterator, requests=request, state=state,
            in_event_listener=True,
        )  # fmt: skip
        outputs.append(result["prediction"])
        iterator = result["iterator"]
        if not result["is_generating"] or iterator is None:
            break
    return outputs


def call_as(app: gr.Blocks, block_fn: Any, inputs: list[Any], user: str | None) -> str:
    """The handler's outputs as text ('' when it raised: a refusal shows as an error)."""
    try:
        return repr(asyncio.run(_drive(app, block_fn, inputs, user)))
    except Exception as e:  # noqa: BLE001 (any refusal or failure; what it says is checked)
        return repr(e)


def handlers(app: gr.Blocks) -> list[Any]:
    return [f for f in app.fns.values() if f.fn is not None]


@pytest.mark.parametrize("states", [False, True], ids=["fields", "fields+states"])
@pytest.mark.slow
def test_no_handler_shows_or_changes_another_users_runs(lab, states):
    app, scene, starts = lab
    before = snapshot(scene.bob)
    assert len(handlers(app)) > 100  # every tab's handlers, not a hand-picked few
    leaks = []
    # Each handler costs a few tenths of a second: every ref through the fields, and two
    # (a path, his folder) also through the session states (the selected run among them).
    refs = scene.refs()[-2:] if states else scene.refs()[:4]
    for block_fn in handlers(app):
        takes_a_ref = _inputs(block_fn, "x", states) != _inputs(block_fn, "y", states)
        for ref in refs if takes_a_ref else refs[:1]:  # no input for a ref: one call says it
            shown = call_as(app, block_fn, _inputs(block_fn, ref, states), "alice")
            if MARK in shown.replace(ref, ""):  # naming the ref back in a refusal is fine
                leaks.append((block_fn.name, ref, shown[:300]))
    assert leaks == []
    assert snapshot(scene.bob) == before
    assert starts == []


@pytest.mark.slow
def test_every_handler_refuses_a_caller_without_a_user(lab):
    app, scene, _ = lab
    before = snapshot(scene.bob)
    for block_fn in handlers(app):
        shown = call_as(app, block_fn, _inputs(block_fn, str(scene.done), False), None)
        assert per_user.LOGIN_FIRST in shown, block_fn.name
    assert snapshot(scene.bob) == before


def _by_output(app: gr.Blocks, elem_id: str) -> list[Any]:
    return [f for f in handlers(app) if any(o.elem_id == elem_id for o in f.outputs)]


def test_listings_show_each_user_their_own_runs_only(lab):
    app, scene, _ = lab
    for elem_id in ("runs-table", "monitor-run", "chat-run", "compare-runs", "evaluate-run"):
        fns = _by_output(app, elem_id)
        assert fns, elem_id
        for block_fn in fns:
            inputs = _inputs(block_fn, "", False)
            mine = call_as(app, block_fn, inputs, "alice")
            assert MARK not in mine, (elem_id, block_fn.name)
            theirs = call_as(app, block_fn, inputs, "bob")
            assert scene.mine.name not in theirs, (elem_id, block_fn.name)
    header = _by_output(app, "df-runs-dir")
    assert str(scene.alice) in call_as(app, header[0], [], "alice")


def test_the_page_built_before_any_login_lists_nobodys_runs(lab):
    app, scene, _ = lab
    config = json.dumps(app.get_config_file(), default=str)
    assert MARK not in config and scene.mine.name not in config
    assert str(scene.alice) not in config and str(scene.bob) not in config


def test_the_public_api_given_a_users_folder_stays_in_it(lab):
    _, scene, _ = lab
    assert list(dragon.runs(scene.alice).id) == [scene.mine.name]
    for ref in scene.refs()[:5]:
        with pytest.raises((ValueError, FileNotFoundError)):
            dragon.open_run(ref, runs_dir=scene.alice)
        with pytest.raises((ValueError, FileNotFoundError)):
            dragon.delete_run(ref, runs_dir=scene.alice)
    assert scene.done.is_dir() and scene.failed.is_dir()


def test_the_lab_root_is_never_served(lab):
    app, scene, _ = lab
    assert app.runs_dir == Path(scene.profile.lab_root).resolve()


def test_an_admin_sees_every_users_runs_read_only_and_nobody_else_does(lab):
    app, scene, _ = lab
    (table,) = _by_output(app, "runs-all-users")
    shown = call_as(app, table, [], "boss")
    assert MARK in shown and scene.mine.name in shown and "'visible': True" in shown
    for user in ("alice", "bob"):
        assert "'visible': False" in call_as(app, table, [], user)


def test_a_model_folder_in_another_users_runs_cannot_be_chosen(lab, tmp_path):
    app, scene, _ = lab
    (choose,) = _by_output(app, "model-error")
    mine = scene.alice / "my-model"
    mine.mkdir(exist_ok=True)
    (mine / "config.json").write_text(json.dumps({"model_type": "llama"}))
    bundled = dragon.ResolvedModel.bundled()
    for ref in (str(scene.merged), str(scene.merged) + "/", f"{scene.alice}/../bob/"
                f"{scene.done.name}/merged"):  # fmt: skip
        shown = call_as(app, choose, [ref, "", bundled], "alice")
        assert "outside your own runs directory" in shown, ref
    assert "outside your own runs directory" not in call_as(app, choose, [str(mine), "", bundled],
                                                            "alice")  # fmt: skip
    assert "outside your own runs directory" not in call_as(
        app, choose, [str(scene.merged), "", bundled], "bob"
    )
