"""GRPO: advantages, the KL estimator, completion masks and log-probabilities, the loss, the
reward columns of progress rows; and (slow) whole runs on the bundled model, read back from disk.
"""

from __future__ import annotations

import doctest
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from dragonfarm_core.chat_template import stop_ids
from dragonfarm_core.data import dataset
from dragonfarm_core.rewards import Reward, reward
from dragonfarm_core.rundir import create, files
from dragonfarm_core.settings import Hardware, Lora, TrainArgs
from dragonfarm_core.trainers import grpo, modeling
from dragonfarm_core.trainers import grpo_rollout as rl
from dragonfarm_core.trainers.common import DataError, Placement
from dragonfarm_core.trainers.config import ExtraArgs, ModelSpec
from dragonfarm_core.trainers.optim import build_optimization

ROOT = Path(__file__).resolve().parents[2]
BASE_COLUMNS = ["step", "epoch", "loss", "eval_loss", "lr", "grad_norm", "elapsed_s", "eta_s"]


# ---- pure functions ------------------------------------------------------------------------


def test_doctests_pass():
    assert doctest.testmod(rl).failed == 0


def test_advantages_are_relative_to_each_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 5.0, 5.0, 5.0, 5.0, 0.0, 2.0, 4.0, 6.0])
    adv = rl.group_advantages(rewards, 4).view(3, 4)
    assert adv[0, 0] > 0 > adv[0, 1] and adv[0, 1] == adv[0, 2] == adv[0, 3]
    assert torch.equal(adv[1], torch.zeros(4))  # all equal: nothing to learn, no 0/0
    assert adv.sum(1).abs().max() < 1e-5  # zero mean within each group
    std = torch.tensor([0.0, 2.0, 4.0, 6.0]).std()  # sample std, as trl
    expected = (torch.tensor([0.0, 2.0, 4.0, 6.0]) - 3.0) / (std + rl.ADVANTAGE_EPS)
    assert torch.allclose(adv[2], expected)
    # scale-free: multiplying a group's rewards does not change its advantages
    assert torch.allclose(rl.group_advantages(rewards * 10, 4), rl.group_advantages(rewards, 4),
                          atol=1e-3)  # fmt: skip


def test_k3_is_zero_on_agreement_never_negative_and_estimates_the_kl():
    same = torch.tensor([-0.5, -3.0])
    assert torch.equal(rl.kl_k3(same, same), torch.zeros(2))
    assert (rl.kl_k3(torch.randn(100), torch.randn(100)) >= 0).all()
    # On tokens drawn from the policy, the mean of k3 is KL(policy || reference).
    gen = torch.Generator().manual_seed(0)
    policy = torch.log_softmax(torch.randn(6, generator=gen), 0)
    reference = torch.log_softmax(torch.randn(6, generator=gen), 0)
    tokens = torch.multinomial(policy.exp(), 200_000, replacement=True, generator=gen)
    estimate = rl.kl_k3(reference[tokens], policy[tokens]).mean()
    exact = (policy.exp() * (policy - reference)).sum()
    assert float(estimate) == pytest.approx(float(exact), rel=0.03)


def test_completion_mask_keeps_tokens_through_the_first_stop():
    ids = torch.tensor([[5, 6, 2, 7, 2], [5, 6, 7, 8, 9], [2, 0, 0, 0, 0]])
    mask = rl.completion_mask(ids, [2])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert rl.completion_mask(ids, [2, 9]).tolist()[1] == [1, 1, 1, 1, 1]


def test_left_pad_aligns_the_ends():
    ids, mask = rl.left_pad([[1, 2, 3], [4]], pad_id=0)
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_loss_gradient_is_advantage_times_score_plus_beta_kl():
    logits = torch.tensor([0.3, -1.0, 2.0], requires_grad=True)
    policy = torch.log_softmax(logits, 0)[[0, 2]]
    advantages = torch.tensor([1.5, -0.5])
    loss, kl = rl.grpo_loss(policy, None, advantages, beta=0.1, n_tokens=4)
    assert kl is None and float(loss.detach()) == pytest.approx(-(1.5 - 0.5) / 4)  # the ratio is 1
    loss.backward()
    manual = torch.tensor([0.3, -1.0, 2.0], requires_grad=True)
    lp = torch.log_softmax(manual, 0)[[0, 2]]
    (-(advantages * lp).sum() / 4).backward()
    assert torch.allclose(logits.grad, manual.grad)

    reference = torch.tensor([-1.0, -0.2])
    policy = torch.tensor([-0.9, -0.4])
    loss, kl = rl.grpo_loss(policy, reference, torch.zeros(2), beta=0.5, n_tokens=2)
    k3 = rl.kl_k3(reference, policy)
    assert kl == pytest.approx(float(k3.sum())) and float(loss) == pytest.approx(
        float(k3.mean()) * 0.5
    )


