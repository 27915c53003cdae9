"""The whole loop on the bundled model, in the background: train → synthesize_pairs (a
deterministic judge behind a local OpenAI-compatible server, its key handed to the job on
stdin) → prefer → judge(against="base") → evaluate → merge; then compare(p) has a row per run
with its figures filled in."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.export.merge import is_complete
from dragonfarm_core.rundir import pipeline_record
from tests.llm.llm_fakes import FakeOpenAI
from tests.pipelines.judges import longer_is_better

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"
KEY = "sk-pipeline-canary-3f9a-never-written"
FAST = {"max_steps": 2, "batch_size": 2, "grad_accum": 1, "max_seq_len": 256,
        "extra": {"sample_max_new_tokens": 8}}  # fmt: skip


@pytest.mark.slow
def test_the_whole_loop_on_the_bundled_model_in_the_background(tmp_path, monkeypatch):
    monkeypatch.delenv("DRAGONFARM_TRAINER_MODULE", raising=False)
    monkeypatch.setenv("PIPELINE_JUDGE_KEY", KEY)
    runs_dir = tmp_path / "runs"
    tickets = pd.read_csv(dragon.example_data()).head(30)  # in memory: saved with the record
    ds = dragon.dataset(tickets).map(prompt="{subject}\n\n{body}", response="reply")
    args = dragon.TrainArgs(**FAST)
    with FakeOpenAI(answer=lambda prompt: {"text": longer_is_better(prompt)}) as server:
        judge = dragon.judge_openai("scripted-judge", server.url, api_key_env="PIPELINE_JUDGE_KEY")
        p = dragon.pipeline(str(BUNDLED), [
            dragon.steps.train(ds, args=args, n_samples=2),
            dragon.steps.synthesize_pairs(n=28, judge=judge, min_gap=1, max_new_tokens=24),
            dragon.steps.prefer(args=args, n_samples=2),
            dragon.steps.judge(against="base", judge=judge, n=3),
            dragon.steps.evaluate(),
            dragon.steps.merge(),
        ], runs_dir=runs_dir, name="bundled-loop", background=True)  # fmt: skip
        record = p.wait(timeout=840)
        assert record["status"] == "succeeded", (record.get("error"), p.logs(40))
        # The job asked the judge with the key it got on stdin; no file or log holds it.
        assert {r["headers"].get("authorization") for r in server.requests} == {f"Bearer {KEY}"}
    for path in runs_dir.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".log"):
            assert KEY not in path.read_text(errors="replace"), path

    sft, dpo = p.runs
    steps = record["steps"]
    assert dpo.config["continued_from"] == str(sft.dir)
    assert dpo.config["dataset"]["source"] == steps[1]["summary"]["file"]
    assert steps[1]["summary"]["rows"] >= 1
    assert steps[3]["summary"]["run"] == dpo.id and steps[3]["summary"]["n"] >= 1
    assert {"metric_token_f1", "metric_exact"} <= set(steps[4]["summary"])
    assert is_complete(steps[5]["summary"]["path"])
    spec = pipeline_record.read(p.path)["steps"][0]["spec"]["dataset"]
    assert Path(spec["source"]).is_relative_to(pipeline_record.folder(p.path))

    table = dragon.compare(p).set_index("id")
    print(table.T.to_string())  # the closing note quotes it
    assert table.index.tolist() == [sft.id, dpo.id]
    # Held-out preference figures need held-out pairs: 20 or more (else none are held out).
    held_out = ["pref_accuracy", "reward_margin"] if dpo.config["data"]["n_eval"] else []
    for run_id, figures in ((sft.id, ["train_loss", "eval_loss", "perplexity"]),
                            (dpo.id, ["train_loss", *held_out, "judge_n", "judge_win_rate",
                                      "metric_token_f1"])):  # fmt: skip
        for column in figures:
            assert not math.isnan(table.loc[run_id, column]), (run_id, column)
    assert table.loc[dpo.id, "judge_against"] == "base"
    assert json.loads(p.path.read_text())["status"] == "succeeded"
