"""How pipeline steps chain, and every chain refused before anything runs (naming the step).

Nothing here starts a process: a refused pipeline writes no record and no run."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.pipelines.chain import PipelineError, check_steps, step_problems
from dragonfarm_core.pipelines.steps import (
    PreferStep,
    TrainStep,
    step_from_dict,
)
from dragonfarm_core.rundir import files


def scorer(prompts):
    return [json.dumps({"score": 5, "rationale": "ok"}) for _ in prompts]


def refused(model_dir, runs_root, steps, match, background=False):
    with pytest.raises(PipelineError, match=match):
        dragon.pipeline(str(model_dir), steps, runs_dir=runs_root, background=background)
    assert not (runs_root / files.PIPELINES_DIR).exists()  # nothing written
    assert list(runs_root.iterdir()) == []  # and no run started


def test_the_steps_have_the_manuals_defaults(sft_data):
    s = dragon.steps
    assert s.train(sft_data).to_dict()["n_samples"] == 10 and s.train(sft_data).args is None
    assert (s.prefer().dataset, s.prefer().method, s.prefer().beta) == (None, "dpo", 0.1)
    synth = s.synthesize_pairs()
    assert (synth.prompts, synth.n, synth.n_samples_per_prompt, synth.min_gap,
            synth.temperature, synth.max_new_tokens) == ("train", 100, 4, 2, 0.8, 256)  # fmt: skip
    assert (s.judge().against, s.judge().n, s.judge().rubric) == ("base", 20, None)
    assert s.evaluate().metrics is True and s.merge().out is None
    pub = s.publish("me/model")
    assert (pub.what, pub.private, pub.commit_message) == ("merged", False, None)
    r = s.reinforce(sft_data, dragon.reward("length", max_chars=50))
    assert (r.group_size, r.beta, r.temperature, r.max_new_tokens) == (4, 0.04, 1.0, 128)


def test_a_step_spec_round_trips_through_the_record_format(sft_data, pairs_data):
    train = dragon.steps.train(sft_data, lora=dragon.Lora(r=8), args=dragon.TrainArgs(epochs=2))
    again = step_from_dict(json.loads(json.dumps(train.to_dict())))
    assert isinstance(again, TrainStep) and again.to_dict() == train.to_dict()
    assert again.lora == dragon.Lora(r=8) and again.args == dragon.TrainArgs(epochs=2)
    assert len(again.dataset) == len(sft_data)
    prefer = step_from_dict(dragon.steps.prefer(pairs_data, method="orpo").to_dict())
    assert isinstance(prefer, PreferStep) and prefer.dataset.mapping.kind == "pairs"
    with pytest.raises(ValueError, match="Unknown step kind 'train_hard'"):
        step_from_dict({"kind": "train_hard"})
    with pytest.raises(ValueError, match="takes no epochs"):
        step_from_dict({"kind": "merge", "epochs": 3})


def test_prefer_without_a_dataset_needs_a_synthesis_step_before_it(model_dir, runs_root,
                                                                  sft_data):  # fmt: skip
    refused(model_dir, runs_root, [dragon.steps.train(sft_data), dragon.steps.prefer()],
            r"^Step 2 \(prefer\): it has no dataset and no synthesize_pairs step")  # fmt: skip
    # One synthesis feeds one prefer step: the second has nothing left.
    chain = [dragon.steps.train(sft_data), dragon.steps.synthesize_pairs(judge=scorer),
             dragon.steps.prefer(), dragon.steps.prefer()]  # fmt: skip
    refused(model_dir, runs_root, chain, r"^Step 4 \(prefer\)")
    assert len(check_steps(chain[:3])) == 3


@pytest.mark.parametrize("kind", ["judge", "evaluate", "merge", "publish"])
def test_a_step_on_the_latest_run_before_any_training_is_refused(model_dir, runs_root, sft_data,
                                                                kind):  # fmt: skip
    step = dragon.steps.publish("me/m") if kind == "publish" else getattr(dragon.steps, kind)()
    if kind == "judge":
        step = dragon.steps.judge(judge=scorer)
    refused(model_dir, runs_root, [step, dragon.steps.train(sft_data)],
            rf"^Step 1 \({kind}\): there is no run to {kind} yet")  # fmt: skip


def test_synthesis_from_the_runs_rows_before_any_training_is_refused(model_dir, runs_root):
    refused(model_dir, runs_root, [dragon.steps.synthesize_pairs(judge=scorer)],
            r"^Step 1 \(synthesize_pairs\): prompts='train' are the latest run's rows")  # fmt: skip


def test_publish_without_a_repo_and_a_dataset_mapped_for_another_stage(model_dir, runs_root,
                                                                      sft_data, pairs_data):  # fmt: skip
    refused(model_dir, runs_root, [dragon.steps.train(sft_data), dragon.steps.publish("")],
            r"^Step 2 \(publish\): publish needs a repo")  # fmt: skip
    refused(model_dir, runs_root, [dragon.steps.train(pairs_data)],
            r"^Step 1 \(train\): sft trains on a dataset mapped with")  # fmt: skip
    refused(model_dir, runs_root, [dragon.steps.train(sft_data), dragon.steps.prefer(sft_data)],
            r"^Step 2 \(prefer\): dpo trains on a dataset mapped with")  # fmt: skip
    refused(model_dir, runs_root, ["train"], r"^step 1 is str, not a step")
    refused(model_dir, runs_root, [], "non-empty list")


def test_no_judge_means_claude_and_needs_its_key(model_dir, runs_root, sft_data, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    refused(model_dir, runs_root, [dragon.steps.train(sft_data), dragon.steps.judge()],
            r"^Step 2 \(judge\): No judge: pass judge=")  # fmt: skip


def test_background_refuses_what_its_job_cannot_rebuild(model_dir, runs_root, sft_data):
    chat = SimpleNamespace(chat=lambda *a, **k: "", system_prompt=None)
    for judge, named in ((dragon.judge_chatlas(chat), "chatlas"), (scorer, "function")):
        steps = [dragon.steps.train(sft_data), dragon.steps.judge(judge=judge)]
        refused(model_dir, runs_root, steps,
                rf"^Step 2 \(judge\): A {named} judge or teacher cannot run as a background job",
                background=True)  # fmt: skip
        assert len(check_steps(steps)) == 2  # the same steps are fine in the foreground
    metric = [dragon.steps.train(sft_data), dragon.steps.evaluate(metrics=[len])]
    refused(model_dir, runs_root, metric, r"^Step 2 \(evaluate\): a background pipeline takes "
            "metrics by name", background=True)  # fmt: skip


def test_step_problems_gives_one_message_per_step(sft_data, pairs_data):
    problems = step_problems([dragon.steps.evaluate(), dragon.steps.train(sft_data),
                              dragon.steps.prefer(), dragon.steps.prefer(pairs_data),
                              dragon.steps.publish(None)])  # fmt: skip
    assert problems[0].startswith("Step 1 (evaluate): there is no run")
    assert problems[1] is None and problems[3] is None
    assert problems[2].startswith("Step 3 (prefer): it has no dataset")
    assert problems[4].startswith("Step 5 (publish): publish needs a repo")
