"""bundle() and pack_run(): the run as train() writes it, and a zip with all a GPU machine needs.

Nothing here trains: launching is stubbed (and made to fail where the test is that nothing is
launched). The notebook's execution is tests/bundles/test_notebook_execution.py (slow).
"""

from __future__ import annotations

import json
import re
import sys
import warnings
import zipfile
from pathlib import Path

import nbformat
import pytest
from results_fakes import bundled_run, good_results, write_zip

import dragonfarm_core as dragon
from dragonfarm_core.bundles import archive as bundle_zip
from dragonfarm_core.bundles.results_check import RESULT_FILES
from dragonfarm_core.cli import commands as cli
from dragonfarm_core.rundir import files, launch

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dragonfarm_core"


def _zip(run: dragon.Run) -> zipfile.ZipFile:
    return zipfile.ZipFile(bundle_zip.bundle_paths(run.dir)[0])


def _tickets() -> dragon.Dataset:
    return dragon.dataset(dragon.example_data()).map(prompt="{subject}\n\n{body}", response="reply")


def _without_identity(config: dict) -> dict:
    return {k: v for k, v in config.items() if k not in ("id", "created_at")}


def test_bundle_writes_the_run_exactly_as_train_would(runs_root):
    args = dragon.TrainArgs(epochs=1)
    trained = dragon.train(_tickets(), "dragonfarm/tiny-support", args=args, runs_dir=runs_root)
    bundled = bundled_run(runs_root, args=args)
    assert _without_identity(bundled.config) == _without_identity(trained.config)
    for name in (files.TRAIN_DATA, files.EVAL_DATA):
        assert (bundled.dir / name).read_bytes() == (trained.dir / name).read_bytes()


def test_nothing_is_launched_and_the_run_is_bundled(tmp_path, monkeypatch):
    def refuse(*_, **__):
        raise AssertionError("bundle() launched a trainer")

    monkeypatch.setattr(launch, "start_run", refuse)
    run = bundled_run(tmp_path / "runs")
    assert run.status()["state"] == "bundled"
    assert dragon.runs(tmp_path / "runs").iloc[0]["state"] == "bundled"
    assert not (run.dir / files.LOG).exists()


def test_the_zip_holds_the_data_config_model_requirements_and_notebook(tmp_path):
    run = bundled_run(tmp_path / "runs")
    with _zip(run) as z:
        names = set(z.namelist())
        config = json.loads(z.read("run/config.json"))
        status = json.loads(z.read("run/status.json"))
        manifest = json.loads(z.read("bundle.json"))
        train = z.read("run/data/train.jsonl")
        weights = z.read("model/model.safetensors")
    assert {"requirements-cuda.txt", f"dragonfarm-{run.id}.ipynb", "run/data/eval.jsonl",
            "model/config.json", "model/tokenizer.json"} <= names  # fmt: skip
    # The zip's config points at the model it carries, relative to run/; the run's own is unchanged.
    assert config["model"]["base"] == "../model" and config["model"]["adapters"] == []
    assert {k: v for k, v in config.items() if k != "model"} == {
        k: v for k, v in run.config.items() if k != "model"}  # fmt: skip
    assert status["state"] == "queued"
    assert manifest["run_id"] == run.id
    assert manifest == files.read_json(run.dir / "bundle" / "bundle.json")
    assert manifest["config_sha256"] == bundle_zip.config_hash(run.config)
    assert train == (run.dir / files.TRAIN_DATA).read_bytes()
    first = json.loads(train.splitlines()[0])
    assert [m["role"] for m in first["messages"]][-2:] == ["user", "assistant"]  # chat format
    assert weights == (ROOT / "assets/models/tiny-support/model.safetensors").read_bytes()


def test_the_trainer_code_is_the_installed_package_as_it_is(tmp_path):
    run = bundled_run(tmp_path / "runs")
    with _zip(run) as z:
        shipped = {n: z.read(n) for n in z.namelist() if n.startswith("dragonfarm_core/")}
    installed = {f"dragonfarm_core/{p.relative_to(PACKAGE).as_posix()}": p.read_bytes()
                 for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}  # fmt: skip
    assert "dragonfarm_core/trainers/__main__.py" in shipped
    assert {n: d for n, d in shipped.items() if n.endswith(".py")} == installed
    assert not [n for n in shipped if "__pycache__" in n or n.endswith(".pyc")]


def test_the_requirements_are_the_projects_pins(tmp_path):
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))  # fmt: skip
    wanted = dragon.python_requirements()
    assert wanted["python_version"] == ">=3.11"
    for line in wanted["packages"]:
        name, version = line.split("==")
        assert pins.get(name) == version, line
    run = bundled_run(tmp_path / "runs")
    with _zip(run) as z:
        assert z.read("requirements-cuda.txt").decode().split() == wanted["packages"]


