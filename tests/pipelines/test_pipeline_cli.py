"""`dragonfarm pipeline FILE` (YAML or JSON with the record's step specs) and
`dragonfarm pipeline-status ID`, with the stand-in trainer."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dragonfarm_core.cli import commands as cli
from dragonfarm_core.rundir import files

YAML = """\
model: {model}
name: from-file
steps:
  - kind: train
    dataset:
      source: tickets.csv
      mapping: {{kind: sft, prompt: question, response: answer}}
    args: {{epochs: 2, learning_rate: 0.001}}
  - kind: prefer
    beta: 0.25
    dataset:
      source: data/pairs.jsonl
      mapping: {{kind: pairs, prompt: q, chosen: good, rejected: bad}}
"""


@pytest.mark.slow
def test_a_yaml_file_runs_its_pipeline_and_pipeline_status_prints_the_record(
    runs_root, model_dir, tickets_csv, capsys
):
    folder = tickets_csv.parent
    (folder / "data").mkdir()
    rows = [{"q": f"Q{i}?", "good": f"Good {i}.", "bad": f"Bad {i}."} for i in range(8)]
    pd.DataFrame(rows).to_json(folder / "data" / "pairs.jsonl", orient="records", lines=True)
    path = folder / "loop.yaml"
    path.write_text(YAML.format(model=model_dir))
    assert cli.main(["pipeline", str(path), "--runs-dir", str(runs_root)]) == 0
    out = capsys.readouterr().out
    assert "step 1 (train): succeeded" in out and "step 2 (prefer): succeeded" in out
    (record_path,) = (runs_root / files.PIPELINES_DIR).glob("*.json")
    assert "from-file" in record_path.stem

    assert cli.main(["pipeline-status", record_path.stem, "--runs-dir", str(runs_root)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["status"] == "succeeded" and record["name"] == "from-file"
    train, prefer = record["steps"]
    # Relative paths were read from the file's folder; the settings reached the runs.
    assert train["spec"]["dataset"]["source"] == str(tickets_csv)
    sft = files.read_config(train["run_dir"])
    assert sft["args"]["epochs"] == 2 and sft["args"]["learning_rate"] == 0.001
    dpo = files.read_config(prefer["run_dir"])
    assert dpo["method_args"]["beta"] == 0.25 and dpo["continued_from"] == train["run_dir"]


def test_a_bad_file_is_refused_naming_the_step(runs_root, model_dir, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"model": str(model_dir), "steps": [{"kind": "evaluate"}]}))
    assert cli.main(["pipeline", str(path), "--runs-dir", str(runs_root)]) == 2
    err = capsys.readouterr().err
    assert "Step 1 (evaluate): there is no run to evaluate yet" in err
    path.write_text(json.dumps({"model": str(model_dir), "steps": [{"kind": "sing"}]}))
    assert cli.main(["pipeline", str(path), "--runs-dir", str(runs_root)]) == 2
    assert "step 1 (sing): Unknown step kind 'sing'" in capsys.readouterr().err
    path.write_text(json.dumps({"steps": []}))
    assert cli.main(["pipeline", str(path), "--runs-dir", str(runs_root)]) == 2
    assert "`model` is missing" in capsys.readouterr().err
    assert not (runs_root / files.PIPELINES_DIR).exists()
