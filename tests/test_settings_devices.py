"""Hardware(devices=..., accelerate_config=...): what a run on several devices may ask for, and
the methods that refuse it, each refusal saying what to write instead."""

from __future__ import annotations

import pytest

from dragonfarm_core.method_args import GrpoArgs
from dragonfarm_core.rewards import reward
from dragonfarm_core.settings import Hardware, SettingsError, from_dict, to_dict
from dragonfarm_core.spec import RunSpec


def test_a_count_or_a_gpu_list_gives_the_processes_and_round_trips():
    assert Hardware().processes == 1 and Hardware(devices=1).processes == 1
    assert Hardware(device="cpu", devices=2).processes == 2
    hw = Hardware(device="cuda", devices="cuda:0, 2")
    assert hw.devices == "cuda:0,2" and hw.processes == 2
    assert from_dict(Hardware, to_dict(hw)) == hw


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"devices": 0}, "not a count from 1 to 1024"),
        ({"devices": True}, "write a count (devices=2) or GPUs (devices='cuda:0,1')"),
        ({"devices": 2.5}, "write a count"),
        ({"devices": "0,1"}, "write a count"),
        ({"devices": "cuda:1,1"}, "names a GPU twice"),
        ({"devices": "cuda:0,1", "device": "cpu"}, "set device='cuda'"),
        ({"devices": 2, "device": "mps"}, "Apple MPS is one device"),
        ({"devices": 2, "device": "cuda:1"}, "list the GPUs in devices"),
    ],
)
def test_nonsense_devices_are_refused_saying_what_to_write(given, says):
    with pytest.raises(SettingsError, match="Hardware.device") as caught:
        Hardware(**given)
    assert says in str(caught.value)


def test_an_accelerate_config_is_resolved_and_must_exist(tmp_path, monkeypatch):
    config = tmp_path / "fsdp.yaml"
    config.write_text("distributed_type: FSDP\n")
    monkeypatch.chdir(tmp_path)
    assert Hardware(devices=2, accelerate_config="fsdp.yaml").accelerate_config == str(config)
    with pytest.raises(SettingsError, match="is not a file; write one with `accelerate config"):
        Hardware(devices=2, accelerate_config="missing.yaml")
    with pytest.raises(SettingsError, match="needs devices too"):
        Hardware(accelerate_config=str(config))


@pytest.mark.parametrize("method", ["sft", "dpo", "orpo", "grpo"])
def test_every_method_takes_several_devices(method):
    group = GrpoArgs(rewards=[reward("numeric")]) if method == "grpo" else None
    spec = RunSpec(method, {}, "some/model", hardware=Hardware(device="cpu", devices=2),
                   method_args=group)  # fmt: skip
    assert spec.to_dict()["hardware"]["devices"] == 2