def test_the_notebook_is_filled_for_the_run_and_valid(tmp_path):
    run = bundled_run(tmp_path / "runs")
    beside = bundle_zip.bundle_paths(run.dir)[1]
    with _zip(run) as z:
        assert z.read(beside.name) == beside.read_bytes()
    notebook = nbformat.reads(beside.read_text(), as_version=4)
    nbformat.validate(notebook)
    text = "\n".join(cell.source for cell in notebook.cells)
    assert "{{" not in text and run.id in text
    assert "python -m dragonfarm_core.trainers" in text or '"dragonfarm_core.trainers"' in text
    parameters = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1 and "INSTALL = True" in parameters[0].source
    listed = re.search(r"RESULT_FILES = (\[.*?\])", text)
    assert listed and set(json.loads(listed.group(1))) == RESULT_FILES


def test_custom_reward_files_travel_and_a_local_command_is_flagged(tmp_path):
    custom = tmp_path / "score.py"
    custom.write_text("def reward(prompt, completion, reference, row):\n    return 1.0\n")
    rewards = [dragon.reward("custom", file=str(custom)),
               dragon.reward("command", command=[sys.executable, "-c", "pass"])]  # fmt: skip
    prompts = dragon.dataset(dragon.example_data()).map_prompts(prompt="{subject}")
    with pytest.warns(UserWarning, match="a path on this machine"):
        run = dragon.bundle(prompts, "dragonfarm/tiny-support", rewards=rewards,
                            runs_dir=tmp_path / "runs", args=dragon.TrainArgs(max_seq_len=512))  # fmt: skip
    assert run.method == "grpo"
    stored = [r for r in run.config["method_args"]["rewards"] if r["type"] == "custom"][0]
    with _zip(run) as z:
        assert z.read(f"run/{stored['file']}") == custom.read_bytes()
        assert "a path on this machine" in json.loads(z.read("bundle.json"))["warnings"][0]


def test_a_hub_model_stays_a_hub_id_and_parent_adapters_travel(tmp_path, monkeypatch):
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    config = {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct", "adapters": ["/runs/a/adapter"],
                        "base": str(cache / "models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/x")}}  # fmt: skip
    model, copies = bundle_zip._remote_model(config)
    assert model["base"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert model["adapters"] == ["../adapters/0"]
    assert copies == [(Path("/runs/a/adapter"), "adapters/0")]


@pytest.mark.slow
def test_a_run_continued_from_an_imported_one_carries_its_adapter(tmp_path):
    parent = bundled_run(tmp_path / "runs")
    dragon.import_results(parent, write_zip(tmp_path / "r.zip", good_results(parent)))
    child = dragon.bundle(_tickets(), parent, runs_dir=tmp_path / "runs")
    with _zip(child) as z:
        config = json.loads(z.read("run/config.json"))
        adapter = z.read("adapters/0/adapter_model.safetensors")
    assert config["model"]["adapters"] == ["../adapters/0"]
    assert adapter == (parent.dir / "adapter" / "adapter_model.safetensors").read_bytes()


def test_pack_run_bundles_a_failed_run_and_refuses_a_succeeded_one(runs_root):
    run = dragon.train(_tickets(), "dragonfarm/tiny-support", runs_dir=runs_root)
    files.write_status(run.dir, {"state": "failed", "reason": "error", "error": "out of memory"})
    dragon.pack_run(run)
    assert run.status()["state"] == "bundled"
    files.write_status(run.dir, {"state": "succeeded"})
    with pytest.raises(ValueError, match="already succeeded"):
        dragon.pack_run(run)


def test_results_of_an_earlier_bundle_are_refused_after_bundling_again(tmp_path):
    run = bundled_run(tmp_path / "runs")
    earlier = write_zip(tmp_path / "r.zip", good_results(run))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dragon.pack_run(run)
    with pytest.raises(dragon.ResultsRefused, match="older bundle"):
        dragon.import_results(run, earlier)


@pytest.mark.slow
def test_the_cli_packs_a_run_and_imports_its_results(tmp_path, capsys):
    run = bundled_run(tmp_path / "runs")
    assert cli.main(["pack", str(run.dir), "--provider", "kaggle"]) == 0
    out = capsys.readouterr().out
    assert str(bundle_zip.bundle_paths(run.dir)[0]) in out and "Import notebook" in out
    results = write_zip(tmp_path / "r.zip", good_results(run))
    assert cli.main(["import", run.id, str(results), "--runs-dir", str(tmp_path / "runs")]) == 0
    assert "succeeded" in capsys.readouterr().out
    assert cli.main(["import", str(run.dir), str(results)]) == 2  # already imported
    assert "not bundled" in capsys.readouterr().err
