"""Train tab handlers: widgets from the settings dataclasses and back, the method and the
mapping it needs, the rewards builder and its dry run, the code preview, Start.

Trainer processes run tests/fake_trainer.py (the `runs_dir` fixture in conftest.py), so a run
takes well under a second and needs no model weights; the dry run samples from a scripted
backend that answers like a server.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import sys
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.method_args import DpoArgs, ReinforceArgs
from dragonfarm_core.methods import METHODS
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs
from ui import present, rewards_builder, train_defaults
from ui.settings_form import settings_fields, settings_widgets, shown_fields
from ui.tabs import train

SKIP = gr.skip()
WIDGETS = (*train.SETTINGS, ReinforceArgs)  # the order the tab passes their values
TICKET = "Reset it [(][0-9]+[)]"


@pytest.fixture
def prompts(tickets: dragon.Dataset) -> dragon.Dataset:
    return tickets.map_prompts(prompt="question", reference="answer")


@pytest.fixture
def pairs(tickets: dragon.Dataset) -> dragon.Dataset:
    return tickets.map_pairs(
        prompt="question", chosen="answer", rejected="No idea about {question}."
    )


class ScriptedBackend:
    """Answers like a server backend: its own model, replies in turn from a script."""

    name, model = "scripted", "scripted-model"

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.calls = replies, []

    def chat(self, model, messages, sampling, on_token=None) -> str:
        raise AssertionError("test_rewards generates in batches")

    def generate(self, model, conversations, sampling) -> list[str]:
        self.calls.append((conversations, sampling))
        return [self.replies[i % len(self.replies)] for i in range(len(conversations))]


@functools.cache
def _defaults() -> dict:
    with gr.Blocks():
        groups = {cls.__name__: settings_fields(cls) for cls in WIDGETS}
        groups["DpoArgs"] = settings_fields(DpoArgs, only=train.DPO_OWN)
    return {group: {name: w.value for name, w in ws.items()} for group, ws in groups.items()}


def default_values() -> dict:
    """What the settings widgets hold before anyone touches them, by group and field name."""
    return copy.deepcopy(_defaults())


def with_values(**changes) -> dict:
    """The settings, some changed: a field of the first group that has it (GRPO's before
    DPO's own), or DPO's own as dpo_<name>."""
    values = default_values()
    for name, value in changes.items():
        if name.startswith("dpo_"):
            values["DpoArgs"][name.removeprefix("dpo_")] = value
        else:
            values[next(g for g, fields in values.items() if name in fields)][name] = value
    return values


@functools.cache
def _reward_defaults() -> dict:
    with gr.Blocks():
        return {name: w.value for name, w in rewards_builder.reward_widgets().items()}


def reward_values(**changes) -> dict:
    """The rewards builder's type-specific widgets as a person left them, by field name."""
    unknown = set(changes) - set(_reward_defaults())
    assert not unknown, unknown
    return {**_reward_defaults(), **changes}


def start_inputs(mapped, model, method: str, settings: dict) -> dict:
    """Start's inputs by name, as the tab passes them (no parent, no name, beta 0.1)."""
    return {"mapped": mapped, "model": model, "method": method, "parent": "", "name": "",
            "beta": 0.1, "rewards": [], "settings": settings}  # fmt: skip


def run_snippet(code: str) -> dict:
    """exec a code panel's text in a fresh namespace, as a person pasting it would."""
    namespace: dict = {"__name__": "__snippet__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<code panel>", "exec"), namespace)
    return namespace


def test_widgets_come_from_the_dataclass_fields():
    with gr.Blocks():
        widgets = {cls: settings_widgets(cls) for cls in train.SETTINGS}
    for cls, made in widgets.items():
        fields = shown_fields(cls)
        assert [w.label for w in made] == [f.metadata["label"] for f in fields]
        for widget, field in zip(made, fields, strict=True):
            assert widget.info.startswith(field.metadata["help"])
            assert widget.elem_id == f"train-{cls.__name__.lower()}-{field.name}"
    by_name = {w.elem_id.rsplit("-", 1)[1]: w for ws in widgets.values() for w in ws}
    rank = by_name["r"]
    assert isinstance(rank, gr.Number) and rank.info.endswith("(1 to 512)")
    assert by_name["seed"].info.endswith("(0 to 4,294,967,295)")
    assert rank.precision == 0 and rank.value == Lora().r
    assert by_name["learning_rate"].precision is None
    # Optional: empty means all epochs. A text box, as Gradio's number box shows empty as 0.
    steps = by_name["max_steps"]
    assert isinstance(steps, gr.Textbox) and steps.value == "" and steps.placeholder == "empty"
    assert isinstance(by_name["device"], gr.Dropdown)
    assert [c[1] for c in by_name["device"].choices] == ["auto", "cuda", "mps", "cpu"]
    assert isinstance(by_name["gradient_checkpointing"], gr.Checkbox)
    assert isinstance(by_name["target_modules"], gr.Textbox)
    assert "extra" not in by_name


