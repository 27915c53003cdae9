"""The command reward against hostile programs and hostile completions.

Commands are `sys.executable` with small inline scripts, so the tests need no other tools.
Time limits in the assertions are generous: they catch a hang, not a slow machine.
"""

import json
import os
import sys
import time
import tracemalloc

import psutil
import pytest

from dragonfarm_core.rewards import RewardError, RewardErrors, reward, score, score_one
from dragonfarm_core.rewards.command import OUTPUT_CAP, run_command

PY = sys.executable

# Records what it received (argv, stdin or the completion file, cwd, environment) in argv[1].
RECORD = """
import json, os, sys
args = sys.argv[1:]
data = open(args[1], "rb").read() if len(args) > 1 else sys.stdin.buffer.read()
open(args[0] + ".data", "wb").write(data)
json.dump({"argv": args, "cwd": os.getcwd(), "files": os.listdir("."), "env": sorted(os.environ)},
          open(args[0], "w"))
"""

# Starts a grandchild that inherits stdout and sleeps; writes its pid to argv[1]; then the
# child itself either sleeps too (argv[2] == "stay") or exits at once.
GRANDCHILD = """
import subprocess, sys, time
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(sys.argv[1], "w") as f:
    f.write(str(p.pid))
if sys.argv[2] == "stay":
    time.sleep(120)
"""


def run(r, completion=""):
    return score_one(r, "prompt", completion, None, {})


def assert_gone(pid: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return  # killed; waiting for whoever adopted it to reap it
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} is still running")


def test_exit_code_scores_one_for_zero():
    r = reward("command", command=[PY, "-c", "import sys; sys.exit(sys.stdin.read() != 'ok')"])
    assert run(r, "ok") == 1.0
    assert run(r, "not ok") == 0.0


def test_stdout_number_is_scaled_and_clipped():
    def printing(text: str) -> float:
        r = reward(
            "command",
            command=[PY, "-c", f"print({text!r}); raise SystemExit(1)"],
            score_from="stdout",
            min_score=0,
            max_score=10,
        )
        return run(r)

    assert printing("checks: 10\nscore: 7") == pytest.approx(0.7)
    assert printing("15") == 1.0
    assert printing("-3") == 0.0
    assert printing("no number at all") == 0.0


def test_a_program_that_never_exits_is_killed_at_the_timeout():
    r = reward("command", command=[PY, "-c", "while True: pass"], timeout=1)
    start = time.monotonic()
    assert run(r) == 0.0
    assert time.monotonic() - start < 5


@pytest.mark.slow
def test_a_grandchild_holding_stdout_is_killed_with_the_group(tmp_path):
    pid_file = tmp_path / "pid"
    start = time.monotonic()
    result = run_command([PY, "-c", GRANDCHILD, str(pid_file), "stay"], "", timeout=2)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - start < 6
    assert_gone(int(pid_file.read_text()))


def test_a_leftover_grandchild_does_not_hold_up_a_finished_program(tmp_path):
    pid_file = tmp_path / "pid"
    r = reward("command", command=[PY, "-c", GRANDCHILD, str(pid_file), "leave"], timeout=20)
    start = time.monotonic()
    assert run(r) == 1.0  # the program itself exited 0
    assert time.monotonic() - start < 10
    assert_gone(int(pid_file.read_text()))


def test_100_mb_of_output_is_capped_and_read_without_buffering_it(tmp_path):
    flood = (
        "import sys\nw = sys.stdout.buffer.write\nfor _ in range(1600): w(b'x' * 65536)\n"
        "print(); print(7)"
    )
    tracemalloc.start()
    try:
        start = time.monotonic()
        result = run_command([PY, "-c", flood], "", timeout=60)
        elapsed = time.monotonic() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0 and result.truncated
    assert len(result.stdout) <= OUTPUT_CAP and result.stdout.endswith("7\n")
    assert peak < 8 * 1024 * 1024
    assert elapsed < 30
    r = reward("command", command=[PY, "-c", flood], score_from="stdout", max_score=10)
    assert run(r) == pytest.approx(0.7)


def test_endless_output_stops_at_the_timeout():
    r = reward(
        "command",
        command=[PY, "-c", "import sys\nwhile True: sys.stdout.write('y' * 9999)"],
        timeout=1,
    )
    start = time.monotonic()
    assert run(r) == 0.0
    assert time.monotonic() - start < 5