def test_micro_batches_give_the_token_mean_of_the_whole_step():
    policy, adv = torch.randn(10), torch.randn(10)
    whole, _ = rl.grpo_loss(policy, None, adv, 0.0, 10)
    halves = [
        rl.grpo_loss(policy[s], None, adv[s], 0.0, 10)[0] for s in (slice(0, 3), slice(3, 10))
    ]
    assert float(sum(halves)) == pytest.approx(float(whole))


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


def _full_logprobs(model, ids: list[int], n_prompt: int) -> torch.Tensor:
    """Reference computation: the plain model on one unpadded sequence."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    return logp[n_prompt - 1 :]


def test_logprobs_cover_completion_tokens_only_and_ignore_padding(tiny):
    model, tokenizer = tiny
    model.eval()
    prompts = [[10, 11, 12, 13, 14], [20, 21]]
    completions = [[30, 31, 2, 0], [40, 41, 42, 43]]  # row 0 stops at token 2
    ids, mask = rl.left_pad(prompts, tokenizer.pad_token_id)
    cids = torch.tensor(completions)
    rollout = rl.Rollout(ids, mask, cids, rl.completion_mask(cids, [2]), ["", ""])
    with torch.no_grad():
        got = rl.completion_logprobs(model, rollout, temperature=1.0)
    assert got.shape == (3 + 4,) and rollout.token_rows().tolist() == [0, 0, 0, 1, 1, 1, 1]
    expected = torch.cat([_full_logprobs(model, prompts[0] + [30, 31, 2], 5),
                          _full_logprobs(model, prompts[1] + completions[1], 2)])  # fmt: skip
    assert torch.allclose(got, expected, atol=1e-4)  # left padding changes nothing
    rollout.completion_ids[0, 3] = 77  # after the stop: not scored, changes nothing
    with torch.no_grad():
        assert torch.allclose(rl.completion_logprobs(model, rollout, 1.0), got)
        hot = rl.completion_logprobs(model, rollout, temperature=2.0)
        with model.disable_adapter():
            ref = rl.completion_logprobs(model, rollout, 1.0)
    assert not torch.allclose(hot, got) and not torch.allclose(ref, got)


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


def test_rewards_reach_the_progress_columns(tiny, tiny_model_dir):
    model, tokenizer = tiny
    model.train()
    rewards = [reward("regex", pattern="e", weight=2), reward("length", max_chars=8, weight=0.5)]
    prompts = [rl.Prompt([{"role": "user", "content": f"Ticket {i}"}], None, {}) for i in range(4)]
    ids, _ = rl.encode_prompts(tokenizer, prompts, 64)
    settings = grpo.ReinforceArgs(group_size=3, beta=0.1, temperature=1.0, max_new_tokens=5)
    task = grpo.Task(prompts, ids, rewards, settings, tokenizer, stop_ids(model, tokenizer),
                     grpo.RewardErrors())  # fmt: skip
    opt = build_optimization(model, TrainArgs(learning_rate=1e-3), ExtraArgs(), 10, torch.float32)
    metrics = grpo.grpo_step(model, task, [[0, 1], [2, 3]], opt)
    assert metrics["reward"] == pytest.approx(
        2 * metrics["reward_regex"] + 0.5 * metrics["reward_length"]
    )
    assert 0 <= metrics["reward_regex"] <= 1 and metrics["kl"] >= 0 and metrics["grad_norm"] > 0
    assert 12 <= metrics["_tokens"] <= metrics["_slots"] <= 12 * 5
    task.settings = grpo.ReinforceArgs(group_size=3, beta=0.0, temperature=1.0, max_new_tokens=5)
    assert grpo.grpo_step(model, task, [[0, 1]], opt)["kl"] is None  # no reference pass


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
