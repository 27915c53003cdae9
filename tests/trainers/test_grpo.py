"""GRPO: prompts, completion masks and batched rollouts, the pieces GRPOTrainer is given (our
rollouts, rewards and column names); and (slow) whole runs on the bundled model, read back.
"""

from __future__ import annotations

import dataclasses
import doctest
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from dragonfarm_core.chat_template import stop_ids
from dragonfarm_core.data import dataset
from dragonfarm_core.rewards import Reward, reward
from dragonfarm_core.rundir import create, files
from dragonfarm_core.rundir.train_config import ModelSpec
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs
from dragonfarm_core.trainers import grpo, modeling
from dragonfarm_core.trainers import grpo_rollout as rl
from dragonfarm_core.trainers.common import DataError
from dragonfarm_core.trainers.placement import Placement

ROOT = Path(__file__).resolve().parents[2]
BASE_COLUMNS = ["step", "epoch", "loss", "eval_loss", "lr", "grad_norm", "elapsed_s", "eta_s"]


# ---- pure functions ------------------------------------------------------------------------


def test_doctests_pass():
    assert doctest.testmod(rl).failed == 0


def test_completion_mask_keeps_tokens_through_the_first_stop():
    ids = torch.tensor([[5, 6, 2, 7, 2], [5, 6, 7, 8, 9], [2, 0, 0, 0, 0]])
    mask = rl.completion_mask(ids, [2])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert rl.completion_mask(ids, [2, 9]).tolist()[1] == [1, 1, 1, 1, 1]


def test_left_pad_aligns_the_ends():
    ids, mask = rl.left_pad([[1, 2, 3], [4]], pad_id=0)
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_read_prompts_names_the_file_and_line(tmp_path):
    good = {"prompt": [{"role": "user", "content": "2+2?"}], "reference": "4", "fields": {"a": 1}}
    files.write_jsonl(files.data_path(tmp_path, "train"), [good, {"prompt": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}])  # fmt: skip
    with pytest.raises(DataError, match=r"train.jsonl, line 2: the prompt must end with a user"):
        rl.read_prompts(tmp_path, "train")
    files.write_jsonl(files.data_path(tmp_path, "train"), [good, {"messages": []}])
    with pytest.raises(DataError, match=r"line 2 has no 'prompt' list"):
        rl.read_prompts(tmp_path, "train")
    files.write_jsonl(files.data_path(tmp_path, "train"), [good])
    (prompt,) = rl.read_prompts(tmp_path, "train")
    assert prompt.text == "2+2?" and prompt.reference == "4" and prompt.fields == {"a": 1}
    assert rl.read_prompts(tmp_path, "eval") == []


# ---- with the tiny fixture model -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    spec = ModelSpec(name="tiny", base=str(tiny_model_dir))
    tokenizer = modeling.load_tokenizer(spec)
    base = modeling.load_model(spec, Placement(torch.device("cpu"), torch.float32), False)
    model = modeling.add_lora(base, Lora(r=4, dropout=0.0), 0, False, False)
    with torch.no_grad():  # a non-zero adapter, so "adapter off" is a different model
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model, tokenizer


def test_rollout_samples_a_group_per_prompt_in_one_call(tiny):
    model, tokenizer = tiny
    stop = stop_ids(model, tokenizer)
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in stop
    model.train()
    torch.manual_seed(0)
    # a model's own sampling defaults (top_k 1 would make every sample the greedy one) are off
    model.generation_config.top_k, model.generation_config.top_p = 1, 0.5
    try:
        rollout = rl.generate_rollout(model, tokenizer, [[10, 11, 12], [20]], 3, 6, 1.0, stop)
    finally:
        model.generation_config.top_k, model.generation_config.top_p = None, None
    assert rollout.prompt_ids.shape == (6, 3) and rollout.completion_ids.shape[0] == 6
    assert torch.equal(rollout.prompt_ids[0], rollout.prompt_ids[2])
    assert rollout.prompt_ids[3].tolist() == [tokenizer.pad_token_id] * 2 + [20]
    assert len(rollout.texts) == 6 and len(set(rollout.texts[:3])) > 1  # sampled, not greedy
    greedy = rl.generate_rollout(model, tokenizer, [[10, 11, 12]], 2, 6, 0.0, stop)
    assert greedy.texts[0] == greedy.texts[1]
    assert model.training  # back in training mode after sampling in eval mode


