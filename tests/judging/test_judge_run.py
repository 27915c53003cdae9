"""dragon.judge and dragon.prompts on run directories: rubric and pairwise modes, judge.json, the
summary in status.json and runs(), the held-out rows chosen with a seed.

Replies come from a stand-in backend (set with dragon.set_backend) that answers "tuned: ..."
with the run's adapter on and "base: ..." without it, so a judge can tell the two apart.
"""

from __future__ import annotations

import json
import os

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.judging import inputs as judge_inputs
from dragonfarm_core.judging import judgement
from dragonfarm_core.llm import Reply
from dragonfarm_core.rundir import files, status_schema
from tests.judging.judge_runs import TwoFacedBackend, make_run, pair_row, reply_of, sft_row
from tests.llm.llm_fakes import FakeAnthropic


@pytest.fixture
def backend(monkeypatch):
    fake = TwoFacedBackend()
    previous = dragon.set_backend(fake)
    yield fake
    dragon.set_backend(previous)


def prefers_tuned(prompts):
    return [{"winner": "A" if reply_of(p, "Reply A").startswith("tuned") else "B",
             "rationale": "the tuned one"} for p in prompts]  # fmt: skip


def first_position(prompts):
    return [json.dumps({"winner": "A", "rationale": "first"}) for _ in prompts]


# -- prompts --------------------------------------------------------------------------------------


def test_prompts_of_sft_and_pair_runs_seeded_and_in_file_order(llm_runs_dir):
    sft = make_run(llm_runs_dir, "sft", [sft_row(i) for i in range(30)], [sft_row(100)])
    pairs = make_run(llm_runs_dir, "dpo", [pair_row(i) for i in range(5)], method="dpo")
    assert dragon.prompts(sft) == [f"question {i}" for i in range(30)]
    assert dragon.prompts(sft.dir, "train") == ["question 100"]
    assert dragon.prompts("dpo") == [f"pair question {i}" for i in range(5)]  # a run id
    some = dragon.prompts(sft, n=5, seed=1)
    assert len(some) == 5 and some == dragon.prompts(sft, n=5, seed=1)
    assert some != dragon.prompts(sft, n=5, seed=2)
    assert some == sorted(some, key=lambda p: int(p.split()[1]))  # file order
    assert dragon.prompts(sft, n=float("inf")) == dragon.prompts(sft)
    # The same rows for another run of the same data: comparable judgements.
    other = make_run(llm_runs_dir, "sft2", [sft_row(i) for i in range(30)])
    assert dragon.prompts(other, n=5, seed=1) == some
    rows = judge_inputs.data_rows(pairs, n=2, seed=0)
    assert all(r.reference.startswith("good") for r in rows)  # the chosen reply
    with pytest.raises(ValueError, match="split must be"):
        dragon.prompts(sft, "test")
    with pytest.raises(ValueError, match="whole number"):
        dragon.prompts(sft, n=0)


# -- rubric ---------------------------------------------------------------------------------------


def test_rubric_scores_the_held_out_rows_and_records_them(llm_runs_dir, backend):
    run = make_run(llm_runs_dir, "sft", [sft_row(i, "Be brief.") for i in range(6)])
    asked: list[str] = []

    def scorer(prompts):
        asked.extend(prompts)
        return [json.dumps({"score": 8 if "tuned: question" in p else 2, "rationale": "r"})
                for p in prompts]  # fmt: skip

    j = dragon.judge(run, n=4, judge=scorer, rubric="Short and right.", progress=False)
    assert j.mode == "rubric" and j.summary["mean_score"] == 8.0 and j.summary["scored"] == 4
    assert j.summary["mean_score_ci95"] == [8.0, 8.0]  # every score equal: sd 0
    assert j.summary["unparsed"] == 0 and j.summary["label"] == "score 8.0/10 (n=4)"
    assert list(j.details.columns) == ["prompt", "reference", "reply", "score", "rationale",
                                       "failure"]  # fmt: skip
    assert j.details["prompt"].tolist() == dragon.prompts(run, n=4, seed=42)
    assert all("Short and right." in q and "answer " in q and "Be brief." in q for q in asked)
    # Greedy replies under each row's own system prompt.
    tuned, conversations, sampling = backend.calls[0]
    assert tuned and sampling.temperature == 0 and conversations[0][0]["content"] == "Be brief."

    stored = files.read_json(run.dir / files.JUDGE)
    assert stored["mode"] == "rubric" and len(stored["rows"]) == 4
    assert stored["judge"]["provider"] == "function" and stored["summary"]["mean_score"] == 8.0
    assert stored["settings"]["prompts_from"] == "eval" and stored["settings"]["seed"] == 42
    assert run.status()["judge"]["mean_score"] == 8.0
    table = dragon.runs(llm_runs_dir)
    assert table.set_index("id").loc["sft", "judge"] == "score 8.0/10 (n=4)"
    assert status_schema.status_problem({"state": "succeeded", "judge": "7/10"})
    again = judgement.read_judgement(run)
    assert again.summary == j.summary and again.details["score"].tolist() == [8.0] * 4


def test_empty_replies_are_recorded_never_scored_and_unparsed_answers_counted(
    llm_runs_dir, backend
):
    rows = [sft_row(0), {"messages": [{"role": "user", "content": "SILENT please"},
                                      {"role": "assistant", "content": "x"}]}, sft_row(2)]  # fmt: skip
    run = make_run(llm_runs_dir, "sft", rows)
    seen: list[str] = []

    def judge(prompts):
        seen.extend(prompts)
        return ["7" if "question 2" in p else '{"score": 6, "rationale": "ok"}' for p in prompts]

    j = dragon.judge(run, judge=judge, progress=False)
    assert j.details["failure"].tolist() == [None, "empty", "unparsed"]
    assert j.summary["replies_not_judged"] == {"refusal": 0, "empty": 1, "error": 0}
    assert j.summary["unparsed"] == 1 and j.summary["scored"] == 1
    assert not any("SILENT" in p for p in seen)  # never sent to the judge
    assert sum("question 2" in p for p in seen) == 2  # asked once more, then counted


