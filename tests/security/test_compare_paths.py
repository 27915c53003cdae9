"""The Compare tab and dragon.compare never read a run outside the runs dir they are given.

The run picker accepts custom values, so a page (or a script posting to the app) can name any
text where a run is expected: an absolute path elsewhere, `../`, percent-encoded forms, a
symlink in the runs dir that points out (tests/security/run_refs_scene.py). Each Compare
handler must show a clear refusal (never raise), leave the victim byte for byte as it was,
watch no folder outside, and put no call naming it in the code panel; the table of every run
must not list a run through a symlink; `dragon.compare(ref, runs_dir=...)` must refuse it.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest
from run_refs_scene import make_scene, write_run

import dragonfarm_core as dragon
from dragonfarm_core.rundir import location
from ui import watch
from ui.tabs import compare

SKIP = gr.skip()
ATTACKS = ["absolute", "dotdot", "nested-dotdot", "encoded", "double-encoded", "symlink-id",
           "symlink-path"]  # fmt: skip
REFUSED = "outside the runs directory"


@pytest.fixture
def scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    monkeypatch.chdir(tmp_path)
    scene = make_scene(tmp_path)
    scene.own = write_run(scene.root, "20260101-000009-own", scene.model, "succeeded")
    return scene


def watched_outside(scene, before: set) -> list[Path]:
    return [p for p in set(watch._watched) - before if not p.is_relative_to(scene.root)]


@pytest.mark.parametrize("how", ATTACKS)
def test_compare_tab_refuses_a_run_outside(scene, how):
    before, watched = scene.untouched(), set(watch._watched)
    ref = scene.refs(scene.done)[how]
    own = str(scene.own)
    with pytest.warns(UserWarning, match=REFUSED):  # each refusal's toast
        outs = [
            compare.show([ref], "loss", "step", None, None, runs_dir=scene.root),
            compare.show([own, ref], "loss", "step", own, None, runs_dir=scene.root),
            compare.curves([own, ref], "eval_loss", "epoch", runs_dir=scene.root),
            compare.pair(ref, own, runs_dir=scene.root),
            compare.pair(own, ref, runs_dir=scene.root),
        ]
    for out in outs:
        *shown, error = out
        assert REFUSED in error and 'class="df-error"' in error
        assert all(value == SKIP for value in shown)  # nothing read from it; no code for it
    assert watched_outside(scene, watched) == []
    assert scene.untouched() == before


def test_the_table_of_every_run_lists_no_run_through_a_symlink(scene):
    for target in (scene.done, scene.failed):
        scene.refs(target)  # puts symlinks to them in the runs dir
    table = compare.show([], "loss", "step", None, None, runs_dir=scene.root)[0]["value"]
    assert list(table["id"]) == [scene.own.name]
    assert list(dragon.compare(runs_dir=scene.root)["id"]) == [scene.own.name]


@pytest.mark.parametrize("how", ATTACKS)
def test_the_api_refuses_a_run_outside_its_runs_dir(scene, how):
    before = scene.untouched()
    with pytest.raises(ValueError, match=REFUSED):
        dragon.compare(scene.own, scene.refs(scene.done)[how], runs_dir=scene.root)
    assert scene.untouched() == before


def test_the_picker_offers_only_runs_inside(scene):
    scene.refs(scene.done)
    assert [value for _, value in compare.run_choices(scene.root)] == [str(scene.own)]