def test_trl_pieces_sample_score_and_name_the_columns(tiny):
    """What GRPOTrainer is given: our rollouts (ids cut at the stop token, their tokens
    counted), our rewards as named TRL reward functions, and its logged metrics renamed."""
    model, tokenizer = tiny
    rewards = [reward("regex", pattern="e", weight=2), reward("length", max_chars=8, weight=0.5)]
    prompts = [rl.Prompt([{"role": "user", "content": f"Ticket {i}"}], None, {}) for i in range(2)]
    texts, ids, cut = rl.encode_prompts(tokenizer, prompts, 64)
    assert (
        cut == 0 and texts[0].endswith("assistant\n") and tokenizer(texts[1])["input_ids"] == ids[1]
    )
    settings = grpo.ReinforceArgs(group_size=3, max_new_tokens=5)
    stop = stop_ids(model, tokenizer)
    task = grpo.Task(prompts, texts, ids, rewards, settings, tokenizer, stop, grpo.RewardErrors())
    callback = grpo.trl_run.RunCallback(Path("unused"), None, None)
    trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m))
    out = grpo.Rollouts(task, callback)([texts[0]] * 3 + [texts[1]] * 3, trainer)
    assert out["prompt_ids"] == [ids[0]] * 3 + [ids[1]] * 3 and out["logprobs"] is None
    for completion, text in zip(out["completion_ids"], out["completion_text"], strict=True):
        assert 1 <= len(completion) <= 5 and all(t not in stop for t in completion[:-1])
        assert text == tokenizer.decode([t for t in completion if t not in stop],
                                        skip_special_tokens=True).strip()  # fmt: skip
    assert callback.state.tokens == sum(map(len, out["completion_ids"])) <= callback.state.slots

    names = grpo.reward_names(rewards)
    regex, length = (grpo.reward_function(r, n, task) for r, n in zip(rewards, names, strict=True))
    assert (regex.__name__, length.__name__) == ("regex", "length")
    kwargs = {"completions": ["x"] * 2, "row": [0, 1], "completion_text": ["hello", "tiny"]}
    assert regex(**kwargs, trainer_state=None) == [1.0, 0.0]  # TRL's own kwargs are ignored
    assert length(**kwargs) == [1.0, 1.0]
    assert task.errors.counts() == {"regex": (2, 0), "length": (2, 0)}

    assert grpo.columns(rewards) == ("reward", "kl", "completion_tokens", "reward_regex",
                                     "reward_length")  # fmt: skip
    logged = {"reward": 1.5, "completions/mean_length": 4.0, "rewards/regex/mean": 0.5,
              "rewards/length/mean": 1.0}  # fmt: skip
    assert grpo.training_columns(names)(logged) == {"reward": 1.5, "kl": None,
        "completion_tokens": 4.0, "reward_regex": 0.5, "reward_length": 1.0}  # fmt: skip
    own = grpo.options(dataclasses.replace(settings, loss_type="dr_grpo", scale_rewards="none"),
                       rewards, batch_size=2, total_steps=7)  # fmt: skip
    assert own["per_device_train_batch_size"] == 6 and own["num_generations"] == 3
    assert own["max_steps"] == 7 and own["reward_weights"] == [2, 0.5]
    assert (own["loss_type"], own["scale_rewards"]) == ("dr_grpo", "none")


def test_loss_and_reward_scaling_are_checked():
    with pytest.raises(SettingsError, match="loss_type = 'ppo' is not one of dapo, grpo"):
        grpo.ReinforceArgs(loss_type="ppo")
    with pytest.raises(SettingsError, match="scale_rewards = 'std' is not one of group, batch"):
        grpo.ReinforceArgs(scale_rewards="std")


# ---- slow: whole runs ----------------------------------------------------------------------


def _ticket_prompts(n: int) -> pd.DataFrame:
    frame = pd.read_csv(ROOT / "assets" / "example_tickets.csv", dtype=str).head(n)
    frame["ticket"] = frame["subject"].str.cat(frame["body"], sep=" ").str.extract(r"(T-\d{4})")[0]
    return frame