def test_widget_values_turn_back_into_the_dataclasses():
    assert train.read_settings(default_values()) == (
        Lora(),
        TrainArgs(),
        Hardware(),
    )
    values = with_values(
        r=8, target_modules="q_proj, v_proj", max_steps=40, batch_size=2, device="cpu"
    )
    lora, args, hardware = train.read_settings(values)
    assert lora == Lora(r=8, target_modules=("q_proj", "v_proj"))
    assert args == TrainArgs(max_steps=40, batch_size=2)
    assert hardware == Hardware(device="cpu")
    # The optional max_steps arrives as text from its box: empty is "no limit".
    for text, steps in (("", None), (" 40 ", 40), ("1,000", 1000)):
        assert train.read_settings(with_values(max_steps=text))[1].max_steps == steps
    with pytest.raises(
        SettingsError, match=r"TrainArgs.max_steps \(Max steps\) is 'ten'; enter a whole"
    ):
        train.read_settings(with_values(max_steps="ten"))
    with pytest.raises(SettingsError, match="max_steps"):
        train.read_settings(with_values(max_steps="0"))


def test_bad_values_are_refused_naming_the_field():
    with pytest.raises(SettingsError, match=r"TrainArgs.epochs \(Epochs\) is empty"):
        train.read_settings(with_values(epochs=None))
    with pytest.raises(SettingsError, match="Lora.dropout = 0.95 is above the maximum"):
        train.read_settings(with_values(dropout=0.95))
    with pytest.raises(SettingsError, match="load_in_4bit needs an NVIDIA GPU"):
        train.read_settings(with_values(load_in_4bit=True, device="cpu"))


def test_code_preview_needs_data_and_shows_changed_settings(mapped, model, runs_dir: Path):
    hint, error = train.preview_code(
        None, model, "sft", "", "", 0.1, [], default_values(), runs_dir=runs_dir
    )
    assert hint == train.CODE_HINT and error == ""
    values = with_values(max_steps=40, batch_size=2, r=8)
    code, error = train.preview_code(
        mapped, model, "sft", "", "faq", 0.1, [], values, runs_dir=runs_dir
    )
    assert error == ""
    assert "lora=dragon.Lora(r=8)" in code
    assert "args=dragon.TrainArgs(batch_size=2, max_steps=40)" in code
    assert 'name="faq"' in code and f'runs_dir="{runs_dir}"' in code
    code, error = train.preview_code(
        mapped, model, "sft", "", "", 0.1, [], with_values(r=0), runs_dir=runs_dir
    )
    assert code == SKIP and "Lora.r = 0 is below the minimum 1" in error


def test_a_preview_replayed_for_the_same_values_changes_nothing(mapped, model, runs_dir: Path):
    values = start_inputs(mapped, model, "sft", with_values(max_steps=3))
    code, error, previewed = train.preview_changed(None, **values, runs_dir=runs_dir)
    assert "max_steps=3" in code and error == "" and previewed == code
    # Start or Run elsewhere wrote the panel since: the same values again leave it alone.
    assert train.preview_changed(previewed, **values, runs_dir=runs_dir) == (SKIP,) * 3
    values["settings"] = with_values(max_steps=4)
    code, _, previewed = train.preview_changed(previewed, **values, runs_dir=runs_dir)
    assert "max_steps=4" in code and previewed == code