def test_a_run_without_held_out_rows_is_judged_on_training_rows_with_a_warning(
    llm_runs_dir, backend
):
    run = make_run(llm_runs_dir, "sft", [], [sft_row(1)])
    with pytest.warns(UserWarning, match="held no rows out"):
        j = dragon.judge(run, judge=lambda ps: ['{"score": 5}'] * len(ps), progress=False)
    assert j.settings["prompts_from"] == "train" and j.summary["mean_score"] == 5.0


def test_given_prompts_and_refusals(llm_runs_dir, backend):
    run = make_run(llm_runs_dir, "sft", [sft_row(0)])
    j = dragon.judge(run, prompts=["mine"], judge=lambda ps: ['{"score": 3}'] * len(ps),
                     progress=False)  # fmt: skip
    assert j.details["prompt"].tolist() == ["mine"] and j.settings["prompts_from"] == "given"
    running = make_run(llm_runs_dir, "busy", [sft_row(0)], state="running")
    files.update_status(running.dir, pid=os.getpid())  # alive: this process
    with pytest.raises(RuntimeError, match="still"):
        dragon.judge(running.dir, judge=lambda ps: [], progress=False)
    with pytest.raises(TypeError, match="prompts must be"):
        dragon.judge(run, prompts="one", judge=lambda ps: [], progress=False)
    with pytest.raises(ValueError, match="No judge"):
        dragon.judge(run, progress=False)


# -- pairwise -------------------------------------------------------------------------------------


def test_a_judge_always_preferring_the_first_position_gives_all_ties_and_bias_one(
    llm_runs_dir, backend
):
    run = make_run(llm_runs_dir, "sft", [sft_row(i) for i in range(5)])
    j = dragon.judge(run, against="base", judge=first_position, progress=False)
    s = j.summary
    assert (s["wins"], s["ties"], s["losses"]) == (0, 5, 0)
    assert s["position_bias"] == 1.0 and s["position_bias_n"] == 10
    assert s["tie_rate"] == 1.0 and s["interval"] == "wilson"
    low, high = s["tie_rate_ci95"]
    assert 0.5 < low < 1.0 and high == 1.0


def test_pairwise_against_base_wins_with_a_wilson_interval(llm_runs_dir, backend):
    run = make_run(llm_runs_dir, "sft", [sft_row(i) for i in range(10)])
    values: list[float] = []
    j = dragon.judge(run, against="base", judge=prefers_tuned,
                     progress=lambda done, total, stage: values.append(done / total))  # fmt: skip
    s = j.summary
    assert (s["wins"], s["ties"], s["losses"], s["judged"]) == (10, 0, 0, 10)
    assert s["position_bias"] == 0.5 and s["win_rate"] == 1.0
    assert s["win_rate_ci95"] == pytest.approx([0.7225, 1.0], abs=1e-3)  # Wilson, 10 of 10
    assert s["label"] == "vs base: 10W 0T 0L (n=10)"
    assert j.details["reply"].str.startswith("tuned").all()
    assert j.details["against_reply"].str.startswith("base").all()
    assert j.details["pick_ours_first"].tolist() == ["A"] * 10
    assert j.details["pick_ours_second"].tolist() == ["B"] * 10
    assert values[-1] == 1.0 and values == sorted(values)
    assert run.status()["judge"]["against"] == "base"
    # Against a run: its own replies ("tuned: ..." too), so the judge sees a tie each time.
    other = make_run(llm_runs_dir, "other", [sft_row(0)])
    j = dragon.judge(run, against=other.id, judge=prefers_tuned, n=3, progress=False)
    assert j.against == "other" and j.summary["ties"] == 3


def test_pairwise_through_claude_with_a_refusal_and_malformed_answer(
    llm_runs_dir, backend, monkeypatch
):
    run = make_run(llm_runs_dir, "sft", [sft_row(i) for i in range(3)])

    def answer(prompt):
        if "question 1" in prompt:
            return {"text": "", "refusal": True}
        if "question 2" in prompt:
            return {"text": "```json\n{not json"}
        a = reply_of(prompt, "Reply A")
        return {"text": json.dumps({"winner": "A" if a.startswith("tuned") else "B"})}

    with FakeAnthropic(answer=answer) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-judge-canary")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        j = dragon.judge(run, against="base", progress=False)  # None: Claude, from the env
    assert j.details["outcome"].tolist() == ["win", None, None]
    assert j.details["failure"].tolist()[1:] == ["judge refusal", "unparsed"]
    assert j.summary["unparsed"] == 2 and j.summary["judge_failed"] == 2
    assert j.summary["judge"] == "anthropic:claude-opus-5" and j.summary["usage"]["requests"] >= 8
    assert j.judge["api_key_env"] == "ANTHROPIC_API_KEY"
    text = (run.dir / files.JUDGE).read_text() + (run.dir / files.STATUS).read_text()
    assert "sk-ant-judge-canary" not in text


def test_judge_answers_that_are_replies_objects(llm_runs_dir, backend):
    run = make_run(llm_runs_dir, "sft", [sft_row(0)])
    j = dragon.judge(run, judge=lambda ps: [Reply(text='{"score": 9, "rationale": "x"}')] * len(ps),
                     progress=False)  # fmt: skip
    assert j.summary["mean_score"] == 9.0
