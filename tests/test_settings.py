import dataclasses

import pytest

from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs, from_dict, to_dict


def test_defaults_follow_the_manual():
    assert (Lora().r, Lora().alpha, Lora().dropout, Lora().target_modules) == (16, 32, 0.05, "auto")
    a = TrainArgs()
    assert (a.epochs, a.learning_rate, a.batch_size, a.grad_accum, a.max_seq_len) == (
        3,
        2e-4,
        4,
        4,
        1024,
    )
    assert (a.max_steps, a.warmup_ratio, a.weight_decay, a.logging_steps, a.save_steps) == (
        None,
        0.03,
        0,
        5,
        100,
    )
    assert (a.gradient_checkpointing, a.seed) == (False, 42)
    assert Hardware() == Hardware(device="auto", dtype="auto", load_in_4bit=False)


def test_unknown_keywords_travel_in_extra():
    a = TrainArgs(epochs=1, lr_scheduler="cosine")
    assert a.extra == {"lr_scheduler": "cosine"}
    assert TrainArgs(extra={"a": 1}, b=2).extra == {"a": 1, "b": 2}


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"warmup_ratio": 0.9}, "warmup_ratio"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"epochs": "3"}, "epochs"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_train_args_name_the_field(kwargs, field):
    with pytest.raises(SettingsError, match=f"TrainArgs.{field}"):
        TrainArgs(**kwargs)


def test_whole_floats_become_ints():
    assert TrainArgs(batch_size=8.0).batch_size == 8


def test_lora_and_hardware_validation():
    with pytest.raises(SettingsError, match="Lora.r"):
        Lora(r=0)
    with pytest.raises(SettingsError, match="Lora.r"):
        Lora(r=8.5)
    with pytest.raises(SettingsError, match="target_modules"):
        Lora(target_modules=[])
    assert Lora(target_modules=["q_proj", "v_proj"]).target_modules == ("q_proj", "v_proj")
    with pytest.raises(SettingsError, match="Hardware.device"):
        Hardware(device="tpu")
    with pytest.raises(SettingsError, match="load_in_4bit"):
        Hardware(device="cpu", load_in_4bit=True)


def test_round_trip_through_dicts():
    for s in (
        Lora(r=8, target_modules=("q_proj",)),
        TrainArgs(max_steps=7, foo=1),
        Hardware(dtype="float32"),
    ):
        assert from_dict(type(s), to_dict(s)) == s


def test_every_field_has_ui_metadata():
    for cls in (Lora, TrainArgs, Hardware):
        for f in dataclasses.fields(cls):
            assert f.metadata["label"] and f.metadata["help"], f"{cls.__name__}.{f.name}"