def test_putting_a_refused_value_back_clears_its_error(mapped, model, runs_dir: Path):
    fine = start_inputs(mapped, model, "sft", with_values(max_steps=3))
    bad = {**fine, "settings": with_values(max_steps=3, r=0)}
    _, _, previewed = train.preview_changed(None, **fine, runs_dir=runs_dir)
    code, error, previewed = train.preview_changed(previewed, **bad, runs_dir=runs_dir)
    assert code == SKIP and "Lora.r = 0" in error and previewed is None
    code, error, _ = train.preview_changed(previewed, **fine, runs_dir=runs_dir)
    assert "max_steps=3" in code and error == ""


@pytest.mark.slow
def test_start_returns_at_once_and_selects_the_run(mapped, model, runs_dir: Path):
    values = with_values(max_steps=6, batch_size=2, logging_steps=1)
    preview, _ = train.preview_code(
        mapped, model, "sft", "", "", 0.1, [], values, runs_dir=runs_dir
    )
    selected, started, code, error = train.start(
        mapped, model, "sft", "", "", 0.1, [], values, runs_dir=runs_dir
    )
    assert error == ""
    run = dragon.open_run(selected)
    assert run.dir.parent == runs_dir and run.id in started
    assert run.config["args"]["max_steps"] == 6 and run.config["args"]["batch_size"] == 2
    assert code == present.portable_code(dragon.code(run))
    assert preview == code  # the code shown before Start is the code of the run it starts
    assert run.wait(timeout=30).state == "succeeded"


@pytest.mark.slow
def test_start_continues_from_a_succeeded_run(mapped, model, runs_dir: Path):
    first = dragon.train(mapped, model.name, runs_dir=runs_dir, wait=True)
    choices = train.parent_choices(runs_dir)
    assert choices[0] == (train.NO_PARENT, "") and choices[1][1] == str(first.dir)
    selected, _, code, error = train.start(
        mapped,
        model,
        "sft",
        str(first.dir),
        "round-2",
        0.1,
        [],
        default_values(),
        runs_dir=runs_dir,
    )
    assert error == ""
    child = dragon.open_run(selected)
    assert child.config["continued_from"] == str(first.dir) and child.name == "round-2"
    assert f'parent = dragon.open_run("{first.dir}")' in code
    child.wait(timeout=30)


def test_start_refusals_are_shown_and_select_nothing(mapped, model, runs_dir: Path):
    with pytest.warns(UserWarning):
        out = train.start(None, model, "sft", "", "", 0.1, [], default_values(), runs_dir=runs_dir)
    assert out[:3] == (SKIP,) * 3 and "Mapping tab" in out[3]
    pairs = dragon.dataset(mapped.frame).map_pairs("question", "answer", "answer")
    with pytest.warns(UserWarning):
        out = train.start(pairs, model, "sft", "", "", 0.1, [], default_values(), runs_dir=runs_dir)
    assert out[0] == SKIP and "holds preference pairs" in out[3] and "Mapping tab" in out[3]
    with pytest.warns(UserWarning):
        out = train.start(
            mapped, model, "sft", "", "", 0.1, [], with_values(epochs=None), runs_dir=runs_dir
        )
    assert "TrainArgs.epochs (Epochs) is empty" in out[3]
    assert dragon.runs(runs_dir).empty


def test_the_parent_picker_reads_only_when_runs_changed(mapped, model, runs_dir: Path):
    update, seen = train.refresh_parents(runs_dir, None, "")
    assert update["choices"] == [(train.NO_PARENT, "")] and update["value"] == ""
    assert train.refresh_parents(runs_dir, seen, "") == (SKIP, SKIP)


# ---- methods and the mapping each needs ------------------------------------------------------


def test_every_method_is_offered_and_an_unknown_one_refused():
    assert [value for _, value in train.METHOD_CHOICES] == ["sft", "dpo", "orpo", "grpo"]
    with pytest.raises(ValueError, match="not available"):
        train.read_spec(None, None, "ppo", "", "", 0.1, [], [], Path("."))


def test_a_mapping_that_does_not_fit_the_method_says_how_to_fix_it(mapped, pairs, prompts):
    assert train.kind_problem("sft", mapped) is None
    assert train.kind_problem("dpo", pairs) is None and train.kind_problem("orpo", pairs) is None
    assert train.kind_problem("grpo", prompts) is None
    assert train.kind_problem("grpo", None) is None  # nothing mapped yet: another hint says so
    problem = train.kind_problem("grpo", mapped)
    assert problem == (
        "GRPO trains on prompts for RL, but the mapped dataset holds prompt → response rows. "
        "In the Mapping tab, choose “Prompts for RL (GRPO)” and map its columns again, or "
        "pick SFT here."
    )
    problem = train.kind_problem("dpo", prompts)
    assert "“Preference pairs (DPO / ORPO)”" in problem and problem.endswith("pick GRPO here.")
    assert "pick DPO or ORPO here" in train.kind_problem("sft", pairs)


