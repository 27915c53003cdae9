"""The lab's queue panel shows every user's jobs (anonymised when asked) and the per-user cap
refuses a run beyond it, wherever in the app it is started.

Tickets are real: processes (sleep) registered in a queue folder of the test's own, each with
a job folder in a user's runs folder, as `jobs.start` registers a training.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from run_refs_scene import snapshot, write_run

from dragonfarm_core.auth import users
from dragonfarm_core.auth.profiles import LAB_ROOT_ENV, Profile, get_profile
from dragonfarm_core.rundir import files, jobs, launch, queue
from ui import per_user, queue_panel


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Profile:
    monkeypatch.delenv(LAB_ROOT_ENV, raising=False)
    monkeypatch.setenv(queue.QUEUE_DIR_ENV, str(tmp_path / "queue"))
    monkeypatch.setattr(jobs, "admission", None)
    profile = get_profile("lab", tmp_path / "lab")
    for name in ("alice", "bob"):
        users.add_user(profile.users_file, name, f"{name}-password-123")
    users.add_user(profile.users_file, "boss", "boss-password-123", admin=True)
    return dataclasses.replace(profile, max_queued_per_user=2, anonymise_queue=True)


@pytest.fixture
def ticket(lab: Profile) -> Iterator:
    """ticket(user, run_id, state, key): a live process queued for a run in user's folder."""
    procs: list[subprocess.Popen] = []

    def make(user: str, run_id: str, state: str = "queued", key: str = "cuda:0") -> Path:
        job_dir = per_user.user_dir(lab, user) / run_id
        job_dir.mkdir()
        proc = subprocess.Popen(["sleep", "60"])
        procs.append(proc)
        created = psutil.Process(proc.pid).create_time()
        queue.register(job_dir, proc.pid, created, len(procs), key)
        if state == "running":
            path = next(p for p in (queue.queue_dir() / queue.TICKETS).glob(f"*-{proc.pid}.json"))
            files.write_json(path, {**files.read_json(path), "state": "running"})
        return job_dir

    yield make
    for proc in procs:
        proc.kill()
        proc.wait()


def test_the_queue_shows_everyone_whose_run_is_where_anonymised_for_others(lab, ticket):
    ticket("bob", "20260101-000000-bobs", "running")
    ticket("alice", "20260101-000001-alices")
    ticket("bob", "20260101-000002-bobs-next")
    ticket("alice", "20260101-000003-on-cpu", key="cpu")
    seen = queue_panel.rows(lab, "alice")
    assert [(r["device"], r["place"]) for r in seen] == [
        ("cpu", "queued #1"), ("cuda:0", "running"), ("cuda:0", "queued #1"),
        ("cuda:0", "queued #2"),
    ]  # fmt: skip
    assert [r["user"] for r in seen] == ["alice", "another user", "alice", "another user"]
    assert "bobs" not in repr(seen)  # not even his run ids
    assert [r["run"] for r in seen if r["user"] == "alice"] == [
        "20260101-000003-on-cpu", "20260101-000001-alices"
    ]  # fmt: skip
    admin = queue_panel.rows(lab, "boss")
    assert [r["user"] for r in admin] == ["alice", "bob", "alice", "bob"]
    plain = queue_panel.rows(dataclasses.replace(lab, anonymise_queue=False), "alice")
    assert "20260101-000000-bobs" in repr(plain)


def test_a_user_at_the_cap_is_refused_and_others_are_not(lab, ticket):
    ticket("alice", "20260101-000001-one", "running")
    assert queue_panel.cap_refusal(lab, per_user.user_dir(lab, "alice")) is None
    ticket("alice", "20260101-000002-two")
    refusal = queue_panel.cap_refusal(lab, per_user.user_dir(lab, "alice"))
    assert refusal and "per user (2)" in refusal and "wait for one to finish" in refusal
    assert queue_panel.cap_refusal(lab, per_user.user_dir(lab, "bob")) is None


def test_every_device_job_the_app_starts_passes_the_cap(lab, ticket, tmp_path):
    """The cap sits where jobs are queued (jobs.Job.start): a training, a resume, an
    evaluation, an export all go through it, and a refused job's run is left as it was."""
    queue_panel.install(lab)
    ticket("alice", "20260101-000001-one")
    ticket("alice", "20260101-000002-two")
    model = tmp_path / "Tiny-Model"
    model.mkdir()
    waiting = write_run(per_user.user_dir(lab, "alice"), "20260101-000003-three", model, "failed")
    before = snapshot(waiting)
    with pytest.raises(RuntimeError, match=r"queued or training already"):
        launch.start_run(waiting)
    assert snapshot(waiting) == before
    theirs = write_run(per_user.user_dir(lab, "bob"), "20260101-000004-bobs", model, "failed")
    stub = ["python", "-c", "pass"]
    launch.start_run(theirs, argv=stub)  # bob is under the cap: queued
    assert files.read_status(theirs)["state"] in ("queued", "running", "failed", "succeeded")


