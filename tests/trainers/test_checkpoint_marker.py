"""Only a checkpoint with its COMPLETE marker counts: the marker is written last, pruning
removes it first, so a kill during a save or a prune never leaves a checkpoint with a file
missing that files.checkpoints(), resume or the trainer would take as complete. Each save here
is what a TRL trainer does: Trainer writes its files into checkpoint-<step>, then the run's
`trl_run.RunCallback.on_save` adds the run's state and the marker and prunes.
"""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from dragonfarm_core.rundir import files
from dragonfarm_core.trainers import checkpoint, trl_run

CONFIG = {"model": {"base": "tiny"}, "lora": {"r": 4}, "args": {"seed": 1}}
TRAINER_FILES = ["adapter_model.safetensors", "optimizer.pt", "rng_state.pth", "trainer_state.json"]
ENTRIES = [*TRAINER_FILES, trl_run.RUN_STATE]


def _save(run_dir, step):
    """Trainer's part of a save at `step`, then the callback's."""
    path = files.checkpoint_dir(run_dir, step)
    path.mkdir(parents=True, exist_ok=True)
    for name in TRAINER_FILES:
        (path / name).write_text(name)
    callback = trl_run.RunCallback(run_dir, None, SimpleNamespace(raw=CONFIG))
    state = SimpleNamespace(global_step=step, is_world_process_zero=True)
    callback.on_save(SimpleNamespace(world_size=1), state, None)
    return path


def test_the_marker_is_written_last(tmp_path, monkeypatch):
    seen = []
    real = files.mark_checkpoint_complete

    def mark(path):
        seen.append((path.name, sorted(p.name for p in path.iterdir())))
        real(path)

    monkeypatch.setattr(files, "mark_checkpoint_complete", mark)
    path = _save(tmp_path, 2)
    assert seen == [("checkpoint-2", sorted(ENTRIES))]
    assert sorted(p.name for p in path.iterdir()) == sorted([*ENTRIES, files.CHECKPOINT_COMPLETE])
    assert files.checkpoints(tmp_path) == [path]
    assert checkpoint.read_state(path / trl_run.RUN_STATE, CONFIG).step == 0


def test_the_last_two_are_kept(tmp_path):
    for step in (2, 4, 6):
        _save(tmp_path, step)
    assert [p.name for p in files.checkpoints(tmp_path)] == ["checkpoint-4", "checkpoint-6"]
    killed = files.checkpoint_dir(tmp_path, 8)  # Trainer's save cut short by kill -9
    killed.mkdir()
    (killed / "optimizer.pt").write_text("half")
    assert checkpoint.latest_checkpoint(tmp_path) == files.checkpoint_dir(tmp_path, 6)
    assert not killed.exists()


def test_a_kill_during_pruning_leaves_no_complete_looking_checkpoint(tmp_path, monkeypatch):
    for step in (2, 4):
        _save(tmp_path, step)
    real = shutil.rmtree

    def killed_midway(path, *args, **kwargs):  # rmtree got one entry, then kill -9
        if path != files.checkpoint_dir(tmp_path, 2):
            return real(path, *args, **kwargs)
        first = sorted(path.iterdir())[0]
        real(first) if first.is_dir() else first.unlink()
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(files.shutil, "rmtree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, 6)  # prunes checkpoint-2
    monkeypatch.undo()

    half = files.checkpoint_dir(tmp_path, 2)
    assert half.is_dir() and len(list(half.iterdir())) == len(ENTRIES) - 1
    assert [p.name for p in files.checkpoints(tmp_path)] == ["checkpoint-4", "checkpoint-6"]
    assert files.incomplete_checkpoints(tmp_path) == [half]
    assert checkpoint.latest_checkpoint(tmp_path) == files.checkpoint_dir(tmp_path, 6)
    assert not half.exists()  # the trainer's next start removes what the prune left


def test_a_checkpoint_without_its_marker_is_not_complete(tmp_path, capsys):
    """Also one from before markers existed: it cannot be told from a half-pruned one."""
    path = _save(tmp_path, 3)
    (path / files.CHECKPOINT_COMPLETE).unlink()
    assert files.checkpoints(tmp_path) == []
    assert checkpoint.latest_checkpoint(tmp_path) is None
    assert "Removing checkpoint-3: it has no COMPLETE marker" in capsys.readouterr().out
    assert not path.exists()


def test_remove_checkpoint_takes_the_marker_first(tmp_path, monkeypatch):
    path = files.checkpoint_dir(tmp_path, 1)
    path.mkdir(parents=True)
    (path / trl_run.RUN_STATE).write_text("{}")
    files.mark_checkpoint_complete(path)
    seen = []
    monkeypatch.setattr(files.shutil, "rmtree", lambda p, **kw: seen.append(sorted(p.iterdir())))
    files.remove_checkpoint(path)
    assert seen == [[path / trl_run.RUN_STATE]]  # the marker was gone before the rest went
    assert files.checkpoints(tmp_path) == []