def test_the_preview_and_start_refuse_a_mismatched_mapping(prompts, model, runs_dir: Path):
    code, error = train.preview_code(
        prompts, model, "dpo", "", "", 0.1, [], default_values(), runs_dir=runs_dir
    )
    assert code.startswith("# DPO trains on preference pairs") and error == ""
    note = train.kind_note("dpo", prompts)
    assert "Problem:" in note and "DPO trains on preference pairs" in note
    assert train.kind_note("grpo", prompts) == ""
    with pytest.warns(UserWarning, match="DPO trains on preference pairs"):
        out = train.start(prompts, model, "dpo", "", "", 0.1, [], default_values(),
                          runs_dir=runs_dir)  # fmt: skip
    assert out[0] == SKIP and "Preference pairs (DPO / ORPO)" in out[3]
    assert dragon.runs(runs_dir).empty


@pytest.mark.slow
def test_dpo_starts_prefer_and_its_code_is_the_runs_code(pairs, model, runs_dir: Path):
    values = with_values(max_steps=4, batch_size=2, dpo_loss_type="ipo")
    preview, error = train.preview_code(
        pairs, model, "dpo", "", "", 0.2, [], values, runs_dir=runs_dir
    )
    assert error == "" and "run = dragon.prefer(" in preview
    assert 'method="dpo",\n    beta=0.2,\n    loss_type="ipo",\n    label_smoothing=0.0,' in preview
    selected, started, code, error = train.start(
        pairs, model, "dpo", "", "", 0.2, [], values, runs_dir=runs_dir
    )
    assert error == ""
    run = dragon.open_run(selected)
    assert run.method == "dpo"
    assert run.config["method_args"] == {"beta": 0.2, "loss_type": "ipo", "label_smoothing": 0.0}
    assert preview == code
    run.wait(timeout=30)
    with pytest.warns(UserWarning, match="Beta is empty"):
        train.start(pairs, model, "orpo", "", "", None, [], values, runs_dir=runs_dir)
    orpo = train.preview_code(pairs, model, "orpo", "", "", 0.2, [], values, runs_dir=runs_dir)
    assert orpo[1] == "" and "beta=0.2,\n" in orpo[0] and "loss_type" not in orpo[0]
    smoothing = with_values(dpo_label_smoothing=0.1)  # DPO's own loss, sigmoid, takes none
    code, error = train.preview_code(pairs, model, "dpo", "", "", 0.2, [], smoothing,
                                     runs_dir=runs_dir)  # fmt: skip
    assert code == SKIP and "set loss_type=&#x27;robust&#x27;, or label_smoothing=0" in error


def test_the_dpo_loss_box_shows_for_dpo_alone():
    shown = {m: [u["visible"] for u in train_defaults.method_boxes(m)] for m in METHODS}
    assert shown == {"sft": [False, False, False], "dpo": [True, True, False],
                     "orpo": [True, False, False], "grpo": [False, False, True]}  # fmt: skip


# ---- the rewards builder ----------------------------------------------------------------------


def test_an_optional_number_is_read_from_its_text_box():
    length = rewards_builder.build_reward("length", 0.5, "", reward_values(max_chars=" 300 "))
    assert length == dragon.reward("length", weight=0.5, max_chars=300)
    empty = reward_values(min_chars=10, max_chars="")  # an empty box is "not set"
    assert rewards_builder.build_reward("length", 0.5, "", empty) == dragon.reward(
        "length", weight=0.5, min_chars=10
    )
    out = rewards_builder.add_reward([], "length", 0.5, "", reward_values(max_chars="lots"))
    assert "Reward.max_chars" in out[-1] and "whole number" in out[-1]


