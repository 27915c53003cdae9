"""A sweep from the command line and as code: `dragonfarm sweep FILE` declares the same sweep
the Python call does, `dragon.code(sweep)` writes Python that starts it again, and both refuse
bad input before anything is queued."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.cli.commands import main
from dragonfarm_core.rundir import files


def _file(tmp_path, tickets_csv, model_dir, space_lines):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        f"model: {model_dir}\n"
        f"dataset: {{source: {tickets_csv.name}, format: csv, "
        "mapping: {kind: sft, prompt: question, response: answer}}\n"
        "args: {epochs: 1}\n"
        f"space:\n{space_lines}"
        "name: from-file\n"
    )
    return path


def test_code_of_a_sweep_starts_the_same_sweep(base, runs_root, evaluating, monkeypatch):
    monkeypatch.setattr("dragonfarm_core.sweeps.sweep._launch", lambda s, judge: s)  # not run
    space_ = {"lr": [1e-4, 3e-4], "r": {"low": 4, "high": 16, "log": True}}
    s = dragon.sweep(base, space_, n_trials=3, sampler="random", seed=3, name="lr-r",
                     runs_dir=runs_root)  # fmt: skip
    code = dragon.code(s)
    assert "spec = dragon.RunSpec(" in code and '"learning_rate": [0.0001, 0.0003]' in code
    assert '"r": {"low": 4, "high": 16, "log": True}' in code
    assert 's = dragon.sweep(spec, space, sampler="random", n_trials=3, seed=3' in code
    compile(code, "<sweep>", "exec")
    # Run, the code declares a second sweep with the same record (but its id and time).
    namespace: dict = {}
    exec(code.replace("s.wait()", "").replace("print(s.trials)", "").replace(
        "best = s.best_run", ""), namespace)  # fmt: skip
    again = namespace["s"].status()
    first = s.status()
    for key in ("base", "space", "sampler", "n_trials", "objective", "prune", "seed", "name"):
        assert again[key] == first[key], key


@pytest.mark.slow
def test_the_command_line_runs_a_sweep_file(tmp_path, runs_root, tickets_csv, model_dir,
                                            evaluating, capsys):  # fmt: skip
    path = _file(tmp_path, tickets_csv, model_dir, "  learning_rate: [1e-3, 3e-4]\n")
    assert main(["sweep", str(path), "--wait", "--runs-dir", str(runs_root)]) == 0
    out = capsys.readouterr().out
    assert "succeeded, eval_loss (minimize)" in out and "from-file-t1" in out
    (s,) = dragon.list_sweeps(runs_root)
    assert s["status"] == "succeeded" and s["done"] == 2 and s["name"] == "from-file"
    assert main(["sweep-status", s["id"], "--runs-dir", str(runs_root)]) == 0
    assert "0.0003" in capsys.readouterr().out  # 1e-4 written in YAML is a number here


def test_a_bad_sweep_file_is_refused_before_anything_is_queued(tmp_path, runs_root,
                                                               tickets_csv, model_dir):  # fmt: skip
    path = _file(tmp_path, tickets_csv, model_dir, "  learnin_rate: [1e-3]\n")
    done = subprocess.run([sys.executable, "-m", "dragonfarm_core.cli", "sweep", str(path),
                           "--runs-dir", str(runs_root)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2
    assert "no setting 'learnin_rate' a sweep can vary" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (runs_root / files.SWEEPS_DIR).exists()
