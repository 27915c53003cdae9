"""The app's sweeps: the Train tab's Sweep form read into `dragon.sweep`'s arguments (by each
setting's type), refusals shown with nothing queued, the code before Start sweep, the trials
as they run with Cancel and Resume, and Compare's ranking (best first and marked, pruned and
failed after) with Optuna's importance and parallel-coordinate plots.

Trials run tests/fake_trainer.py, which logs a held-out loss set by the learning rate and the
LoRA rank (best at lr 3e-4, r 16): the tab is what is tested here, not the training.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import gradio as gr
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import sweep_record
from tests.llm.llm_fakes import FakeOpenAI
from tests.rundir.conftest import _kill_children  # noqa: F401  (autouse: no sweep outlives a test)
from tests.ui.test_tab_train import default_values
from ui import sweep_form, sweep_panel, sweep_view
from ui.tabs import compare, train

SKIP = gr.skip()
VIEW = ["header", "trials", "log", "cancel", "resume", "error", "seen"]
SWEPT = ["ranked", "note", "importance", "parallel", "code", "error"]
READ_SPEC = partial(train.checked_spec, profile=None)


def rows(*picked: tuple) -> dict:
    """The form's setting rows: (setting, values) or (setting, values, low, high, log)."""
    out = {}
    for i in range(sweep_form.ROWS):
        setting, values, low, high, log = (*picked[i], "", "", False)[:5] if i < len(picked) else (
            "", "", "", "", False)  # fmt: skip
        out[str(i)] = {"setting": setting, "values": values, "low": low, "high": high, "log": log}
    return out


NO_JUDGE = {"kind": "anthropic", "model": "", "url": "", "key": ""}


def sweep_values(*picked: tuple, sampler="grid", trials="", objective="eval_loss", prune="auto",
                 seed="42", judge=NO_JUDGE) -> dict:  # fmt: skip
    return {"rows": rows(*picked), "sampler": sampler, "trials": trials, "objective": objective,
            "prune": prune, "seed": seed, "judge": judge}  # fmt: skip


def form(mapped, model, **changes) -> dict:
    """Start's widget values, by name, as the Train tab passes them."""
    values = {"mapped": mapped, "model": model, "method": "sft", "parent": "", "name": "",
              "beta": 0.1, "rewards": [], "settings": default_values()}  # fmt: skip
    return {**values, **changes}


def start(runs_dir: Path, mapped, model, sweep: dict, **changes) -> tuple:
    return sweep_panel.start_sweep(READ_SPEC, sweep, runs_dir=runs_dir,
                                   **form(mapped, model, **changes))  # fmt: skip


def until(predicate, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


@pytest.fixture
def evaluating(monkeypatch):
    """The fake trainer logs a held-out loss every other step: 4 steps."""
    monkeypatch.setenv("FAKE_TRAINER_EVAL", "1")
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "4")


# ---- the form ----------------------------------------------------------------------------------


def test_the_rows_read_as_each_settings_type():
    space = sweep_form.read_space(rows(
        ("args.learning_rate", "1e-4, 3e-4"), ("lora.r", " 8,16 "),
        ("args.gradient_checkpointing", "true, no"),
    ), "sft")  # fmt: skip
    assert space == {"args.learning_rate": [1e-4, 3e-4], "lora.r": [8, 16],
                     "args.gradient_checkpointing": [True, False]}  # fmt: skip
    assert isinstance(space["lora.r"][0], int)
    ranged = sweep_form.read_space(rows(("args.learning_rate", "", "1e-5", "1e-3", True),
                                        ("lora.r", "", "4", "32")), "sft")  # fmt: skip
    assert ranged == {"args.learning_rate": {"low": 1e-5, "high": 1e-3, "log": True},
                      "lora.r": {"low": 4, "high": 32, "log": False}}  # fmt: skip
    dpo = sweep_form.read_space(rows(("method_args.beta", "0.1, 0.3")), "dpo")
    assert dpo == {"method_args.beta": [0.1, 0.3]}
    assert sweep_form.read_trials("") is None and sweep_form.read_trials(" 8 ") == 8


@pytest.mark.parametrize(
    ("picked", "message"),
    [
        ((), "Pick at least one setting"),
        ((("lora.r", "8, 16", "4", "32"),), "not both"),
        ((("lora.r", ""),), "list its values"),
        ((("lora.r", "8, sixteen"),), "'sixteen' is not a whole number"),
        ((("lora.r", "8.5"),), "not a whole number"),
        ((("args.learning_rate", "", "small", "1e-3"),), "'small' is not a number"),
        ((("args.gradient_checkpointing", "maybe"),), "not true or false"),
        ((("lora.r", "8"), ("lora.r", "16")), "picked twice"),
        ((("method_args.beta", "0.1"),), "has no setting"),
    ],
)
def test_a_row_that_cannot_be_read_says_what_to_fix(picked, message):
    with pytest.raises(dragon.SweepError, match=message):
        sweep_form.read_space(rows(*picked), "sft")