def test_the_builder_shows_the_fields_each_reward_type_reads():
    names = [f.name for f in rewards_builder.REWARD_OPTIONS]
    with gr.Blocks():
        by_name = rewards_builder.reward_widgets()
    assert list(by_name) == names
    assert [w.elem_id for w in by_name.values()] == [f"train-reward-{n}" for n in names]
    assert [n for n, w in by_name.items() if w.visible] == ["pattern", "case_sensitive"]
    assert isinstance(by_name["mode"], gr.Radio) and by_name["mode"].choices[1][1] == "all"
    # May be empty, so a text box (Gradio's number box would show empty as 0).
    assert isinstance(by_name["max_chars"], gr.Textbox) and by_name["max_chars"].value == ""
    assert isinstance(by_name["case_sensitive"], gr.Checkbox)
    shown = lambda t: [  # noqa: E731
        n for n, u in zip(names, rewards_builder.show_reward_fields(t), strict=True) if u["visible"]
    ]
    assert shown("regex") == ["pattern", "case_sensitive"]
    assert shown("keyword") == ["case_sensitive", "words", "mode"]
    assert shown("command") == ["command", "input", "score_from", "min_score", "max_score",
                                "timeout"]  # fmt: skip
    assert shown("custom") == ["file", "fn"] and shown("numeric") == []


def test_builder_values_become_the_same_reward_objects_as_the_api(tmp_path: Path):
    custom = tmp_path / "cites.py"
    custom.write_text("def score(prompt, completion, reference, row):\n    return 1.0\n")
    # Fields of other types may hold leftovers from an earlier choice: they are ignored.
    leftovers = {"pattern": "T-", "words": "refund", "file": "nowhere.py"}
    cases = [
        (("regex", 2, "ticket"), {"pattern": r"T-\d{4}", "case_sensitive": True},
         dragon.reward("regex", weight=2, name="ticket", pattern=r"T-\d{4}", case_sensitive=True)),
        (("json", 1, ""), {"keys": " id, status ,"}, dragon.reward("json", keys=["id", "status"])),
        (("length", 0.5, None), {"min_chars": 0, "max_chars": 300},
         dragon.reward("length", weight=0.5, max_chars=300)),
        (("keyword", 1, ""), {"words": "reset, reboot", "mode": "all"},
         dragon.reward("keyword", words=["reset", "reboot"], mode="all")),
        (("command", 1, ""), {"command": f"{sys.executable} -c 'import sys'", "timeout": 5},
         dragon.reward("command", command=[sys.executable, "-c", "import sys"], timeout=5)),
        (("custom", 1, ""), {"file": str(custom), "fn": "score"},
         dragon.reward("custom", file=str(custom), fn="score")),
        (("exact", 1, ""), {}, dragon.reward("exact")),
    ]  # fmt: skip
    for (kind, weight, name), fields, expected in cases:
        values = reward_values(**(leftovers | fields))
        assert rewards_builder.build_reward(kind, weight, name, values) == expected, kind


def test_adding_and_removing_rewards_keeps_the_list(tmp_path: Path):
    rewards, table, picker, message = rewards_builder.add_reward(
        [], "regex", 1, "", reward_values(pattern=TICKET)
    )
    assert message == "" and rewards == [dragon.reward("regex", pattern=TICKET)]
    rewards, table, picker, message = rewards_builder.add_reward(
        rewards, "length", 0.2, "", reward_values(max_chars=40)
    )
    assert list(table["name"]) == ["regex", "length"] and list(table["weight"]) == [1, 0.2]
    assert list(table["settings"]) == [f'pattern="{TICKET}"', "max_chars=40"]
    assert picker["choices"] == ["regex", "length"]
    # A bad reward is refused with the field named; the list is left as it was.
    out = rewards_builder.add_reward(rewards, "regex", 1, "", reward_values(pattern="("))
    assert (
        out[:3] == (SKIP,) * 3 and "Reward.pattern &#x27;(&#x27; is not a valid regular" in out[3]
    )
    short = reward_values(max_chars=9)
    named = rewards_builder.add_reward(rewards, "length", 1, "short", short)[0]
    out = rewards_builder.add_reward(named, "json", 1, "short", reward_values())
    assert out[:3] == (SKIP,) * 3 and "Two rewards have the same name" in out[3]
    out = rewards_builder.add_reward(rewards, "length", None, "", reward_values(max_chars=9))
    assert "Reward.weight is empty" in out[3]
    rewards, table, picker, message = rewards_builder.remove_reward(rewards, "regex")
    assert rewards == [dragon.reward("length", weight=0.2, max_chars=40)]
    assert list(table["name"]) == ["length"] and picker["choices"] == ["length"]
    assert "Pick a reward" in rewards_builder.remove_reward(rewards, None)[3]


