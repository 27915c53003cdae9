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
from dragonfarm_core import environment
from dragonfarm_core.auth import profiles
from dragonfarm_core.auth.profiles import get_profile
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


def test_an_unknown_profile_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="use one of local, lab, spaces"):
        get_profile("cloud")
    assert profiles.profile_names() == ["local", "lab", "spaces"]


@pytest.fixture
def lab_env(monkeypatch, tmp_path: Path) -> Path:
    """No lab setting from the environment; the working folder is a fresh one."""
    for name in (profiles.LAB_ROOT_ENV, profiles.USER_HEADER_ENV, profiles.MAX_QUEUED_ENV,
                 profiles.ANONYMISE_QUEUE_ENV, profiles.SESSION_HOURS_ENV, profiles.RUNS_DIR_ENV):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_lab_logs_in_on_loopback_with_per_user_runs_under_its_root(lab_env: Path):
    lab = get_profile("lab")
    assert lab.login and lab.host == "127.0.0.1"
    # Nobody's code runs as the server's account, which can read every user's folder.
    for kind in ("command", "custom"):
        refusal = lab.reward_refusal(kind)
        assert refusal and "'lab' profile turns off" in refusal and "every user's runs" in refusal
    assert lab.lab_root == str(lab_env / "dragonfarm_lab")
    assert lab.users_file == str(lab_env / "dragonfarm_lab" / "users.json")
    assert (lab.max_queued_per_user, lab.anonymise_queue, lab.user_header) == (2, False, None)
    assert lab.session_hours == 12
    assert profiles.runs_dir_for(lab_env / "elsewhere", lab) == lab_env / "dragonfarm_lab"
    assert lab.runs_dir_for_user("alice") == lab_env / "dragonfarm_lab" / "users" / "alice"
    for bad in ("..", ".alice", "a/b", "", "alice/../bob", "x" * 33):
        with pytest.raises(ValueError, match="is not a user name"):
            lab.runs_dir_for_user(bad)
    with pytest.raises(ValueError, match="no per-user runs"):
        get_profile("local").runs_dir_for_user("alice")
    summary = lab.summary()
    assert "login required (the users file); each user has their own runs" in summary
    assert "at most 2 queued runs per user" in summary
    header = layout.where_runs_go(lab.runs_dir_for_user("alice"), lab)
    assert summary in header
    # Logging out is a POST (the Origin check guards it), never a link a page could fire.
    assert 'method="post" action="logout"' in layout.LOGOUT_FORM and "(logout)" not in header


def test_the_lab_root_is_the_variable_then_the_runs_dir_flag(lab_env: Path, monkeypatch):
    assert get_profile("lab", lab_env / "flag").lab_root == str(lab_env / "flag")
    monkeypatch.setenv(profiles.LAB_ROOT_ENV, str(lab_env / "env"))
    assert get_profile("lab", lab_env / "flag").lab_root == str(lab_env / "env")
    assert get_profile("local", lab_env / "flag").lab_root is None  # other profiles: none


def test_the_lab_reads_its_settings_from_the_environment(lab_env: Path, monkeypatch):
    monkeypatch.setenv(profiles.USER_HEADER_ENV, "X-Forwarded-User")
    monkeypatch.setenv(profiles.MAX_QUEUED_ENV, "5")
    monkeypatch.setenv(profiles.ANONYMISE_QUEUE_ENV, "1")
    monkeypatch.setenv(profiles.SESSION_HOURS_ENV, "0.5")
    lab = get_profile("lab")
    assert lab.user_header == "X-Forwarded-User"
    assert lab.max_queued_per_user == 5 and lab.anonymise_queue
    assert lab.session_hours == 0.5 and "the X-Forwarded-User header" in lab.summary()
    monkeypatch.setenv(profiles.MAX_QUEUED_ENV, "none")
    with pytest.raises(ValueError, match="DRAGONFARM_MAX_QUEUED='none' is not a positive"):
        get_profile("lab")


def test_the_users_file_says_who_is_admin_and_check_counts_them(lab_env: Path, monkeypatch):
    from dragonfarm_core.auth import users

    lab = get_profile("lab")
    users.add_user(lab.users_file, "boss", "boss-password", admin=True)
    users.add_user(lab.users_file, "alice", "alice-password")
    assert lab.is_admin("boss") and not lab.is_admin("alice")
    assert not lab.is_admin("nobody") and not lab.is_admin(None)
    assert not get_profile("local").is_admin("boss")
    assert "0 users (0 admin)" in profiles.check_line(get_profile("lab", lab_env / "empty"))
    monkeypatch.setenv(profiles.PROFILE_ENV, "lab")
    line = environment._profile()  # what `dragonfarm check` prints
    assert line.startswith(lab.summary()) and f"2 users (1 admin) in {lab.users_file}" in line


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
    out = rewards_builder.add_reward([], "command", 1.0, "", values, profile=spaces)
    assert out[:3] == (gr.skip(),) * 3 and "turns off" in out[3]
    local = rewards_builder.add_reward([], "command", 1.0, "", values)
    assert local[0][0].type == "command"  # the local profile allows it

    runs_dir = tmp_path / "runs"
    prompts = dragon.dataset(dragon.example_data()).map_prompts("{subject}")
    model = dragon.ResolvedModel.bundled()
    with warnings.catch_warnings(), pytest.warns(UserWarning, match="turns off"):
        out = train.start(prompts, model, "grpo", "", "", 0.1, [COMMAND], with_values(),
                          runs_dir=runs_dir, profile=spaces)  # fmt: skip
    assert out[:3] == (gr.skip(),) * 3 and "turns off" in out[3]
    assert not runs_dir.exists() or dragon.runs(runs_dir).empty
    rl = with_values()["ReinforceArgs"]
    dry = train.dry_run(prompts, model, "", [COMMAND], rl, runs_dir=runs_dir, profile=spaces)
    assert "turns off" in dry[-1]


def test_check_names_the_active_profile(monkeypatch, spaces):
    monkeypatch.setenv(profiles.PROFILE_ENV, "spaces")
    facts = {"profile": environment._profile()}
    assert facts["profile"] == spaces.summary()
    monkeypatch.setenv(profiles.PROFILE_ENV, "nope")
    assert "Unknown profile 'nope'" in environment._profile()


@pytest.mark.slow
def test_local_never_binds_every_interface_and_says_what_to_do_instead(tmp_path: Path):
    import subprocess
    import sys

    local = get_profile("local")
    for host in ("0.0.0.0", "::"):
        refusal = local.bind_refusal(host)
        assert refusal and "no login" in refusal and "--profile lab" in refusal
    assert local.bind_refusal("127.0.0.1") is None
    assert get_profile("spaces").bind_refusal("0.0.0.0") is None  # behind the Space's proxy
    done = subprocess.run(
        [sys.executable, "app.py", "--host", "0.0.0.0", "--port", "7999", "--runs-dir",
         str(tmp_path / "runs")],  # fmt: skip
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "DRAGONFARM_PROFILE": "local"},
    )  # fmt: skip
    assert done.returncode == 2 and "Refusing to bind '0.0.0.0' under the local profile" in (
        done.stderr
    )