def _create(tmp_path: Path, model_dir: Path, rewards: list[Reward], **args) -> Path:
    ds = dataset(_ticket_prompts(24)).map_prompts(prompt="{subject}\n\n{body}", reference="ticket")
    method_args = {"rewards": [r.to_dict() for r in rewards], "group_size": 4, "beta": 0.04,
                   "temperature": 1.0, "max_new_tokens": 24}  # fmt: skip
    settings = {"batch_size": 2, "grad_accum": 1, "max_steps": 3, "logging_steps": 1,
                "save_steps": 2, "learning_rate": 1e-4, "max_seq_len": 384, **args}  # fmt: skip
    return create.create_run("grpo", ds, str(model_dir), Lora(r=8), TrainArgs(**settings),
                             Hardware(device="cpu"), run_dir=tmp_path / "run", n_samples=3,
                             method_args=method_args)  # fmt: skip


REWARDS = [reward("contains", name="ticket_id"), reward("length", max_chars=200, weight=0.5)]


@pytest.mark.slow
def test_grpo_run_writes_and_reads_back_every_file(tmp_path, model_dir):
    run_dir = _create(tmp_path, model_dir, REWARDS)
    assert grpo.main(run_dir) == "succeeded"

    status = files.read_status(run_dir)
    assert status["state"] == "succeeded" and status["step"] == status["total_steps"] == 3
    assert 0 < status["params_trainable"] < status["params_total"]
    rows = files.read_progress(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert list(row)[:8] == BASE_COLUMNS
        assert {"reward", "reward_ticket_id", "reward_length", "kl"} <= set(row)
        assert row["reward"] == pytest.approx(row["reward_ticket_id"] + 0.5 * row["reward_length"])
        assert row["kl"] >= 0 and math.isfinite(row["loss"]) and row["grad_norm"] >= 0
    assert rows[0]["kl"] == pytest.approx(0, abs=1e-6)  # step 1 samples from the start model

    evaluation = files.read_eval(run_dir)
    assert evaluation["eval_prompts"] == 1 and evaluation["step"] == 3  # 24 rows: 5 % held out
    assert 0 <= evaluation["reward"] <= 1.5
    assert set(evaluation) >= {"reward_ticket_id", "reward_length"}
    assert set(evaluation) >= {"start_reward", "start_reward_ticket_id", "start_reward_length"}
    samples = files.read_samples(run_dir)
    assert len(samples) == 1 and samples[0]["split"] == "eval"
    assert set(samples[0]) >= {
        "prompt",
        "reference",
        "generated",
        "reward_ticket_id",
        "reward_length",
    }
    assert samples[0]["reference"].startswith("T-")
    assert status["metrics"]["reward"] == evaluation["reward"]
    assert (files.adapter_dir(run_dir) / "adapter_config.json").is_file()
    assert [p.name for p in files.checkpoints(run_dir)] == ["checkpoint-2"]


@pytest.mark.slow
def test_cancel_then_resume_continues_from_the_checkpoint(tmp_path, model_dir):
    run_dir = _create(tmp_path, model_dir, REWARDS[1:], max_steps=2, save_steps=10)
    files.request_cancel(run_dir)  # seen after the first step
    assert grpo.main(run_dir) == "cancelled"
    assert files.read_status(run_dir)["state"] == "cancelled"
    assert [p.name for p in files.checkpoints(run_dir)] == ["checkpoint-1"]
    assert not files.cancel_requested(run_dir)
    assert grpo.main(run_dir) == "succeeded"
    assert [r["step"] for r in files.read_progress(run_dir)] == [1, 2]
    assert files.read_eval(run_dir)["reward_length"] is not None


@pytest.mark.slow
def test_a_reward_that_keeps_failing_fails_the_run_with_its_traceback(tmp_path, model_dir):
    broken = tmp_path / "broken.py"
    broken.write_text("def reward(prompt, completion, reference, row):\n    return row['nope']\n")
    run_dir = _create(tmp_path, model_dir, [reward("custom", file=str(broken))], max_steps=3)
    with pytest.raises(Exception, match="failed on"):
        grpo.main(run_dir)
    status = files.read_status(run_dir)
    assert status["state"] == "failed" and "custom" in status["error"]
    assert any("KeyError: 'nope'" in line for line in status["log_tail"])
    assert json.dumps(status)  # written as plain JSON
