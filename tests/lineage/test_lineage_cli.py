"""`dragonfarm lineage THING`: the list or the JSON, the runs dir taken from where a path lies,
and bad input as one line with exit code 2."""

from __future__ import annotations

import json

from dragonfarm_core.cli import commands as cli


def test_a_run_by_id_prints_its_lineage(chain, capsys):
    assert cli.main(["lineage", chain.dpo.id, "--runs-dir", str(chain.runs)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Lineage of run {chain.dpo.id}: 7 nodes")
    assert f"continued from: {chain.sft.id}" in out


def test_a_path_names_its_runs_dir_and_json_is_the_lineage(chain, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no ./dragonfarm_runs here: the path says where to read
    assert cli.main(["lineage", str(chain.pairs), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    focus = next(n for n in d["nodes"] if n["key"] == d["focus"])
    assert (focus["kind"], focus["id"]) == ("feedback_export", "pairs-round1.jsonl")
    assert {n["id"] for n in d["nodes"]} >= {chain.sft.id, chain.dpo.id, "tickets.csv"}


def test_bad_input_is_one_line_and_exit_2(chain, capsys):
    assert cli.main(["lineage", "no-such-thing", "--runs-dir", str(chain.runs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dragonfarm lineage: error: lineage() takes a run")
    assert err.count("\n") == 1