def test_trials_that_are_not_a_whole_number_are_refused():
    for text in ("many", "2.5"):
        with pytest.raises(dragon.SweepError, match="whole number"):
            sweep_form.read_trials(text)


def test_the_pickers_follow_the_method():
    beta = ("Beta (beta)", "method_args.beta")
    assert beta in sweep_form.setting_choices("dpo") and beta not in sweep_form.setting_choices(
        "sft"
    )
    updates = sweep_form.follow_method("sft", {"0": "method_args.beta", "1": "lora.r"})
    assert [u["value"] for u in updates] == [sweep_form.NONE, "lora.r"]


# ---- refusals, the preview ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        (sweep_values(("lora.r", "8, 16"), trials="0"), "n_trials must be a whole number of at least 1"),
        (sweep_values(("args.learning_rate", "", "1e-3", "1e-3"), sampler="tpe", trials="4"),
         "range is empty"),
        (sweep_values(("lora.r", "8, 16"), objective="pref_accuracy"), "does not produce"),
        (sweep_values(("args.learning_rate", "", "1e-5", "1e-3")), "A grid needs values"),
        (sweep_values(("lora.r", "0, 8")), "lora.r = 0 is refused"),
        (sweep_values(("lora.r", "8, 16"), seed="soon"), "Seed is &#x27;soon&#x27;; enter a whole number"),
        (sweep_values(("lora.r", "8, 16"), seed="-1"), "seed"),
        (sweep_values(("lora.r", "8, 16"), objective="metric_exact", prune="on"), "prune"),
        (sweep_values(("lora.r", "8, 16"), objective="judge_mean_score",
                      judge={**NO_JUDGE, "kind": "openai", "url": "http://127.0.0.1:9/v1"}),
         "as the server lists it at /v1/models"),
    ],
)  # fmt: skip
def test_a_refused_sweep_shows_why_and_queues_nothing(mapped, model, runs_dir, sweep, message):
    with pytest.warns(UserWarning):
        picker, started, code, error = start(runs_dir, mapped, model, sweep)
    assert (picker, started, code) == (SKIP,) * 3
    assert message in error and "df-error" in error
    assert dragon.list_sweeps(runs_dir) == [] and dragon.runs(runs_dir).empty


def test_without_mapped_data_nothing_starts(model, runs_dir):
    with pytest.warns(UserWarning):
        *_, error = start(runs_dir, None, model, sweep_values(("lora.r", "8, 16")))
    assert "Mapping tab" in error and dragon.list_sweeps(runs_dir) == []


def test_the_code_before_start_is_the_sweep_it_would_start(mapped, model, runs_dir):
    sweep = sweep_values(("args.learning_rate", "1e-4, 3e-4"), ("lora.r", "8, 16"))
    values = form(mapped, model, name="lr-and-r")
    assert sweep_panel.preview(READ_SPEC, "One run", sweep, runs_dir=runs_dir, **values) == (
        SKIP, SKIP)  # fmt: skip
    code, objective = sweep_panel.preview(READ_SPEC, "Sweep", sweep, runs_dir=runs_dir, **values)
    assert "spec = dragon.RunSpec(" in code and '"learning_rate": [0.0001, 0.0003]' in code
    assert 's = dragon.sweep(spec, space, name="lr-and-r"' in code
    assert objective["value"] == "eval_loss" and "train_loss" in objective["choices"]
    assert "metric_exact" in objective["choices"]
    namespace: dict = {}
    exec(code.split("s = dragon.sweep(")[0], namespace)  # the spec and space it would pass
    assert namespace["spec"].method == "sft" and namespace["space"]["r"] == [8, 16]
    random = sweep_values(("lora.r", "8, 16"), sampler="random", trials="2")
    code, _ = sweep_panel.preview(READ_SPEC, "Sweep", random, runs_dir=runs_dir, **values)
    assert 's = dragon.sweep(spec, space, sampler="random", n_trials=2,' in code
    chosen = sweep_values(("lora.r", "8, 16"), prune="off", seed="7")
    code, _ = sweep_panel.preview(READ_SPEC, "Sweep", chosen, runs_dir=runs_dir, **values)
    assert "s = dragon.sweep(spec, space, prune=False, seed=7," in code
    judged = sweep_values(("lora.r", "8, 16"), objective="judge_mean_score", judge={
        "kind": "openai", "model": "judge-model", "url": "http://127.0.0.1:9/v1",
        "key": "sk-typed-in-the-page"})  # fmt: skip
    code, objective = sweep_panel.preview(READ_SPEC, "Sweep", judged, runs_dir=runs_dir, **values)
    assert 'objective="judge_mean_score", judge=dragon.judge_openai("judge-model",' in code
    assert "sk-typed-in-the-page" not in code and "key typed in the app is not shown" in code
    assert objective["value"] == "judge_mean_score" and "judge_win_rate" in objective["choices"]
    # The judge form is read only for a judge's objective.
    code, _ = sweep_panel.preview(READ_SPEC, "Sweep", {**judged, "objective": "eval_loss"},
                                  runs_dir=runs_dir, **values)  # fmt: skip
    assert "judge=" not in code
    bad = sweep_values(("lora.r", "eight"))
    code, _ = sweep_panel.preview(READ_SPEC, "Sweep", bad, runs_dir=runs_dir, **values)
    assert code.startswith("# Start sweep cannot run yet") and "eight" in code


