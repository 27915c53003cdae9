"""Deployment profiles as core policy: what each turns off, where runs live, and the app and
`dragonfarm check` saying which profile is active. The spaces profile never offers, nor accepts
through an API call, a reward that runs the user's code."""

from __future__ import annotations

import warnings
from pathlib import Path

import gradio as gr
import pytest
from test_tab_train import reward_values, with_values  # the Train tab's widget values

import dragonfarm_core as dragon
from dragonfarm_core import environment, profiles
from dragonfarm_core.profiles import get_profile
from ui import layout, rewards_builder
from ui.tabs import train

COMMAND = dragon.reward("command", command=["python", "-c", "print(1)"])


@pytest.fixture
def spaces(monkeypatch, tmp_path: Path) -> profiles.Profile:
    monkeypatch.setattr(profiles, "SPACES_DATA", tmp_path / "no-data")
    return get_profile("spaces")


def test_local_turns_nothing_off():
    local = get_profile("local")
    assert local.off == {} and not local.ephemeral_runs
    assert all(local.reward_refusal(t) is None for t in rewards_builder.REWARD_TYPES)
    assert local.summary() == "profile 'local'"


def test_spaces_turns_off_user_code_and_says_why(spaces):
    for kind in ("command", "custom"):
        refusal = spaces.reward_refusal(kind)
        assert refusal and "'spaces' profile turns off" in refusal and "profile 'local'" in refusal
    assert spaces.reward_refusal("regex") is None
    assert spaces.summary().startswith("profile 'spaces' (off: command and custom rewards")


def test_spaces_runs_live_on_the_persistent_disk_or_vanish_visibly(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(profiles, "SPACES_DATA", tmp_path / "missing")
    temporary = get_profile("spaces")
    assert temporary.ephemeral_runs and "runs folder is temporary" in temporary.summary()
    folder = profiles.runs_dir_for(None, temporary)
    assert "runs vanish when it restarts" in layout.where_runs_go(folder, temporary)
    chosen = layout.where_runs_go(tmp_path / "chosen", temporary)  # --runs-dir given
    assert "vanish" not in chosen and "off: command and custom rewards" in chosen

    (tmp_path / "data").mkdir()
    monkeypatch.setattr(profiles, "SPACES_DATA", tmp_path / "data")
    persistent = get_profile("spaces")
    assert not persistent.ephemeral_runs
    assert profiles.runs_dir_for(None, persistent) == tmp_path / "data" / "dragonfarm_runs"


def test_lab_and_unknown_profiles_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="'lab' profile .* not available"):
        get_profile("lab")
    with pytest.raises(ValueError, match="use one of local, spaces"):
        get_profile("cloud")
    assert profiles.profile_names() == ["local", "spaces"]


def test_the_spaces_builder_offers_no_user_code_rewards(spaces):
    offered = [t for _, t in rewards_builder.offered_types(spaces)]
    assert "command" not in offered and "custom" not in offered and "regex" in offered
    assert len(rewards_builder.offered_types(get_profile("local"))) == len(
        rewards_builder.REWARD_TYPES
    )
    with gr.Blocks():
        rewards_builder.build_rewards(spaces)  # builds with the shorter list


def test_an_api_call_cannot_add_or_start_a_user_code_reward_on_spaces(spaces, tmp_path: Path):
    values = reward_values(command="python -c print(1)")
    out = rewards_builder.add_reward([], "command", 1.0, "", *values, profile=spaces)
    assert out[:3] == (gr.skip(),) * 3 and "turns off" in out[3]
    local = rewards_builder.add_reward([], "command", 1.0, "", *values)
    assert local[0][0].type == "command"  # the local profile allows it

    runs_dir = tmp_path / "runs"
    prompts = dragon.dataset(dragon.example_data()).map_prompts("{subject}")
    model = dragon.ResolvedModel.bundled()
    with warnings.catch_warnings(), pytest.warns(UserWarning, match="turns off"):
        out = train.start(prompts, model, "grpo", "", "", 0.1, [COMMAND], *with_values(),
                          runs_dir=runs_dir, profile=spaces)  # fmt: skip
    assert out[:3] == (gr.skip(),) * 3 and "turns off" in out[3]
    assert not runs_dir.exists() or dragon.runs(runs_dir).empty
    dry = train.dry_run(prompts, model, "", [COMMAND], *with_values()[train.N_SETTINGS :],
                        runs_dir=runs_dir, profile=spaces)  # fmt: skip
    assert "turns off" in dry[-1]


def test_check_names_the_active_profile(monkeypatch, spaces):
    monkeypatch.setenv(profiles.PROFILE_ENV, "spaces")
    facts = {"profile": environment._profile()}
    assert facts["profile"] == spaces.summary()
    monkeypatch.setenv(profiles.PROFILE_ENV, "nope")
    assert "Unknown profile 'nope'" in environment._profile()
