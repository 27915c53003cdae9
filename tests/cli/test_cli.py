"""The `dragonfarm` command line, run as a user runs it: each test starts `python -m
dragonfarm_core.cli.commands ...` in a subprocess and reads its exit code, stdout and stderr.

Training runs use the stand-in trainer (tests/fake_trainer.py, DRAGONFARM_TRAINER_MODULE) and
replies come from the stand-in worker (tests/inference/fake_worker.py, DRAGONFARM_WORKER_MODULE),
which echoes the last user message word by word; neither loads the bundled model it is given.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.llamacpp import location as llama_cpp
from dragonfarm_core.models import bundled_model_path
from dragonfarm_core.rundir import files, launch

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))
from llama_cpp_fakes import complete_cache  # noqa: E402

MODEL = str(bundled_model_path())
SFT = ["--prompt", "{subject}\\n\\n{body}", "--response", "reply"]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FAKE_TRAINER_", "FAKE_WORKER_")) and k != "DRAGONFARM_RUNS_DIR"}  # fmt: skip
    paths = [str(ROOT), str(TESTS), str(TESTS / "inference"), env.get("PYTHONPATH", "")]
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
        DRAGONFARM_TRAINER_MODULE="fake_trainer",
        DRAGONFARM_WORKER_MODULE="fake_worker",
        COLUMNS="200",  # argparse wraps help at the terminal's width
        **extra,
    )
    return env


def cli(*argv: str, input: str | None = None, cwd: Path | None = None, **env: str):
    return subprocess.run(
        [sys.executable, "-m", "dragonfarm_core.cli.commands", *argv],
        capture_output=True,
        text=True,
        input=input,
        cwd=cwd,
        env=cli_env(**env),
        timeout=120,
    )


def flat(text: str) -> str:
    return " ".join(text.split())


def only_run(runs: Path) -> Path:
    found = [p for p in runs.iterdir() if files.is_run_dir(p)]
    assert len(found) == 1, found
    return found[0]


def wait_state(run: Path, states: set[str], timeout: float = 30) -> str:
    end = time.monotonic() + timeout
    while (state := launch.live_status(run).get("state")) not in states:
        assert time.monotonic() < end, f"{run.name} still {state}"
        time.sleep(0.05)
    return str(state)


@pytest.fixture
def runs(tmp_path: Path):
    root = tmp_path / "runs"
    yield root
    for config in root.rglob(files.CONFIG):  # no trainer a test started outlives it
        status = files.read_status(config.parent)
        if launch.process_alive(status):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(status["pid"], signal.SIGKILL)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("data")
    pairs = pd.DataFrame({
        "q": [f"question {i}" for i in range(6)],
        "good": [f"a good answer {i}" for i in range(6)],
        "bad": [f"a bad answer {i}" for i in range(6)],
    })  # fmt: skip
    prompts = pd.DataFrame({"q": [f"what is {i} + 1?" for i in range(6)],
                            "answer": [str(i + 1) for i in range(6)]})  # fmt: skip
    pairs.to_csv(folder / "pairs.csv", index=False)
    prompts.to_csv(folder / "prompts.csv", index=False)
    chats = [{"messages": [{"role": "user", "content": f"hi {i}"},
                           {"role": "assistant", "content": f"hello {i}"}]} for i in range(4)]  # fmt: skip
    (folder / "chats.jsonl").write_text("".join(json.dumps(c) + "\n" for c in chats))
    return {"tickets": Path(dragon.example_data()), **{p.stem: p for p in folder.iterdir()}}


# --- help ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_help_of_every_command_shows_its_defaults():
    top = cli("--help")
    assert top.returncode == 0
    for command in ("train", "generate", "chat", "status", "runs", "cancel", "resume", "serve"):
        assert command in top.stdout

    train = flat(cli("train", "--help").stdout)
    # Generated from the dataclasses: the field's help, its limits, each method's default.
    assert "--lora-r N Size of the low-rank update." in train
    assert "1 to 512. (default: 16)" in train
    assert (
        "--epochs N Passes over the training rows. 0.01 to 1000. (default: sft 3; dpo, orpo 2; grpo 1)"
        in train
    )
    assert (
        "--learning-rate N" in train
        and "(default: sft 0.0002; dpo, orpo 5e-05; grpo 1e-05)" in train
    )
    assert "--device {auto,cuda,mps,cpu}" in train and "--no-gradient-checkpointing" in train
    assert "(grpo only; default: 4)" in train  # --group-size
    assert "dpo, orpo 0.1; grpo 0.04" in train  # one --beta, two meanings, both defaults
    assert "--lora-target-modules NAMES" in train and "--extra KEY=VALUE" in train
    assert "--n-samples N" in train and "(default: 10)" in train

    for command, fn in (("generate", dragon.generate), ("chat", dragon.chat)):
        options = flat(cli(command, "--help").stdout).split("options:")[1]
        d = {k: p.default for k, p in inspect.signature(fn).parameters.items()}
        assert (
            f"--max-new-tokens N longest reply, in tokens (default: {d['max_new_tokens']})"
            in options
        )
        assert f"more varied (default: {d['temperature']})" in options
        assert f"cover this probability (default: {d['top_p']})" in options
    assert "/undo" in cli("chat", "--help").stdout  # the in-chat commands are listed

    cancel = flat(cli("cancel", "--help").stdout)
    assert f"(default: {inspect.signature(dragon.cancel).parameters['timeout'].default})" in cancel
    for command in ("status", "runs", "resume", "cancel", "check"):
        text = flat(cli(command, "--help").stdout)
        assert "--runs-dir DIR" in text and "(default: dragonfarm_runs)" in text, command
    assert "(default: 7860)" in flat(cli("app", "--help").stdout)
    assert "--allowed-hosts" in cli("serve", "--help").stdout


def test_the_installed_console_script_runs():
    script = shutil.which(
        "dragonfarm", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    if script is None:
        pytest.skip("the package is not installed (pip install -e .)")
    done = subprocess.run([script, "train", "--help"], capture_output=True, text=True,
                          env=cli_env(), timeout=60)  # fmt: skip
    assert done.returncode == 0 and "--lora-r" in done.stdout


# --- train -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_train_puts_the_flags_into_the_run_and_wait_exits_0(runs, data):
    done = cli("train", str(data["tickets"]), "--model", MODEL, *SFT, "--epochs", "2",
               "--lora-r", "8", "--learning-rate", "1e-3", "--device", "cpu",
               "--lora-target-modules", "q_proj, v_proj", "--extra", "lr_scheduler_type=cosine", "--extra", "max_grad_norm=0.5",
               "--eval-frac", "0.1", "--name", "cli-run", "--runs-dir", str(runs), "--wait")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = only_run(runs)
    assert f"Run {run.name} succeeded: train_loss" in done.stdout
    config = files.read_config(run)
    assert config["method"] == "sft" and config["name"] == "cli-run"
    assert config["lora"]["r"] == 8 and config["lora"]["target_modules"] == ["q_proj", "v_proj"]
    assert config["args"]["epochs"] == 2 and config["args"]["learning_rate"] == 1e-3
    assert config["args"]["extra"] == {"lr_scheduler_type": "cosine", "max_grad_norm": 0.5}
    assert config["args"]["batch_size"] == 4  # not given: sft's default
    assert config["hardware"]["device"] == "cpu"
    assert config["dataset"]["mapping"]["prompt"] == "{subject}\n\n{body}"  # \n is a newline
    assert config["dataset"]["eval_frac"] == 0.1


def test_the_command_line_fills_what_no_flag_gives_from_the_recommendation(runs, data):
    done = cli("train", str(data["tickets"]), "--model", "bundled", "--prompt", "{subject}",
               "--response", "reply", "--learning-rate", "1e-3", "--runs-dir", str(runs))  # fmt: skip
    assert done.returncode == 0, done.stderr
    args = files.read_config(only_run(runs))["args"]
    fits = dragon.recommended("bundled").args
    assert args["learning_rate"] == 1e-3  # given
    assert args["epochs"] == fits.epochs and args["max_seq_len"] == fits.max_seq_len


@pytest.mark.slow
def test_train_without_wait_returns_and_the_run_goes_on(runs, data):
    done = cli("train", str(data["chats"]), "--conversations", "--model", MODEL,
               "--runs-dir", str(runs), FAKE_TRAINER_STEP_S="0.05")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = only_run(runs)
    assert f"Started run {run.name}" in done.stdout
    assert files.read_config(run)["dataset"]["mapping"]["kind"] == "conversations"
    assert wait_state(run, {"succeeded"})
    status = cli("status", run.name, "--runs-dir", str(runs))
    assert status.returncode == 0 and json.loads(status.stdout)["state"] == "succeeded"


@pytest.mark.slow
def test_wait_exits_1_when_the_run_fails(runs, data):
    done = cli("train", str(data["tickets"]), "--model", MODEL, *SFT, "--runs-dir", str(runs),
               "--wait", FAKE_TRAINER_FAIL_AT="2")  # fmt: skip
    assert done.returncode == 1
    assert "failed" in done.stderr and "fake failure at step 2" in done.stderr
    assert launch.live_status(only_run(runs))["state"] == "failed"


@pytest.mark.slow
def test_pairs_train_dpo_with_its_own_defaults_and_beta(runs, data):
    done = cli("train", str(data["pairs"]), "--model", MODEL, "--prompt", "q", "--chosen", "good",
               "--rejected", "bad", "--beta", "0.2", "--loss-type", "ipo", "--runs-dir", str(runs),
               "--wait")  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = files.read_config(only_run(runs))
    assert config["method"] == "dpo"
    assert config["method_args"] == {"beta": 0.2, "loss_type": "ipo", "label_smoothing": 0.0}
    assert config["args"]["epochs"] == 2 and config["args"]["learning_rate"] == 5e-5


def test_a_loss_type_of_another_method_is_refused_naming_the_flag(runs, data):
    pairs = (str(data["pairs"]), "--model", MODEL, "--prompt", "q", "--chosen", "good",
             "--rejected", "bad", "--runs-dir", str(runs))  # fmt: skip
    done = cli("train", *pairs, "--loss-type", "dr_grpo")  # GRPO's, offered by the shared flag
    assert done.returncode == 2
    assert "DpoArgs.loss_type = 'dr_grpo' is not one of sigmoid" in done.stderr
    assert "(flag --loss-type)" in done.stderr
    done = cli("train", *pairs, "--method", "orpo", "--label-smoothing", "0.1")
    assert done.returncode == 2 and "--label-smoothing does not apply to orpo" in done.stderr
    assert not runs.exists() or not list(runs.iterdir())  # nothing written


@pytest.mark.slow
def test_grpo_rewards_come_from_reward_flags(runs, data):
    done = cli("train", str(data["prompts"]), "--model", MODEL, "--prompt", "q",
               "--reference", "answer", "--reward", "regex:pattern=^\\d{1,3}$,weight=2",
               "--reward", "numeric", "--reward", "keyword:words=one,two,mode=all",
               "--group-size", "3", "--runs-dir", str(runs), "--wait")  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = files.read_config(only_run(runs))
    args = config["method_args"]
    assert config["method"] == "grpo" and args["group_size"] == 3 and args["beta"] == 0.04
    regex, numeric, keyword = args["rewards"]
    assert (regex["type"], regex["pattern"], regex["weight"]) == ("regex", "^\\d{1,3}$", 2.0)
    assert numeric["type"] == "numeric"
    assert keyword["words"] == ["one", "two"] and keyword["mode"] == "all"
    assert config["args"]["save_steps"] == 20  # grpo's default, not sft's


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--lora-r", "0"], "Lora.r = 0 is below the minimum 1"),
        (["--lora-r", "0"], "--lora-r"),
        (["--epochs", "many"], "argument --epochs: 'many' is not a number"),
        (["--learning-rate", "nan"], "TrainArgs.learning_rate"),
        (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
        (["--group-size", "3"], "--group-size does not apply to sft"),
        (["--method", "sft", "--reward", "numeric"], "--reward is for grpo"),
        (["--reward", "numeric"], "--response does not apply to grpo, which reads --prompt"),
        (["--method", "dpo"], "--response does not apply to dpo"),
        (["--chosen", "reply", "--method", "sft"], "--chosen does not apply to sft"),
        (["--max-seq-len", "8"], "TrainArgs.max_seq_len"),
        (["--devices", "0"], "Hardware.devices = 0 is not a count"),
        (["--devices", "cuda:1,1"], "Hardware.devices = 'cuda:1,1' names a GPU twice"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2_naming_it(runs, data, flags, named):
    done = cli("train", str(data["tickets"]), "--model", MODEL, *SFT, *flags,
               "--runs-dir", str(runs))  # fmt: skip
    assert done.returncode == 2
    assert named in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("dragonfarm train: error:")
    assert not runs.exists() or not any(runs.iterdir())  # nothing half-made


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["missing.csv", "--model", MODEL, *SFT], "missing.csv"),
        (["tickets", "--model", MODEL, "--prompt", "subject"], "'subject', 'body', 'product', 'reply'"),
        (["tickets", "--model", MODEL, "--prompt", "{nope}", "--response", "reply"], "nope"),
        (["tickets", "--model", MODEL, "--prompt", "subject", "--method", "orpo"], "orpo needs --chosen and --rejected"),
        (["tickets", "--model", "not a model", *SFT], "'not a model' is neither a local folder"),
        (["prompts", "--model", MODEL, "--prompt", "q", "--method", "grpo"], "needs at least one --reward"),
        (["prompts", "--model", MODEL, "--prompt", "q", "--reward", "numeric"], "reference"),
        (["prompts", "--model", MODEL, "--prompt", "q", "--reward", "regex:patern=x"], "'patern=x' is not an option"),
        (["pairs", "--model", MODEL, "--prompt", "q", "--chosen", "good", "--rejected", "bad", "--beta", "0"], "PreferenceArgs.beta"),
    ],
)  # fmt: skip
def test_bad_data_model_or_rewards_exit_2(runs, data, argv, named):
    source, *flags = argv  # one of the `data` files, or a path that does not exist
    done = cli("train", str(data.get(source, source)), *flags, "--runs-dir", str(runs),
               cwd=runs.parent)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr


# --- runs, status, cancel, resume ------------------------------------------------------------


@pytest.mark.slow
def test_runs_status_cancel_and_resume_a_run(runs, data):
    slow = {
        "FAKE_TRAINER_STEPS": "40",
        "FAKE_TRAINER_STEP_S": "0.05",
        "FAKE_TRAINER_SAVE_EVERY": "2",
    }
    started = cli(
        "train", str(data["tickets"]), "--model", MODEL, *SFT, "--runs-dir", str(runs), **slow
    )
    assert started.returncode == 0, started.stderr
    run = only_run(runs)
    wait_state(run, {"running"})
    end = time.monotonic() + 30
    while not files.checkpoints(run):  # a checkpoint to resume from
        assert time.monotonic() < end, "no checkpoint"
        time.sleep(0.05)

    cancelled = cli("cancel", run.name, "--runs-dir", str(runs), "--timeout", "30")
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"Run {run.name}: cancelled" in cancelled.stdout
    listed = cli("runs", "--runs-dir", str(runs))
    assert listed.returncode == 0 and run.name in listed.stdout and "cancelled" in listed.stdout
    by_path = cli("status", str(run))  # a folder works without --runs-dir
    assert json.loads(by_path.stdout)["state"] == "cancelled"
    again = cli("cancel", run.name, "--runs-dir", str(runs))
    assert again.returncode == 0 and "nothing to cancel" in again.stdout

    resumed = cli("resume", run.name, "--runs-dir", str(runs), "--wait", FAKE_TRAINER_STEPS="8")
    assert resumed.returncode == 0, resumed.stderr
    assert "Resuming run" in resumed.stdout and f"Run {run.name} succeeded" in resumed.stdout
    refused = cli("resume", run.name, "--runs-dir", str(runs))
    assert refused.returncode == 2 and "already succeeded" in refused.stderr


@pytest.mark.slow
def test_runs_dir_defaults_to_the_environment_then_dragonfarm_runs(runs, tmp_path):
    assert "No runs in" in cli("runs", DRAGONFARM_RUNS_DIR=str(runs)).stdout
    assert str(runs) in cli("runs", DRAGONFARM_RUNS_DIR=str(runs)).stdout
    assert "No runs in dragonfarm_runs." in cli("runs", cwd=tmp_path).stdout
    missing = cli("status", "20990101-000000-nope", "--runs-dir", str(runs))
    assert missing.returncode == 2 and "20990101-000000-nope" in missing.stderr


# --- generate and chat -----------------------------------------------------------------------


@pytest.mark.slow
def test_generate_prints_replies_from_a_model_or_a_run_and_train_continues_a_run(
    runs, data, tmp_path
):
    one = cli("generate", MODEL, "hello big world")
    assert one.returncode == 0, one.stderr
    assert one.stdout.strip() == "echo: hello big world"

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("first prompt\n\nsecond prompt\n")
    many = cli("generate", MODEL, "zeroth", "--file", str(prompts), "--json", "--temperature", "0")
    assert many.returncode == 0, many.stderr
    assert json.loads(many.stdout) == [
        {"prompt": p, "reply": f"echo: {p}"} for p in ("zeroth", "first prompt", "second prompt")
    ]

    trained = cli(
        "train", str(data["tickets"]), "--model", MODEL, *SFT, "--runs-dir", str(runs), "--wait"
    )
    assert trained.returncode == 0, trained.stderr
    by_id = cli("generate", only_run(runs).name, "a", "b", "--runs-dir", str(runs))
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout.strip() == "> a\necho: a\n\n> b\necho: b"

    first = only_run(runs)
    more = cli("train", str(data["chats"]), "--conversations", "--model", first.name,
               "--runs-dir", str(runs), "--wait")  # fmt: skip
    assert more.returncode == 0, more.stderr  # --model names a run: the new one continues it
    (second,) = [p for p in runs.iterdir() if p != first and files.is_run_dir(p)]
    assert files.read_config(second)["continued_from"] == str(first)

    nothing = cli("generate", MODEL)
    assert nothing.returncode == 2 and "Nothing to answer" in nothing.stderr
    bad = cli("generate", MODEL, "hi", "--temperature", "9")
    assert bad.returncode == 2 and "temperature = 9.0" in bad.stderr


def test_chat_streams_replies_and_obeys_its_commands(runs):
    # The stand-in worker streams "echo:" then one token per word, while its final text keeps
    # the message as sent: only a streamed reply shows "echo: hello big world" for this message.
    lines = ["hello   big world", "/undo", "/undo", "second turn", "/reset", "/help",
             "third", "/exit", "never sent"]  # fmt: skip
    done = cli("chat", MODEL, "--system", "be brief", "--runs-dir", str(runs),
               input="\n".join(lines) + "\n")  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "echo: hello big world" in out and "echo: hello   big world" not in out
    assert "(last exchange dropped)" in out
    assert "Nothing to undo" in done.stderr  # the second /undo: reported, the chat goes on
    assert "echo: second turn" in out and "(conversation forgotten)" in out
    assert "/retry" in out and "echo: third" in out
    assert "never sent" not in out


@pytest.mark.slow
def test_chat_ends_at_end_of_input(runs):
    done = cli("chat", MODEL, "--runs-dir", str(runs), input="only line\n/up\n")
    assert done.returncode == 0, done.stderr
    assert "echo: only line" in done.stdout and "(rated up)" in done.stdout
    bad = cli("chat", MODEL, "--max-new-tokens", "0", input="")
    assert bad.returncode == 2 and "max_new_tokens" in bad.stderr


# --- build-llama-cpp -------------------------------------------------------------------------


@pytest.mark.slow
def test_build_llama_cpp_reuses_a_complete_build_and_says_why_it_cannot_build(tmp_path):
    """`dragonfarm build-llama-cpp`: the build a pip install has (no scripts/ needed). A complete
    cache is reused at once; a source that is not the pinned one is refused, exit 1."""
    cache = tmp_path / "cache"
    built = complete_cache(cache / f"llama.cpp-{llama_cpp.LLAMA_CPP_PYTHON_VERSION}")
    done = cli("build-llama-cpp", DRAGONFARM_CACHE=str(cache))
    assert done.returncode == 0, done.stderr
    assert f"llama.cpp is ready in {built}" in done.stdout and "reused" in done.stdout
    check = cli("check", "--json", DRAGONFARM_CACHE=str(cache), LLAMA_CPP_DIR="")
    assert json.loads(check.stdout)["llama_cpp"]["root"] == str(built)

    sdist = tmp_path / f"llama_cpp_python-{llama_cpp.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    sdist.write_bytes(b"not the source distribution")
    failed = cli("build-llama-cpp", "--cache", str(tmp_path / "new"), "--sdist", str(sdist))
    assert failed.returncode == 1 and "not the pinned" in failed.stderr
    assert "--portable" in cli("build-llama-cpp", "--help").stdout