def test_a_sweep_outside_the_sweeps_folder_is_refused(runs_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    out = dict(zip(VIEW, sweep_panel.show(str(elsewhere), runs_dir=runs_dir), strict=True))
    assert "outside" in out["error"] or "No sweep" in out["header"]
    out = dict(zip(VIEW, sweep_panel.show("no-such-sweep", runs_dir=runs_dir), strict=True))
    assert "No sweep" in out["header"] and out["cancel"]["interactive"] is False


def test_the_switch_shows_the_sweep_in_place_of_start():
    box, timer, start_row, code = sweep_panel.switch("Sweep", n_single=2)
    assert box["visible"] and timer.active and not start_row["visible"] and not code["visible"]
    box, timer, start_row, code = sweep_panel.switch("One run", n_single=2)
    assert not box["visible"] and not timer.active and start_row["visible"]


# ---- the tables --------------------------------------------------------------------------------


def record(direction="minimize") -> dict:
    trial = {"params": {}, "run": None, "step": None, "pruned_at": None, "error": None}
    values = [(0, "complete", 1.5), (1, "pruned", None), (2, "complete", 1.1),
              (3, "failed", None), (4, "complete", 2.0), (5, "running", None)]  # fmt: skip
    trials = [{**trial, "number": n, "state": s, "value": v,
               "params": {"args.learning_rate": 10.0 ** -n}} for n, s, v in values]  # fmt: skip
    trials[1]["pruned_at"], trials[3]["error"] = 4, "run x failed: out of memory\nmore"
    best = 2 if direction == "minimize" else 4
    return {"id": "s1", "objective": "eval_loss", "direction": direction, "n_trials": 8,
            "space": {"args.learning_rate": [1.0]}, "status": "running", "best": best,
            "trials": trials, "started_at": None}  # fmt: skip


def test_compare_ranks_complete_trials_best_first_then_the_rest():
    table = sweep_view.ranked_table(record())
    assert table["trial"].tolist() == [2, 0, 4, 5, 1, 3]
    assert table["rank"].tolist() == ["★ 1", "2", "3", "", "", ""]
    assert table["eval_loss ↓"].tolist()[:3] == ["★ 1.1", "1.5", "2"]
    assert table["state"].tolist()[3:] == ["▶ running", "✂ pruned at step 4", "✗ failed"]
    assert table["note"].tolist()[-1] == "run x failed: out of memory"
    higher = sweep_view.ranked_table(record("maximize"))
    assert higher["trial"].tolist()[:3] == [4, 0, 2] and higher["rank"][0] == "★ 1"


def test_the_header_says_how_far_and_the_best():
    text = sweep_view.header_markdown(record())
    assert "**running**" in text and "5 of 8 trials done" in text
    assert "eval_loss, lower is better" in text and "best 1.1 (trial 2" in text
    table = sweep_view.progress_table(record())
    assert table["trial"].tolist() == list(range(6)) and table["learning_rate"][1] == "0.1"


# ---- a sweep from the page to Compare, on the fake trainer -------------------------------------


@pytest.mark.slow
def test_a_sweep_started_on_the_page_runs_and_compare_ranks_it(mapped, model, runs_dir,
                                                               evaluating):  # fmt: skip
    sweep = sweep_values(("args.learning_rate", "3e-3, 3e-4, 3e-2"), ("lora.r", "16"), seed="7")
    picker, started, code, error = start(runs_dir, mapped, model, sweep)
    assert error == "" and "Started sweep" in started
    path = Path(picker["value"])
    assert path.parent == runs_dir / "sweeps" and (str(path), str(path)) != picker["choices"][0]
    assert "dragon.sweep(" in code and "seed=7" in code
    s = dragon.open_sweep(path)
    assert s.status()["seed"] == 7 and s.status()["prune"] is True  # automatic: eval_loss
    s.wait(timeout=120)
    out = dict(zip(VIEW, sweep_panel.show(str(path), runs_dir=runs_dir), strict=True))
    assert "**succeeded**" in out["header"] and "3 of 3 trials done" in out["header"], s.logs()
    assert len(out["trials"]) == 3 and out["cancel"]["interactive"] is False
    assert "sweep succeeded: best trial" in out["log"]
    # Nothing changed: a tick reads nothing.
    assert sweep_panel.tick(str(path), out["seen"], runs_dir=runs_dir) == (SKIP,) * 7

    choices = compare.sweep_choices(runs_dir, None)["choices"]
    assert choices[0][1] == str(path) and "succeeded, 3/3" in choices[0][0]
    swept = dict(zip(SWEPT, compare.show_sweep(str(path), runs_dir=runs_dir), strict=True))
    frame = swept["ranked"]["value"]
    assert frame["rank"][0] == "★ 1" and frame["learning_rate"][0] == "0.0003"
    assert frame["state"][0] == "✓ complete"
    assert swept["importance"]["visible"] and swept["parallel"]["visible"]
    bars = swept["importance"]["value"].data[0]
    assert set(bars.y) >= {"args.learning_rate"}
    assert "optuna.load_study(" in swept["code"] and s.id in swept["code"]


@pytest.mark.slow
def test_cancel_and_resume_from_the_page(mapped, model, runs_dir, evaluating, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "30")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.1")
    sweep = sweep_values(("args.learning_rate", "3e-4, 1e-3"))
    picker, *_ = start(runs_dir, mapped, model, sweep)
    path = picker["value"]
    until(lambda: any(t.get("run_dir") for t in sweep_record.read(Path(path))["trials"]))
    out = dict(zip(VIEW, sweep_panel.show(path, runs_dir=runs_dir), strict=True))
    assert out["cancel"]["interactive"] is True and out["resume"]["interactive"] is False
    sweep_panel.cancel(path, runs_dir=runs_dir)
    until(lambda: dragon.sweep_status(path)["status"] == "cancelled")
    out = dict(zip(VIEW, sweep_panel.show(path, runs_dir=runs_dir), strict=True))
    assert "**cancelled**" in out["header"] and "Resume goes on" in out["header"]
    assert out["resume"]["interactive"] is True
    first = sweep_record.read(Path(path))["trials"][0]["run"]
    out = dict(zip(VIEW, sweep_panel.resume(path, runs_dir=runs_dir), strict=True))
    assert out["error"] == ""
    record = dragon.open_sweep(path).wait(timeout=120)
    assert record["status"] == "succeeded" and record["trials"][0]["run"] == first
    assert len(dragon.runs(runs_dir)) == 2  # the cancelled trial went on, not trained again


@pytest.mark.slow
def test_a_judge_objective_from_the_page_with_a_key_typed_there(mapped, model, runs_dir,
                                                                 evaluating, monkeypatch):  # fmt: skip
    """The judge form's key, typed in the page, reaches the sweep's job on stdin: its judge
    requests carry it, and no file of the sweep or its runs holds it."""
    from tests.sweeps.test_sweep_judge import answer

    typed = "sk-typed-in-the-sweep-form-5d1e"
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "2")
    with FakeOpenAI(answer=answer) as server:
        monkeypatch.setenv("DRAGONFARM_BACKEND", f"server:{server.url}|stand-in")
        judge = {"kind": "openai", "model": "page-judge", "url": server.url, "key": typed}
        sweep = sweep_values(("lora.r", "8, 16"), objective="judge_mean_score", judge=judge)
        picker, started, code, error = start(runs_dir, mapped, model, sweep)
        assert error == "" and "Started sweep" in started and typed not in code
        s = dragon.open_sweep(picker["value"])
        s.wait(timeout=120)
        assert s.status()["status"] == "succeeded", s.logs(40)
    asked = [r for r in server.requests if r["body"].get("model") == "page-judge"]
    assert asked and {r["headers"].get("authorization") for r in asked} == {f"Bearer {typed}"}
    assert s.trials["judge_mean_score"].notna().all()
    for path in runs_dir.rglob("*"):
        if path.is_file():
            assert typed.encode() not in path.read_bytes(), path
