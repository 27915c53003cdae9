"""Every numeric setting refuses NaN, the infinities, None (where its type has no None), text
and booleans, with the field named; and train(), prefer() and reinforce() refuse a keyword the
trainer does not understand before anything is written, listing the ones it does.

The numeric fields are found from the dataclasses' declared types, so a field added later is
covered by these tests without a new line.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir.train_config import ExtraArgs, extra_args
from dragonfarm_core.settings import Lora, SettingsError, TrainArgs, check_numbers
from dragonfarm_core.training.reinforcement import ReinforceArgs

NUMERIC = {
    Lora: ["r", "alpha", "dropout"],
    TrainArgs: [
        "epochs", "learning_rate", "batch_size", "grad_accum", "max_seq_len", "max_steps",
        "warmup_ratio", "weight_decay", "logging_steps", "save_steps", "seed",
    ],
}  # fmt: skip
FIELDS = [(cls, name) for cls, names in NUMERIC.items() for name in names]
BAD = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "text": "3",
    "a bool": True,
    "a list": [1],
}


def test_every_numeric_field_is_checked():
    for cls, names in NUMERIC.items():
        declared = [
            f.name for f in dataclasses.fields(cls) if f.type in ("int", "float", "int | None")
        ]
        assert declared == names, cls.__name__


@pytest.mark.parametrize(("cls", "name"), FIELDS, ids=[f"{c.__name__}.{n}" for c, n in FIELDS])
@pytest.mark.parametrize("bad", list(BAD))
def test_nan_inf_and_other_kinds_are_refused_with_the_field_named(cls, name, bad):
    with pytest.raises(SettingsError, match=rf"^{cls.__name__}\.{name}\b"):
        cls(**{name: BAD[bad]})


@pytest.mark.parametrize(("cls", "name"), FIELDS, ids=[f"{c.__name__}.{n}" for c, n in FIELDS])
def test_none_is_refused_unless_the_field_is_optional(cls, name):
    if name == "max_steps":  # `int | None`: None runs all epochs
        assert cls(**{name: None}).max_steps is None
        return
    with pytest.raises(SettingsError, match=rf"^{cls.__name__}\.{name} is None; it must be"):
        cls(**{name: None})


def test_the_messages_say_what_to_use():
    with pytest.raises(SettingsError, match=r"epochs = nan is not a finite number; use a value "
                       r"between 0.01 and 1000"):  # fmt: skip
        TrainArgs(epochs=math.nan)
    with pytest.raises(SettingsError, match=r"Lora.alpha = nan is not a finite number"):
        Lora(alpha=math.nan)
    with pytest.raises(SettingsError, match=r"TrainArgs.learning_rate is None; it must be a "
                       r"number \(a value between 1e-08 and 1.0\)"):  # fmt: skip
        TrainArgs(learning_rate=None)


def test_numpy_numbers_become_plain_ones():
    np = pytest.importorskip("numpy")
    args = TrainArgs(batch_size=np.int64(8), epochs=np.float32(1.5), max_seq_len=512.0)
    assert (type(args.batch_size), type(args.epochs), args.max_seq_len) == (int, float, 512)
    assert type(Lora(alpha=np.float64(16)).alpha) is float


def test_check_numbers_can_name_another_prefix():
    @dataclasses.dataclass
    class Knobs:
        rate: float = dataclasses.field(default=0.5, metadata={"min": 0, "max": 1})

        def __post_init__(self):
            check_numbers(self, "extra")

    with pytest.raises(SettingsError, match=r"^extra.rate = nan is not a finite number"):
        Knobs(math.nan)


@pytest.mark.parametrize("name", ["adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm"])
def test_trainer_extras_refuse_nan_and_inf(name):
    for value in (math.nan, math.inf):
        with pytest.raises(SettingsError, match=rf"TrainArgs.extra\['{name}'\] must be a finite"):
            ExtraArgs(**{name: value})


def test_reinforce_settings_refuse_nan_and_none():
    for name in ("group_size", "beta", "temperature", "max_new_tokens"):
        for value in (math.nan, None):
            with pytest.raises(SettingsError, match=name):
                ReinforceArgs(**{name: value})


# --- Unknown keywords, refused by the public API before anything is written. ---


@pytest.fixture
def tickets(tmp_path):
    rows = [
        {"q": f"Device {i} reboots", "good": f"Reset it ({i}).", "bad": "No."} for i in range(8)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    return dragon.dataset(tmp_path / "t.csv")


def _calls(tickets, model):
    sft = tickets.map(prompt="q", response="good")
    pairs = tickets.map_pairs(prompt="q", chosen="good", rejected="bad")
    prompts = tickets.map_prompts(prompt="q", reference="good")
    rewards = [dragon.reward("length", max_chars=100)]
    return {
        "train": lambda **kw: dragon.train(sft, model, **kw),
        "prefer": lambda **kw: dragon.prefer(pairs, model, **kw),
        "reinforce": lambda **kw: dragon.reinforce(prompts, model, rewards, **kw),
    }


@pytest.mark.parametrize("call", ["train", "prefer", "reinforce"])
@pytest.mark.parametrize("unknown", [{"lr": 1e-3}, {"label_smoothing_factor": 0.1}])
def test_an_unknown_keyword_is_refused_up_front_with_the_accepted_ones(
    runs_root, model_dir, tickets, call, unknown
):
    args = TrainArgs(epochs=1, max_seq_len=512, **unknown)
    assert args.extra == unknown  # TrainArgs passes it on to the trainer in `extra`
    with pytest.raises(SettingsError) as caught:
        _calls(tickets, str(model_dir))[call](args=args, runs_dir=runs_root)
    message = str(caught.value)
    assert f"unknown key(s) {next(iter(unknown))!r}" in message
    assert "the trainer understands lr_scheduler_type, eval_steps" in message
    assert "TrainArgs itself takes epochs, learning_rate" in message
    assert list(runs_root.iterdir()) == []


@pytest.mark.parametrize("call", ["prefer", "reinforce"])
def test_an_sft_only_keyword_is_refused_up_front_for_the_other_methods(
    runs_root, model_dir, tickets, call
):
    args = TrainArgs(epochs=1, max_seq_len=512, neftune_noise_alpha=5)
    with pytest.raises(SettingsError, match="neftune_noise_alpha'] works for sft runs for now"):
        _calls(tickets, str(model_dir))[call](args=args, runs_dir=runs_root)
    assert list(runs_root.iterdir()) == []


def test_the_accepted_list_is_the_trainers():
    with pytest.raises(SettingsError) as caught:
        extra_args({"lr": 1})
    for f in dataclasses.fields(ExtraArgs):
        assert f.name in str(caught.value)
