"""Only a checkpoint with its COMPLETE marker counts: the marker is written last, pruning
removes it first, so a kill during a save or a prune never leaves a checkpoint with a file
missing that files.checkpoints(), resume or the trainer would take as complete.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from dragonfarm_core.rundir import files
from dragonfarm_core.settings import Lora, TrainArgs
from dragonfarm_core.trainers import checkpoint, modeling, optim
from dragonfarm_core.trainers.common import Placement, TrainState
from dragonfarm_core.trainers.config import ExtraArgs, ModelSpec

CONFIG = {"model": {"base": "tiny"}, "lora": {"r": 4}, "args": {"seed": 1}}
ENTRIES = [checkpoint.ADAPTER, checkpoint.OPTIMIZER, checkpoint.RNG, checkpoint.STATE]


@pytest.fixture(scope="module")
def trainable(tiny_model_dir):
    spec = ModelSpec(name="tiny", base=str(tiny_model_dir))
    model = modeling.load_model(spec, Placement(torch.device("cpu"), torch.float32), False)
    model = modeling.add_lora(model, Lora(r=4, dropout=0.0), 0, False, False)
    opt = optim.build_optimization(
        model, TrainArgs(learning_rate=1e-2), ExtraArgs(), total_steps=20, dtype=torch.float32
    )
    return model, opt


def _save(run_dir, trainable, step):
    model, opt = trainable
    return checkpoint.save_checkpoint(run_dir, model, opt, TrainState(step=step), CONFIG)


def test_the_marker_is_written_last_before_the_checkpoint_becomes_visible(
    tmp_path, trainable, monkeypatch
):
    seen = []
    real = files.mark_checkpoint_complete

    def mark(path):
        seen.append((path.name, sorted(p.name for p in path.iterdir())))
        real(path)

    monkeypatch.setattr(files, "mark_checkpoint_complete", mark)
    path = _save(tmp_path, trainable, 2)
    assert seen == [(files.checkpoint_temp_dir(tmp_path, 2).name, sorted(ENTRIES))]
    assert sorted(p.name for p in path.iterdir()) == sorted([*ENTRIES, files.CHECKPOINT_COMPLETE])
    assert files.checkpoints(tmp_path) == [path]


def test_a_kill_during_pruning_leaves_no_complete_looking_checkpoint(
    tmp_path, trainable, monkeypatch
):
    for step in (2, 4):
        _save(tmp_path, trainable, step)
    real = shutil.rmtree

    def killed_midway(path, *args, **kwargs):  # rmtree got one entry, then kill -9
        if path != files.checkpoint_dir(tmp_path, 2):
            return real(path, *args, **kwargs)
        first = sorted(path.iterdir())[0]
        real(first) if first.is_dir() else first.unlink()
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(files.shutil, "rmtree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, trainable, 6)  # prunes checkpoint-2
    monkeypatch.undo()

    half = files.checkpoint_dir(tmp_path, 2)
    assert half.is_dir() and len(list(half.iterdir())) == len(ENTRIES) - 1  # 3 of 4 left
    assert [p.name for p in files.checkpoints(tmp_path)] == ["checkpoint-4", "checkpoint-6"]
    assert files.incomplete_checkpoints(tmp_path) == [half]
    assert checkpoint.latest_checkpoint(tmp_path) == files.checkpoint_dir(tmp_path, 6)
    assert not half.exists()  # the trainer's next start removes what the prune left


def test_a_checkpoint_without_its_marker_is_not_complete(tmp_path, trainable, capsys):
    """Also one from before markers existed: it cannot be told from a half-pruned one."""
    path = _save(tmp_path, trainable, 3)
    (path / files.CHECKPOINT_COMPLETE).unlink()  # all four entries, no marker
    assert files.checkpoints(tmp_path) == []
    assert checkpoint.latest_checkpoint(tmp_path) is None
    assert "Removing checkpoint-3: it has no COMPLETE marker" in capsys.readouterr().out
    assert not path.exists()


def test_a_save_at_the_step_of_an_unmarked_folder_writes_it_again(tmp_path, trainable):
    stale = files.checkpoint_dir(tmp_path, 5)
    (stale / checkpoint.ADAPTER).mkdir(parents=True)  # half pruned: only the adapter is left
    path = _save(tmp_path, trainable, 5)
    assert path == stale and files.checkpoints(tmp_path) == [path]
    assert sorted(p.name for p in path.iterdir()) == sorted([*ENTRIES, files.CHECKPOINT_COMPLETE])


def test_remove_checkpoint_takes_the_marker_first(tmp_path, monkeypatch):
    path = files.checkpoint_dir(tmp_path, 1)
    path.mkdir(parents=True)
    (path / checkpoint.STATE).write_text("{}")
    files.mark_checkpoint_complete(path)
    seen = []
    monkeypatch.setattr(files.shutil, "rmtree", lambda p, **kw: seen.append(sorted(p.iterdir())))
    files.remove_checkpoint(path)
    assert seen == [[path / checkpoint.STATE]]  # the marker was gone before the rest went
    assert files.checkpoints(tmp_path) == []