# ---- GRPO: start, code, dry run ---------------------------------------------------------------

TWO_REWARDS = [dragon.reward("regex", pattern=TICKET), dragon.reward("length", max_chars=40,
                                                                     weight=0.5)]  # fmt: skip


@pytest.mark.slow
def test_grpo_needs_a_reward_then_starts_reinforce(prompts, model, runs_dir: Path):
    values = with_values(max_steps=3, group_size=2, max_new_tokens=16, max_seq_len=256)
    code, error = train.preview_code(prompts, model, "grpo", "", "", 0.1, [], values,
                                     runs_dir=runs_dir)  # fmt: skip
    assert code == train.NO_REWARDS_HINT and error == ""
    with pytest.warns(UserWarning, match="at least one reward"):
        train.start(prompts, model, "grpo", "", "", 0.1, [], values, runs_dir=runs_dir)
    preview, error = train.preview_code(
        prompts, model, "grpo", "", "rl", 0.1, TWO_REWARDS, values, runs_dir=runs_dir
    )
    assert error == "" and "run = dragon.reinforce(" in preview
    assert f'dragon.reward("regex", pattern="{TICKET}"),' in preview
    assert "group_size=2,\n    beta=0.04,\n    temperature=1.0,\n    max_new_tokens=16," in preview
    selected, started, code, error = train.start(
        prompts, model, "grpo", "", "rl", 0.1, TWO_REWARDS, values, runs_dir=runs_dir
    )
    assert error == "", error
    run = dragon.open_run(selected)
    assert run.method == "grpo" and run.name == "rl"
    assert [r["name"] for r in run.config["method_args"]["rewards"]] == ["regex", "length"]
    assert run.config["method_args"]["group_size"] == 2
    assert preview == code  # the code shown before Start is the code of the run it starts
    run.wait(timeout=30)

    # Pasted into Python, the panel's code starts a run configured exactly like this one.
    again = run_snippet(code)["run"]
    assert again.dir != run.dir
    for key in ("method", "method_args", "args", "lora", "hardware", "dataset"):
        assert again.config[key] == run.config[key], key
    again.wait(timeout=30)


@pytest.mark.parametrize("method", ["sft", "dpo", "orpo", "grpo"])
@pytest.mark.slow
def test_the_tabs_spec_is_the_one_the_api_function_writes(
    method, mapped, pairs, prompts, model, runs_dir: Path
):
    """The widgets describe the same RunSpec as dragon.train/prefer/reinforce with the same
    settings: both read back from config.json alike."""
    data = {"sft": mapped, "dpo": pairs, "orpo": pairs, "grpo": prompts}[method]
    values = with_values(max_steps=3, batch_size=2, r=8, device="cpu", max_seq_len=256,
                         group_size=2, max_new_tokens=16)  # fmt: skip
    rewards = TWO_REWARDS if method == "grpo" else []
    spec = train.read_spec(data, model, method, "", " faq ", 0.2, rewards, values, runs_dir)
    lora, args, hardware = train.read_settings(values)
    common = {"lora": lora, "args": args, "hardware": hardware, "name": "faq",
              "runs_dir": runs_dir}  # fmt: skip
    if method == "sft":
        run = dragon.train(data, model.name, **common)
    elif method == "grpo":
        run = dragon.reinforce(data, model.name, TWO_REWARDS, group_size=2, max_new_tokens=16,
                               **common)  # fmt: skip
    else:
        run = dragon.prefer(data, model.name, method=method, beta=0.2, **common)
    assert spec == dragon.RunSpec.from_dict(run.config, run_dir=run.dir)
    assert spec.to_dict()["method_args"] == run.config["method_args"]
    run.wait(timeout=30)


