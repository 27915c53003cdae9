"""Pipelines that run, with the stand-in trainer and a scripted judge: the record after each
step, how steps chain, a failing step, and code(pipeline) round trip."""

from __future__ import annotations

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.pipelines import context as pipeline_context
from dragonfarm_core.pipelines.pipeline import list_pipelines
from dragonfarm_core.rundir import files
from tests.pipelines.judges import as_function, first_sample_best


@pytest.fixture
def snapshots(monkeypatch):
    """The record as it stands each time the runner logs a finished step."""
    taken: list[dict] = []
    log = pipeline_context.Context.log

    def logged(self, message):
        log(self, message)
        if message.endswith(") succeeded"):
            taken.append(dragon.pipeline_status(self.path))

    monkeypatch.setattr(pipeline_context.Context, "log", logged)
    return taken


@pytest.mark.filterwarnings("ignore:Run .* held no rows out")  # 5 pairs: too few to split
@pytest.mark.slow
def test_train_synthesize_prefer_judge_chain_and_the_record_after_each_step(
    runs_root, model_dir, sft_data, backend, snapshots
):
    judge = as_function(first_sample_best)
    p = dragon.pipeline(str(model_dir), [
        dragon.steps.train(sft_data),
        dragon.steps.synthesize_pairs(n=5, judge=judge, n_samples_per_prompt=3),
        dragon.steps.prefer(beta=0.2),
        dragon.steps.judge(against="base", judge=judge, n=3),
    ], runs_dir=runs_root, name="loop")  # fmt: skip
    states = [[s["state"] for s in snap["steps"]] for snap in snapshots]
    assert states == [
        ["succeeded", "pending", "pending", "pending"],
        ["succeeded", "succeeded", "pending", "pending"],
        ["succeeded", "succeeded", "succeeded", "pending"],
        ["succeeded", "succeeded", "succeeded", "succeeded"],
    ]
    assert [snap["status"] for snap in snapshots] == ["running"] * 4
    record = p.status()
    assert record["status"] == "succeeded" and record["finished_at"] and record["error"] is None
    sft, dpo = p.runs
    steps = record["steps"]
    assert steps[0]["run"] == sft.id and steps[2]["run"] == dpo.id
    # prefer started from the training run, on the pairs the synthesis step wrote.
    assert dpo.config["continued_from"] == str(sft.dir)
    assert dpo.config["dataset"]["source"] == steps[1]["summary"]["file"]
    assert dpo.config["method_args"]["beta"] == 0.2
    assert steps[1]["summary"]["rows"] == 5  # "#1" scored 9, the rest 2: every prompt kept
    assert steps[0]["summary"]["train_loss"] == pytest.approx(2 / 6)
    # The judge step judged the latest run, the preference run, against its base.
    assert steps[3]["summary"]["run"] == dpo.id and steps[3]["summary"]["wins"] == 3
    assert dpo.status()["judge"]["wins"] == 3
    table = dragon.compare(p)
    assert table["id"].tolist() == [sft.id, dpo.id]
    # A pipeline by its id or its record means its runs too, beside other runs.
    assert dragon.compare(p.id, runs_dir=runs_root)["id"].tolist() == [sft.id, dpo.id]
    assert dragon.compare(dpo, str(p.path))["id"].tolist() == [dpo.id, sft.id]
    (row,) = list_pipelines(runs_root)
    assert (row["id"], row["name"], row["status"], row["done"], row["steps"]) == (
        p.id, "loop", "succeeded", 4, 4)  # fmt: skip
    assert table.set_index("id").loc[dpo.id, "judge_win_rate"] == 1.0
    log = "\n".join(p.logs(100))
    assert "step 2 (synthesize_pairs) succeeded" in log and "pipeline succeeded" in log


@pytest.mark.filterwarnings("ignore:Run .* held no rows out")
@pytest.mark.slow
def test_the_steps_judge_keeps_its_answers_in_the_pipelines_runs_dir(
    runs_root, model_dir, sft_data, backend
):
    from dragonfarm_core.rundir import location
    from tests.llm.llm_fakes import FakeOpenAI

    with FakeOpenAI(answer=lambda q: {"text": first_sample_best(q)}) as server:
        judge = dragon.judge_openai("judge-model", server.url)
        p = dragon.pipeline(str(model_dir), [
            dragon.steps.train(sft_data),
            dragon.steps.synthesize_pairs(n=2, judge=judge, n_samples_per_prompt=2),
            dragon.steps.judge(against="base", judge=judge, n=2),
        ], runs_dir=runs_root)  # fmt: skip
        asked = len(server.requests)
    # 2 prompts x 2 samples scored; one held-out row judged both ways round.
    assert p.status()["status"] == "succeeded" and asked == 2 * 2 + 2
    # No runs dir is set in this session (its default is a temp folder, removed at exit): the
    # answers are where the pipeline's runs are, for the next session to find.
    assert len(list((runs_root / files.LLM_CACHE_DIR).rglob("*.json"))) == asked
    assert not (location.runs_dir() / files.LLM_CACHE_DIR).exists()


