"""A run reference (an id, or a path) given with a runs dir stays inside that runs dir.

`refs.resolve_run` is the one place that turns what a page or a caller names into a run folder.
Every way out is refused with an error naming the reference and the runs dir: an absolute path
elsewhere, `../`, `..` deeper in the path, percent-encoded forms (`..%2F`, `..%252F`), a symlink
in the runs dir pointing out. `dragon.delete_run/archive_run/unarchive_run/open_run` confine the
same way when `runs_dir=` is given, and leave the victim byte for byte as it was; without
`runs_dir=` they still take any run folder's path, as the manual says.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_refs_scene import make_scene, snapshot, write_run

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files, location, refs

ATTACKS = ["absolute", "dotdot", "nested-dotdot", "encoded", "double-encoded", "symlink-id",
           "symlink-path"]  # fmt: skip


@pytest.fixture
def scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    monkeypatch.chdir(tmp_path)
    return make_scene(tmp_path)


@pytest.mark.parametrize("how", ATTACKS)
@pytest.mark.parametrize("archived", [False, True])
def test_every_way_out_is_refused_naming_the_reference_and_the_runs_dir(scene, how, archived):
    for victim in (scene.failed, scene.archived):
        ref = scene.refs(victim)[how]
        with pytest.raises(refs.OutsideFolderError) as refused:
            refs.resolve_run(ref, scene.root, archived=archived)
        message = str(refused.value)
        assert repr(ref) in message and str(scene.root) in message
        assert "outside" in message
        assert isinstance(refused.value, ValueError)  # what every tab already shows


def test_a_symlinked_archived_folder_does_not_lead_out(scene):
    (scene.root / files.ARCHIVED_DIR).symlink_to(scene.elsewhere / files.ARCHIVED_DIR)
    with pytest.raises(refs.OutsideFolderError):
        refs.resolve_run(scene.archived.name, scene.root, archived=True)


def test_runs_inside_are_found_by_id_path_and_inner_symlink(scene):
    run = write_run(scene.root, "20260102-000000-mine", scene.model, "failed")
    gone = write_run(scene.root / files.ARCHIVED_DIR, "20260102-000001-old", scene.model, "failed")
    (scene.root / "alias").symlink_to(run, target_is_directory=True)
    assert refs.resolve_run(run.name, scene.root) == run
    assert refs.resolve_run(str(run), scene.root) == run
    assert refs.resolve_run(f"./{run.name}", scene.root) == run
    assert refs.resolve_run(f"{files.UPLOADS_DIR}/../{run.name}", scene.root) == run
    assert refs.resolve_run(Path(run), scene.root) == run
    assert refs.resolve_run(dragon.open_run(run), scene.root) == run
    assert refs.resolve_run("alias", scene.root) == run  # stays inside: the real folder
    # The manual's form, relative to the working directory, names the same folder.
    assert refs.resolve_run(f"runs/{run.name}", scene.root) == run
    assert refs.resolve_run(gone.name, scene.root, archived=True) == gone
    with pytest.raises(FileNotFoundError, match="No run"):
        refs.resolve_run(gone.name, scene.root)  # archived runs only when asked for


def test_what_is_not_a_run_inside_is_not_found_and_odd_text_is_refused(scene):
    (scene.root / files.UPLOADS_DIR / "x").mkdir(parents=True)
    for ref in ["nope", ".", files.UPLOADS_DIR, f"{files.UPLOADS_DIR}/x", "100%25-done"]:
        with pytest.raises(FileNotFoundError) as missing:
            refs.resolve_run(ref, scene.root)
        assert repr(ref) in str(missing.value) and str(scene.root) in str(missing.value)
    for ref in ["", "   ", None]:
        with pytest.raises(ValueError, match="No run given"):
            refs.resolve_run(ref, scene.root)
    with pytest.raises(refs.OutsideFolderError, match="NUL"):
        refs.resolve_run("ok\x00/../../etc", scene.root)
    with pytest.raises(TypeError):
        refs.resolve_run(42, scene.root)


def test_resolve_inside_confines_any_other_file(scene):
    inner = scene.root / files.UPLOADS_DIR / "qa.csv"
    inner.parent.mkdir()
    inner.write_text("a,b\n")
    (scene.root / files.UPLOADS_DIR / "out.csv").symlink_to(scene.failed / files.LOG)
    assert refs.resolve_inside(inner, scene.root) == inner
    assert refs.resolve_inside("uploads/qa.csv", scene.root) == inner
    for bad in ["../elsewhere", str(scene.failed / files.LOG), "uploads/out.csv",
                "uploads%2F..%2F..%2Felsewhere"]:  # fmt: skip
        with pytest.raises(refs.OutsideFolderError, match="outside"):
            refs.resolve_inside(bad, scene.root)


@pytest.mark.parametrize("how", ATTACKS)
def test_the_public_api_with_a_runs_dir_refuses_and_leaves_the_victim_as_it_was(scene, how):
    before = scene.untouched()
    for victim, calls in [
        (scene.failed, [
            lambda r: dragon.delete_run(r, runs_dir=scene.root),
            lambda r: dragon.delete_run(r, runs_dir=scene.root, force=True),
            lambda r: dragon.archive_run(r, runs_dir=scene.root, force=True),
            lambda r: dragon.open_run(r, runs_dir=scene.root),
        ]),
        (scene.archived, [lambda r: dragon.unarchive_run(r, runs_dir=scene.root)]),
    ]:  # fmt: skip
        for call in calls:
            ref = scene.refs(victim)[how]
            with pytest.raises(refs.OutsideFolderError, match="outside"):
                call(ref)
    assert scene.untouched() == before
    assert not (scene.root / files.ARCHIVED_DIR).exists()


def test_a_run_object_from_elsewhere_is_refused_when_a_runs_dir_is_given(scene):
    before = snapshot(scene.failed)
    run = dragon.open_run(scene.failed)
    for call in (dragon.delete_run, dragon.archive_run, dragon.open_run):
        with pytest.raises(refs.OutsideFolderError):
            call(run, runs_dir=scene.root)
    assert snapshot(scene.failed) == before


def test_without_a_runs_dir_any_run_folder_is_still_taken(scene, tmp_path: Path):
    # The manual: dragon_delete_run(run) and dragon_run(dir) take a run folder wherever it is.
    loose = write_run(tmp_path / "loose", "20260103-000000-loose", scene.model, "failed")
    assert dragon.open_run(loose).dir == loose
    assert dragon.archive_run(str(loose)) == loose.name
    moved = loose.parent / files.ARCHIVED_DIR / loose.name
    assert dragon.unarchive_run(str(moved)) == loose.name
    assert dragon.delete_run(str(loose)) == loose.name
    assert not loose.exists()


def test_ids_and_inside_paths_keep_working_with_a_runs_dir(scene):
    run = write_run(scene.root, "20260104-000000-mine", scene.model, "failed")
    assert dragon.open_run(run.name, runs_dir=scene.root).dir == run
    assert dragon.archive_run(str(run), runs_dir=scene.root) == run.name
    assert dragon.open_run(run.name, runs_dir=scene.root).dir.parent.name == files.ARCHIVED_DIR
    assert dragon.unarchive_run(run.name, runs_dir=scene.root) == run.name
    with pytest.raises(FileNotFoundError, match="No archived run"):
        dragon.unarchive_run(run.name, runs_dir=scene.root)  # it is not archived now
    assert dragon.delete_run(f"./{run.name}", runs_dir=scene.root) == run.name
    assert not run.exists()


def test_a_symlinked_run_is_not_listed(scene):
    mine = write_run(scene.root, "20260102-000000-mine", scene.model, "failed")
    scene.refs(scene.failed)  # plants a symlink to a run outside
    (scene.root / "alias").symlink_to(mine, target_is_directory=True)
    assert list(dragon.runs(runs_dir=scene.root)["id"]) == [mine.name]
