"""dragon.code(run): the generated Python, run with the launch stubbed, writes the same config."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import code
from dragonfarm_core.rundir import files, location
from dragonfarm_core.rundir.create import create_run


@pytest.fixture
def tickets(tmp_path) -> Path:
    path = tmp_path / "tickets.csv"
    pd.DataFrame(
        {
            "subject": [f"s{i}" for i in range(30)],
            "body": [f"b{i}" for i in range(30)],
            "reply": [f"r{i}" for i in range(30)],
        }
    ).to_csv(path, index=False)
    return path


def _replay(source: str, runs_root: Path) -> dict:
    """Execute generated code; return the config of the one new run it wrote."""
    before = set(runs_root.iterdir())
    namespace: dict = {}
    exec(compile(source, "<dragon.code>", "exec"), namespace)
    (new,) = [p for p in set(runs_root.iterdir()) - before if files.is_run_dir(p)]
    assert namespace["run"].dir == new
    return files.read_config(new)


def _comparable(config: dict) -> dict:
    """The config without what depends on the run's id and creation time. (A dataset saved
    in the first run is read from there by the replay, so even its path stays the same.)"""
    return {k: v for k, v in config.items() if k not in ("id", "created_at")}


def _round_trip(run_dir: Path, runs_root: Path) -> str:
    source = code(run_dir)
    config = _replay(source, runs_root)
    assert _comparable(config) == _comparable(files.read_config(run_dir))
    return source


def test_a_default_run_is_a_short_script(runs_root, tickets, model_dir):
    ds = dragon.dataset(tickets).map(prompt="{subject}\n\n{body}", response="reply")
    run = dragon.train(ds, str(model_dir), runs_dir=runs_root)
    source = _round_trip(run.dir, runs_root)
    assert source.startswith("import dragonfarm_core as dragon\n")
    assert "dragon.train(" in source and f'"{model_dir}"' in source
    for default in ("lora=", "args=", "hardware=", "name=", "n_samples=", "revision="):
        assert default not in source
    assert f'runs_dir="{runs_root.resolve()}"' in source


def test_every_non_default_setting_is_reproduced(runs_root, tickets, model_dir):
    ds = dragon.dataset(tickets).map(prompt="subject", response="reply").split(0.1, seed=7)
    run = dragon.train(
        ds,
        str(model_dir),
        lora=dragon.Lora(r=8, target_modules=["q_proj"]),
        args=dragon.TrainArgs(epochs=1, max_steps=6, lr_scheduler_type="constant"),
        hardware=dragon.Hardware(device="cpu"),
        name="My run",
        n_samples=2,
        revision="v1",
        trust_remote_code=True,
        runs_dir=runs_root,
    )
    source = _round_trip(run.dir, runs_root)
    assert 'dragon.TrainArgs(epochs=1, max_steps=6, lr_scheduler_type="constant")' in source
    assert "dragon.Lora(r=8, target_modules=['q_proj'])" in source
    assert 'name="My run"' in source and "trust_remote_code=True" in source


def test_runs_in_the_configured_dir_leave_runs_dir_out(runs_root, tickets, model_dir):
    location.set_runs_dir(runs_root)
    ds = dragon.dataset(tickets).map(prompt="subject", response="reply")
    run = dragon.train(ds, str(model_dir))
    source = _round_trip(run.dir, runs_root)
    assert "runs_dir=" not in source


def test_a_dataframe_run_reads_the_rows_saved_with_it(runs_root, model_dir):
    frame = pd.DataFrame({"q": ["a", "b", "c"], "a": ["x", "y", "z"]})
    run = dragon.train(
        dragon.dataset(frame).map(prompt="q", response="a"), str(model_dir), runs_dir=runs_root
    )
    source = _round_trip(run.dir, runs_root)
    assert str(run.dir / files.SOURCE_DATA) in source


def test_a_continued_run_refers_to_its_parent_by_directory(runs_root, tickets, model_dir):
    ds = dragon.dataset(tickets).map(prompt="subject", response="reply")
    parent = dragon.train(ds, str(model_dir), runs_dir=runs_root)
    files.adapter_dir(parent.dir).mkdir()
    files.update_status(parent.dir, state="succeeded")
    child = dragon.train(ds, parent, args=dragon.TrainArgs(epochs=1), runs_dir=runs_root)
    source = _round_trip(child.dir, runs_root)
    assert f'parent = dragon.open_run("{parent.dir}")' in source
    assert "    parent,\n" in source


def test_preference_runs_call_prefer_with_their_method(runs_root, model_dir):
    frame = pd.DataFrame({"p": ["q1", "q2"], "c": ["good", "fine"], "r": ["bad", "worse"]})
    ds = dragon.dataset(frame).map_pairs(prompt="p", chosen="c", rejected="r")
    path = create_run("orpo", ds, str(model_dir), runs_dir=runs_root, method_args={"beta": 0.2})
    source = code(path)
    assert "run = dragon.prefer(" in source
    assert '    method="orpo",\n    beta=0.2,\n' in source
    compile(source, "<dragon.code>", "exec")


# -- stored values in generated code: quoted, never live ------------------------------------------


@pytest.mark.parametrize("cut", ["\n", "\r", "\u2028", "\x85", '"""', "\x00"])
def test_comments_and_settings_from_stored_values_stay_quoted(cut):
    import ast

    from dragonfarm_core.codegen import run as codegen

    payload = f"x{cut}import os"
    comment = f"# {codegen.comment_value(payload)}\n" + codegen.comment_lines(payload)
    assert ast.parse(comment).body == []  # every line a comment
    assert codegen.comment_value("tests.judges.my_judge") == "tests.judges.my_judge"
    call = codegen.llm_call({"provider": "anthropic", "sampling": {"max_tokens": payload}})
    keywords = {k.arg: k.value for k in ast.parse(call, mode="eval").body.keywords}
    assert ast.literal_eval(keywords["max_tokens"]) == payload
    with pytest.raises(ValueError, match="reward 1 has a field"):
        codegen.rewards_code([{"type": "numeric", f"weight=1){cut}import os#": 1}])
