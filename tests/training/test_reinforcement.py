"""reinforce(): validation, the run it writes (rewards, custom files), dragon.code() round trips;
test_rewards(): the score table, through a stand-in backend. Slow: the real trainer continuing
from an SFT run, and test_rewards through the local worker.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import code, rewards_code
from dragonfarm_core.inference.protocol import Sampling
from dragonfarm_core.rewards import Reward, reward
from dragonfarm_core.rundir import files, location
from dragonfarm_core.settings import Hardware, SettingsError, TrainArgs
from dragonfarm_core.training import reinforcement
from dragonfarm_core.training.reinforcement import ReinforceArgs, reinforce
from dragonfarm_core.training.reinforcement import test_rewards as dry_run

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"
TICKET = r"T-\d{4}"


def _tickets(n: int = 30) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "question": [f"Ticket T-{1000 + i}: my router {i} is offline" for i in range(n)],
            "ticket": [f"T-{1000 + i}" for i in range(n)],
            "product": ["router"] * n,
        }
    )


@pytest.fixture
def prompts_ds():
    return dragon.dataset(_tickets()).map_prompts(prompt="question", reference="ticket")


@pytest.fixture
def custom_file(tmp_path) -> Path:
    path = tmp_path / "cites_id.py"
    path.write_text(
        "def reward(prompt, completion, reference, row):\n"
        "    return float(reference in completion) + 0.1 * (row.get('product') == 'router')\n"
    )
    return path


def _only_run(root: Path) -> Path:
    (run_dir,) = [p for p in root.iterdir() if files.is_run_dir(p)]
    return run_dir


# ---- reinforce(): the run directory --------------------------------------------------------


def test_reinforce_writes_rewards_and_settings_into_config(runs_root, prompts_ds, model_dir):
    run = reinforce(
        prompts_ds,
        str(model_dir),
        [reward("regex", pattern=TICKET, weight=2), reward("length", max_chars=300)],
        group_size=6,
        runs_dir=runs_root,
    )
    config = run.config
    assert config["method"] == "grpo" and config["data"]["kind"] == "prompts"
    method_args = config["method_args"]
    assert [r["name"] for r in method_args["rewards"]] == ["regex", "length"]
    assert (
        method_args["rewards"][0]["pattern"] == TICKET and method_args["rewards"][0]["weight"] == 2
    )
    assert {k: method_args[k] for k in ("group_size", "beta", "temperature", "max_new_tokens")} == {
        "group_size": 6, "beta": 0.04, "temperature": 1.0, "max_new_tokens": 128}  # fmt: skip
    assert config["args"]["learning_rate"] == 1e-5 and config["args"]["save_steps"] == 20
    (row, *_) = files.read_jsonl(run.dir / files.TRAIN_DATA)
    assert row["reference"].startswith("T-") and row["fields"] == {"product": "router"}


def test_a_custom_reward_file_is_copied_into_the_run(runs_root, prompts_ds, model_dir, custom_file):
    run = reinforce(
        prompts_ds, str(model_dir), [reward("custom", file=str(custom_file), name="cites")],
        runs_dir=runs_root,
    )  # fmt: skip
    (stored,) = run.config["method_args"]["rewards"]
    assert stored["file"] == "rewards/cites.py"
    copy = run.dir / "rewards" / "cites.py"
    assert copy.read_text() == custom_file.read_text()
    custom_file.unlink()  # the run no longer needs the original
    rebuilt = Reward.from_dict(stored, run_dir=run.dir)
    assert Path(rebuilt.file) == copy.resolve()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rewards": []}, ValueError, "non-empty list of dragon.reward"),
        ({"rewards": [{"type": "exact"}]}, TypeError, r"rewards\[0\] is a dict"),
        ({"group_size": 1}, SettingsError, "group_size = 1 is below the minimum 2"),
        ({"temperature": 0}, SettingsError, "temperature = 0 is below the minimum 0.05"),
        ({"max_new_tokens": 2.5}, SettingsError, "max_new_tokens must be a whole number"),
        ({"args": TrainArgs(warmup_steps=3)}, SettingsError, "unknown key.*'warmup_steps'"),
        ({"args": TrainArgs(max_seq_len=128)}, SettingsError, r"max_seq_len \(128\) must leave"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    runs_root, prompts_ds, model_dir, kwargs, error, match
):
    kwargs = {"rewards": [reward("regex", pattern=TICKET)], **kwargs}
    with pytest.raises(error, match=match):
        reinforce(prompts_ds, str(model_dir), runs_dir=runs_root, **kwargs)
    assert list(runs_root.iterdir()) == []


def test_datasets_must_be_prompts_with_the_references_rewards_need(runs_root, model_dir):
    frame = _tickets()
    sft = dragon.dataset(frame).map(prompt="question", response="ticket")
    with pytest.raises(ValueError, match=r"map_prompts.*it is mapped as 'sft'"):
        reinforce(sft, str(model_dir), [reward("regex", pattern=TICKET)], runs_dir=runs_root)
    no_reference = dragon.dataset(frame).map_prompts(prompt="question")
    with pytest.raises(ValueError, match=r"'numeric', 'exact' compare completions with a ref"):
        reinforce(no_reference, str(model_dir), [reward("numeric"), reward("exact")],
                  runs_dir=runs_root)  # fmt: skip
    with pytest.raises(TypeError, match="map_prompts"):
        reinforce(frame, str(model_dir), [reward("regex", pattern=TICKET)], runs_dir=runs_root)
    assert list(runs_root.iterdir()) == []
    # rewards that need no reference are fine without one
    reinforce(no_reference, str(model_dir), [reward("regex", pattern=TICKET)], runs_dir=runs_root)


def test_reinforce_args_carry_ui_metadata():
    meta = {f.name: f.metadata for f in ReinforceArgs.__dataclass_fields__.values()}
    assert meta["group_size"]["min"] == 2 and meta["beta"]["label"].startswith("KL")
    assert meta["loss_type"]["choices"] == ("dapo", "grpo", "dr_grpo", "bnpo")
    assert ReinforceArgs().to_dict() == {
        "group_size": 4, "beta": 0.04, "temperature": 1.0, "max_new_tokens": 128,
        "loss_type": "dapo", "scale_rewards": "group"}  # fmt: skip


# ---- dragon.code(run) ----------------------------------------------------------------------


def _replay(source: str, root: Path) -> dict:
    before = set(root.iterdir())
    namespace: dict = {}
    exec(compile(source, "<dragon.code>", "exec"), namespace)
    (new,) = [p for p in set(root.iterdir()) - before if files.is_run_dir(p)]
    return files.read_config(new)


def _comparable(config: dict) -> dict:
    return {k: v for k, v in config.items() if k not in ("id", "created_at")}


def test_code_rebuilds_a_grpo_run_with_reward_calls(runs_root, prompts_ds, model_dir, custom_file):
    rewards = [
        reward("regex", pattern=TICKET, weight=2),
        reward("length", max_chars=300, weight=0.5),
        reward("keyword", words=["reset", "router"], mode="all"),
        reward("custom", file=str(custom_file), name="cites"),
    ]
    run = reinforce(prompts_ds, str(model_dir), rewards, beta=0.1, runs_dir=runs_root)
    source = code(run)
    assert "run = dragon.reinforce(" in source
    assert '        dragon.reward("regex", weight=2, pattern="T-\\\\d{4}"),\n' in source
    assert (
        f'dragon.reward("custom", name="cites", file="{run.dir / "rewards" / "cites.py"}")'
        in source
    )
    assert "words=['reset', 'router'], mode=\"all\"" in source and "beta=0.1" in source
    assert _comparable(_replay(source, runs_root)) == _comparable(run.config)


def test_automatic_reward_names_are_left_out_of_the_code(runs_root, prompts_ds, model_dir):
    rewards = [reward("regex", pattern="a"), reward("regex", pattern="b"), reward("contains")]
    run = reinforce(prompts_ds, str(model_dir), rewards, runs_dir=runs_root)
    stored = run.config["method_args"]["rewards"]
    assert [r["name"] for r in stored] == ["regex", "regex_2", "contains"]
    assert rewards_code(stored, run.dir) == (
        '[\n        dragon.reward("regex", pattern="a"),\n        dragon.reward("regex", pattern="b"),'
        '\n        dragon.reward("contains"),\n    ]'
    )
    assert rewards_code(stored[2:], run.dir) == '[dragon.reward("contains")]'
    assert _comparable(_replay(code(run), runs_root)) == _comparable(run.config)


# ---- test_rewards() ------------------------------------------------------------------------


class ScriptedBackend:
    """Answers like a server backend: its own model, replies in order from a script."""

    name, model = "scripted", "scripted-model"

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.calls = replies, []

    def chat(self, model, messages, sampling, on_token=None) -> str:
        raise AssertionError("test_rewards generates in batches")

    def generate(self, model, conversations, sampling) -> list[str]:
        self.calls.append((conversations, sampling))
        return self.replies[: len(conversations)]


def test_dry_run_scores_n_completions_per_prompt():
    backend = ScriptedBackend(["T-1234 is fixed", "no idea", "x" * 50, "T-9999"])
    table = dry_run(
        [reward("regex", pattern=TICKET), reward("length", max_chars=20, weight=0.5)],
        "any-model", ["Ticket T-1234: help", "Where is my order?"], n=2,
        max_new_tokens=32, temperature=0.8, backend=backend,
    )  # fmt: skip
    assert list(table.columns) == ["prompt", "completion", "regex", "length", "total"]
    assert list(table["prompt"]) == ["Ticket T-1234: help"] * 2 + ["Where is my order?"] * 2
    assert list(table["regex"]) == [1.0, 0.0, 0.0, 1.0]
    assert list(table["length"]) == [1.0, 1.0, 0.0, 1.0]
    assert list(table["total"]) == [1.5, 0.5, 0.0, 1.5]
    ((conversations, sampling),) = backend.calls  # one batched call
    assert conversations[0] == [{"role": "user", "content": "Ticket T-1234: help"}]
    assert sampling == Sampling(max_new_tokens=32, temperature=0.8, top_p=1.0)


def test_dry_run_on_a_dataset_scores_with_references_and_fields(prompts_ds, custom_file):
    backend = ScriptedBackend(["See T-1000.", "Hello", "T-1001 done", "T-1000"])
    table = dry_run(
        [reward("contains"), reward("custom", file=str(custom_file), name="cites")],
        "any-model", prompts_ds, n=2, max_prompts=2, backend=backend,
    )  # fmt: skip
    assert list(table.columns) == ["prompt", "completion", "contains", "cites", "total"]
    assert list(table["contains"]) == [1.0, 0.0, 1.0, 0.0]
    assert list(table["cites"]) == pytest.approx([1.1, 0.1, 1.1, 0.1])


def test_dry_run_warns_about_a_failing_reward_and_refuses_missing_references(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def reward(prompt, completion, reference, row):\n    return 1 / 0\n")
    backend = ScriptedBackend(["a", "b"])
    with pytest.warns(UserWarning, match=r"'custom' failed on 2 of 2.*ZeroDivisionError"):
        table = dry_run(reward("custom", file=str(broken)), "m", "hi", n=2, backend=backend)
    assert list(table["custom"]) == [0.0, 0.0]
    with pytest.raises(ValueError, match="'numeric' compare with a reference"):
        dry_run([reward("numeric")], "m", ["2+2?"], backend=backend)
    with pytest.raises(ValueError, match="n must be a whole number"):
        dry_run([reward("regex", pattern="a")], "m", ["hi"], n=0, backend=backend)


def test_the_api_modules_do_not_import_torch():
    probe = (
        "import sys, dragonfarm_core.training.reinforcement, dragonfarm_core.codegen.run; "
        "heavy = {'torch', 'transformers', 'peft', 'trl'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, cwd=ROOT)


# ---- slow: the real trainer and the local worker -------------------------------------------


@pytest.fixture(scope="module")
def real_model(tmp_path_factory) -> Path:
    """The bundled model, or the trainer tests' tiny random model when the repo lacks it."""
    if (BUNDLED / "config.json").is_file():
        return BUNDLED
    spec = importlib.util.spec_from_file_location(
        "trainer_fixtures", ROOT / "tests" / "trainers" / "trainer_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture
def live_runs(tmp_path, monkeypatch) -> Path:
    for name in ("DRAGONFARM_TRAINER_MODULE", "DRAGONFARM_MAX_CONCURRENT", location.ENV_VAR):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    return tmp_path / "runs"


@pytest.mark.slow
def test_reinforce_continues_from_an_sft_run(live_runs, real_model):
    frame = pd.read_csv(ROOT / "assets" / "example_tickets.csv", dtype=str).head(40)
    frame["ticket"] = frame["subject"].str.cat(frame["body"], sep=" ").str.extract(f"({TICKET})")[0]
    cpu = Hardware(device="cpu")
    sft = dragon.train(
        dragon.dataset(frame).map(prompt="{subject}\n\n{body}", response="reply"), str(real_model),
        args=TrainArgs(max_steps=2, batch_size=4, grad_accum=1, max_seq_len=256,
                       extra={"sample_max_new_tokens": 8}),
        hardware=cpu, n_samples=1, runs_dir=live_runs, wait=True,
    )  # fmt: skip
    prompts = dragon.dataset(frame).map_prompts(prompt="{subject}\n\n{body}", reference="ticket")
    rl = reinforce(
        prompts, sft,
        [reward("contains", name="cites_id"), reward("length", max_chars=200, weight=0.5)],
        max_new_tokens=16,
        args=TrainArgs(max_steps=2, batch_size=2, grad_accum=1, logging_steps=1, max_seq_len=384),
        hardware=cpu, n_samples=2, runs_dir=live_runs, wait=True,
    )  # fmt: skip
    assert rl.config["continued_from"] == str(sft.dir)
    assert rl.config["model"]["adapters"] == [str(sft.dir / "adapter")]
    progress = rl.progress()
    assert list(progress["step"]) == [1, 2]
    assert {"reward", "reward_cites_id", "reward_length", "kl"} <= set(progress.columns)
    evaluation = files.read_eval(rl.dir)
    assert evaluation["eval_prompts"] == 2 and evaluation["reward_cites_id"] is not None
    assert len(files.read_samples(rl.dir)) == 2
    assert any("GRPO on" in line for line in rl.logs(200))


@pytest.mark.slow
def test_dry_run_through_the_local_worker(real_model):
    from dragonfarm_core.inference.local import worker_stop

    try:
        table = dry_run(
            [reward("regex", pattern=TICKET), reward("length", max_chars=100, weight=0.5)],
            str(real_model), ["Ticket T-1234: my doorbell is offline."], n=3, max_new_tokens=12,
        )  # fmt: skip
    finally:
        worker_stop()
    assert list(table.columns) == ["prompt", "completion", "regex", "length", "total"]
    assert len(table) == 3 and table["completion"].map(lambda c: isinstance(c, str)).all()
    assert (table["total"] == table["regex"] + 0.5 * table["length"]).all()
    assert reinforcement.test_rewards is dry_run