def test_the_train_tab_offers_each_gpu_the_machine_has_each_its_own_queue(monkeypatch):
    import gradio as gr

    from dragonfarm_core.settings import Hardware
    from ui.settings_form import settings_widgets
    from ui.tabs import train

    monkeypatch.setattr(queue, "_torch_build", lambda: {"cuda": "12.4"})
    monkeypatch.setattr(queue, "_gpus_present", lambda build: True)
    assert queue.devices({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["cpu", "cuda:0", "cuda:1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with gr.Blocks():
        widgets = settings_widgets(Hardware)
        train.offer_devices(widgets)
    offered = [value for _, value in widgets[0].choices]
    assert offered[-3:] == ["cpu", "cuda:0", "cuda:1"] and offered[0] == "auto"
    assert offered.count("cpu") == 1
    keys = [queue.queue_key({"hardware": {"device": d}}) for d in ("cuda:0", "cuda:1")]
    assert keys == ["cuda:0", "cuda:1"]  # two queues: a run on one never waits for the other
    assert Hardware(device="cuda:1").device == "cuda:1"
    with pytest.raises(ValueError, match="not one of"):
        Hardware(device="cuda:one")


def test_without_gpus_only_the_cpu_is_offered(monkeypatch):
    monkeypatch.setattr(queue, "_gpus_present", lambda build: False)
    assert queue.devices({}) in (["cpu"], ["cpu", "mps"])


def test_the_train_tab_refuses_a_run_beyond_the_cap_and_makes_no_folder(lab, ticket, tmp_path):
    import gradio as gr

    import dragonfarm_core as dragon
    from dragonfarm_core.models import ResolvedModel
    from dragonfarm_core.training.reinforcement import ReinforceArgs
    from ui.settings_form import settings_fields
    from ui.tabs import train

    ticket("alice", "20260101-000001-one")
    ticket("alice", "20260101-000002-two")
    csv = tmp_path / "tickets.csv"
    csv.write_text("question,answer\n" + "".join(f"Q{i}?,A{i}.\n" for i in range(12)))
    mapped = dragon.dataset(csv).map(prompt="question", response="answer")
    model_dir = tmp_path / "Tiny-Model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"model_type": "llama"}')
    with gr.Blocks():
        widgets = {cls.__name__: settings_fields(cls) for cls in (*train.SETTINGS, ReinforceArgs)}
    settings = {group: {name: w.value for name, w in ws.items()} for group, ws in widgets.items()}
    home = per_user.user_dir(lab, "alice")
    before = sorted(p.name for p in home.iterdir())
    with pytest.warns(UserWarning, match="queued or training already"):
        selected, started, _, error = train.start(
            mapped, ResolvedModel(str(model_dir), str(model_dir), None), "sft", None, "", 0.1,
            [], settings, runs_dir=home, profile=lab,
        )  # fmt: skip
    assert "per user (2)" in error and started == gr.skip()
    assert sorted(p.name for p in home.iterdir()) == before  # no run folder was written


def test_the_trainer_refuses_a_gpu_this_machine_does_not_have():
    from dragonfarm_core.settings import Hardware, SettingsError
    from dragonfarm_core.trainers import placement

    have = placement.torch.cuda.device_count() if placement.torch.cuda.is_available() else 0
    with pytest.raises(SettingsError, match=f"'cuda:{have}'"):
        placement.resolve_placement(Hardware(device=f"cuda:{have}"))


def test_a_space_visitor_has_one_run_queued_and_keeps_a_capped_number(tmp_path, monkeypatch):
    """On a Space each visitor (a browser's id) may have 1 run queued or training and keep
    max_runs_per_owner runs, archived ones included; a job on a run they keep (a resume)
    is not a new run. Another visitor is not counted against them."""
    monkeypatch.setenv(queue.QUEUE_DIR_ENV, str(tmp_path / "queue"))
    monkeypatch.setattr(jobs, "admission", None)
    monkeypatch.setenv("DRAGONFARM_SPACES_DATA", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    space = get_profile("spaces")
    assert (space.max_queued_per_user, space.max_runs_per_owner) == (1, 20)
    space = dataclasses.replace(space, max_runs_per_owner=3)
    queue_panel.install(space)
    visitor, other = "a" * 32, "b" * 32
    home = per_user.user_dir(space, visitor)
    assert home == tmp_path / "data" / "dragonfarm_runs" / "visitors" / visitor
    model = tmp_path / "Tiny-Model"
    model.mkdir()
    kept = [write_run(home, f"20260101-00000{i}-kept", model, "failed") for i in range(2)]
    write_run(home / files.ARCHIVED_DIR, "20260101-000009-old", model, "succeeded")
    new = home / "20260102-000000-new"
    refusal = queue_panel.cap_refusal(space, new)
    assert refusal and "You keep 3 runs (archived ones included)" in refusal
    assert "delete one in the Runs tab" in refusal
    assert queue_panel.cap_refusal(space, kept[0]) is None  # resuming a run it keeps
    assert queue_panel.cap_refusal(space, per_user.user_dir(space, other) / "x") is None
    before = snapshot(kept[0])
    proc = subprocess.Popen(["sleep", "60"])  # kept[1] training: the visitor's one place
    try:
        queue.register(kept[1], proc.pid, psutil.Process(proc.pid).create_time(), 1, "cpu")
        with pytest.raises(RuntimeError, match=r"the most this Space allows per visitor \(1\)"):
            launch.start_run(kept[0])  # through jobs.admission, as every tab starts a job
    finally:
        proc.kill()
        proc.wait()
    assert snapshot(kept[0]) == before
