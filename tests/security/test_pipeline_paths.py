"""The Pipelines tab refuses every pipeline record, and every run a record names, outside the
app's runs dir.

Its picker takes any text, so a page (or a script posting to the app) can name a record
elsewhere: an absolute path, `../`, percent-encoded forms, a symlink in pipelines/ that points
out. Show, tick, cancel and resume must refuse it on the page, leave it byte for byte as it
was and write no cancel request beside it. A record inside whose step names a run folder
outside (a tampered record) gets no curve and no log from that folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_refs_scene import write_run

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files, location, pipeline_record
from ui.tabs import pipelines

REFUSED = "outside the pipelines folder"
SECRET = "a line only the outside run's log holds"


@pytest.fixture
def scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    runs, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    runs.mkdir()
    victim = pipeline_record.create(elsewhere, "victim", "m", [{"kind": "evaluate"}], False)
    pipeline_record.update(victim, status="failed", error="made up")
    (runs / files.PIPELINES_DIR).mkdir()
    link = runs / files.PIPELINES_DIR / "link.json"
    link.symlink_to(victim)
    home = runs / files.PIPELINES_DIR
    refs = {
        "absolute": str(victim),
        "dotdot": f"../../elsewhere/pipelines/{victim.name}",
        "encoded": f"..%2F..%2Felsewhere%2Fpipelines%2F{victim.name}",
        "double-encoded": f"..%252F..%252Felsewhere%252Fpipelines%252F{victim.name}",
        "symlink-id": "link",
        "symlink-path": str(link),
    }
    assert (home / refs["dotdot"]).resolve() == victim.resolve()
    return {"runs": runs, "victim": victim, "refs": refs}


def _snapshot(path: Path) -> dict[str, bytes]:
    folder = pipeline_record.folder(path)
    found = [path, *folder.rglob("*")] if folder.is_dir() else [path]
    return {str(p): p.read_bytes() for p in found if p.is_file()}


@pytest.mark.parametrize("how", ["absolute", "dotdot", "encoded", "double-encoded",
                                 "symlink-id", "symlink-path"])  # fmt: skip
@pytest.mark.parametrize("handler", ["show", "tick", "cancel", "resume"])
def test_a_record_outside_is_refused_and_left_alone(scene, how, handler):
    before = _snapshot(scene["victim"])
    ref = scene["refs"][how]
    call = getattr(pipelines, handler)
    out = (
        call(ref, None, runs_dir=scene["runs"])
        if handler == "tick"
        else call(ref, runs_dir=scene["runs"])
    )
    header, timeline, _, log, code, stop, again, error, _ = out
    assert "Refused" in error and ("outside" in error or "URL-decoded" in error)
    assert timeline.empty and log == "" and "victim" not in code and "made up" not in header
    assert stop["interactive"] is False and again["interactive"] is False
    assert _snapshot(scene["victim"]) == before
    assert not (pipeline_record.folder(scene["victim"]) / files.CANCEL_REQUEST).exists()


def test_resolve_pipeline_takes_only_records_in_the_pipelines_folder(scene):
    runs = scene["runs"]
    inside = pipeline_record.create(runs, "mine", "m", [{"kind": "evaluate"}], False)
    assert pipelines.resolve_pipeline(inside.stem, runs) == inside.resolve()
    assert pipelines.resolve_pipeline(str(inside), runs) == inside.resolve()
    with pytest.raises(ValueError, match=REFUSED):
        pipelines.resolve_pipeline(scene["refs"]["absolute"], runs)
    (runs / files.PIPELINES_DIR / "notes.txt").write_text("not a record")
    with pytest.raises(FileNotFoundError):
        pipelines.resolve_pipeline("notes.txt", runs)
    with pytest.raises(FileNotFoundError):  # its job folder, not its record
        pipelines.resolve_pipeline(str(pipeline_record.folder(inside)), runs)


def test_a_run_outside_named_by_a_record_inside_is_never_read(scene, tmp_path):
    runs = scene["runs"]
    outside = write_run(tmp_path / "elsewhere", "20260101-000000-victim", tmp_path, "running")
    (outside / files.LOG).write_text(SECRET + "\n")
    files.write_progress(outside, [{"step": 1, "loss": 1.0}])
    (tmp_path / "qa.csv").write_text("q,a\nHi?,Hello.\n")
    ds = dragon.dataset(tmp_path / "qa.csv").map(prompt="q", response="a")
    path = pipeline_record.create(runs, "tampered", "m", [dragon.steps.train(ds).to_dict()], False)
    pipeline_record.update_step(path, 0, state="succeeded", run=outside.name,
                                run_dir=str(outside))  # fmt: skip
    header, timeline, chart, log, *_ = pipelines.show(str(path), runs_dir=runs)
    assert SECRET not in log and all(len(trace.x or ()) == 0 for trace in chart.data)
    assert list(timeline["state"]) == ["✓ succeeded"]