def test_a_failing_step_fails_the_pipeline_and_names_it(runs_root, model_dir, sft_data,
                                                        pairs_data, monkeypatch):  # fmt: skip
    monkeypatch.setenv("FAKE_TRAINER_FAIL_AT", "3")
    with pytest.raises(dragon.RunFailedError, match="fake failure at step 3"):
        dragon.pipeline(str(model_dir), [dragon.steps.train(sft_data),
                                         dragon.steps.prefer(pairs_data)], runs_dir=runs_root)  # fmt: skip
    (path,) = (runs_root / files.PIPELINES_DIR).glob("*.json")
    record = dragon.pipeline_status(path)
    assert record["status"] == "failed" and record["error"].startswith("Step 1 (train): ")
    assert [s["state"] for s in record["steps"]] == ["failed", "pending"]
    assert "fake failure at step 3" in record["steps"][0]["error"]


def test_code_of_a_pipeline_declares_the_same_steps(runs_root, model_dir, sft_data, pairs_data,
                                                    monkeypatch):  # fmt: skip
    from dragonfarm_core.pipelines import pipeline as pipelines
    from dragonfarm_core.rundir import pipeline_record

    judge = dragon.judge_openai("judge-model", "http://127.0.0.1:9/v1", api_key_env="MY_KEY")
    prompts = dragon.dataset(sft_data.source).map_prompts(prompt="question", reference="answer")
    steps = [
        dragon.steps.train(sft_data, lora=dragon.Lora(r=8), args=dragon.TrainArgs(epochs=2)),
        dragon.steps.synthesize_pairs(n=7, judge=judge, min_gap=3),
        dragon.steps.prefer(method="orpo", beta=0.3),
        dragon.steps.prefer(pairs_data),
        dragon.steps.reinforce(prompts, [dragon.reward("numeric"),
                                         dragon.reward("length", max_chars=80)], group_size=2),
        dragon.steps.judge(against=None, judge=judge, rubric="Short."),
        dragon.steps.evaluate(metrics=["exact", "token_f1"]),
        dragon.steps.merge(),
        dragon.steps.publish("me/model", private=True),
    ]  # fmt: skip
    path = pipeline_record.create(runs_root, "round-trip", str(model_dir), [], True)
    specs = pipelines._specs(steps, pipeline_record.folder(path))
    pipeline_record.update(path, steps=pipeline_record.step_entries(specs))
    source = dragon.code(path)
    assert source == dragon.code(pipelines.Pipeline(path))
    assert "judge = dragon.judge_openai(" in source and source.count("judge=judge") == 2
    assert 'api_key_env="MY_KEY"' in source and "background=True" in source

    seen = {}

    def capture(model, declared, **kwargs):
        seen.update(model=model, steps=declared, **kwargs)

    monkeypatch.setattr(dragon, "pipeline", capture)
    monkeypatch.setattr(dragon, "pipeline_status", lambda p: {"status": "queued"})
    exec(compile(source, "<code(pipeline)>", "exec"), {})
    assert seen["model"] == str(model_dir) and seen["name"] == "round-trip"
    assert [s.to_dict() for s in seen["steps"]] == specs


def test_code_of_a_hand_written_record_takes_the_defaults_it_leaves_out(runs_root, sft_data):
    from dragonfarm_core.rundir import pipeline_record

    spec = dragon.steps.train(sft_data).to_dict()
    spec = {k: v for k, v in spec.items() if k not in ("lora", "args", "n_samples")}
    path = pipeline_record.create(runs_root, "by-hand", "dragonfarm/tiny-support", [], False)
    pipeline_record.update(path, steps=pipeline_record.step_entries([spec]))
    source = dragon.code(path)
    assert "dragon.steps.train(ds)," in source and "Lora" not in source