def test_grpo_settings_are_checked_naming_the_field(prompts, model, runs_dir: Path):
    code, error = train.preview_code(prompts, model, "grpo", "", "", 0.1, TWO_REWARDS,
                                     with_values(group_size=None), runs_dir=runs_dir)  # fmt: skip
    assert code == SKIP and "ReinforceArgs.group_size (Group size) is empty" in error
    with pytest.warns(UserWarning, match="group_size = 1 is below the minimum 2"):
        out = train.start(prompts, model, "grpo", "", "", 0.1, TWO_REWARDS,
                          with_values(group_size=1), runs_dir=runs_dir)  # fmt: skip
    assert out[0] == SKIP
    assert dragon.runs(runs_dir).empty


def test_the_dry_run_scores_sampled_completions(prompts, model, runs_dir: Path):
    backend = ScriptedBackend(["Reset it (1).", "Reset it (1)." + " and more" * 9])
    rl = with_values(group_size=2, max_new_tokens=16, temperature=0.7)["ReinforceArgs"]
    table, summary, code, message = train.dry_run(
        prompts, model, "", TWO_REWARDS, rl, backend=backend, runs_dir=runs_dir
    )
    assert message == ""
    frame = table["value"]
    assert table["visible"] is True
    assert list(frame.columns) == ["prompt", "completion", "regex", "length", "total"]
    assert len(frame) == train.DRY_RUN_PROMPTS * 2
    assert list(frame["total"][:2]) == [1.5, 1.0]
    assert "**Mean scores** over 6 completions: regex 1, length 0.5, total 1.25." in summary
    ((conversations, sampling),) = backend.calls
    assert len(conversations) == 6 and sampling.temperature == 0.7
    assert sampling.max_new_tokens == 16
    # The code panel's dry run, pasted into Python with the same backend, gives the same table.
    previous = dragon.set_backend(backend)
    try:
        again = run_snippet(code)["table"]
    finally:
        dragon.set_backend(previous)
    pd.testing.assert_frame_equal(again, frame)


def test_the_dry_run_says_what_is_missing(mapped, prompts, model, tmp_path: Path, runs_dir: Path):
    backend = ScriptedBackend(["same"])
    rl = default_values()["ReinforceArgs"]
    out = train.dry_run(prompts, model, "", [], rl, backend=backend, runs_dir=runs_dir)
    assert out[:3] == (SKIP,) * 3 and "Add a reward first" in out[3]
    out = train.dry_run(mapped, model, "", TWO_REWARDS, rl, backend=backend, runs_dir=runs_dir)
    assert "Prompts for RL (GRPO)" in out[3]
    no_reference = dragon.dataset(prompts.frame).map_prompts(prompt="question")
    out = train.dry_run(
        no_reference, model, "", [dragon.reward("exact")], rl, backend=backend, runs_dir=runs_dir
    )
    assert "compare completions with a reference answer" in out[3]
    # Every completion alike: the summary says GRPO could learn nothing from these prompts.
    table, summary, _, message = train.dry_run(prompts, model, "", TWO_REWARDS, rl,
                                               backend=backend, runs_dir=runs_dir)  # fmt: skip
    assert message == "" and "3 of 3 prompts gave all their completions the same total" in summary
    broken = tmp_path / "broken.py"
    broken.write_text("def reward(prompt, completion, reference, row):\n    return 1 / 0\n")
    custom = [dragon.reward("custom", file=str(broken))]
    _, summary, _, message = train.dry_run(
        prompts, model, "", custom, rl, backend=backend, runs_dir=runs_dir
    )
    assert "Warning: Reward 'custom' failed on 12 of 12" in summary
    assert "ZeroDivisionError" in summary


def test_after_start_the_monitor_is_one_click_away(tmp_path: Path):
    from ui import layout

    assert train.offer_monitor("")["visible"] is True
    assert train.offer_monitor('<div class="df-error">no</div>')["visible"] is False
    app = layout.build_app(tmp_path / "runs")
    ids = {block._id: block for block in app.blocks.values()}
    [dep] = [d for d in app.fns.values() if d.fn is train.open_monitor]
    assert [(ids[b].elem_id, event) for b, event in dep.targets] == [
        ("train-open-monitor", "click")
    ]
    [tabs] = [b for b in app.blocks.values() if isinstance(b, gr.Tabs)]
    assert [o._id for o in dep.outputs] == [tabs._id]
    assert train.open_monitor().selected == train.MONITOR_TAB
    assert train.MONITOR_TAB in {t.id for t in app.blocks.values() if isinstance(t, gr.Tab)}