def test_a_large_completion_to_a_program_that_never_reads_stdin_does_not_deadlock():
    r = reward("command", command=[PY, "-c", "import time; time.sleep(0.2)"], timeout=10)
    assert run(r, "z" * 5_000_000) == 1.0


HOSTILE = "-rf ; rm -rf ~ && touch {m} $(touch {m}) `touch {m}` | tee {m}\x00after the NUL\n--help"


@pytest.mark.parametrize("mode", ["stdin", "file"])
def test_hostile_completions_arrive_literally_and_run_nothing(tmp_path, mode):
    out, marker = tmp_path / "seen.json", tmp_path / "pwned"
    completion = HOSTILE.format(m=marker)
    argv = [PY, "-c", RECORD, str(out)] + (["{completion_file}"] if mode == "file" else [])
    assert run(reward("command", command=argv, input=mode), completion) == 1.0
    assert (tmp_path / "seen.json.data").read_bytes() == completion.encode()
    seen = json.loads(out.read_text())
    assert not marker.exists()
    if mode == "file":
        assert seen["argv"][0] == str(out)
        assert os.path.basename(seen["argv"][1]) == "test_completion.py"
        assert os.path.dirname(seen["argv"][1]) == seen["cwd"]
    else:
        assert seen["argv"] == [str(out)] and seen["files"] == []
    assert seen["cwd"] != os.getcwd() and not os.path.exists(seen["cwd"])  # fresh, then removed


def test_a_command_string_is_split_but_never_given_to_a_shell(tmp_path):
    out = tmp_path / "seen.json"
    r = reward(
        "command",
        command=f"{PY} -c '{RECORD}' {out} {{completion_file}} ';' '$(whoami)'",
        input="file",
    )
    run(r, "x")
    assert json.loads(out.read_text())["argv"][2:] == [";", "$(whoami)"]


def test_secrets_are_removed_from_the_environment(tmp_path, monkeypatch):
    for name in (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "HF_TOKEN",
        "MY_DB_PASSWORD",
        "aws_secret_access_key",
        "GITHUB_TOKEN",
    ):
        monkeypatch.setenv(name, "do-not-leak")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("HOME", str(tmp_path))
    out = tmp_path / "seen.json"
    run(reward("command", command=[PY, "-c", RECORD, str(out)]), "x")
    env = json.loads(out.read_text())["env"]
    assert not {
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "HF_TOKEN",
        "MY_DB_PASSWORD",
        "aws_secret_access_key",
        "GITHUB_TOKEN",
    } & set(env)
    assert {"PATH", "HOME", "LANG"} <= set(env)


def test_a_missing_program_fails_when_the_reward_is_created(tmp_path):
    with pytest.raises(RewardError, match="'no-such-program-dragonfarm' was not found"):
        reward("command", command=["no-such-program-dragonfarm", "-q"])
    with pytest.raises(RewardError, match="not found"):
        reward("command", command=[str(tmp_path / "missing")])
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")  # exists but is not executable
    with pytest.raises(RewardError, match="not found"):
        reward("command", command=[str(script)])
    with pytest.raises(RewardError, match="Reward.command is empty"):
        reward("command", command=[])


def test_the_completion_file_token_must_be_a_whole_argument_with_input_file():
    with pytest.raises(RewardError, match="inside a longer argument"):
        reward("command", command=[PY, "--file={completion_file}"], input="file")
    with pytest.raises(RewardError, match="set input='file'"):
        reward("command", command=[PY, "{completion_file}"])


def test_score_runs_a_batch_of_commands_and_counts_a_vanished_program(tmp_path):
    r = reward("command", command=[PY, "-c", "import sys; sys.exit(int(sys.stdin.read()))"])
    scores = score([r], ["p"] * 4, ["0", "1", "0", "3"])
    assert scores.per_reward["command"] == [1.0, 0.0, 1.0, 0.0]
    program = tmp_path / "prog"
    program.write_text(f"#!{PY}\n")
    program.chmod(0o755)
    gone = reward("command", command=[str(program)])
    program.unlink()
    errors = RewardErrors()
    assert score([gone], ["p"], ["x"], errors=errors).total == [0.0]
    assert errors.counts() == {"command": (1, 1)}
